/* zero_int.h: what ZeRO's sharded checkpoints (zero.c) ask of one process's holdings
 * (zero_side.c): which values of which units it writes, which it keeps on load, and where they
 * are, in memory (the in-memory trainer's stages 1-2: a run of whole units) or in the offload
 * engine's homes (stages 1-3: this rank's cut of every block slice). Not public. */
#ifndef HPT_TRAIN_ZERO_INT_H
#define HPT_TRAIN_ZERO_INT_H

#include "core/core.h"
#include "model/model.h"
#include "optim/optim.h"
#include "train/train_int.h"

/* Values [a, z) of the optimizer's unit u (optim.h: a slice of a tensor, checkpoint order). */
typedef struct {
    uint64_t u, a, z;
} zpiece;

typedef struct {
    hpt_model *model;
    hpt_optim *opt;
    struct offload_engine *eng; /* NULL: in memory */
    const hpt_tensor_table *t;
    hpt_model_config c;
    hpt_adamw_opts ao;
    size_t nu;                  /* units */
    int rank, size;             /* this process among the writers or the loaders */
    size_t ulo, uhi;            /* in memory: the units whose state this rank holds */
    size_t comp_S;              /* bf16-kahan with the engine: halves per block in a state.bin's
                                 * "bf16_comp" section (0: no compensation) */
} zside;

/* The side of a run: its model, optimizer, rank; z (in memory) its run of units. */
hpt_status zs_init(zside *s, hpt_model *model, hpt_optim *opt, const dp_shard *z);
/* Unit u: its tensor, slice (layer), values, and first value in checkpoint order. */
void zs_unit(const zside *s, size_t u, int *i, size_t *sl, size_t *sn, size_t *off);
/* The pieces this rank writes, in unit order (*n of them; malloc'd, the caller frees). */
hpt_status zs_pieces(const zside *s, zpiece **out, size_t *n);
/* What this rank keeps of unit u on load: weights [*wa, *wz) and state [*sa, *sz). */
void zs_held(const zside *s, size_t u, size_t *wa, size_t *wz, size_t *sa, size_t *sz);
/* The weights of values [a, a + n) of unit u: get (*p valid until the next call), put. */
hpt_status zs_weights_get(zside *s, size_t u, size_t a, size_t n, const float **p);
hpt_status zs_weights_put(zside *s, size_t u, size_t a, size_t n, const float *src);
/* State buffer b's bytes of values [a, z) of unit u: in the optimizer's buffers (*p, *len), or,
 * for AdamW fp32's blocks in the engine's homes, *p NULL and *eb the home (EB_M, EB_V). */
hpt_status zs_state_at(zside *s, int b, size_t u, size_t a, size_t z, char **p, uint64_t *len, int *eb);
/* An fp32 state range in the engine's homes (eb from zs_state_at): get and put, by value. */
hpt_status zs_state_get(zside *s, int eb, size_t u, size_t a, size_t n, const float **p);
hpt_status zs_state_put(zside *s, int eb, size_t u, size_t a, size_t n, const float *src);
/* bf16-kahan: the compensation of value a of block unit u (NULL: none kept), and where it goes
 * in a state.bin's "bf16_comp" section (halves). */
uint16_t *zs_comp(zside *s, size_t u, size_t a);
uint64_t zs_comp_whole(const zside *s, size_t u, size_t a);

#endif
