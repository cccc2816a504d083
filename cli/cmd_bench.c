/* graphtrain bench: steady-state timing of the graph modes side by side (bench/bench.h), plus
 * the hidden exchange paths for bench/torch_reference.py (--export-weights, --parity). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench.h"
#include "bench/weights_io.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "config/rules.h"
#include "train/trainer.h"

static const char *usage =
    "usage: graphtrain bench [--recipe R | -mr R] [--config FILE]\n"
    "                        [--modes eager,attn,attn+mlp,full_iteration | --modes all]\n"
    "                        [--steps N] [--warmup W] [--json FILE] [--csv FILE]\n"
    "                        [--plot FILE.svg] [--quiet] [--same-process]\n"
    "                        [Bridge harness flags] [key=value ...]\n"
    "  --modes      graph modes to compare (default all): eager, full_iteration, or scopes\n"
    "               joined by '+' (attn, attn+mlp, ...). On MoE models attn+mlp means\n"
    "               attn+moe_router+moe_preprocess.\n"
    "  --steps N    timed steady-state steps per mode (default 30); --warmup W untimed\n"
    "               steps after the capture step (default 3)\n"
    "  --cuda_graph_impl X --cuda_graph_scope a,b   run that single mode (Bridge's harness)\n"
    "  --json FILE, --csv FILE   also write the results there\n"
    "  --plot FILE.svg           also draw them: a bar a mode (median, min-max whisker) against\n"
    "               the step-time limit\n"
    "  --same-process            run every mode in this process; by default each mode runs\n"
    "               in a process of its own, as a training run would\n"
    "  --export-weights FILE     write the initial fp32 weights (bench/weights_io.h) and exit\n"
    "  --parity DIR [--parity-steps K]   write weights, batches, losses and step-1 gradients\n"
    "               for `bench/torch_reference.py parity DIR` (K default 10)\n"
    "  Several ranks (mpirun -np N graphtrain bench ..., torchrun, srun; runtime.device=cpu\n"
    "  runs MPI's collectives, GPUs NCCL's): every mode runs in each rank's process, and rank\n"
    "  0 reports per-GPU and total tokens/s, the step's communication time (its collectives\n"
    "  alone), the step without them, and the share of the communication hidden behind\n"
    "  compute.\n";

typedef struct bench_args {
    const char *modes, *json, *csv, *plot, *export_weights, *parity;
    int steps, warmup, parity_steps, quiet, help, same_process;
} bench_args;

static int parse_int(const char *flag, const char *v, int lo, int *out, gt_error *err) {
    char *end = NULL;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || x < lo || x > 1000000)
        return gt_error_set(err, GT_ERR_INVALID, "bench: %s needs an integer >= %d, got '%s'", flag,
                            lo, v ? v : "");
    *out = (int)x;
    return GT_OK;
}

/* The flags gt_cli_load_config left over. */
static int parse_rest(int argc, char **argv, bench_args *a, gt_error *err) {
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        const char *v = NULL;
        const char *eq = strchr(f, '=');
        char name[64];
        if (!strncmp(f, "--", 2) && eq && (size_t)(eq - f) < sizeof name) {
            snprintf(name, sizeof name, "%.*s", (int)(eq - f), f);
            v = eq + 1;
            f = name;
        }
#define VALUE() (v ? v : (i + 1 < argc ? argv[++i] : NULL))
#define STRING(dst)                                                                                \
    do {                                                                                           \
        (dst) = VALUE();                                                                           \
        if (!(dst) || !*(dst))                                                                     \
            return gt_error_set(err, GT_ERR_INVALID, "bench: %s needs a value", f);                \
    } while (0)
        int rc = GT_OK;
        if (!strcmp(f, "--help") || !strcmp(f, "-h"))
            a->help = 1;
        else if (!strcmp(f, "--quiet"))
            a->quiet = 1;
        else if (!strcmp(f, "--same-process"))
            a->same_process = 1;
        else if (!strcmp(f, "--modes"))
            STRING(a->modes);
        else if (!strcmp(f, "--json"))
            STRING(a->json);
        else if (!strcmp(f, "--csv"))
            STRING(a->csv);
        else if (!strcmp(f, "--plot"))
            STRING(a->plot);
        else if (!strcmp(f, "--export-weights"))
            STRING(a->export_weights);
        else if (!strcmp(f, "--parity"))
            STRING(a->parity);
        else if (!strcmp(f, "--steps"))
            rc = parse_int(f, VALUE(), 1, &a->steps, err);
        else if (!strcmp(f, "--warmup"))
            rc = parse_int(f, VALUE(), 0, &a->warmup, err);
        else if (!strcmp(f, "--parity-steps"))
            rc = parse_int(f, VALUE(), 1, &a->parity_steps, err);
        else
            return gt_error_set(err, GT_ERR_INVALID,
                                "bench: unknown argument '%s'; run "
                                "`graphtrain bench --help`",
                                argv[i]);
#undef STRING
#undef VALUE
        if (rc) return rc;
    }
    return GT_OK;
}

/* Value of a flag in the original arguments ("--f v" or "--f=v"), or NULL. */
static const char *find_flag(int argc, char **argv, const char *f1, const char *f2) {
    for (int i = 1; i < argc && argv[i]; i++) {
        const char *fl[2] = {f1, f2};
        for (int k = 0; k < 2; k++) {
            if (!fl[k]) continue;
            size_t n = strlen(fl[k]);
            if (!strcmp(argv[i], fl[k])) return i + 1 < argc ? argv[i + 1] : "";
            if (!strncmp(argv[i], fl[k], n) && argv[i][n] == '=') return argv[i] + n + 1;
        }
    }
    return NULL;
}

/* Before the modes run (minutes on a GPU): an output that could not be written is refused
 * now, not after the run. */
static int check_output(const char *flag, const char *path, gt_error *err) {
    if (!path) return GT_OK;
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (access(dir, W_OK) != 0)
        return gt_error_set(err, GT_ERR_IO,
                            "bench: %s %s: cannot write into the folder %s (%s); create it or "
                            "choose another path",
                            flag, path, dir, strerror(errno));
    return GT_OK;
}

static int export_weights(const gt_config *base, const char *path, gt_error *err) {
    gt_config c = *base;
    c.dataset.source = GT_DATA_MOCK;
    gt_trainer *t = NULL;
    int rc = gt_trainer_create(&t, &c, err);
    if (!rc) rc = gt_weights_export(t, path, err);
    gt_trainer_destroy(t);
    return rc;
}

/* Before any mode runs: the settings every mode shares are checked with the graph keys cleared
 * (each mode sets its own and is checked again), so a configuration graphtrain cannot run,
 * or one that breaks a rule outside the graph keys, is refused by name and nothing runs. */
static int refuse_invalid(const gt_config *cfg, gt_error *err) {
    gt_config *c = malloc(sizeof *c);
    gt_report *r = malloc(sizeof *r);
    int rc = GT_OK;
    if (!c || !r) {
        rc = gt_error_set(err, GT_ERR_NOMEM, "bench: out of host memory");
    } else {
        *c = *cfg;
        c->model.cuda_graph_impl = GT_GRAPH_IMPL_NONE;
        c->model.cuda_graph_scope = 0;
        c->dataset.source = GT_DATA_MOCK; /* what bench_run.c runs every mode with */
        c->train.eval_interval = 0;
        if (gt_config_validate(c, r) > 0) {
            gt_report_print(r, stderr);
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "the configuration is invalid (see above); nothing was run");
        }
    }
    free(c);
    free(r);
    return rc;
}

static const char *env_get(void *ctx, const char *name) {
    (void)ctx;
    return getenv(name);
}

/* A launcher's world (or ddp.force_collectives): the communicator every mode trains over;
 * NULL for one process. The configuration takes the world's size. */
static int bench_world(gt_config *cfg, gt_comm **comm, gt_error *err) {
    *comm = NULL;
    gt_world world;
    int rc = gt_world_from_env(env_get, NULL, &world, err);
    if (!rc && world.launcher == GT_LAUNCH_NONE && !cfg->ddp.force_collectives) return GT_OK;
    if (!rc) rc = gt_cli_reconcile_world(cfg, &world, err);
    if (!rc) rc = gt_cli_make_comm(comm, &world, cfg, err);
    if (!rc && world.rank == 0) gt_world_print(&world, stdout);
    return rc;
}

/* The modes over comm; rank 0 alone prints and writes the outputs. */
static int run_modes(const gt_config *cfg, const bench_args *a, gt_bench_options *o,
                     gt_error *err) {
    int lead = !o->comm || gt_comm_rank(o->comm) == 0;
    if (!lead) o->quiet = 1;
    gt_bench_report *rep = calloc(1, sizeof *rep);
    if (!rep) return gt_error_set(err, GT_ERR_NOMEM, "bench: out of host memory");
    int rc = gt_bench_run(cfg, o, rep, err);
    if (!rc && lead) {
        gt_bench_print_table(rep, stdout);
        if (a->json) rc = gt_bench_write_json(rep, a->json, err);
        if (!rc && a->csv) rc = gt_bench_write_csv(rep, a->csv, err);
        if (!rc && a->plot) rc = gt_bench_write_svg(rep, a->plot, err);
    }
    if (!rc) {
        int failed = 0;
        for (int i = 0; i < rep->n; i++)
            failed += !rep->results[i].ok;
        if (failed || rep->losses_identical == 0)
            rc = gt_error_set(err, GT_ERR_NUMERIC, "bench: %d mode(s) failed%s", failed,
                              rep->losses_identical == 0 ? "; losses differ between modes" : "");
    }
    gt_bench_report_free(rep);
    free(rep);
    return rc;
}

static int run(int argc, char **argv, gt_config *cfg, char **rest, gt_error *err) {
    int rest_argc = 0, checkable = 0;
    int rc = gt_cli_load_config(argc, argv, cfg, &rest_argc, rest, &checkable, err);
    if (rc) {
        /* bad settings only: print them and the rules' findings on the rest here; the caller
         * prints the closing line */
        if (checkable) {
            fprintf(stderr, "graphtrain bench: %s\n", err->msg);
            gt_cli_report_other_errors(cfg, stderr);
            return gt_error_set(err, rc,
                                "the configuration is invalid (see above); nothing was run");
        }
        return rc;
    }
    bench_args a = {.steps = 30, .warmup = 3, .parity_steps = 10};
    if ((rc = parse_rest(rest_argc, rest, &a, err))) return rc;
    if (a.help) {
        fputs(usage, stdout);
        return GT_OK;
    }
    if ((rc = refuse_invalid(cfg, err))) return rc;
    if (a.plot && (rc = gt_bench_svg_path_check(a.plot, err))) return rc;
    if ((rc = check_output("--json", a.json, err)) || (rc = check_output("--csv", a.csv, err)) ||
        (rc = check_output("--plot", a.plot, err)))
        return rc;
    if (a.export_weights) return export_weights(cfg, a.export_weights, err);
    if (a.parity) return gt_bench_parity(cfg, a.parity, a.parity_steps, err);

    gt_bench_options o;
    gt_bench_options_init(&o);
    o.steps = a.steps;
    o.warmup = a.warmup;
    o.quiet = a.quiet;
    o.same_process = a.same_process;
    const char *recipe = find_flag(argc, argv, "--recipe", "-mr");
    if (!recipe) recipe = find_flag(argc, argv, "--model_recipe_name", NULL);
    char label[GT_BENCH_NAME_MAX];
    snprintf(label, sizeof label, "%s", recipe && *recipe ? recipe : "custom");
    o.label = label;
    int harness = find_flag(argc, argv, "--cuda_graph_impl", NULL) ||
                  find_flag(argc, argv, "--cuda_graph_scope", NULL);
    if (harness && a.modes)
        return gt_error_set(err, GT_ERR_INVALID,
                            "bench: give either --modes or "
                            "--cuda_graph_impl/--cuda_graph_scope (one mode), not both");
    if (harness) {
        o.n_modes = 1;
        gt_bench_mode_from_config(&o.modes[0], cfg);
    } else if ((rc = gt_bench_parse_modes(&o, a.modes ? a.modes : "all",
                                          cfg->model.num_moe_experts > 0, err))) {
        return rc;
    }
    gt_comm *comm = NULL;
    if ((rc = bench_world(cfg, &comm, err))) return rc;
    o.comm = comm;
    rc = run_modes(cfg, &a, &o, err);
    if (rc && comm && gt_comm_size(comm) > 1) {
        /* the other ranks may wait in a collective this rank will never join */
        fprintf(stderr, "graphtrain bench: rank %d: %s; stopping every rank\n", gt_comm_rank(comm),
                err->msg);
        fflush(stderr);
        gt_comm_abort(comm, rc == GT_ERR_NUMERIC ? 1 : 2);
    }
    gt_comm_destroy(comm);
    return rc;
}

int gt_cmd_bench(int argc, char **argv) {
    gt_error err = {0};
    gt_config *cfg = calloc(1, sizeof *cfg);
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int rc = (!cfg || !rest) ? gt_error_set(&err, GT_ERR_NOMEM, "bench: out of host memory")
                             : run(argc, argv, cfg, rest, &err);
    free(cfg);
    free(rest);
    if (rc) {
        fprintf(stderr, "graphtrain bench: %s\n", err.msg);
        return rc == GT_ERR_NUMERIC ? 1 : 2;
    }
    return 0;
}
