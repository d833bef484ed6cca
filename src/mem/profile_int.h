/* profile_int.h: what the profiler's files share (trace.c, profile.c, profile_svg.c): the
 * atomic file writer and the replay of recorded events. */
#ifndef HPT_PROFILE_INT_H
#define HPT_PROFILE_INT_H

#include "core/core.h"

#include <stdint.h>
#include <stdio.h>

/* Writes to a temporary name beside path and renames it over path on success, so a reader
 * never sees half a trace. (mem sits below io in the module order, so io's helper is not used.)
 * prof_out_end closes the file and frees o's names whether or not it succeeds. (trace.c) */
typedef struct {
    FILE *f;
    char *path, *tmp;
} prof_out;
hpt_status prof_out_begin(prof_out *o, const char *path);
hpt_status prof_out_end(prof_out *o);

/* The running state of a replay: accounted bytes by tier and category (signed: a free of a
 * block allocated before recording began goes below zero), each tier's total as the events
 * report it, and the arena buffers alive, oldest first. Start from all zeros; the caller frees
 * bufs. */
typedef struct {
    int64_t live[HPT_TIER_COUNT][HPT_CAT_COUNT];
    uint64_t total[HPT_TIER_COUNT];
    uint64_t arena_live;
    hpt_profile_buf *bufs;   /* (n_bufs) live arena buffers in birth order */
    size_t n_bufs, cap_bufs;
    const char *last_born;   /* name of the latest buffer or block born (NULL: unnamed) */
    int oom;                 /* bufs could not grow: the buffer list is incomplete */
} prof_replay;

/* Applies one event to r. (profile.c) */
void prof_replay_apply(prof_replay *r, const hpt_mem_event *e);

static inline uint64_t prof_clamp0(int64_t v) { return v > 0 ? (uint64_t)v : 0; }

#endif
