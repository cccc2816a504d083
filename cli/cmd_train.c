/* graphtrain train: resolves the configuration (--recipe / --config / key=value), checks every
 * rule, then runs the training loop (train/train_loop.c). Ctrl-C (SIGINT) or SIGTERM (what
 * Slurm sends before preemption) finishes the current step, saves a checkpoint when
 * checkpoint.save is set, and exits 128 + the signal (130, 143), as a shell reports it. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "config/rules.h"
#include "dist/comm.h"
#include "dist/world.h"
#include "train/train_loop.h"

#define TRAIN_EXIT_FAILED 1
#define TRAIN_EXIT_INVALID 2
/* 128 + the signal, the shell's convention: 130 for Ctrl-C, 143 for SIGTERM. A job script
 * (Slurm's requeue) tells "stopped and saved" from "done" (0) and "failed" (1, 2). */
#define TRAIN_EXIT_SIGNAL_BASE 128

/* The one piece of file-scope state: a signal handler can reach nothing else. */
static volatile sig_atomic_t g_stop_requested;

/* records which signal asked to stop (the loop names it, the exit status carries it) */
static void on_stop_signal(int sig) {
    g_stop_requested = sig;
}

static const char *env_get(void *ctx, const char *name) {
    (void)ctx;
    return getenv(name);
}

/* The launcher's world decides the data-parallel size: runtime.num_gpus left at 1 takes it,
 * a value set to another number is an error (as is a world of one asked for more). */
int gt_cli_reconcile_world(gt_config *cfg, const gt_world *w, gt_error *err) {
    int asked =
        cfg->ddp.data_parallel_size > 0 ? cfg->ddp.data_parallel_size : cfg->runtime.num_gpus;
    if (w->size > 1 && cfg->runtime.num_gpus == 1 && cfg->ddp.data_parallel_size != 1) {
        cfg->runtime.num_gpus = w->size;
        return GT_OK;
    }
    if (asked == w->size && cfg->runtime.num_gpus == w->size) return GT_OK;
    if (w->size == 1)
        return gt_error_set(err, GT_ERR_INVALID,
                            "runtime.num_gpus=%d / ddp.data_parallel_size=%d asks for %d "
                            "data-parallel ranks, but this process was started alone; launch "
                            "one process per rank (mpirun -np %d graphtrain train ..., or "
                            "torchrun, or srun), or set runtime.num_gpus=1",
                            cfg->runtime.num_gpus, cfg->ddp.data_parallel_size, asked, asked);
    return gt_error_set(err, GT_ERR_INVALID,
                        "runtime.num_gpus=%d / ddp.data_parallel_size=%d disagree with the %d "
                        "ranks %s started; set runtime.num_gpus=%d (or leave it at 1 and "
                        "ddp.data_parallel_size at 0: the launcher decides)",
                        cfg->runtime.num_gpus, cfg->ddp.data_parallel_size, w->size,
                        gt_launcher_name(w->launcher), w->size);
}

/* The communicator of this process, with the rendezvous of its NCCL id: dist.nccl_id_file,
 * the launcher's job id against a stale file, torchrun's agent store (which holds
 * MASTER_PORT itself: graphtrain's rank 0 listens on the next port). */
int gt_cli_make_comm(gt_comm **comm, const gt_world *w, const gt_config *cfg, gt_error *err) {
    int rc = gt_comm_create(comm, w, NULL, err);
    if (rc) return rc;
    const char *tag = getenv("SLURM_JOB_ID");
    if (!tag) tag = getenv("TORCHELASTIC_RUN_ID");
    if (!tag) tag = getenv("OMPI_MCA_ess_base_jobid");
    const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
    gt_comm_rendezvous r = {cfg->ddp.nccl_id_file, tag ? tag : "",
                            cfg->ddp.timeout_minutes * 60.0 * 1000.0,
                            agent && !strcasecmp(agent, "true") ? 1 : 0};
    gt_comm_set_rendezvous(*comm, &r);
    return GT_OK;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: graphtrain train [--recipe NAME|PATH | --config FILE] [harness flags]\n"
            "                        [key=value ...]\n\n"
            "Trains a model. Prints the memory plan, a progress line every logger.log_interval\n"
            "steps (loss, learning rate, gradient norm, tokens/s, ms/step and whether the step\n"
            "ran eagerly, captured graphs or replayed them), evaluation loss every\n"
            "train.eval_interval steps, and the graph report at the end.\n\n"
            "useful keys: train.train_iters, runtime.device=auto|cpu|cuda,\n"
            "  model.cuda_graph_impl=none|local|transformer_engine, model.cuda_graph_scope=...,\n"
            "  dataset.source=mock|shards, dataset.data_path=PREFIX (from prepare-data),\n"
            "  checkpoint.save=DIR, checkpoint.save_interval=N, checkpoint.load=DIR,\n"
            "  logger.log_interval=N, logger.metrics_file=FILE.jsonl\n\n"
            "Ctrl-C (SIGINT) or SIGTERM (Slurm's warning before preemption) finishes the current\n"
            "step, saves a checkpoint (when checkpoint.save is set) and exits with status 130 or\n"
            "143; resume with checkpoint.load=DIR (checkpoint.load=checkpoint.save resumes a\n"
            "restarted job by itself).\n"
            "exit status: 0 done, 1 failed (e.g. NaN loss), 2 bad configuration, 130 interrupted\n"
            "by SIGINT, 143 by SIGTERM\n\n"
            "Data parallelism on the CPU backend: mpirun -np N graphtrain train ...\n"
            "  runtime.device=cpu (or srun); each rank trains its slice of every global batch,\n"
            "  rank 0 prints and writes the files (README, Data parallelism).\n");
}

int gt_cmd_train(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
    gt_config cfg;
    gt_error err = {0};
    char *rest[argc > 0 ? argc : 1];
    int n_rest = 0;
    int checkable = 0;
    int rc = gt_cli_load_config(argc, argv, &cfg, &n_rest, rest, &checkable, &err);
    if (rc == GT_OK && n_rest > 1)
        rc = gt_error_set(&err, GT_ERR_INVALID,
                          "unknown argument '%.100s'; settings are key=value (e.g. "
                          "train.train_iters=100), see `graphtrain train --help`",
                          rest[1]);
    if (rc != GT_OK) {
        fprintf(stderr, "graphtrain train: %s\n", err.msg);
        if (checkable) {
            gt_cli_report_other_errors(&cfg, stderr);
            fprintf(stderr, "graphtrain train: the configuration is invalid (see above); "
                            "nothing was run\n");
        }
        return TRAIN_EXIT_INVALID;
    }
    gt_world world;
    rc = gt_world_from_env(env_get, NULL, &world, &err);
    if (!rc) rc = gt_cli_reconcile_world(&cfg, &world, &err);
    if (rc != GT_OK) {
        fprintf(stderr, "graphtrain train: %s\n", err.msg);
        return TRAIN_EXIT_INVALID;
    }
    gt_report report;
    if (gt_config_validate(&cfg, &report) > 0) {
        gt_report_print(&report, stderr);
        fprintf(stderr, "graphtrain train: the configuration is invalid (see above); nothing "
                        "was run\n");
        return TRAIN_EXIT_INVALID;
    }
    if (report.notes > 0) gt_report_print(&report, stderr);

    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C kills at once */
    g_stop_requested = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    gt_train_run_opts opts = {.stop = &g_stop_requested, .out = stdout};
    /* a launcher: a communicator, even for one rank (its reductions give the bits of every
     * world size; MPI on the CPU backend, NCCL on GPUs); ddp.force_collectives: one alone */
    gt_comm *comm = NULL;
    FILE *sink = NULL;
    if (world.launcher != GT_LAUNCH_NONE || cfg.ddp.force_collectives) {
        rc = gt_cli_make_comm(&comm, &world, &cfg, &err);
        if (rc != GT_OK) {
            fprintf(stderr, "graphtrain train: rank %d: %s\n", world.rank, err.msg);
            return TRAIN_EXIT_FAILED;
        }
        opts.comm = comm;
        if (world.rank == 0) gt_world_print(&world, stdout);
        if (world.rank != 0 && !(opts.out = sink = fopen("/dev/null", "w"))) opts.out = stdout;
    }
    rc = gt_train_run(&cfg, &opts, NULL, &err);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (sink) fclose(sink);
    if (rc != GT_OK && rc != GT_ERR_INTERRUPTED && world.size > 1) {
        /* the other ranks may wait in a collective this rank will never join */
        fprintf(stderr, "graphtrain train: rank %d of %d: %s; stopping every rank\n", world.rank,
                world.size, err.msg);
        fflush(stderr);
        gt_comm_abort(comm, rc == GT_ERR_INVALID ? TRAIN_EXIT_INVALID : TRAIN_EXIT_FAILED);
    }
    gt_comm_destroy(comm);
    if (rc == GT_ERR_INTERRUPTED) {
        fprintf(stderr, "graphtrain train: %s\n", err.msg);
        return TRAIN_EXIT_SIGNAL_BASE + (g_stop_requested == SIGTERM ? SIGTERM : SIGINT);
    }
    if (rc != GT_OK) {
        fprintf(stderr, "graphtrain train: %s\n", err.msg);
        return rc == GT_ERR_INVALID ? TRAIN_EXIT_INVALID : TRAIN_EXIT_FAILED;
    }
    return 0;
}
