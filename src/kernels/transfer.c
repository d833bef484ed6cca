/* transfer.c: the CPU's transfers (kernels/backend.h, "transfers") and the choice of an
 * hpt_mem's.
 * On the CPU the device tier and the host tier are both RAM: a copy is a memcpy that is done
 * when it returns, so every event is already complete and records and waits do nothing; one
 * static event stands for all of them (no allocation, nothing to free). */
#include "core/core.h"
#include "mem/mem.h"
#include "kernels/backend.h"
#ifdef HPT_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#endif

#include <string.h>

struct hpt_xevent {
    int unused;
};
static hpt_xevent g_done;

static hpt_status cpu_event_create(hpt_xevent **out) {
    *out = &g_done;
    return HPT_OK;
}
static void cpu_event_destroy(hpt_xevent *ev) { (void)ev; }
static void cpu_copy_async(void *dst, const void *src, size_t bytes, hpt_copy_kind kind,
                           hpt_xstream s) {
    (void)kind, (void)s;
    if (bytes) memcpy(dst, src, bytes);
}
static void cpu_record(hpt_xevent *ev, hpt_xstream s) { (void)ev, (void)s; }
static void cpu_stream_wait(hpt_xstream s, hpt_xevent *ev) { (void)ev, (void)s; }
static void cpu_host_wait(hpt_xevent *ev) {
    (void)ev;
    hpt_be_note_trip(); /* a GPU's host waits here: counted as one (backend.h) */
}

static const hpt_transfer g_cpu = {"cpu", 0, cpu_event_create, cpu_event_destroy, cpu_copy_async,
                                   cpu_record, cpu_stream_wait, cpu_host_wait, NULL};

const hpt_transfer *hpt_transfer_cpu(void) { return &g_cpu; }

const hpt_transfer *hpt_transfer_of(const hpt_mem *mem) {
#ifdef HPT_HAVE_CUDA
    if (mem_device(mem) != 0) {
        const hpt_transfer *x = hpt_transfer_cuda(); /* the backend started at the binding */
        if (x) return x;
    }
#else
    (void)mem;
#endif
    if (hpt_transfer_check_env()) return hpt_transfer_check();
    return &g_cpu;
}
