/* hptrain/dist.h: many processes (data parallel over MPI; docs/zero.md). Part of hptrain.h.
 *
 *   // the command line, before anything else of a training run:
 *   hpt_dist_init();                 // MPI when started by mpirun, else one process
 *   int rank = hpt_dist_rank(), n = hpt_dist_size();
 *   ... hpt_trainer_create / hpt_trainer_step: the trainer reduces over every process ...
 *   hpt_dist_finalize(failed);       // failed and the others do not know: MPI_Abort
 *
 * A process started by mpirun (Open MPI's OMPI_COMM_WORLD_SIZE, or PMI/PMIx's size in the
 * environment) joins MPI_COMM_WORLD; any other process is a world of one without MPI, and a
 * build without MPI (HPT_MPI off) is always a world of one. The world is process-wide (MPI is):
 * one init, one finalize. Collectives give up after a timeout (HPT_DIST_TIMEOUT_S, default 600
 * seconds) with an error naming the operation, so a process that hangs or dies cannot keep the
 * others waiting for ever. */
#ifndef HPTRAIN_DIST_H
#define HPTRAIN_DIST_H
#ifndef HPTRAIN_H
#error "include hptrain.h, which includes this part"
#endif

/* Joins the world (idempotent). HPT_ERR_IO when MPI cannot start. */
hpt_status hpt_dist_init(void);
/* Leaves it. failed: this process ends with an error the others may not share: the whole job
 * is aborted (MPI_Abort), so that no process waits for it. */
void hpt_dist_finalize(int failed);
int hpt_dist_rank(void);   /* 0 without MPI */
int hpt_dist_size(void);   /* 1 without MPI */
/* 1 when any process passes a nonzero flag (a stop request seen by one is seen by all). */
int hpt_dist_any(int flag);
/* Bytes this process has sent through the layer's collectives since init (the figure the
 * benchmark compares with the ZeRO paper's volumes). */
uint64_t hpt_dist_bytes_sent(void);
/* 1 when this build has MPI (HPT_MPI). */
int hpt_dist_have_mpi(void);

#endif
