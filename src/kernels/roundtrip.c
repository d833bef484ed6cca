/* roundtrip.c: the count of host round trips (backend.h, "Host round trips"). A round trip is
 * a backend call after which the host holds something computed by, or copied from, the device
 * work issued before it, so on a GPU the host waits for the stream to drain: an op returning a
 * value computed from device data, a copy to, from or between host buffers, sync, a transfer's
 * host_wait. Both backends note one per such call where the CUDA backend waits (the CPU where
 * it would): one counter for the process, relaxed atomics (the offload worker calls ops too).
 * Tests and tools read and reset it; nothing decides anything from it. */
#include "kernels/backend.h"

#include <stdatomic.h>

static atomic_ullong g_trips;

void hpt_be_note_trip(void) { atomic_fetch_add_explicit(&g_trips, 1ull, memory_order_relaxed); }

uint64_t hpt_be_trips(void) { return (uint64_t)atomic_load_explicit(&g_trips, memory_order_relaxed); }

void hpt_be_trips_reset(void) { atomic_store_explicit(&g_trips, 0ull, memory_order_relaxed); }
