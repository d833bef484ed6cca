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

#endif
