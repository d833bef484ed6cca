/* hptrain/model.h: the model, over any architecture (hpt_model_*): its tensors, forward and
 * backward, the activation arena's choices, sampling; and GPT-2's shapes. Part of hptrain.h.
 *
 *   hpt_model *m;  hpt_model_create(mem, "gpt2-124m", &m);          // a SHAPE
 *   hpt_model_init_random(m, 1337);                                 // or hpt_model_load(...)
 *   hpt_model_forward(m, x, y, B, T, &loss);                        // (B, T) int32 each
 *   hpt_model_zero_grad(m); hpt_model_backward(m);
 *   for (int i = 0; i < hpt_model_num_tensors(m); i++) { hpt_tensor_info t;
 *       hpt_model_tensor(m, i, &t); }                               // name, dtype, shape, layer
 *
 * One object type serves every architecture (src/model/arch.h: GPT-2, the llama family, Qwen2 and
 * Qwen3, Gemma 3).
 * The old names (the type hpt_gpt2, the hpt_gpt2_* calls) are in the deprecated
 * include/hptrain_gpt2.h, which nothing in hptrain includes. A model's weights, gradients and
 * activations come from the hpt_mem it was made with. What the activation arena keeps
 * (recomputation, flash attention, offload and compression of saved activations, a chunked
 * head) is an hpt_act_opts, a choice of the plan (hptrain/plan.h): every choice computes the
 * same thing, bit for bit where it is exact. */
#ifndef HPTRAIN_MODEL_H
#define HPTRAIN_MODEL_H
#ifndef HPTRAIN_H
#error "include hptrain.h, which includes this part"
#endif

/* A model's configuration, for every architecture (hpt_arch_id). GPT-2 fills NKV = NH,
 * FF = 4C, norm_eps 1e-5, tied 1, init_range 0.02 and leaves the rope fields 0; a GPT-2
 * configuration written by hand with only L, C, NH, V, Vp, maxT set (designated initialisers,
 * arch 0) means the same thing: the model fills the rest on create. The head width is C / NH
 * unless hd says otherwise (Qwen3's head_dim: NH * hd may differ from C). */
typedef enum {
    HPT_ARCH_GPT2 = 0, HPT_ARCH_LLAMA = 1, HPT_ARCH_QWEN2 = 2, HPT_ARCH_QWEN3 = 3, HPT_ARCH_GEMMA3 = 4
} hpt_arch_id;
typedef struct {
    int arch;            /* hpt_arch_id */
    int L, C, NH, NKV;   /* layers, channels, query heads, key/value heads (GPT-2: NKV = NH);
                          * C % NH == 0, NH % NKV == 0 */
    int FF;              /* MLP hidden width (GPT-2: 4C) */
    int V, Vp, maxT;     /* vocabulary, padded vocabulary (rows of wte, Vp >= V), positions */
    float norm_eps;      /* GPT-2 1e-5 (LayerNorm), llama rms_norm_eps */
    float rope_theta;    /* llama's rope base; GPT-2 0 */
    float rope_factor;   /* Llama 3 frequency scaling factor; 0 = none */
    float rope_low_freq, rope_high_freq; /* low_freq_factor, high_freq_factor */
    int rope_orig_maxT;  /* original_max_position_embeddings (with rope_factor > 0) */
    int tied;            /* the head is wte (GPT-2: 1); 0: a separate lm_head (Vp, C) */
    int attn_bias, mlp_bias; /* llama: biases on q/k/v/o, on gate/up/down; Qwen2: on q/k/v
                          * (always); Qwen3: on q/k/v/o */
    float init_range;    /* initializer_range: N(0, init_range) init (GPT-2 0.02) */
    int hd;              /* head width; 0: C / NH (GPT-2, llama, Qwen2 keep 0); Qwen3's head_dim */
    int window;          /* llama (Mistral's sliding_window): each query sees its last `window`
                          * keys, its own included; 0: all (fully causal) */
    /* Gemma 3 (0 elsewhere): window applies to the local layers only, every swa_pattern-th
     * layer (l + 1 a multiple) global, the others local (0: all global); the local layers'
     * rope base; the scores scaled by attn_scalar^-1/2 (query_pre_attn_scalar; 0: hd) */
    int swa_pattern;
    float rope_local_theta;
    float attn_scalar;
} hpt_model_config;

/* SHAPE of any architecture:
 *   "gpt2-124m" | "gpt2-350m" | "gpt2-774m" | "gpt2-1558m" |
 *   "gpt2:L=12,C=768,NH=12[,V=50257][,T=1024][,Vp=...]"
 *   "llama3.2-1b" | "llama3.2-3b" | "llama3.1-8b" | "llama2-7b" | "mistral-7b" (v0.1) |
 *   "llama:L=..,C=..,NH=..,FF=..[,NKV=..][,V=..][,T=..][,theta=..][,Vp=..][,eps=..]
 *          [,factor=..,low=..,high=..,orig=..][,tied=0|1][,attn_bias=0|1][,mlp_bias=0|1]
 *          [,range=..]"
 *   "qwen2.5-0.5b" | "qwen2.5-1.5b" | "qwen2.5-7b" | "qwen2:L=..,C=..,NH=..,FF=..[,...]"
 *   "qwen3-0.6b" | "qwen3-1.7b" | "qwen3-4b" | "qwen3-8b" | "qwen3:L=..,C=..,NH=..,FF=..[,hd=..]"
 *          (the Qwen keys: llama's less factor/low/high/orig and mlp_bias; docs/qwen.md)
 *   "gemma3-270m" | "gemma3-1b" | "gemma3-4b" | "gemma3-12b" | "gemma3-27b" |
 *   "gemma3:L=..,C=..,NH=..,FF=..[,hd=..][,window=..][,pattern=..][,ltheta=..][,qscalar=..]"
 *          (Gemma 3's text models; docs/gemma.md)
 * The named shapes carry their published config.json's dimensions (docs/llama.md). A custom
 * llama shape takes Hugging Face LlamaConfig's defaults: NKV = NH, V 32000, T 2048, theta
 * 10000, eps 1e-6, untied, no biases, no rope scaling (factor 0; with factor > 0, low 1,
 * high 4 unless given, orig required), range 0.02. Vp defaults to V rounded up to 128. */
hpt_status hpt_model_config_parse(const char *shape, hpt_model_config *out);
/* HPT_ERR_SHAPE for a configuration no architecture can build. */
hpt_status hpt_model_config_check(const hpt_model_config *cfg);
/* Number of parameters of the configuration (wte's and lm_head's padding rows included). */
size_t hpt_model_config_num_params(const hpt_model_config *cfg);

/* The architectures this build registers (src/model/registry.c), by id (hpt_model_config.arch):
 * what reports, help texts and the calibration say of each, so that no caller names a family.
 *   for (int i = 0; i < hpt_arch_count(); i++) puts(hpt_arch_desc_of(i)->label); */
#define HPT_ARCH_MAX_OPS 4
typedef struct {
    const char *name;      /* "gpt2", "llama": hpt_model_arch's, the calibration file's key */
    const char *label;     /* reports, traces and pictures: "GPT-2", "llama" */
    const char *shapes;    /* the SHAPEs hpt_model_config_parse takes for it (help texts) */
    /* the calibration report of its block's own rates (block NULL: none, the reference
     * block's rates serve): the block's title, the attention's with the heads measured, and
     * each pointwise op's, in the order of hpt_cal_arch.op_ns */
    const char *block, *attention;
    const char *op[HPT_ARCH_MAX_OPS];
} hpt_arch_desc;
int hpt_arch_count(void);
const hpt_arch_desc *hpt_arch_desc_of(int id); /* NULL: no architecture has that id */

typedef struct hpt_model hpt_model;

/* A tensor of a model's table (checkpoint order): what it is, apart from its storage. */
typedef enum {
    HPT_DTYPE_F32 = 0, HPT_DTYPE_BF16, HPT_DTYPE_F16, HPT_DTYPE_Q8, HPT_DTYPE_I32, HPT_DTYPE_U16,
    HPT_DTYPE_U32
} hpt_dtype_id;
typedef struct {
    const char *name;   /* "wte", "qkvw", ... (borrowed from the model) */
    int dtype;          /* hpt_dtype_id of its checkpoint values (F32 today) */
    int ndim;
    int64_t shape[4];   /* row-major; a per-layer tensor stacked over the blocks: shape[0] = L */
    size_t numel;
    int per_layer;      /* 1: one slice per block, stacked */
    int is_matrix;      /* 2-D weights (embeddings and linear weights): decayed by default */
} hpt_tensor_info;

/* A model from SHAPE (an architecture's shape, see hpt_model_config_parse), with zeroed
 * parameters and gradients (device tier); hpt_model_create_offload (hptrain/offload.h) adds the
 * offload engine. HPT_ERR_INVALID for a shape no architecture knows. */
hpt_status hpt_model_create(hpt_mem *mem, const char *shape, hpt_model **out);
/* The same from a configuration (hpt_model_config_parse's, or a Hugging Face config.json's). */
hpt_status hpt_model_create_config(hpt_mem *mem, const hpt_model_config *cfg, hpt_model **out);
/* The model's configuration (every field filled). */
const hpt_model_config *hpt_model_get_config(const hpt_model *m);
/* A model from a checkpoint (llm.c GPT-2, version 3 fp32 or 5 bf16). */
hpt_status hpt_model_load(hpt_mem *mem, const char *path, hpt_model **out);
/* Forward-only models: hpt_model_create and hpt_model_load without the gradient buffer (never
 * allocated, so a forward-only run's peak holds parameters and activations only), as after
 * hpt_model_release_grads: hpt_model_acquire_grads allocates it if a backward comes later.
 * Separate calls rather than a flag on the create calls, so that every existing caller (and
 * every training run) allocates its gradients at creation exactly as before. Models with the
 * offload engine are made by hptrain/offload.h's calls and keep their gradients. */
hpt_status hpt_model_create_forward(hpt_mem *mem, const char *shape, hpt_model **out);
hpt_status hpt_model_load_forward(hpt_mem *mem, const char *path, hpt_model **out);
/* Writes the checkpoint of the model's architecture (llm.c version 3 for GPT-2), atomically. */
hpt_status hpt_model_save(const hpt_model *m, const char *path);
void hpt_model_free(hpt_model *m);
/* The architecture's initialisation (GPT-2: N(0, 0.02), residual projections N(0,
 * 0.02/sqrt(2L)), biases 0, layernorm weights 1, wte padding rows 0). Deterministic in seed; the
 * same values with or without the offload engine (which can fail: a disk write). */
hpt_status hpt_model_init_random(hpt_model *m, uint64_t seed);
const char *hpt_model_arch(const hpt_model *m); /* "gpt2", "llama", "qwen2", "qwen3" */
size_t hpt_model_num_params(const hpt_model *m);
int hpt_model_num_tensors(const hpt_model *m);
/* Tensor i (0 <= i < hpt_model_num_tensors) of the model's table; HPT_ERR_INVALID otherwise. */
hpt_status hpt_model_tensor(const hpt_model *m, int i, hpt_tensor_info *out);
float *hpt_model_params(hpt_model *m); /* (num_params) fp32, checkpoint order; NULL with the engine */
float *hpt_model_grads(hpt_model *m);  /* (num_params) fp32; NULL with the engine */
/* Logits of the last forward: (B, T, Vp) fp32, entries >= V are the padding columns. */
const float *hpt_model_logits(const hpt_model *m);

/* Activation buffers for (B, T) are allocated on first use and kept while B*T does not grow.
 * targets may be NULL (no loss; *loss_out = -1). Token ids must be in [0, V). */
hpt_status hpt_model_forward(hpt_model *m, const int32_t *inputs, const int32_t *targets,
                             int B, int T, float *loss_out);
/* Packed examples (docs/packing.md): pos (B*T, host) each token's position in its example (0 at
 * its first token, then 1, 2, ...) for the following forwards at (B, T): GPT-2's wpe and RoPE
 * read it instead of t, and attention sees only keys of the query's own example. The model
 * keeps a device copy (B*T int32, activations) until the next call; NULL: back to positions
 * 0 .. T-1 and plain causal attention. HPT_ERR_INVALID for positions that do not run 0, 1, 2,
 * ... from an example's first token; a forward at another (B, T) is refused. */
hpt_status hpt_model_set_positions(hpt_model *m, const int32_t *pos, int B, int T);
void hpt_model_zero_grad(hpt_model *m);
/* Accumulates (+=) the gradients of the mean loss of the last forward (which needs targets)
 * into hpt_model_grads(). */
hpt_status hpt_model_backward(hpt_model *m);
/* Releases the activation buffers. */
void hpt_model_free_activations(hpt_model *m);
/* Frees the gradient buffer (a predict phase needs none): hpt_model_grads() is NULL, backward
 * and an optimizer step are refused, zero_grad does nothing, until hpt_model_acquire_grads()
 * allocates it again (zeroed; HPT_ERR_OOM if the device budget refuses; nothing if present). */
void hpt_model_release_grads(hpt_model *m);
hpt_status hpt_model_acquire_grads(hpt_model *m);

/* -- model: what the activation arena keeps (docs/activations.md) --
 * attention: FLASH (the default) saves each block's attention output and the log-sum-exp of
 *   each row, (B,NH,T), and recomputes the probabilities in backward, memory linear in T;
 *   PLAIN saves the (B,NH,T,T) probabilities (the reference kernel).
 * recompute (exact: the same kernels on the same inputs, so gradients and losses are the same
 *   bits as without recomputation):
 *   NONE       every block keeps all it saves until its backward.
 *   SELECTIVE  drops the large cheap activations, ln1, ln2 (recomputed from the saved input,
 *              mean and rstd), the GELU output and, with PLAIN attention, the probabilities;
 *              each is rebuilt at the start of its block's backward.
 *   EVERY      (every:N) keeps only the input of every N-th block (blocks 0, N, 2N, ...) and
 *              the last block's output; the backward of a segment of N blocks reruns that
 *              segment's forward once, keeping its activations until each block's backward.
 *   FULL       every:1: keeps each block's input (the residual stream), reruns each block's
 *              forward at the start of its backward.
 * The arena plan follows the choice: recomputed buffers live only during the forward of their
 * block and from the recompute to their block's backward, so the arena shrinks. */
typedef enum { HPT_ATTN_FLASH = 0, HPT_ATTN_PLAIN } hpt_attention;
typedef enum {
    HPT_RECOMPUTE_NONE = 0,
    HPT_RECOMPUTE_SELECTIVE,
    HPT_RECOMPUTE_EVERY,
    HPT_RECOMPUTE_FULL
} hpt_recompute;
/* offload (docs/activations.md; recompute NONE or SELECTIVE only, else HPT_ERR_UNSUPPORTED):
 *   the fields each block keeps for its backward other than its output and the per-row
 *   statistics (ln1, qkv, atty, att, res2, ln2, fch, fch_gelu, those the policy keeps) live in
 *   the device arena only during the block's forward, which copies them to a HOST buffer or to
 *   the DISK tier (hpt_mem_set_disk_dir first); at the time point before the block's backward
 *   (the next block's backward, or the head's) they are copied back into arena buffers that
 *   live until the block's backward. Copies out are synchronous; the copy back is done by a
 *   thread during the next block's backward with HOST, synchronously with DISK. Exact: same
 *   bits.
 * compress INT8: those fields are stored as int8 with one fp32 absmax scale per row (a token's
 *   C, 3C or 4C values; a probability row of T) and dequantised before backward: on the
 *   offload tier, or with no offload in the device arena. Lossy.
 * compress BF16: those fields are stored as bf16 (a float's top 16 bits, rounded to nearest
 *   even: fp32's range, 8 significant bits) and widened before backward. Half the bytes of
 *   fp32; lossy, far less than INT8 (relative error <= 2^-9 per value). */
typedef enum { HPT_OFFLOAD_NONE = 0, HPT_OFFLOAD_HOST, HPT_OFFLOAD_DISK } hpt_act_offload;
/* matmul (--matmul; docs/design.md, "Matmul precision"): FP32, every linear layer's GEMM in fp32;
 * BF16, each linear layer's GEMMs (forward, the backward's dX and dW; the head's too; not the
 * attention's own products, nor LoRA's adapters or int8 weights' GEMMs) round their two operands
 * to bf16 (nearest even) and sum and write fp32. Weights, activations and the optimizer stay
 * fp32. Lossy; adds HPT_MM_BF16_WS_BYTES of device workspace (category workspace). */
typedef enum { HPT_MATMUL_FP32 = 0, HPT_MATMUL_BF16 } hpt_matmul;
typedef enum { HPT_COMPRESS_NONE = 0, HPT_COMPRESS_INT8, HPT_COMPRESS_BF16 } hpt_act_compress;
typedef struct {
    hpt_attention attention;
    hpt_recompute recompute;
    int every;                /* N of HPT_RECOMPUTE_EVERY, >= 1 */
    hpt_act_offload offload;
    hpt_act_compress compress;
    int head_chunk;           /* 0: the head keeps all (B,T,Vp) logits; N > 0: it computes the
                               * loss N rows at a time, keeps only (N,Vp) logits, and recomputes
                               * each chunk's logits in backward (one more head GEMM). A forward
                               * without targets then fails: sampling and verify need all logits. */
    int mlp_tile;             /* 0: each block keeps its MLP's (B*T, FF) intermediates; N > 0:
                               * the MLP runs N token rows at a time in the forward and again in
                               * the backward, and keeps none (docs/activations.md) */
    hpt_matmul matmul;        /* the linear layers' GEMM precision (above) */
} hpt_act_opts;
/* Parses "none" | "host" | "disk" into o->offload; "none" | "int8" | "bf16" into o->compress. */
hpt_status hpt_act_offload_parse(const char *text, hpt_act_opts *o);
hpt_status hpt_act_compress_parse(const char *text, hpt_act_opts *o);
const char *hpt_act_offload_name(hpt_act_offload x);
const char *hpt_act_compress_name(hpt_act_compress x);
/* "fp32" | "bf16" into o->matmul; and back */
hpt_status hpt_matmul_parse(const char *text, hpt_act_opts *o);
const char *hpt_matmul_name(hpt_matmul x);
/* Activation bytes per tier that a forward+backward at (B, T) allocates with o (category
 * acts): [DEVICE] the arena (= hpt_model_activation_bytes), [HOST] the offload buffer (host
 * offload) or the int8 staging buffer (disk offload with int8), [DISK] the offload file.
 * HPT_ERR_INVALID / HPT_ERR_UNSUPPORTED for a bad choice, HPT_ERR_OOM if it cannot plan. */
hpt_status hpt_model_act_tier_bytes(const hpt_model_config *cfg, int B, int T,
                                    const hpt_act_opts *o, uint64_t out[HPT_TIER_COUNT]);
/* FLASH, NONE, every 1, no offload, no compression. */
hpt_act_opts hpt_act_defaults(void);
/* Parses "flash" | "plain" into o->attention. */
hpt_status hpt_attention_parse(const char *text, hpt_act_opts *o);
/* Parses "none" | "selective" | "every:N" (N >= 1) | "full" into o->recompute and o->every. */
hpt_status hpt_recompute_parse(const char *text, hpt_act_opts *o);
/* "flash", "plain"; "none", "selective", "every:N", "full" (written to buf, n >= 24). */
const char *hpt_attention_name(hpt_attention a);
const char *hpt_recompute_name(const hpt_act_opts *o, char *buf, size_t n);
/* Sets what the model keeps (HPT_ERR_INVALID for an unknown choice). Activations already
 * allocated are released, so the next forward plans and allocates the arena for the choice. */
hpt_status hpt_model_set_act_opts(hpt_model *m, const hpt_act_opts *o);
hpt_act_opts hpt_model_get_act_opts(const hpt_model *m);
/* Bytes of activations (and backward scratch) that a forward+backward at (B, T) allocates
 * with the choice o (NULL: hpt_act_defaults()); 0 if the plan cannot be made. */
size_t hpt_model_activation_bytes(const hpt_model_config *cfg, int B, int T,
                                  const hpt_act_opts *o);

/* Samples n_new tokens after the n_prompt tokens in tokens[] (capacity n_prompt + n_new),
 * with temperature (> 0) and top_k (0: all): hpt_infer_generate on the model's fp32 weights
 * with a cache of min(n_prompt + n_new, maxT) positions. */
hpt_status hpt_model_generate(hpt_model *m, int32_t *tokens, int n_prompt, int n_new,
                              float temperature, int top_k, uint64_t seed);

/* -- model: LoRA adapters over a frozen base (docs/lora.md) --
 * On each chosen linear layer y = W x + s * B (A (dropout(x))), s = alpha / r (rslora:
 * alpha / sqrt(r)); A (r, in) initialised as PEFT does (kaiming-uniform, a = sqrt(5): U(-1/sqrt(in),
 * 1/sqrt(in))), B (out, r) zero. Once attached the base is frozen: a backward computes the
 * adapters' gradients and the activations' only (no weight-gradient GEMM for the base, no
 * gradient or optimizer memory for it); hpt_optim_create on such a model updates the adapters.
 *
 *   hpt_lora_opts lo = hpt_lora_defaults();
 *   hpt_lora_parse("r=16,alpha=32,dropout=0.05", &lo); snprintf(lo.targets, ..., "q,v");
 *   hpt_model_create_forward(mem, shape, &m);  ...load the base...
 *   hpt_model_lora_attach(m, &lo, seed);       // adapters, their gradients, the frozen sink
 *   forward, backward, hpt_optim_step as for full training
 *
 * targets: comma-separated names of the architecture's linear layers (llama: q, k, v, o, gate,
 * up, down; GPT-2: c_attn, attn.c_proj, c_fc, mlp.c_proj, and c_proj for both projections), or
 * the end of a Hugging Face module path (q_proj, self_attn.q_proj); "" every linear layer of
 * the blocks (PEFT's "all-linear" less the head). */
#define HPT_LORA_TARGETS_MAX 128
/* How a LoRA run stores its frozen base's block matrices (--base-weights): fp32, bf16 (round to
 * nearest even), int8 with one scale per output row, or QLoRA's NF4 (blocks of 64, double-
 * quantised absmaxes; CPU only); widened to fp32 block by block. With bf16, int8 or nf4 the
 * embedding and an untied head are stored in bf16, widened a vocabulary chunk at a time. */
typedef enum { HPT_BASE_F32 = 0, HPT_BASE_BF16, HPT_BASE_INT8, HPT_BASE_NF4 } hpt_base_weights;
typedef struct {
    int r;          /* rank; 0: no adapters (full training) */
    float alpha;    /* the scale's numerator */
    float dropout;  /* probability on the adapters' input while training, in [0, 1) */
    int rslora;     /* 1: s = alpha / sqrt(r) (rank-stabilised LoRA) */
    char targets[HPT_LORA_TARGETS_MAX];
    int base;       /* hpt_base_weights of the frozen base's blocks (--base-weights) */
    int home;       /* hpt_tier of the frozen base's stored blocks (--base-home): device (0),
                     * host or disk, read-only there and brought in a block at a time */
    int no_prefetch; /* 1: --base-prefetch 0: off the device, each block read when acquired;
                      * 0 (default): the next block read by a worker meanwhile (CPU only) */
} hpt_lora_opts;
/* r 0 (off), alpha 8, dropout 0, every linear layer: PEFT's LoraConfig defaults once r is set. */
hpt_lora_opts hpt_lora_defaults(void);
/* "r=N,alpha=X,dropout=P[,rslora]" (any subset, any order; r defaults to 8 when absent) into
 * o; HPT_ERR_INVALID naming the bad key. */
hpt_status hpt_lora_parse(const char *text, hpt_lora_opts *o);
/* Writes o as hpt_lora_parse reads it ("r=16,alpha=32,dropout=0.05"). */
void hpt_lora_name(const hpt_lora_opts *o, char *buf, size_t n);
/* The scale s of o. */
float hpt_lora_scale(const hpt_lora_opts *o);
/* Attaches adapters o (r > 0) to m: a model without the offload engine and with full
 * embeddings (or a frozen base's, hpt_model_create_frozen); A from seed, B zero.
 * HPT_ERR_INVALID naming an unknown target, HPT_ERR_OOM. */
hpt_status hpt_model_lora_attach(hpt_model *m, const hpt_lora_opts *o, uint64_t seed);
/* Whether m has adapters; their tensors (the table, A then B of each target layer, stacked
 * over the blocks), values and gradients (flat, in that order: device tier). */
int hpt_model_lora_on(const hpt_model *m);
int hpt_model_lora_num_tensors(const hpt_model *m);
hpt_status hpt_model_lora_tensor(const hpt_model *m, int i, hpt_tensor_info *out);
size_t hpt_model_lora_num_params(const hpt_model *m);
float *hpt_model_lora_params(hpt_model *m);
float *hpt_model_lora_grads(hpt_model *m);
/* A model of cfg without gradients whose blocks' matrices are stored as kind (HPT_BASE_BF16,
 * HPT_BASE_INT8 or HPT_BASE_NF4; vectors and the final norm stay fp32, the embedding and an
 * untied head bf16), for LoRA: attach adapters, then load or initialise it as any model (values
 * are rounded as they are stored). A forward needs targets (the head runs by vocabulary chunks). */
hpt_status hpt_model_create_frozen(hpt_mem *mem, const hpt_model_config *cfg, int kind,
                                   hpt_model **out);
/* The same with any kind (HPT_BASE_F32 too: fp32 blocks, fp32 embeddings) whose stored blocks
 * live on tier home (HPT_TIER_DEVICE, HOST or DISK: the disk tier's directory set first), each
 * brought whole into a device staging block when acquired (--base-home). */
hpt_status hpt_model_create_frozen_on(hpt_mem *mem, const hpt_model_config *cfg, int kind,
                                      int home, hpt_model **out);
/* Merges the adapters into the base, W += s * B @ A on each chosen layer, and frees them (the
 * model is then a plain one: `eval --adapter`, `sample --adapter`). */
hpt_status hpt_model_lora_merge(hpt_model *m);
/* Frees the adapters (nothing without them): the model is its base again. */
void hpt_model_lora_detach(hpt_model *m);
/* Dropout on (1, the default after attach) or off (evaluation). */
void hpt_model_lora_set_training(hpt_model *m, int on);
/* What adapters o on a model of cfg allocate, by category (HPT_CAT_*): params (A and B), grads
 * (their gradients and the frozen base's small vector sink), acts (the adapters' scratch at
 * (B, T)); training 0: params only. HPT_ERR_INVALID for an unknown target. */
hpt_status hpt_lora_bytes(const hpt_model_config *cfg, const hpt_lora_opts *o, int B, int T,
                          int training, uint64_t out[HPT_CAT_COUNT]);
/* Number of adapter values of o on cfg (0 on an unknown target). */
size_t hpt_lora_num_params(const hpt_model_config *cfg, const hpt_lora_opts *o);

#endif /* HPTRAIN_MODEL_H */
