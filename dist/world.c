/* The world from the launchers' variables (world.h). The launcher that sets its variables per
 * process wins: mpirun's, then torchrun's, then srun's. srun's come first to be inherited
 * (mpirun inside an sbatch script leaves every rank SLURM_PROCID=0), so a disagreeing lower
 * launcher is set aside with a note that the CLI prints, not an error. */
#include "dist/world.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct launcher_vars {
    gt_launcher kind;
    const char *rank, *size, *local_rank, *local_size, *nodes;
} launcher_vars;

static const launcher_vars launchers[] = {
    {GT_LAUNCH_MPIRUN, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", NULL},
    {GT_LAUNCH_TORCHRUN, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", NULL},
    {GT_LAUNCH_SRUN, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL, "SLURM_NNODES"},
};
#define N_LAUNCHERS (int)(sizeof launchers / sizeof launchers[0])

gt_world gt_world_single(void) {
    gt_world w = {0};
    w.size = w.local_size = w.nodes = 1;
    return w;
}

const char *gt_launcher_name(gt_launcher l) {
    switch (l) {
    case GT_LAUNCH_MPIRUN:
        return "mpirun";
    case GT_LAUNCH_SRUN:
        return "srun";
    case GT_LAUNCH_TORCHRUN:
        return "torchrun";
    default:
        return "no launcher";
    }
}

/* *out = the variable as a number >= min; -1 (unset) leaves *out alone */
static int read_int(gt_env_fn env, void *ctx, const char *name, int min, int *out, int *set,
                    gt_error *err) {
    *set = 0;
    const char *v = name ? env(ctx, name) : NULL;
    if (!v) return GT_OK;
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (*v == '\0' || *end != '\0' || errno || x < min || x > INT_MAX)
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s=%s is not a whole number >= %d; the launcher sets it, so unset it "
                            "if it was exported by hand",
                            name, v, min);
    *out = (int)x;
    *set = 1;
    return GT_OK;
}

/* Reads one launcher's variables into w; *found when its rank and size are both set. */
static int read_launcher(gt_env_fn env, void *ctx, const launcher_vars *lv, gt_world *w, int *found,
                         gt_error *err) {
    int rs = 0, ss = 0, lrs = 0, lss = 0, ns = 0;
    *w = gt_world_single();
    w->launcher = lv->kind;
    int rc = read_int(env, ctx, lv->rank, 0, &w->rank, &rs, err);
    if (!rc) rc = read_int(env, ctx, lv->size, 1, &w->size, &ss, err);
    if (!rc) rc = read_int(env, ctx, lv->local_rank, 0, &w->local_rank, &lrs, err);
    if (!rc) rc = read_int(env, ctx, lv->local_size, 1, &w->local_size, &lss, err);
    if (!rc) rc = read_int(env, ctx, lv->nodes, 1, &w->nodes, &ns, err);
    if (rc) return rc;
    *found = rs && ss;
    if (!*found) {
        if (rs != ss)
            return gt_error_set(err, GT_ERR_INVALID,
                                "%s is set but %s is not; a %s launch sets both (unset the one "
                                "exported by hand)",
                                rs ? lv->rank : lv->size, rs ? lv->size : lv->rank,
                                gt_launcher_name(lv->kind));
        return GT_OK;
    }
    if (w->rank >= w->size)
        return gt_error_set(err, GT_ERR_INVALID, "%s=%d is outside the world of %s=%d", lv->rank,
                            w->rank, lv->size, w->size);
    if (!lrs) w->local_rank = w->rank;
    if (!lss) w->local_size = ns && w->size % w->nodes == 0 ? w->size / w->nodes : w->size;
    if (w->local_rank >= w->local_size)
        return gt_error_set(err, GT_ERR_INVALID, "%s=%d is outside the %d processes of its node",
                            lv->local_rank, w->local_rank, w->local_size);
    if (!ns) w->nodes = (w->size + w->local_size - 1) / w->local_size;
    return GT_OK;
}

int gt_world_from_env(gt_env_fn env, void *ctx, gt_world *w, gt_error *err) {
    *w = gt_world_single();
    int have = -1;
    for (int i = 0; i < N_LAUNCHERS; i++) {
        gt_world cand;
        int found = 0;
        int rc = read_launcher(env, ctx, &launchers[i], &cand, &found, err);
        if (rc) return rc;
        if (!found) continue;
        if (have >= 0 && (cand.rank != w->rank || cand.size != w->size) && !w->note[0])
            snprintf(w->note, sizeof w->note,
                     "%s's variables (%s=%d, %s=%d) disagree with %s's and are set aside: "
                     "%s starts each process itself",
                     gt_launcher_name(cand.launcher), launchers[i].rank, cand.rank,
                     launchers[i].size, cand.size, gt_launcher_name(w->launcher),
                     gt_launcher_name(w->launcher));
        if (have < 0) {
            *w = cand;
            have = i;
        }
    }
    if (w->launcher == GT_LAUNCH_TORCHRUN) {
        const char *addr = env(ctx, "MASTER_ADDR");
        int set = 0;
        int rc = read_int(env, ctx, "MASTER_PORT", 1, &w->master_port, &set, err);
        if (rc) return rc;
        if (!addr || !*addr || !set)
            return gt_error_set(err, GT_ERR_INVALID,
                                "RANK and WORLD_SIZE are set but MASTER_ADDR or MASTER_PORT is "
                                "not; torchrun sets all four (launch with torchrun, or unset "
                                "RANK and WORLD_SIZE)");
        if (strlen(addr) >= sizeof w->master_addr)
            return gt_error_set(err, GT_ERR_INVALID, "MASTER_ADDR is longer than %d characters",
                                GT_WORLD_ADDR_MAX - 1);
        snprintf(w->master_addr, sizeof w->master_addr, "%s", addr);
    }
    return GT_OK;
}

void gt_world_print(const gt_world *w, FILE *f) {
    fprintf(f, "world: %d rank%s on %d node%s (%d per node), %s%s; this is rank %d (local %d)\n",
            w->size, w->size == 1 ? "" : "s", w->nodes, w->nodes == 1 ? "" : "s", w->local_size,
            w->launcher == GT_LAUNCH_NONE ? "" : "launched by ", gt_launcher_name(w->launcher),
            w->rank, w->local_rank);
    if (w->note[0]) fprintf(f, "world: note: %s\n", w->note);
}
