/* backend.cu: the CUDA backend's table (kernels/backend.h), its device, streams and memory. The
 * device tier is one region of the budget's size (unlimited: free memory less 512 MiB, at most
 * HPT_CUDA_REGION) opened at the first device allocation: reserved addresses with GPU memory
 * mapped as the allocator reaches them (vmm.cu), or one cudaMalloc where that is not available;
 * carved first-fit (256-byte pieces, neighbours coalesced); the host tier is pinned. Ops run on cu_stream in
 * issue order; host copies run on a stream per direction, ordered against the compute by events.
 * docs/cuda.md, "What is implemented".
 * Invariants: the memory manager accounts every piece first (mem_reserve), as on the CPU; no
 * cudaMalloc or cudaFree after setup (the region's memory is mapped in the first step, when
 * the run allocates); a host copy returns when its bytes have arrived, as memcpy
 * does (host to host after the compute issued before it); sync() waits for every op and copy
 * (the transfers' streams too); ops cannot fail: the first CUDA or cuBLAS error is kept and
 * hpt_cuda_status() returns it. */
#include "kernels/cuda/cu_common.cuh"
#include "kernels/cuda/carve.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CU_ALIGN 256
#define CU_MARGIN ((size_t)512 << 20)      /* left to the context and other users */
#define CU_BLAS_WS ((size_t)32 << 20)      /* cuBLAS's workspace, fixed at init */
#define CU_MAX_EXTENTS 65536

cudaStream_t cu_stream;
cublasHandle_t cu_blas;
double *cu_red;
float *cu_colred;
double *cu_red_host;
float *cu_stage;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* init, allocator, copies */
static int g_ready, g_device, g_selected;
static cudaStream_t g_h2d, g_d2h;
static cudaEvent_t g_ev_a, g_ev_b;
static void *g_ws;
static char g_err[256];
static int g_err_set;

/* the device region and its allocator (carve.h) */
static char *g_base;
static hpt_carve g_carve;
static hpt_extent *g_free;

void cu_note(cudaError_t e, const char *what) {
    if (e == cudaSuccess || g_err_set) return;
    snprintf(g_err, sizeof g_err, "CUDA error in %s: %s", what, cudaGetErrorString(e));
    g_err_set = 1;
}
void cu_note_blas(cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS || g_err_set) return;
    snprintf(g_err, sizeof g_err, "cuBLAS error %d in %s", (int)s, what);
    g_err_set = 1;
}

static __thread int t_entered = -1;
void cu_enter(void) {
    if (t_entered != g_device) {
        cu_note(cudaSetDevice(g_device), "cudaSetDevice");
        t_entered = g_device;
    }
}

extern "C" hpt_status hpt_cuda_status(void) {
    if (!g_err_set) return HPT_OK;
    g_err_set = 0;
    return hpt_fail(HPT_ERR_IO, "%s", g_err);
}

void cu_read_red_at(int first, int n) {
    cu_note(cudaMemcpyAsync(cu_red_host + first, cu_red + first, (size_t)n * sizeof(double),
                            cudaMemcpyDeviceToHost, cu_stream), "reading a reduction");
    cu_note(cudaStreamSynchronize(cu_stream), "reading a reduction");
    hpt_be_note_trip();
}
void cu_read_red(int n) { cu_read_red_at(0, n); }

extern "C" int hpt_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver: not sticky for later calls */
        return 0;
    }
    return n;
}

extern "C" hpt_status hpt_cuda_device_props(int device, char *name, size_t n, int *major, int *minor) {
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, device);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return hpt_fail(HPT_ERR_UNSUPPORTED, "no CUDA device %d: %s", device, cudaGetErrorString(e));
    }
    snprintf(name, n, "%s", p.name);
    *major = p.major, *minor = p.minor;
    return HPT_OK;
}

extern "C" hpt_status hpt_cuda_select(int device) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return hpt_fail(HPT_ERR_UNSUPPORTED, "no CUDA device: %s", cudaGetErrorString(e));
    }
    if (device < 0 || device >= n)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "no CUDA device %d (this machine has %d)", device, n);
    pthread_mutex_lock(&g_lock);
    hpt_status s = HPT_OK;
    if (g_ready && device != g_device)
        s = hpt_fail(HPT_ERR_INVALID, "the CUDA backend already runs on device %d", g_device);
    else g_device = device, g_selected = 1;
    pthread_mutex_unlock(&g_lock);
    return s;
}

static hpt_status init_locked(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return hpt_fail(HPT_ERR_UNSUPPORTED, "no CUDA device: %s",
                        e != cudaSuccess ? cudaGetErrorString(e) : "none present");
    }
    if (!g_selected) g_device = 0;
    if (g_device >= n)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "no CUDA device %d (this machine has %d)", g_device, n);
    t_entered = -1;
    if ((e = cudaSetDevice(g_device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&cu_stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&g_h2d, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&g_d2h, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&g_ev_a, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&g_ev_b, cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaMalloc(&g_ws, CU_BLAS_WS)) != cudaSuccess ||
        (e = cudaMalloc((void **)&cu_red, CU_RED_SLOTS * sizeof(double))) != cudaSuccess ||
        (e = cudaMalloc((void **)&cu_colred, CU_COLRED_FLOATS * sizeof(float))) != cudaSuccess ||
        (e = cudaHostAlloc((void **)&cu_red_host, CU_RED_SLOTS * sizeof(double), cudaHostAllocDefault)) != cudaSuccess ||
        (e = cudaHostAlloc((void **)&cu_stage, CU_STAGE_FLOATS * sizeof(float), cudaHostAllocDefault)) != cudaSuccess)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "CUDA device %d: %s", g_device, cudaGetErrorString(e));
    cublasStatus_t b = cublasCreate(&cu_blas);
    if (b == CUBLAS_STATUS_SUCCESS) b = cublasSetStream(cu_blas, cu_stream);
    if (b == CUBLAS_STATUS_SUCCESS) b = cublasSetWorkspace(cu_blas, g_ws, CU_BLAS_WS);
    /* fp32 GEMMs in fp32 (no TF32) unless hpt_cuda_set_tf32 asks, or HPT_CUDA_TF32=1 (a
     * measuring knob until the mixed-precision mode: docs/cuda.md) */
    const char *tf = getenv("HPT_CUDA_TF32");
    const int tf32 = tf && !strcmp(tf, "1");
    if (b == CUBLAS_STATUS_SUCCESS)
        b = cublasSetMathMode(cu_blas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH);
    if (b != CUBLAS_STATUS_SUCCESS)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "cuBLAS on CUDA device %d: status %d", g_device, (int)b);
    g_ready = 1;
    t_entered = g_device;
    return HPT_OK;
}

extern "C" void *hpt_cuda_compute_stream(void) { return (void *)cu_stream; }

extern "C" void hpt_cuda_set_tf32(int on) {
    if (g_ready)
        cu_note_blas(cublasSetMathMode(cu_blas, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH),
                     "cublasSetMathMode");
}

extern "C" hpt_status hpt_cuda_mem_info(size_t *free_bytes, size_t *total_bytes) {
    cu_enter();
    cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    if (e != cudaSuccess) return hpt_fail(HPT_ERR_IO, "cudaMemGetInfo: %s", cudaGetErrorString(e));
    return HPT_OK;
}

/* ---- the device region ---- */
static hpt_status region_open_locked(size_t want) {
    if (g_base) return HPT_OK;
    if (!want) {
        size_t fr = 0, tot = 0;
        cudaError_t e = cudaMemGetInfo(&fr, &tot);
        if (e != cudaSuccess) return hpt_fail(HPT_ERR_OOM, "cudaMemGetInfo: %s", cudaGetErrorString(e));
        want = fr > 2 * CU_MARGIN ? fr - CU_MARGIN : fr / 2;
        const char *cap = getenv("HPT_CUDA_REGION");
        uint64_t cb = 0;
        if (cap && *cap) {
            if (hpt_parse_size(cap, &cb) != HPT_OK || !cb)
                return hpt_fail(HPT_ERR_INVALID, "HPT_CUDA_REGION=%s: not a size (\"2GiB\")", cap);
            if (cb < want) want = (size_t)cb;
        }
    }
    want = want / CU_ALIGN * CU_ALIGN;
    g_free = (hpt_extent *)malloc(CU_MAX_EXTENTS * sizeof(hpt_extent)); /* allocator metadata, host */
    if (!g_free) return hpt_fail(HPT_ERR_OOM, "the device allocator's extent list");
    /* addresses only, memory mapped as the allocator reaches it (vmm.cu); else one cudaMalloc */
    cudaError_t e = cu_vmm_open(g_device, want, &g_base) ? cudaSuccess : cudaMalloc((void **)&g_base, want);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        free(g_free);
        g_free = NULL;
        g_base = NULL;
        return hpt_fail(HPT_ERR_OOM, "the device region of %.1f MiB: %s", (double)want / 1048576.0,
                        cudaGetErrorString(e));
    }
    hpt_carve_init(&g_carve, g_free, CU_MAX_EXTENTS, want);
    return HPT_OK;
}

extern "C" hpt_status hpt_cuda_reserve(size_t bytes) {
    if (!hpt_backend_cuda()) return HPT_ERR_UNSUPPORTED;
    pthread_mutex_lock(&g_lock);
    hpt_status s = g_base && bytes && bytes != g_carve.size
                       ? hpt_fail(HPT_ERR_INVALID, "the device region is already %zu bytes", g_carve.size)
                       : region_open_locked(bytes);
    pthread_mutex_unlock(&g_lock);
    return s;
}

extern "C" size_t hpt_cuda_region_backed(void) {
    pthread_mutex_lock(&g_lock);
    size_t b = !g_base ? 0 : cu_vmm_active() ? cu_vmm_mapped() : g_carve.size;
    pthread_mutex_unlock(&g_lock);
    return b;
}

extern "C" void hpt_cuda_region(size_t *region_bytes, size_t *used_bytes) {
    pthread_mutex_lock(&g_lock);
    *region_bytes = g_base ? g_carve.size : 0;
    *used_bytes = g_base ? g_carve.used : 0;
    pthread_mutex_unlock(&g_lock);
}

static size_t round_up(size_t x) { return (x + CU_ALIGN - 1) / CU_ALIGN * CU_ALIGN; }

static hpt_status cu_alloc(hpt_mem *mem, hpt_tier tier, hpt_category cat, size_t bytes, void **out) {
    *out = NULL;
    if (tier == HPT_TIER_DISK)
        return hpt_fail(HPT_ERR_INVALID, "the disk tier is not addressable: use hpt_mem_disk_alloc");
    if (bytes == 0) return HPT_OK;
    cu_enter();
    HPT_CHECK(mem_reserve(mem, tier, cat, bytes));
    pthread_mutex_lock(&g_lock);
    hpt_status s = HPT_OK;
    void *p = NULL;
    if (tier == HPT_TIER_DEVICE) {
        if (!g_base) {
            hpt_mem_stats st;
            hpt_mem_get_stats(mem, &st);
            s = region_open_locked(st.budget_bytes[HPT_TIER_DEVICE]);
        }
        size_t off = 0, high0 = g_carve.high;
        if (s == HPT_OK) {
            if (hpt_carve_take(&g_carve, round_up(bytes), &off)) p = g_base + off;
            else s = hpt_fail(HPT_ERR_OOM, "device tier: %zu bytes do not fit the device region "
                              "(%zu of %zu bytes carved, in %d free pieces)", bytes, g_carve.used,
                              g_carve.size, g_carve.n);
        }
        if (p && (s = cu_vmm_ensure(g_carve.high)) != HPT_OK) { /* memory behind the piece */
            (void)hpt_carve_give(&g_carve, off, round_up(bytes));
            g_carve.high = high0; /* nothing was mapped past it */
            p = NULL;
        }
        if (s == HPT_OK) cu_note(cudaMemsetAsync(p, 0, bytes, cu_stream), "zero-filling an allocation");
    } else {
        cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            p = NULL;
            s = hpt_fail(HPT_ERR_OOM, "host tier: cudaHostAlloc of %zu bytes: %s", bytes, cudaGetErrorString(e));
        } else {
            memset(p, 0, bytes);
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (s != HPT_OK) {
        mem_unreserve(mem, tier, cat, bytes);
        return s;
    }
    *out = p;
    return HPT_OK;
}

static void cu_free(hpt_mem *mem, hpt_tier tier, hpt_category cat, void *p, size_t bytes) {
    if (!p) return;
    cu_enter();
    pthread_mutex_lock(&g_lock);
    if (tier == HPT_TIER_DEVICE) {
        char *c = (char *)p;
        if (c < g_base || c >= g_base + g_carve.size || !hpt_carve_give(&g_carve, (size_t)(c - g_base), round_up(bytes)))
            cu_note(cudaErrorInvalidValue, "freeing device memory the allocator did not give");
    } else {
        cu_note(cudaFreeHost(p), "cudaFreeHost");
    }
    pthread_mutex_unlock(&g_lock);
    mem_unreserve(mem, tier, cat, bytes);
}

/* A copy on stream s after the compute work issued so far, the later compute after it. */
static void copy_on(cudaStream_t s, void *dst, const void *src, size_t bytes, cudaMemcpyKind k) {
    cu_note(cudaEventRecord(g_ev_a, cu_stream), "cudaEventRecord");
    cu_note(cudaStreamWaitEvent(s, g_ev_a, 0), "cudaStreamWaitEvent");
    cu_note(cudaMemcpyAsync(dst, src, bytes, k, s), "cudaMemcpyAsync");
    cu_note(cudaEventRecord(g_ev_b, s), "cudaEventRecord");
    cu_note(cudaStreamWaitEvent(cu_stream, g_ev_b, 0), "cudaStreamWaitEvent");
    cu_note(cudaEventSynchronize(g_ev_b), "cudaEventSynchronize"); /* the bytes have arrived */
}

static void cu_copy(void *dst, const void *src, size_t bytes, hpt_copy_kind kind) {
    if (!bytes) return;
    cu_enter();
    switch (kind) {
    case HPT_COPY_D2D:
        cu_note(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cu_stream), "D2D copy");
        break;
    case HPT_COPY_H2H: /* after the compute issued so far, which may write a pinned buffer */
        hpt_be_note_trip();
        cu_note(cudaStreamSynchronize(cu_stream), "H2H copy");
        memcpy(dst, src, bytes);
        break;
    case HPT_COPY_H2D:
    case HPT_COPY_D2H:
        hpt_be_note_trip(); /* copy_on: the host waits for the bytes */
        pthread_mutex_lock(&g_lock);
        /* cudaMemcpyDefault: the pointers say where they live (unified addressing), so pinned
         * host-tier buffers and pageable host memory both work in either direction */
        copy_on(kind == HPT_COPY_H2D ? g_h2d : g_d2h, dst, src, bytes, cudaMemcpyDefault);
        pthread_mutex_unlock(&g_lock);
        break;
    }
}

static void cu_memset(void *dst, int value, size_t bytes) {
    if (!bytes) return;
    cu_enter();
    cu_note(cudaMemsetAsync(dst, value, bytes, cu_stream), "cudaMemsetAsync");
}

static void cu_sync(void) {
    cu_enter();
    hpt_be_note_trip();
    cu_note(cudaStreamSynchronize(cu_stream), "sync");
    cu_note(cudaStreamSynchronize(g_h2d), "sync");
    cu_note(cudaStreamSynchronize(g_d2h), "sync");
    cu_transfer_sync();
}

static hpt_backend g_table;

static void fill_table(hpt_backend *t) {
    memset(t, 0, sizeof *t);
    t->name = "cuda";
    t->alloc = cu_alloc;
    t->free = cu_free;
    t->copy = cu_copy;
    t->memset = cu_memset;
    t->sync = cu_sync;
    t->gemm = cu_gemm;
    t->matmul_forward = cu_matmul_forward;
    t->matmul_backward = cu_matmul_backward;
    t->gemm_bf16 = cu_gemm_bf16;
    t->matmul_forward_bf16 = cu_matmul_forward_bf16;
    t->matmul_backward_bf16 = cu_matmul_backward_bf16;
    t->encoder_forward = cu_encoder_forward;
    t->encoder_backward = cu_encoder_backward;
    t->layernorm_forward = cu_layernorm_forward;
    t->layernorm_apply = cu_layernorm_apply;
    t->layernorm_backward = cu_layernorm_backward;
    t->rmsnorm_forward = cu_rmsnorm_forward;
    t->rmsnorm_apply = cu_rmsnorm_apply;
    t->rmsnorm_backward = cu_rmsnorm_backward;
    t->rope_forward = cu_rope_forward;
    t->rope_backward = cu_rope_backward;
    t->swiglu_forward = cu_swiglu_forward;
    t->swiglu_backward = cu_swiglu_backward;
    t->geglu_forward = cu_geglu_forward;
    t->geglu_backward = cu_geglu_backward;
    t->attention_forward = cu_attention_forward;
    t->attention_backward = cu_attention_backward;
    t->flash_attention_forward = cu_flash_attention_forward;
    t->flash_attention_backward = cu_flash_attention_backward;
    t->attention_forward_seg = cu_attention_forward_seg;
    t->attention_backward_seg = cu_attention_backward_seg;
    t->flash_attention_forward_seg = cu_flash_attention_forward_seg;
    t->flash_attention_backward_seg = cu_flash_attention_backward_seg;
    t->flash_attention_forward_bf16 = cu_flash_attention_forward_bf16;
    t->flash_attention_backward_bf16 = cu_flash_attention_backward_bf16;
    t->flash_attention_bf16_heads = cu_flash_attention_bf16_heads;
    t->encoder_forward_pos = cu_encoder_forward_pos;
    t->encoder_backward_pos = cu_encoder_backward_pos;
    t->encoder_forward_bf16_pos = cu_encoder_forward_bf16_pos;
    t->rope_forward_pos = cu_rope_forward_pos;
    t->rope_backward_pos = cu_rope_backward_pos;
    t->gelu_forward = cu_gelu_forward;
    t->gelu_backward = cu_gelu_backward;
    t->scale = cu_scale;
    t->add = cu_add;
    t->sumsq = cu_sumsq;
    t->nonfinite = cu_nonfinite;
    t->sumsq_many = cu_sumsq_many;
    t->sumsq_many_dev = cu_sumsq_many_dev;
    t->nonfinite_many = cu_nonfinite_many;
    t->crossentropy_forward = cu_crossentropy_forward;
    t->crossentropy_backward = cu_crossentropy_backward;
    t->loss_mean = cu_loss_mean;
    t->bf16_widen_par = cu_bf16_widen_par;
    t->bf16_split_par = cu_bf16_split_par;
    t->encoder_forward_bf16 = cu_encoder_forward_bf16;
    t->encoder_backward_wpe = cu_encoder_backward_wpe;
    t->encoder_backward_rows = cu_encoder_backward_rows;
    t->logsumexp_chunk = cu_logsumexp_chunk;
    t->tied_loss = cu_tied_loss;
    t->crossentropy_dlogits = cu_crossentropy_dlogits;
    t->adamw = cu_adamw;
    t->adamw_q = cu_adamw_q;
    t->lion = cu_lion;
    t->sgd = cu_sgd;
    t->adam_mini = cu_adam_mini;
    t->q8_map = cu_q8_map;
    t->q8_lut_of = cu_q8_lut_of;
    t->q8_quantize = cu_q8_quantize;
    t->q8_dequantize = cu_q8_dequantize;
    t->f16_narrow = cu_f16_narrow;
    t->bf16_narrow = cu_bf16_narrow;
    t->f16_widen = cu_f16_widen;
    t->bf16_widen = cu_bf16_widen;
    t->bf16_split = cu_bf16_split;
    t->q8w_quantize = cu_q8w_quantize;
    t->q8w_dequantize = cu_q8w_dequantize;
    t->q8w_matmul_forward = cu_q8w_matmul_forward;
    t->infer_embed = cu_infer_embed;
    t->infer_kv_store = cu_infer_kv_store;
    t->infer_attend = cu_infer_attend;
    t->act_code_bytes = cu_act_code_bytes;
    t->act_code_store = cu_act_code_store;
    t->act_code_load = cu_act_code_load;
    t->fit_observe = cu_fit_observe;
    t->fit_velocity = cu_fit_velocity;
    t->predict_adam = cu_predict_adam;
    t->predict_linear = cu_predict_linear;
    t->add_normal = cu_add_normal;
    t->adam_step_sumsq = cu_adam_step_sumsq;
    t->init_normal = cu_init_normal;
    t->fill = cu_fill;
    t->dropout_forward = cu_dropout_forward;
    t->dropout_backward = cu_dropout_backward;
    t->nf4_quantize = cu_nf4_quantize;
    t->nf4_dequantize = cu_nf4_dequantize;
}

extern "C" const hpt_backend *hpt_backend_cuda(void) {
    pthread_mutex_lock(&g_lock);
    hpt_status s = g_ready ? HPT_OK : init_locked();
    if (s == HPT_OK && !g_table.name) fill_table(&g_table);
    pthread_mutex_unlock(&g_lock);
    /* the q8 tables' device copies at setup, not at the first 8-bit update of a step */
    if (s == HPT_OK) (void)cu_q8_lut_of(0), (void)cu_q8_lut_of(1);
    return s == HPT_OK ? &g_table : NULL;
}

extern "C" void hpt_cuda_shutdown(void) {
    pthread_mutex_lock(&g_lock);
    if (g_ready) {
        cu_enter();
        cudaDeviceSynchronize();
        if (g_base && cu_vmm_active()) cu_vmm_close();
        else if (g_base) cudaFree(g_base);
        free(g_free);
        g_base = NULL, g_free = NULL;
        memset(&g_carve, 0, sizeof g_carve);
        cu_q8_release();
        cublasDestroy(cu_blas);
        cudaFree(g_ws);
        cudaFree(cu_red);
        cudaFree(cu_colred);
        cudaFreeHost(cu_red_host);
        cudaFreeHost(cu_stage);
        cudaEventDestroy(g_ev_a);
        cudaEventDestroy(g_ev_b);
        cudaStreamDestroy(cu_stream);
        cudaStreamDestroy(g_h2d);
        cudaStreamDestroy(g_d2h);
        g_ready = 0;
    }
    pthread_mutex_unlock(&g_lock);
}
