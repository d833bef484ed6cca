/* gpt2_int.h: the GPT-2 object's layout, shared by the model and io modules. */
#ifndef HPT_GPT2_INT_H
#define HPT_GPT2_INT_H

#include "hptrain.h"

/* Pointers into the parameter (or gradient) buffer, llm.c's checkpoint order. */
typedef struct {
    float *wte;      // (Vp, C)
    float *wpe;      // (maxT, C)
    float *ln1w;     // (L, C)
    float *ln1b;     // (L, C)
    float *qkvw;     // (L, 3C, C)
    float *qkvb;     // (L, 3C)
    float *attprojw; // (L, C, C)
    float *attprojb; // (L, C)
    float *ln2w;     // (L, C)
    float *ln2b;     // (L, C)
    float *fcw;      // (L, 4C, C)
    float *fcb;      // (L, 4C)
    float *fcprojw;  // (L, C, 4C)
    float *fcprojb;  // (L, C)
    float *lnfw;     // (C)
    float *lnfb;     // (C)
} gpt2_tensors;

/* Activations of one forward at (B, T) and the scratch of its backward; all fp32. */
typedef struct {
    float *encoded;  // (B, T, C) block 0's input
    float *ln1;      // (L, B, T, C)
    float *ln1_mean; // (L, B, T)
    float *ln1_rstd; // (L, B, T)
    float *qkv;      // (L, B, T, 3C)
    float *atty;     // (L, B, T, C)
    float *att;      // (L, B, NH, T, T) softmax probabilities
    float *res2;     // (L, B, T, C) residual after attention
    float *ln2;      // (L, B, T, C)
    float *ln2_mean; // (L, B, T)
    float *ln2_rstd; // (L, B, T)
    float *fch;      // (L, B, T, 4C) MLP pre-activation
    float *fch_gelu; // (L, B, T, 4C)
    float *res3;     // (L, B, T, C) residual after the MLP: the block's output
    float *lnf;      // (B, T, C)
    float *lnf_mean; // (B, T)
    float *lnf_rstd; // (B, T)
    float *logits;   // (B, T, Vp); dlogits in place during backward
    float *lse;      // (B, T) log-sum-exp of each row
    float *losses;   // (B, T)
    /* backward scratch */
    float *dres;     // (B, T, C) gradient of the residual stream
    float *dsmall;   // (B, T, C)
    float *dbig;     // (B, T, 4C) also holds dqkv (B, T, 3C)
    float *attscr;   // (B, NH, T)
} gpt2_acts;

struct hpt_gpt2 {
    hpt_gpt2_config cfg;
    hpt_mem *mem;         /* borrowed; outlives the model */
    size_t num_params;
    float *params;        /* (num_params) device tier, params category */
    float *grads;         /* (num_params) device tier, grads category */
    gpt2_tensors p, g;
    /* activations: one block sized for (aB, aT); reused while a forward fits */
    float *act_mem;
    size_t act_bytes;
    int aB, aT;
    gpt2_acts a;
    /* the last forward */
    int B, T;
    int32_t *inputs;      /* (B, T) copies, in act_mem */
    int32_t *targets;     /* (B, T) or NULL */
    int has_targets;
    float loss;
};

void gpt2_point_tensors(const hpt_gpt2_config *cfg, float *base, gpt2_tensors *t);

#endif
