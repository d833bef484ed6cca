#!/usr/bin/env bash
# test_hf_gemma.sh HPTRAIN: Gemma 3 against tests/make_ref_state_gemma.py's PyTorch model (written
# from Hugging Face's modeling_gemma3.py), in fp32:
#  - `hptrain verify` on reference states of odd shapes: logits, loss, every gradient and the
#    losses of 10 AdamW steps within 1e-4: all layers global; local and global layers with T
#    below, at and above the window (window 16, 13 and 5), linear rope scaling, q/k/v/o biases,
#    an untied head, a query_pre_attn_scalar apart from hd; the published head width 256;
#  - Hugging Face directories written by tests/hf_write.py (Gemma3ForCausalLM in fp32 with
#    sliding_window_pattern; in bf16 shards with transformers 5's layer_types and rope_parameters
#    per layer type, and the tied head's copy in the files) through `hptrain eval`: PyTorch's
#    loss, with T above the window;
#  - training from the bf16 directory, the same losses with disk homes, and --save writing the
#    names and shapes torch wrote (fp32 values), with model_type and the window in config.json.
# Exit 77 (ctest: skipped) without python3-torch.
set -u
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"       # $tmp, ok, bad, finish
. "$here/hf_family.sh" # $py (exit 77 without torch), hf_verify, hf_eval, hf_train

#                               name   shape                                                                      B T  seed
hf_verify make_ref_state_gemma.py "global gemma3:L=2,C=48,NH=4,NKV=2,hd=10,FF=80,V=300,T=40,pattern=1,qscalar=7,tied=0 2 9 7" \
           "below gemma3:L=3,C=40,NH=4,hd=6,FF=72,V=260,T=32,pattern=2,window=16,theta=100000,ltheta=500,factor=4,attn_bias=1 2 9 5" \
           "at gemma3:L=3,C=40,NH=4,NKV=2,hd=6,FF=72,V=260,T=32,pattern=2,window=13,ltheta=500 2 13 3" \
           "above gemma3:L=4,C=48,NH=4,NKV=1,hd=12,FF=60,V=300,T=40,pattern=3,window=5,factor=2 2 17 9" \
           "hd256 gemma3:L=2,C=64,NH=2,NKV=1,hd=256,FF=96,V=200,T=40,pattern=2,window=8,qscalar=256 2 21 13"

#             tag  shape                                                                          B T  options
hf_eval gemma "g32|gemma3:L=3,C=48,NH=6,NKV=2,hd=10,FF=80,V=300,T=64,window=6,pattern=3,factor=8,tied=0|2|13|" \
              "g16|gemma3:L=2,C=40,NH=4,NKV=2,hd=14,FF=72,V=260,T=32,window=4,pattern=2|3|9|--rope-parameters --dtype bf16 --shard 20000 --lm-head"

# training from the bf16 directory: the same losses with disk homes; --save writes torch's names
if [ -f "$tmp/g16/hf/config.json" ]; then
  hf_train "$tmp/g16" 260 Gemma3ForCausalLM gemma3_text head_dim=14 num_attention_heads=4 \
    hidden_size=40 sliding_window=4 sliding_window_pattern=2 tie_word_embeddings=true
fi
finish test_hf_gemma || exit 1
