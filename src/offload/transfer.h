/* transfer.h: copies between the host tier and the device tier that run beside compute, and
 * the events that order them: what the activation store and the offload engine see of PCIe.
 *
 *   const hpt_transfer *x = hpt_transfer_of(mem);        // the CPU's or a GPU's
 *   hpt_xevent *after, *done;
 *   HPT_CHECK(x->event_create(&after)); HPT_CHECK(x->event_create(&done));
 *   x->record(after, HPT_XS_COMPUTE);                    // the compute issued so far
 *   x->stream_wait(HPT_XS_LOAD, after);                  // the copy starts after it (dst free)
 *   x->copy_async(dev, host, bytes, HPT_COPY_H2D, HPT_XS_LOAD);
 *   x->record(done, HPT_XS_LOAD);
 *   ... compute issued here overlaps the copy ...
 *   x->stream_wait(HPT_XS_COMPUTE, done);                // compute issued later sees dev
 *   x->host_wait(done);                                  // or: the host reads what arrived
 *   x->event_destroy(after); x->event_destroy(done);
 *
 * Three streams: COMPUTE (the backend's ops), LOAD (host to device) and STORE (device to host).
 * Work on one stream runs in issue order; between streams only the events order it, and
 * nothing orders a copy implicitly: the caller records and waits for what it needs (a copy's
 * destination must be free of earlier readers, its source complete, before it starts; no
 * later compute may overwrite the source until the copy's event has been waited for).
 * On the CPU (async 0) a copy is a memcpy that is complete when it returns, and events, records
 * and waits do nothing: code written against this table keeps the CPU's behaviour exactly.
 * On a GPU (kernels/cuda/transfer.cu) copies are cudaMemcpyAsync on two streams of their own
 * and events are CUDA events; host memory must be the host tier's (pinned) for the copies to
 * be asynchronous. Nothing fails after event_create: a CUDA error is kept by the backend
 * (hpt_cuda_status). */
#ifndef HPT_OFFLOAD_TRANSFER_H
#define HPT_OFFLOAD_TRANSFER_H

#include "kernels/backend.h"

typedef enum { HPT_XS_COMPUTE = 0, HPT_XS_LOAD, HPT_XS_STORE, HPT_XS_COUNT } hpt_xstream;
typedef struct hpt_xevent hpt_xevent;

typedef struct hpt_transfer {
    const char *name; /* "cpu", "cuda" */
    int async;        /* 1: copies run beside compute; 0: complete when copy_async returns */
    hpt_status (*event_create)(hpt_xevent **out);
    void (*event_destroy)(hpt_xevent *ev); /* NULL: nothing */
    /* bytes from src to dst on stream s (LOAD or STORE) */
    void (*copy_async)(void *dst, const void *src, size_t bytes, hpt_copy_kind kind, hpt_xstream s);
    /* ev completes when the work issued on s so far has */
    void (*record)(hpt_xevent *ev, hpt_xstream s);
    /* the work issued on s after this call waits for ev (the host does not) */
    void (*stream_wait)(hpt_xstream s, hpt_xevent *ev);
    /* the calling thread waits for ev */
    void (*host_wait)(hpt_xevent *ev);
} hpt_transfer;

/* The CPU's: memcpy, no events. */
const hpt_transfer *hpt_transfer_cpu(void);
/* The transfers of mem's device tier (kernels/device.c's binding): the CPU's, or the CUDA
 * backend's when mem is bound to a GPU. */
const hpt_transfer *hpt_transfer_of(const hpt_mem *mem);

#endif
