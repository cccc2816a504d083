/* graphtrain train: resolves the configuration (--recipe / --config / key=value), checks every
 * rule, then runs the training loop (train/train_loop.c). Ctrl-C (SIGINT) or SIGTERM (what
 * Slurm sends before preemption) finishes the current step, saves a checkpoint when
 * checkpoint.save is set, and exits 128 + the signal (130, 143), as a shell reports it. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "config/rules.h"
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
            "by SIGINT, 143 by SIGTERM\n");
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
    rc = gt_train_run(&cfg, &opts, NULL, &err);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
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
