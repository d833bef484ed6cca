/* mem_int.h: the memory manager's state, shared by its files (mem.c, disk.c). */
#ifndef HPT_MEM_INT_H
#define HPT_MEM_INT_H

#include "hptrain.h"
#include "mem/mem.h"

#include <limits.h>

/* Debug and sanitizer builds keep each live block's size and check it at hpt_mem_free (the
 * caller tells the size: a wrong one would corrupt the accounting silently). Release: no cost. */
#if defined(HPT_SANITIZED) || !defined(NDEBUG)
#define HPT_MEM_CHECK 1
#else
#define HPT_MEM_CHECK 0
#endif

struct hpt_mem {
    hpt_mem_stats st;
    int device;              /* whose memory the device tier is: 0 the CPU, 1 + N CUDA GPU N
                              * (hpt_device_bind; kernels/device.c picks the backend by it) */
    uint64_t fail_countdown; /* 0: off; 1: the next allocation fails */
    /* event timeline */
    int recording;
    double t0;
    hpt_mem_event *ev;       /* (n_ev) growable; profiler metadata, not tensor data */
    size_t n_ev, cap_ev;
    uint64_t arena_live;     /* bytes live inside arenas */
    int64_t step;            /* context tags */
    int layer;
    hpt_phase phase;
    const char *next_name;
    /* disk tier */
    char disk_dir[PATH_MAX];
    int disk_direct;         /* the last block opened with O_DIRECT */
    void *bounce;            /* (4 MiB) host tier, io: aligned staging for unaligned disk I/O */
    uint64_t disk_fault_countdown; /* atomic; 0: off; 1: the next disk transfer fails */
    int disk_fault_kind;     /* hpt_disk_fault */
#if HPT_MEM_CHECK
    /* live blocks' sizes (debug/sanitizer builds): an open-addressing table (linear probing,
     * a power-of-two capacity, key NULL = empty), host memory outside the budget */
    struct mem_block { void *p; size_t bytes; } *blocks;
    size_t n_blocks, cap_blocks;
    int blocks_lost;         /* a growth failed: the record is incomplete, checks are off */
#endif
};


/* Accounts bytes on tier/category if the budget (and failure injection) allow: the common
 * part of every tier's allocation. Records the event. */
hpt_status mem_reserve(hpt_mem *m, hpt_tier tier, hpt_category cat, size_t bytes);
void mem_unreserve(hpt_mem *m, hpt_tier tier, hpt_category cat, size_t bytes);



#endif
