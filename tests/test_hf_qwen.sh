#!/usr/bin/env bash
# test_hf_qwen.sh HPTRAIN: the Qwen families against tests/make_ref_state_qwen.py's PyTorch model
# (written from Hugging Face's modeling_qwen2.py and modeling_qwen3.py), in fp32:
#  - `hptrain verify` on a reference state of odd shapes: logits, loss, every gradient and the
#    losses of 10 AdamW steps within 1e-4 (Qwen2 with GQA and NH/NKV = 7, untied and tied;
#    Qwen3 with head_dim above and below C/NH, so NH*hd != C, untied, tied with
#    attention_bias, and the published models' head_dim 128 (wider than the flash kernel's
#    compact tiles) at C 64);
#  - Hugging Face directories written by tests/hf_write.py (Qwen2ForCausalLM in fp32;
#    Qwen3ForCausalLM in bf16 shards with transformers 5's rope_parameters and a tied head kept
#    in the files, as the hub's Qwen3-0.6B's) through `hptrain eval`: PyTorch's loss;
#  - training from the Qwen3 directory, the same losses with disk homes, and --save writing the
#    names and shapes torch wrote (fp32 values), with head_dim and model_type in config.json.
# Exit 77 (ctest: skipped) without python3-torch.
set -u
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"       # $tmp, ok, bad, finish
. "$here/hf_family.sh" # $py (exit 77 without torch), hf_verify, hf_eval, hf_train

#                              name  shape                                                                        B T  seed
hf_verify make_ref_state_qwen.py "q2gqa qwen2:L=2,C=56,NH=7,NKV=1,FF=90,V=333,T=40,theta=1000000,eps=1e-6 2 19 7" \
           "q2tied qwen2:L=3,C=40,NH=4,NKV=2,FF=72,V=260,T=32,theta=10000,tied=1 3 13 3" \
           "q3wide qwen3:L=2,C=48,NH=6,NKV=2,hd=10,FF=80,V=300,T=40,theta=1000000,eps=1e-6 3 17 11" \
           "q3bias qwen3:L=3,C=40,NH=4,hd=6,FF=72,V=260,T=32,theta=10000,tied=1,attn_bias=1 2 23 5" \
           "q3hd128 qwen3:L=2,C=64,NH=2,NKV=1,hd=128,FF=96,V=200,T=40,theta=1000000 2 37 13"

#            tag   shape                                                                        B T  options
hf_eval qwen "q2|qwen2:L=2,C=48,NH=6,NKV=2,FF=80,V=300,T=64,theta=1000000|2|13|" \
             "q3|qwen3:L=2,C=40,NH=4,NKV=2,hd=14,FF=72,V=260,T=32,theta=1000000,tied=1|3|9|--rope-parameters --dtype bf16 --shard 20000 --lm-head"

# training from the Qwen3 directory: the same losses with disk homes; --save writes torch's names
if [ -f "$tmp/q3/hf/config.json" ]; then
  hf_train "$tmp/q3" 260 Qwen3ForCausalLM qwen3 head_dim=14 num_attention_heads=4 hidden_size=40 \
    tie_word_embeddings=true 'eos_token_id=[2, 3]'
fi
finish test_hf_qwen || exit 1
