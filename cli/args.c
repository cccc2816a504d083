/* Command-line configuration: finds recipes, maps Bridge's harness flags onto keys and applies
 * every source in a fixed order (recipe, --config, harness flags, key=value overrides). */
#include "cli/args.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/keys.h"
#include "config/rules.h"

#define ARGS_MAX_OVERRIDES 256
#define ARGS_DIR_MAX (GT_PATH_MAX + 32)

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Candidate recipe folders in search order; returns how many were written. */
static int recipe_dirs(char dirs[3][ARGS_DIR_MAX]) {
    int n = 0;
    const char *env = getenv("GT_RECIPE_DIR");
    if (env && *env) snprintf(dirs[n++], ARGS_DIR_MAX, "%.*s", GT_PATH_MAX, env);
    snprintf(dirs[n++], ARGS_DIR_MAX, "recipes");
    char exe[GT_PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(dirs[n++], ARGS_DIR_MAX, "%s/../recipes", exe);
        }
    }
    return n;
}

int gt_cli_recipe_dir(char *dir, size_t n, gt_error *err) {
    char dirs[3][ARGS_DIR_MAX];
    int count = recipe_dirs(dirs);
    for (int i = 0; i < count; i++) {
        if (is_dir(dirs[i])) {
            snprintf(dir, n, "%s", dirs[i]);
            return GT_OK;
        }
    }
    return gt_error_set(err, GT_ERR_IO,
                        "no recipes folder found (looked in $GT_RECIPE_DIR, ./recipes and next "
                        "to the executable); set GT_RECIPE_DIR to the repository's recipes/");
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

int gt_cli_find_recipe(const char *name, char *path, size_t n, gt_error *err) {
    if (!name || !*name)
        return gt_error_set(err, GT_ERR_INVALID,
                            "--recipe needs a name; `graphtrain recipes` lists them");
    if (strchr(name, '/') || ends_with(name, ".yaml") || ends_with(name, ".yml")) {
        if (!is_file(name))
            return gt_error_set(err, GT_ERR_IO, "recipe file %s: not found; check the path", name);
        snprintf(path, n, "%s", name);
        return GT_OK;
    }
    char dirs[3][ARGS_DIR_MAX];
    int count = recipe_dirs(dirs);
    for (int i = 0; i < count; i++) {
        char p[ARGS_DIR_MAX + 160];
        size_t dl = strnlen(dirs[i], ARGS_DIR_MAX - 1), nl = strnlen(name, 128);
        memcpy(p, dirs[i], dl);
        p[dl] = '/';
        memcpy(p + dl + 1, name, nl);
        memcpy(p + dl + 1 + nl, ".yaml", sizeof ".yaml");
        if (is_file(p)) {
            if (strlen(p) >= n) return gt_error_set(err, GT_ERR_IO, "recipe path too long: %s", p);
            snprintf(path, n, "%s", p);
            return GT_OK;
        }
    }
    return gt_error_set(err, GT_ERR_IO,
                        "unknown recipe '%.100s'; `graphtrain recipes` lists them (or give a "
                        "path to a YAML file)",
                        name);
}

typedef struct harness_flag {
    const char *short_name, *long_name;
    const char *key; /* NULL: handled specially */
} harness_flag;

static const harness_flag k_harness[] = {
    {"-m", "--model_family_name", NULL},
    {"-mr", "--model_recipe_name", NULL},
    {NULL, "--task", NULL},
    {"-g", "--gpu", "runtime.gpu"},
    {"-c", "--compute_dtype", "model.compute_dtype"},
    {"-ng", "--num_gpus", "runtime.num_gpus"},
    {NULL, "--cuda_graph_impl", "model.cuda_graph_impl"},
    {NULL, "--cuda_graph_scope", "model.cuda_graph_scope"},
    {"-tp", "--tensor_model_parallel_size", "model.tensor_model_parallel_size"},
    {"-pp", "--pipeline_model_parallel_size", "model.pipeline_model_parallel_size"},
    {"-cp", "--context_parallel_size", "model.context_parallel_size"},
    {"-ep", "--expert_model_parallel_size", "model.expert_model_parallel_size"},
    {"-et", "--expert_tensor_parallel_size", "model.expert_tensor_parallel_size"},
    {"-vp", "--virtual_pipeline_model_parallel_size", "model.virtual_pipeline_model_parallel_size"},
    {"-gb", "--global_batch_size", "train.global_batch_size"},
    {"-mb", "--micro_batch_size", "train.micro_batch_size"},
    {"-sl", "--seq_length", "model.seq_length"},
    {NULL, "--recipe", NULL},
    {NULL, "--config", NULL},
    {"-d", "--dryrun", NULL}, /* takes no value; refused (apply_harness) */
};
enum {
    HF_FAMILY,
    HF_RECIPE_NAME,
    HF_TASK,
    HF_GPU,
    HF_DTYPE,
    HF_NGPU,
    HF_IMPL,
    HF_SCOPE,
    HF_TP,
    HF_PP,
    HF_CP,
    HF_EP,
    HF_ETP,
    HF_VP,
    HF_GBS,
    HF_MBS,
    HF_SEQ,
    HF_RECIPE,
    HF_CONFIG,
    HF_DRYRUN,
    HF_COUNT
};

/* Matches "--flag", "--flag=value" (and the short name); sets *value when inline. */
static int match_flag(const char *arg, const harness_flag *f, const char **value) {
    const char *names[2] = {f->short_name, f->long_name};
    for (int i = 0; i < 2; i++) {
        if (!names[i]) continue;
        size_t len = strlen(names[i]);
        if (!strncmp(arg, names[i], len) && (arg[len] == '\0' || arg[len] == '=')) {
            *value = arg[len] == '=' ? arg + len + 1 : NULL;
            return 1;
        }
    }
    return 0;
}

static int is_override(const char *arg) {
    /* key=value, where key looks like a dotted name (not a flag, not a path) */
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || arg[0] == '-') return 0;
    for (const char *p = arg; p < eq; p++)
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '+') return 0;
    return 1;
}

static int apply_harness(gt_config *cfg, const char *vals[HF_COUNT], gt_error *err) {
    if (vals[HF_TASK] && strcmp(vals[HF_TASK], "pretrain"))
        return gt_error_set(err, GT_ERR_INVALID,
                            "--task %.64s: graphtrain only pretrains; use --task pretrain",
                            vals[HF_TASK]);
    if (vals[HF_DRYRUN])
        return gt_error_set(err, GT_ERR_INVALID,
                            "-d/--dryrun: graphtrain launches no cluster job, so there is no dry "
                            "run of one; `graphtrain validate` with the same arguments resolves "
                            "and checks the configuration without running anything");
    for (int i = HF_GPU; i <= HF_SEQ; i++) {
        if (!vals[i]) continue;
        char lower[GT_PATH_MAX];
        const char *v = vals[i];
        if (i == HF_GPU && strlen(v) < sizeof lower) { /* -g H100 and -g h100 alike */
            size_t j = 0;
            for (; v[j]; j++)
                lower[j] = (char)tolower((unsigned char)v[j]);
            lower[j] = '\0';
            v = lower;
        }
        if (gt_config_set(cfg, k_harness[i].key, v, err) != GT_OK)
            return gt_error_wrap(err, "%s: ", k_harness[i].long_name);
        /* Bridge's harness (_set_cuda_graph_overrides) turns the RNG tracker keys on */
        if (i == HF_IMPL && cfg->model.cuda_graph_impl != GT_GRAPH_IMPL_NONE) {
            cfg->model.use_te_rng_tracker = true;
            cfg->rng.te_rng_tracker = true;
        }
    }
    return GT_OK;
}

/* The bad settings of one load, every source's in turn (a message of up to GT_ERROR_MSG_MAX
 * bytes, cut there), and the first one's error code. */
typedef struct load_errors {
    char text[GT_ERROR_MSG_MAX];
    int rc;
    int count; /* the problems the text reports */
} load_errors;

static void add_error_text(load_errors *e, int rc, const char *msg, int count) {
    if (e->rc == GT_OK) e->rc = rc;
    e->count += count > 0 ? count : 1;
    size_t used = strlen(e->text);
    snprintf(e->text + used, sizeof e->text - used, "%s%s", used ? "\n" : "", msg);
}

/* Every bad setting found, as one error that counts them */
static int load_failed(gt_error *err, const load_errors *bad) {
    int rc = gt_error_set(err, bad->rc, "%s", bad->text);
    if (err) err->count = bad->count;
    return rc;
}

/* runtime.gemm_table: a relative path that is no file from the working folder is looked up in
 * the recipes folder, so a recipe can name a table that lives beside it. Left as it is when
 * neither exists: loading it then reports the path. */
static void resolve_gemm_table(gt_config *cfg) {
    char *t = cfg->runtime.gemm_table;
    if (!t[0] || t[0] == '/' || is_file(t)) return;
    char dir[ARGS_DIR_MAX];
    gt_error ignored = {0};
    if (gt_cli_recipe_dir(dir, sizeof dir, &ignored) != GT_OK) return;
    char p[ARGS_DIR_MAX + GT_PATH_MAX + 2];
    snprintf(p, sizeof p, "%s/%s", dir, t);
    if (is_file(p) && strlen(p) < sizeof cfg->runtime.gemm_table)
        snprintf(cfg->runtime.gemm_table, sizeof cfg->runtime.gemm_table, "%s", p);
}

int gt_cli_load_config(int argc, char **argv, gt_config *cfg, int *rest_argc, char **rest_argv,
                       int *checkable, gt_error *err) {
    const char *vals[HF_COUNT] = {0};
    if (checkable) *checkable = 0;
    const char *overrides[ARGS_MAX_OVERRIDES];
    int n_over = 0, n_rest = 0;
    if (rest_argv && argc > 0) rest_argv[n_rest++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int matched = -1;
        const char *value = NULL;
        for (int f = 0; f < HF_COUNT && matched < 0; f++)
            if (match_flag(a, &k_harness[f], &value)) matched = f;
        if (matched == HF_DRYRUN) {
            vals[matched] = "1"; /* a switch, as in Bridge's harness */
        } else if (matched >= 0) {
            if (!value) {
                if (i + 1 >= argc) return gt_error_set(err, GT_ERR_INVALID, "%s needs a value", a);
                value = argv[++i];
            }
            vals[matched] = value;
        } else if (is_override(a)) {
            if (n_over >= ARGS_MAX_OVERRIDES)
                return gt_error_set(err, GT_ERR_INVALID, "more than %d overrides",
                                    ARGS_MAX_OVERRIDES);
            overrides[n_over++] = a;
        } else if (rest_argv) {
            rest_argv[n_rest++] = argv[i];
        }
    }
    if (rest_argc) *rest_argc = n_rest;

    gt_config_defaults(cfg);
    gt_config_read_env(cfg);
    /* bad settings in the YAML files and bad overrides are all collected, and the rest of
     * the configuration stays checkable; an unreadable or malformed file stops at once */
    load_errors bad = {"", GT_OK, 0};
    const char *files[2] = {NULL, vals[HF_CONFIG]};
    char path[GT_PATH_MAX + 128];
    const char *recipe = vals[HF_RECIPE] ? vals[HF_RECIPE] : vals[HF_RECIPE_NAME];
    char lower_name[GT_PATH_MAX];
    if (!vals[HF_RECIPE] && recipe && strlen(recipe) < sizeof lower_name) {
        /* -mr is case-insensitive, as Bridge's is (Llama3_8B and llama3_8b alike) */
        size_t j = 0;
        for (; recipe[j]; j++)
            lower_name[j] = (char)tolower((unsigned char)recipe[j]);
        lower_name[j] = '\0';
        recipe = lower_name;
    }
    if (recipe) {
        int rc = gt_cli_find_recipe(recipe, path, sizeof path, err);
        if (rc != GT_OK) return rc;
        files[0] = path;
    }
    for (int f = 0; f < 2; f++) {
        if (!files[f]) continue;
        int complete = 0;
        int rc = gt_config_load_yaml_read(cfg, files[f], &complete, err);
        if (rc == GT_OK) continue;
        if (!complete) return rc;
        add_error_text(&bad, rc, err->msg, err->count);
    }
    int rc = apply_harness(cfg, vals, err);
    if (rc != GT_OK) { /* stops here, but with the files' bad settings found so far */
        if (bad.rc == GT_OK) return rc;
        add_error_text(&bad, rc, err->msg, err->count);
        return load_failed(err, &bad);
    }
    /* every bad override is reported at once, one per line, not just the first */
    int n_bad = 0, first_rc = GT_OK;
    char all[GT_ERROR_MSG_MAX] = "";
    for (int i = 0; i < n_over; i++) {
        gt_error one = {0};
        if ((rc = gt_config_override(cfg, overrides[i], &one)) == GT_OK) continue;
        if (!n_bad++) first_rc = rc;
        size_t used = strlen(all);
        snprintf(all + used, sizeof all - used, "%s%s", used ? "\n  " : "", one.msg);
    }
    if (n_bad > 1) {
        char head[GT_ERROR_MSG_MAX];
        snprintf(head, sizeof head, "%d bad overrides:\n  %s", n_bad, all);
        add_error_text(&bad, first_rc, head, n_bad);
    } else if (n_bad) {
        add_error_text(&bad, first_rc, all, 1);
    }
    resolve_gemm_table(cfg);
    /* the bad settings kept their earlier values: the rest can still be checked */
    gt_config_finalize(cfg);
    if (checkable) *checkable = 1;
    if (bad.rc != GT_OK) return load_failed(err, &bad);
    return GT_OK;
}

int gt_cli_report_other_errors(const gt_config *cfg, FILE *out) {
    gt_report report;
    int errors = gt_config_validate(cfg, &report);
    if (errors > 0) {
        fprintf(out, "and the rules, checked with the other settings (each bad setting above "
                     "keeps its earlier value):\n");
        gt_report_print(&report, out);
    }
    return errors;
}
