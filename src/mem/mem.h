/* mem.h: what the memory manager offers other modules beyond the public header: the raw disk
 * transfer the offload engine's worker thread uses. The manager's state stays in mem_int.h. */
#ifndef HPT_MEM_H
#define HPT_MEM_H

#include "hptrain.h"

/* Reads or writes a disk block with no bounce buffer and no timeline event: the offload
 * engine's worker thread (buf, offset and bytes 4096-aligned; bytes may run into the block's
 * last aligned page). */
hpt_status mem_disk_rw(hpt_mem *m, const hpt_disk_ref *ref, uint64_t offset, void *buf,
                       size_t bytes, int write_);

/* Accounts bytes on tier/category if the budget (and failure injection) allow, and undoes it:
 * the memory manager's bookkeeping for a backend that allocates its own device memory (the CUDA
 * backend carves its region and accounts each piece here, as hpt_mem_alloc does for RAM). */
hpt_status mem_reserve(hpt_mem *m, hpt_tier tier, hpt_category cat, size_t bytes);
void mem_unreserve(hpt_mem *m, hpt_tier tier, hpt_category cat, size_t bytes);

/* Which device's memory the device tier is (0: the CPU's RAM, 1 + N: CUDA GPU N): set once by
 * hpt_device_bind before anything is allocated; kernels/device.c chooses the backend by it. */
void mem_set_device(hpt_mem *m, int device);
int mem_device(const hpt_mem *m);

#endif
