/* transfer.cu: the CUDA backend's transfers (kernels/backend.h, "transfers"). Two streams of
 * their own, LOAD (host to device) and STORE (device to host), beside the compute stream
 * cu_stream; copies are cudaMemcpyAsync with cudaMemcpyDefault (unified addressing: the pointers
 * say where they live), asynchronous for the host tier's pinned memory; an hpt_xevent is a CUDA
 * event without timing. Nothing orders a copy but the caller's events (the table's contract).
 * The streams are made once, at the first hpt_transfer_cuda() (hpt_device_bind makes that
 * call), under a lock, and live as long as the process: hpt_cuda_shutdown leaves them, as it
 * does not reset the device (a few hundred bytes of the driver's); the backend's sync() waits for
 * them too (cu_transfer_sync), as backend.h promises for every copy. Errors: event_create returns
 * them; the other calls keep the first in cu_note for hpt_cuda_status(). */
#include "kernels/cuda/cu_common.cuh"

#include <pthread.h>
#include <stdlib.h>

struct hpt_xevent {
    cudaEvent_t ev;
};

static pthread_mutex_t g_xlock = PTHREAD_MUTEX_INITIALIZER;
static cudaStream_t g_xs[HPT_XS_COUNT]; /* [COMPUTE] is cu_stream, set at use */
static int g_xready;

static cudaStream_t xs(hpt_xstream s) { return s == HPT_XS_COMPUTE ? cu_stream : g_xs[s]; }

static hpt_status x_event_create(hpt_xevent **out) {
    *out = NULL;
    cu_enter();
    hpt_xevent *e = (hpt_xevent *)malloc(sizeof *e); /* host metadata */
    if (!e) return hpt_fail(HPT_ERR_OOM, "a transfer event");
    cudaError_t r = cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming);
    if (r != cudaSuccess) {
        free(e);
        return hpt_fail(HPT_ERR_IO, "cudaEventCreate: %s", cudaGetErrorString(r));
    }
    *out = e;
    return HPT_OK;
}

static void x_event_destroy(hpt_xevent *e) {
    if (!e) return;
    cu_enter();
    cu_note(cudaEventDestroy(e->ev), "cudaEventDestroy");
    free(e);
}

static void x_copy_async(void *dst, const void *src, size_t bytes, hpt_copy_kind kind, hpt_xstream s) {
    if (!bytes) return;
    cu_enter();
    (void)kind; /* cudaMemcpyDefault: the pointers say it */
    cu_note(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, xs(s)), "transfer copy");
}

static void x_record(hpt_xevent *e, hpt_xstream s) {
    cu_enter();
    cu_note(cudaEventRecord(e->ev, xs(s)), "transfer event record");
}

static void x_stream_wait(hpt_xstream s, hpt_xevent *e) {
    cu_enter();
    cu_note(cudaStreamWaitEvent(xs(s), e->ev, 0), "transfer stream wait");
}

static void x_host_wait(hpt_xevent *e) {
    cu_enter();
    cu_note(cudaEventSynchronize(e->ev), "transfer host wait");
    hpt_be_note_trip();
}

void cu_transfer_sync(void) {
    pthread_mutex_lock(&g_xlock);
    const int ready = g_xready;
    pthread_mutex_unlock(&g_xlock);
    if (!ready) return;
    cu_note(cudaStreamSynchronize(g_xs[HPT_XS_LOAD]), "sync (transfer LOAD stream)");
    cu_note(cudaStreamSynchronize(g_xs[HPT_XS_STORE]), "sync (transfer STORE stream)");
}

static void *x_native_stream(hpt_xstream s) { return (void *)xs(s); }

static hpt_transfer g_x = {"cuda", 1, x_event_create, x_event_destroy, x_copy_async,
                           x_record, x_stream_wait, x_host_wait, x_native_stream};

extern "C" const struct hpt_transfer *hpt_transfer_cuda(void) {
    if (!hpt_backend_cuda()) return NULL; /* the reason is the last error */
    pthread_mutex_lock(&g_xlock);
    cudaError_t r = cudaSuccess;
    if (!g_xready) {
        cu_enter();
        r = cudaStreamCreateWithFlags(&g_xs[HPT_XS_LOAD], cudaStreamNonBlocking);
        if (r == cudaSuccess) r = cudaStreamCreateWithFlags(&g_xs[HPT_XS_STORE], cudaStreamNonBlocking);
        if (r == cudaSuccess) g_xready = 1;
    }
    pthread_mutex_unlock(&g_xlock);
    if (r != cudaSuccess) {
        (void)hpt_fail(HPT_ERR_UNSUPPORTED, "the transfer streams: %s", cudaGetErrorString(r));
        return NULL;
    }
    return &g_x;
}
