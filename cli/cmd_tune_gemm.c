/* graphtrain tune-gemm: picks each GEMM shape's cuBLASLt algorithm by timing the candidates
 * where the training step runs them, and writes the choices as a table for
 * runtime.gemm_table (backend/gemm_table.h). Timing inside the step, not alone, matters:
 * algorithms faster alone made tiny's step slower (docs/design.md, "GEMM algorithm tables"). A
 * table makes the choice once, so every later run on the machine sums in the same order; timing at
 * startup instead could pick differently from one process to the next and lose bitwise
 * reproducibility.
 *
 * How: eager steps of the recipe's model, one GEMM shape at a time. That shape's launches take
 * its candidates in turn, each between two CUDA events, so every candidate meets every call
 * site (each layer, the operands in and out of cache as the step leaves them) and a drift of
 * the GPU's clock falls on all candidates alike. Whole-step timings were tried first: their
 * spread from one measurement to the next (0.3-0.5% on gpt124m) was larger than most of the
 * differences to find. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/gemm_table.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "config/keys.h"
#include "config/rules.h"
#include "core/atomic_file.h"
#include "core/median.h"
#include "train/trainer.h"

#define TUNE_MAX_STEPS 4000 /* eager steps for one shape, at most */
#define TUNE_STEP_SAMPLES 10

static const char *usage =
    "usage: graphtrain tune-gemm [--recipe R | --config FILE] --out FILE [--samples N]\n"
    "                            [--min-gain PCT] [key=value ...]\n"
    "Times the algorithms cuBLASLt offers for each GEMM shape of a training step (up to 8 a\n"
    "shape) where the step runs them: in eager steps, one shape at a time, that shape's\n"
    "launches take the candidates in turn between CUDA events. Keeps a candidate where its\n"
    "median time beats the heuristic's choice by more than --min-gain percent, and writes\n"
    "every shape's algorithm to FILE. Set runtime.gemm_table=FILE to use them; the table\n"
    "applies on this GPU and cuBLASLt version only. Compare with graphtrain bench.\n"
    "  --samples N     timings per candidate (default 24)\n"
    "  --min-gain PCT  least gain on a GEMM's own time that changes its algorithm (default 1)\n"
    "It runs about 8 x N / (launches a step) steps a shape, and always starts from cuBLASLt's\n"
    "heuristic (runtime.gemm_table is not read). About a minute for gpt124m.\n"
    "\n"
    "usage: graphtrain tune-gemm --peak [--size N]\n"
    "Times one N x N x N cuBLASLt GEMM (default 8192) in bf16 and in fp8 (E4M3, fast\n"
    "accumulation) on GPU 0 and prints both rates: the peaks MFU is measured against\n"
    "(config/gpus.c).\n";

#define PEAK_DEFAULT_N 8192
#define PEAK_REPS 50

/* graphtrain tune-gemm --peak [--size N] */
static int run_peak(int argc, char **argv) {
    int n = PEAK_DEFAULT_N;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--peak")) continue;
        char *end = NULL;
        long x = i + 1 < argc && !strcmp(argv[i], "--size") ? strtol(argv[i + 1], &end, 10) : 0;
        if (!end || *end || x < 256 || x > 32768 || x % 256) {
            fprintf(stderr,
                    "graphtrain tune-gemm --peak: '%.100s' is not --size N (a multiple of 256 "
                    "from 256 to 32768); see --help\n",
                    strcmp(argv[i], "--size") || i + 1 >= argc ? argv[i] : argv[i + 1]);
            return 2;
        }
        n = (int)x;
        i++;
    }
    gt_backend *b = NULL;
    gt_error err = {0};
    int rc = gt_backend_create_cuda(&b, 0, NULL, &err);
    if (rc) {
        fprintf(stderr, "graphtrain tune-gemm --peak: needs a GPU: %s\n", err.msg);
        return rc == GT_ERR_INVALID ? 2 : 1;
    }
    double rate[2] = {0, 0};
    for (int fp8 = 0; fp8 < 2 && !rc; fp8++)
        rc = b->ops->gemm_peak ? b->ops->gemm_peak(b, fp8, n, PEAK_REPS, &rate[fp8], &err)
                               : gt_error_set(&err, GT_ERR_UNSUPPORTED,
                                              "the %s backend cannot time a GEMM", b->name);
    if (!rc) {
        gt_gemm_table t = {0};
        b->ops->gemm_table_header(b, &t);
        printf("%s, cuBLASLt %ld, %d x %d x %d, median of %d:\n", t.device, t.cublaslt, n, n, n,
               PEAK_REPS);
        printf("bf16 %.0f TFLOP/s\nfp8  %.0f TFLOP/s (E4M3, fast accumulation)\n", rate[0] / 1e12,
               rate[1] / 1e12);
    } else {
        fprintf(stderr, "graphtrain tune-gemm --peak: %s\n", err.msg);
    }
    gt_backend_destroy(b);
    return rc ? 1 : 0;
}

typedef struct tune_args {
    const char *out;
    int samples, help;
    double min_gain;
} tune_args;

static int parse_rest(int argc, char **argv, tune_args *a, gt_error *err) {
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            a->help = 1;
            continue;
        }
        int takes = !strcmp(f, "--out") || !strcmp(f, "--samples") || !strcmp(f, "--min-gain");
        if (!takes)
            return gt_error_set(err, GT_ERR_INVALID,
                                "unknown argument '%.100s'; see `graphtrain tune-gemm "
                                "--help`",
                                f);
        if (!v || !*v) return gt_error_set(err, GT_ERR_INVALID, "%s needs a value", f);
        i++;
        char *end = NULL;
        if (!strcmp(f, "--out")) {
            a->out = v;
        } else if (!strcmp(f, "--min-gain")) {
            double x = strtod(v, &end);
            if (*end || !(x >= 0 && x <= 50))
                return gt_error_set(err, GT_ERR_INVALID,
                                    "--min-gain needs a percentage from 0 to 50, got "
                                    "'%.40s'",
                                    v);
            a->min_gain = x;
        } else {
            long x = strtol(v, &end, 10);
            if (*end || x < 3 || x > 500)
                return gt_error_set(err, GT_ERR_INVALID,
                                    "--samples needs a whole number from 3 to 500, "
                                    "got '%.40s'",
                                    v);
            a->samples = (int)x;
        }
    }
    if (!a->help && !a->out)
        return gt_error_set(err, GT_ERR_INVALID, "--out FILE is required (where the table goes)");
    return GT_OK;
}

/* Median wall time of n eager steps, for the report. */
static int step_median(gt_trainer *t, double *ms, gt_error *err) {
    double v[TUNE_STEP_SAMPLES];
    for (int i = 0; i < TUNE_STEP_SAMPLES; i++) {
        gt_step_stats st;
        int rc = gt_trainer_step(t, &st, err);
        if (rc) return rc;
        v[i] = st.ms;
    }
    *ms = gt_median(v, TUNE_STEP_SAMPLES);
    return GT_OK;
}

/* Times plan i's candidates and leaves it on the one kept; *saved_us is what that saves a
 * step by the medians. */
static int tune_plan(gt_trainer *t, const tune_args *a, int i, int n_plans, double *saved_us,
                     gt_error *err) {
    gt_backend *b = gt_trainer_backend(t);
    gt_gemm_entry e;
    int n_cand = 0, cur = 0;
    *saved_us = 0;
    int ok = b->ops->gemm_plan_get(b, i, &e, &n_cand, &cur);
    printf("  %2d/%d %s M=%d N=%d K=%d batch=%d", i + 1, n_plans, e.key.kind, e.key.M, e.key.N,
           e.key.K, e.key.count);
    if (!ok || n_cand < 2 || cur < 0) {
        printf(": %d candidate(s), nothing to choose\n", ok ? n_cand : 0);
        return GT_OK;
    }
    double med[GT_GEMM_CANDIDATES];
    int cnt[GT_GEMM_CANDIDATES];
    int rc = b->ops->gemm_tune(b, i, err);
    int steps = 0, least = 0;
    while (!rc && least < a->samples && steps < TUNE_MAX_STEPS) {
        gt_step_stats st;
        rc = gt_trainer_step(t, &st, err);
        steps++;
        if (!rc) rc = b->ops->gemm_tune_read(b, med, cnt, err);
        if (rc) break;
        least = cnt[0];
        for (int c = 1; c < n_cand; c++)
            if (cnt[c] < least) least = cnt[c];
    }
    gt_error ignored = {0};
    b->ops->gemm_tune(b, -1, &ignored);
    if (rc) return rc;
    if (least == 0) { /* launched only with operands off the 256-byte alignment */
        printf(": no aligned launch in %d steps, the heuristic's choice stays\n", steps);
        return GT_OK;
    }
    int best = cur;
    for (int c = 0; c < n_cand; c++)
        if (med[c] < med[best]) best = c;
    double gain = 100.0 * (med[cur] - med[best]) / med[cur];
    int keep = gain > a->min_gain ? best : cur;
    double calls = 0;
    for (int c = 0; c < n_cand; c++)
        calls += cnt[c];
    calls /= steps;
    *saved_us = (med[cur] - med[keep]) * calls;
    printf(", %.0f a step; median us by candidate:", calls);
    for (int c = 0; c < n_cand; c++)
        printf(" %s%.1f", c == cur ? "*" : "", med[c]);
    printf("\n        %s (%.1f%%)\n",
           keep != cur ? "candidate kept" : "the heuristic's choice stays", gain);
    if (keep != cur) printf("        -> candidate %d, %.1f us a step less\n", keep, *saved_us);
    fflush(stdout);
    return b->ops->gemm_choose(b, i, keep, err);
}

static int write_table(gt_trainer *t, const tune_args *a, const char *what, gt_error *err) {
    gt_backend *b = gt_trainer_backend(t);
    gt_gemm_table tab = {0};
    b->ops->gemm_table_header(b, &tab);
    int rc = GT_OK;
    int n = b->ops->gemm_plans(b);
    for (int i = 0; !rc && i < n; i++) {
        gt_gemm_entry e;
        if (b->ops->gemm_plan_get(b, i, &e, NULL, NULL)) rc = gt_gemm_table_put(&tab, &e, err);
    }
    gt_atomic_file af;
    if (!rc) rc = gt_atomic_open(&af, a->out, err);
    if (!rc) {
        if (gt_gemm_table_write(&tab, what, af.f))
            rc = gt_error_set(err, GT_ERR_IO, "writing %s failed (disk full?)", a->out);
        if (!rc) rc = gt_atomic_commit(&af, err);
        gt_atomic_abort(&af);
    }
    gt_gemm_table_free(&tab);
    return rc;
}

static int run(gt_config *cfg, const tune_args *a, const char *cmdline, gt_error *err) {
    gt_trainer *t = NULL;
    int rc = gt_trainer_create(&t, cfg, err);
    gt_backend *b = rc ? NULL : gt_trainer_backend(t);
    if (!rc && !b->ops->gemm_tune)
        rc = gt_error_set(err, GT_ERR_UNSUPPORTED,
                          "it needs the CUDA backend (cuBLASLt's GEMMs); this run got the "
                          "%s backend (set runtime.device=cuda on a machine with a GPU)",
                          b->name);
    int n = rc ? 0 : b->ops->gemm_plans(b);
    double first = 0, last = 0, saved = 0;
    if (!rc) {
        char desc[512];
        b->ops->describe(b, desc, sizeof desc);
        printf("graphtrain tune-gemm: %s\n%d GEMM shapes planned; %d timings a candidate\n", desc,
               n, a->samples);
        for (int i = 0; !rc && i < 3; i++) { /* first launches load the library's kernels */
            gt_step_stats st;
            rc = gt_trainer_step(t, &st, err);
        }
        if (!rc) rc = step_median(t, &first, err);
    }
    for (int i = 0; !rc && i < n; i++) {
        double us = 0;
        rc = tune_plan(t, a, i, n, &us, err);
        saved += us;
    }
    if (!rc) rc = step_median(t, &last, err);
    if (!rc) {
        char what[1024];
        time_t now = time(NULL);
        struct tm tmv;
        char stamp[32] = "";
        if (gmtime_r(&now, &tmv)) strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M UTC", &tmv);
        snprintf(what, sizeof what,
                 "graphtrain GEMM algorithm table: set runtime.gemm_table to this file.\n"
                 "made by: %s (samples %d, min-gain %g%%)\nat %s; the changed algorithms took "
                 "%.0f us off the GEMMs of an eager step by their medians (eager step %.3f ms "
                 "before, %.3f ms after)",
                 cmdline, a->samples, a->min_gain, stamp, saved, first, last);
        rc = write_table(t, a, what, err);
        if (!rc)
            printf("the changed algorithms: %.0f us a step less by their medians; eager step "
                   "%.3f ms before, %.3f ms after; wrote %s\n",
                   saved, first, last, a->out);
    }
    gt_trainer_destroy(t);
    return rc;
}

int gt_cmd_tune_gemm(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--peak")) return run_peak(argc, argv);
    gt_config cfg;
    gt_error err = {0};
    char *rest[argc > 0 ? argc : 1];
    int n_rest = 0, checkable = 0;
    int rc = gt_cli_load_config(argc, argv, &cfg, &n_rest, rest, &checkable, &err);
    tune_args a = {NULL, 24, 0, 1.0};
    if (!rc) rc = parse_rest(n_rest, rest, &a, &err);
    /* eager steps (events time launches, not graph nodes), started from the heuristic, with
     * no side work */
    static const char *const forced[] = {
        "model.cuda_graph_impl=none", "train.train_iters=1000000", "train.eval_interval=0",
        "checkpoint.save=",           "checkpoint.load=",          "runtime.gemm_table="};
    if (!rc && cfg.runtime.gemm_table[0])
        fprintf(stderr,
                "graphtrain tune-gemm: note: runtime.gemm_table=%s is not read: tuning "
                "starts from cuBLASLt's heuristic\n",
                cfg.runtime.gemm_table);
    for (size_t i = 0; !rc && i < sizeof forced / sizeof forced[0]; i++)
        rc = gt_config_override(&cfg, forced[i], &err);
    if (rc != GT_OK) {
        fprintf(stderr, "graphtrain tune-gemm: %s\n", err.msg);
        if (checkable) gt_cli_report_other_errors(&cfg, stderr);
        return 2;
    }
    gt_config_finalize(&cfg);
    gt_report report;
    if (gt_config_validate(&cfg, &report) > 0) {
        gt_report_print(&report, stderr);
        fprintf(stderr, "graphtrain tune-gemm: the configuration is invalid (see above); nothing "
                        "was run\n");
        return 2;
    }
    char cmdline[600] = "graphtrain";
    for (int i = 0; i < argc; i++) {
        size_t used = strlen(cmdline);
        snprintf(cmdline + used, sizeof cmdline - used, " %s", argv[i]);
    }
    rc = run(&cfg, &a, cmdline, &err);
    if (rc) {
        fprintf(stderr, "graphtrain tune-gemm: %s; nothing was written\n", err.msg);
        return rc == GT_ERR_INVALID ? 2 : 1;
    }
    return 0;
}
