/* Who this process is in a data-parallel job: its rank, the world size, its rank on its node
 * (which picks its GPU), the nodes, and the launcher that started it. Read from the variables
 * the launchers set: mpirun (Open MPI's OMPI_COMM_WORLD_*), srun (SLURM_PROCID, SLURM_NTASKS,
 * SLURM_LOCALID, SLURM_NNODES) and torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT). No launcher: a world of one. */
#ifndef GT_DIST_WORLD_H
#define GT_DIST_WORLD_H

#include <stdio.h>

#include "core/error.h"

typedef enum {
    GT_LAUNCH_NONE,
    GT_LAUNCH_MPIRUN,
    GT_LAUNCH_SRUN,
    GT_LAUNCH_TORCHRUN,
} gt_launcher;

#define GT_WORLD_ADDR_MAX 256

typedef struct gt_world {
    int rank, size;             /* this process among all */
    int local_rank, local_size; /* among the processes of its node */
    int nodes;
    gt_launcher launcher;
    char master_addr[GT_WORLD_ADDR_MAX]; /* torchrun's rendezvous, "" otherwise */
    int master_port;                     /* 0 when unknown */
    char note[GT_ERROR_MSG_MAX];         /* a launcher's variables set aside, "" if none */
} gt_world;

/* Looks a variable up (getenv in the CLI; a table in tests). NULL: not set. */
typedef const char *(*gt_env_fn)(void *ctx, const char *name);

/* Fills w from the launchers' variables. Errors name the variable and its value: a number
 * that is not one, a rank outside the world, a rank without a size, a torchrun world without
 * its rendezvous address. Launchers that disagree: the one that starts each process wins
 * (mpirun, then torchrun, then srun, whose variables are inherited) and w->note says so. */
int gt_world_from_env(gt_env_fn env, void *ctx, gt_world *w, gt_error *err);
/* The world of a process started by no launcher. */
gt_world gt_world_single(void);
const char *gt_launcher_name(gt_launcher l);
/* One line: "world: 4 ranks on 1 node (4 per node), launched by mpirun; this is rank 0". */
void gt_world_print(const gt_world *w, FILE *f);

#endif
