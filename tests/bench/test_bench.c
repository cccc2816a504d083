/* The bench harness (bench/bench.h, `graphtrain bench`) on a tiny CPU model: every mode runs,
 * the JSON and CSV carry every field, the SVG plot draws every mode to scale, the losses of eager,
 * scoped and full-iteration runs agree bitwise, a mode that fails is reported while the others
 * still run, and the mode list and FLOPs formula behave as documented. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/weights_io.h"
#include "config/keys.h"
#include "core/median.h"
#include "testlib.h"

#define TINY_ARGS                                                                                  \
    "runtime.device=cpu model.num_layers=2 model.hidden_size=32 model.num_attention_heads=4 "      \
    "model.num_query_groups=2 model.ffn_hidden_size=64 model.vocab_size=64 "                       \
    "model.seq_length=16 train.micro_batch_size=2 train.global_batch_size=2"

static void tiny_config(gt_config *c) {
    gt_config_defaults(c);
    c->runtime.device = GT_DEVICE_CPU;
    c->model.num_layers = 2;
    c->model.hidden_size = 32;
    c->model.num_attention_heads = 4;
    c->model.num_query_groups = 2;
    c->model.ffn_hidden_size = 64;
    c->model.vocab_size = 64;
    c->model.seq_length = 16;
    c->train.micro_batch_size = 2;
    c->train.global_batch_size = 2;
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static const size_t cap = 1 << 20;
    char *buf = calloc(1, cap);
    if (buf) buf[fread(buf, 1, cap - 1, f)] = '\0';
    fclose(f);
    return buf;
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

typedef int (*bench_writer)(const gt_bench_report *rep, const char *path, gt_error *err);

/* Writes rep with `write` as dir/name, dir a fresh temporary folder (the caller removes both),
 * and returns the file's text (the caller frees it). */
static char *write_and_read(const gt_bench_report *rep, bench_writer write, const char *name,
                            char dir[256], char path[300]) {
    gt_test_tmpdir(dir, 256);
    snprintf(path, 300, "%s/%s", dir, name);
    gt_error err = {0};
    if (write(rep, path, &err)) fail_msg("writing %s: %s", path, err.msg);
    char *text = read_all(path);
    assert_non_null(text);
    return text;
}

static void run_modes_how(const char *modes, int same_process, gt_bench_report *rep) {
    gt_config c;
    tiny_config(&c);
    gt_bench_options o;
    gt_bench_options_init(&o);
    o.steps = 3;
    o.warmup = 1;
    o.quiet = 1;
    o.label = "tiny-cpu";
    o.same_process = same_process;
    gt_error err = {0};
    assert_int_equal(gt_bench_parse_modes(&o, modes, 0, &err), GT_OK);
    int rc = gt_bench_run(&c, &o, rep, &err);
    if (rc) fprintf(stderr, "gt_bench_run: %s\n", err.msg);
    assert_int_equal(rc, GT_OK);
}

/* each mode in a process of its own, the default */
static void run_modes(const char *modes, gt_bench_report *rep) {
    run_modes_how(modes, 0, rep);
}

static void test_bench_json_records_the_runtime_cuda_keys(void **state) {
    (void)state;
    gt_config c;
    tiny_config(&c);
    gt_error err = {0};
    assert_int_equal(gt_config_override(&c, "runtime.cuda.attention=mma", &err), GT_OK);
    assert_int_equal(gt_config_override(&c, "runtime.cuda.pdl=off", &err), GT_OK);
    static gt_bench_report rep; /* large: not on the stack */
    memset(&rep, 0, sizeof rep);
    gt_bench_workload_compute(&rep.w, &c, 1e6, 0);
    char dir[256], path[300];
    char *json = write_and_read(&rep, gt_bench_write_json, "bench.json", dir, path);
    if (!strstr(json, "\"runtime_cuda\": {\n    \"attention\": \"mma\",\n    \"attention_bwd\": "
                      "\"auto\",\n    \"moe_gemm\": \"auto\",\n    \"pdl\": \"off\",\n    "
                      "\"graph_memset\": \"auto\"\n  }"))
        fail_msg("no runtime_cuda object in: %.600s", json);
    free(json);
    remove(path);
    remove(dir);
}

static void test_bench_json_has_every_field_and_modes_agree_bitwise(void **state) {
    (void)state;
    gt_bench_report rep;
    run_modes("eager,attn,full_iteration", &rep);
    assert_int_equal(rep.n, 3);
    for (int i = 0; i < rep.n; i++) {
        const gt_bench_result *r = &rep.results[i];
        if (!r->ok) fprintf(stderr, "mode %s: %s\n", r->mode.name, r->error.msg);
        assert_true(r->ok);
        assert_int_equal(r->timed, 3);
        assert_int_equal(r->timed_unreplayed, 0); /* every timed graph step replayed */
        assert_true(r->n_losses >= GT_BENCH_LOSS_STEPS);
        assert_true(r->min_ms > 0 && r->min_ms <= r->median_ms && r->median_ms <= r->max_ms);
        assert_true(r->tokens_per_s > 0 && r->tflops > 0 && r->peak_bytes > 0);
        if (r->mode.impl == GT_GRAPH_IMPL_NONE) {
            assert_int_equal(r->graphs, 0);
            assert_int_equal(r->capture_step, 0);
        } else {
            assert_true(r->graphs > 0 && r->nodes > 0);
            assert_true(r->capture_step > 0);
        }
    }
    assert_int_equal(rep.loss_steps_compared, GT_BENCH_LOSS_STEPS);
    assert_int_equal(rep.losses_identical, 1);

    char dir[256], path[300];
    char *json = write_and_read(&rep, gt_bench_write_json, "bench.json", dir, path);
    static const char *const top[] = {"\"workload\": \"tiny-cpu\"",
                                      "\"backend\": \"cpu\"",
                                      "\"backend_detail\": \"CPU reference kernels",
                                      "\"date\": ",
                                      "\"tokens_per_step\": 32",
                                      "\"n_params\": ",
                                      "\"n_active_params\": ",
                                      "\"flops_per_step\": ",
                                      "\"bytes_per_step\": ",
                                      "\"limit_ms\": ",
                                      "\"peak_tflops\": 790",
                                      "\"loss_steps_compared\": 10",
                                      "\"losses_identical\": true",
                                      "\"limit_formula\": "};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) {
        if (!strstr(json, top[i])) fprintf(stderr, "missing %s in\n%s\n", top[i], json);
        assert_non_null(strstr(json, top[i]));
    }
    static const char *const per_mode[] = {"\"mode\": ",
                                           "\"cuda_graph_impl\": ",
                                           "\"cuda_graph_scope\": ",
                                           "\"ok\": true",
                                           "\"median_ms\": ",
                                           "\"min_ms\": ",
                                           "\"max_ms\": ",
                                           "\"tokens_per_s\": ",
                                           "\"tflops\": ",
                                           "\"mfu\": ",
                                           "\"limit_fraction\": ",
                                           "\"capture_ms\": ",
                                           "\"instantiate_ms\": ",
                                           "\"graphs\": ",
                                           "\"nodes\": ",
                                           "\"peak_bytes\": ",
                                           "\"peak_ratio_to_eager\": ",
                                           "\"losses\": ["};
    for (size_t i = 0; i < sizeof per_mode / sizeof per_mode[0]; i++)
        assert_int_equal(count(json, per_mode[i]), 3);
    /* the loss arrays as written are the same text in every mode */
    const char *l0 = strstr(json, "\"losses\": ["), *l1 = strstr(l0 + 1, "\"losses\": [");
    const char *l2 = strstr(l1 + 1, "\"losses\": [");
    size_t len = (size_t)(strchr(l0, ']') - l0);
    assert_true(len > 20);
    assert_memory_equal(l0, l1, len);
    assert_memory_equal(l0, l2, len);
    free(json);
    remove(path);
    remove(dir);
    gt_bench_report_free(&rep);
}

static void test_mode_whose_capture_fails_is_reported_and_others_still_run(void **state) {
    (void)state;
    setenv("GT_GRAPHS_FORCE_CAPTURE_FAILURE", "full_iteration", 1);
    gt_bench_report rep;
    run_modes("eager,full_iteration", &rep);
    unsetenv("GT_GRAPHS_FORCE_CAPTURE_FAILURE");
    assert_true(rep.results[0].ok);
    assert_false(rep.results[1].ok);
    assert_true(rep.results[1].error.msg[0] != '\0');
    assert_int_equal(rep.losses_identical, -1); /* one mode left: nothing to compare */
    gt_bench_report_free(&rep);
}

/* Modes run in child processes bring back everything a run in this process has: the workload
 * figures, the graph counts and every loss, bit for bit. */
static void test_modes_in_their_own_processes_match_a_run_in_one_process(void **state) {
    (void)state;
    gt_bench_report *child = calloc(1, sizeof *child), *same = calloc(1, sizeof *same);
    assert_non_null(child);
    assert_non_null(same);
    run_modes_how("eager,attn,full_iteration", 0, child);
    run_modes_how("eager,attn,full_iteration", 1, same);
    assert_int_equal(child->n, 3);
    assert_int_equal(same->n, 3);
    assert_int_equal(child->w.tokens_per_step, same->w.tokens_per_step);
    assert_true(child->w.n_params == same->w.n_params && child->w.n_params > 0);
    assert_true(child->w.flops_per_step == same->w.flops_per_step);
    assert_string_equal(child->w.backend, "cpu");
    assert_string_equal(child->w.backend_detail, same->w.backend_detail);
    for (int i = 0; i < 3; i++) {
        const gt_bench_result *a = &child->results[i], *b = &same->results[i];
        assert_true(a->ok && b->ok);
        assert_string_equal(a->mode.name, b->mode.name);
        assert_string_equal(a->graph_mode, b->graph_mode);
        assert_int_equal(a->graphs, b->graphs);
        assert_int_equal(a->nodes, b->nodes);
        assert_int_equal(a->capture_step, b->capture_step);
        assert_int_equal(a->timed, b->timed);
        assert_true(a->peak_bytes == b->peak_bytes && a->peak_bytes > 0);
        assert_true(a->median_ms > 0);
        assert_int_equal(a->n_losses, b->n_losses);
        assert_memory_equal(a->losses, b->losses, (size_t)a->n_losses * sizeof(float));
    }
    assert_int_equal(child->losses_identical, 1);
    gt_bench_report_free(child);
    gt_bench_report_free(same);
    free(child);
    free(same);
}

/* A mode whose process dies is failed with the signal named; the modes around it still run
 * and their losses are still compared. */
static void test_a_mode_whose_process_dies_is_reported_and_others_still_run(void **state) {
    (void)state;
    setenv("GT_BENCH_FORCE_CHILD_CRASH", "attn", 1);
    gt_bench_report rep;
    run_modes("eager,attn,full_iteration", &rep);
    unsetenv("GT_BENCH_FORCE_CHILD_CRASH");
    assert_int_equal(rep.n, 3);
    assert_true(rep.results[0].ok);
    assert_false(rep.results[1].ok);
    assert_true(rep.results[2].ok);
    if (!strstr(rep.results[1].error.msg, "died with signal 9"))
        fail_msg("unexpected error: %s", rep.results[1].error.msg);
    assert_non_null(strstr(rep.results[1].error.msg, "mode attn"));
    assert_int_equal(rep.losses_identical, 1);
    assert_true(rep.w.tokens_per_step > 0);
    gt_bench_report_free(&rep);
}

static void test_cli_bench_writes_json_csv_and_says_losses_are_identical(void **state) {
    (void)state;
    char dir[256], args[1024];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(args, sizeof args,
             "bench " TINY_ARGS " --modes eager,attn+mlp,full_iteration --steps 2 --warmup 0 "
             "--json %s/b.json --csv %s/b.csv --plot %s/b.svg --quiet",
             dir, dir, dir);
    static char out[1 << 16];
    int rc = gt_test_run(args, out, sizeof out);
    if (rc) fprintf(stderr, "%s\n", out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "bitwise identical across modes over the first 10 steps: yes"));
    assert_non_null(strstr(out, "attn+mlp"));
    assert_non_null(strstr(out, "\nbackend: CPU reference kernels")); /* what ran, stated */
    char path[300];
    snprintf(path, sizeof path, "%s/b.csv", dir);
    char *csv = read_all(path);
    assert_non_null(csv);
    assert_int_equal(count(csv, "\n"), 4); /* header + 3 modes */
    assert_non_null(strstr(csv, "median_ms,min_ms,max_ms,tokens_per_s,tflops,mfu"));
    assert_non_null(strstr(csv, ",full_iteration,local,full_iteration,1,"));
    free(csv);
    remove(path);
    snprintf(path, sizeof path, "%s/b.json", dir);
    char *json = read_all(path);
    assert_non_null(json);
    assert_int_equal(count(json, "\"ok\": true"), 3);
    free(json);
    remove(path);
    snprintf(path, sizeof path, "%s/b.svg", dir);
    char *svg = read_all(path);
    assert_non_null(svg);
    assert_int_equal(count(svg, "<rect class=\"bar "), 3);
    free(svg);
    remove(path);
    remove(dir);
}

/* The width of the first bar of class cls in an SVG from gt_bench_write_svg, or -1. */
static double bar_width(const char *svg, const char *cls) {
    char key[64];
    snprintf(key, sizeof key, "<rect class=\"%s\"", cls);
    const char *p = strstr(svg, key);
    if (!p) return -1;
    p = strstr(p, "width=\"");
    double wv = -1;
    if (p && sscanf(p, "width=\"%lf\"", &wv) != 1) wv = -1;
    return wv;
}

static void test_plot_draws_a_bar_per_mode_to_scale_with_its_figures(void **state) {
    (void)state;
    gt_bench_report rep;
    run_modes("eager,attn,full_iteration", &rep);
    snprintf(rep.w.label, sizeof rep.w.label, "tiny<&>cpu"); /* escaped in the title */
    char dir[256], path[300];
    char *svg = write_and_read(&rep, gt_bench_write_svg, "bench.svg", dir, path);
    static const char head[] = "<svg xmlns=\"http://www.w3.org/2000/svg\"";
    assert_int_equal(strncmp(svg, head, sizeof head - 1), 0);
    size_t len = strlen(svg);
    assert_true(len > 8 && !strcmp(svg + len - 7, "</svg>\n"));
    assert_int_equal(count(svg, "<rect class=\"bar "), 3);
    assert_int_equal(count(svg, "class=\"bar eager\""), 1);
    assert_int_equal(count(svg, "class=\"bar scoped\""), 1);
    assert_int_equal(count(svg, "class=\"bar full\""), 1);
    assert_int_equal(count(svg, "class=\"whisker\""), 3);
    assert_int_equal(count(svg, "class=\"limit\""), 1);
    assert_non_null(strstr(svg, "tiny&lt;&amp;&gt;cpu"));
    assert_non_null(strstr(svg, ">CPU reference kernels")); /* the backend's own line */
    assert_null(strstr(svg, "tiny<&>cpu"));
    assert_non_null(strstr(svg, "losses bitwise identical across modes: yes"));
    for (int i = 0; i < rep.n; i++) {
        const gt_bench_result *r = &rep.results[i];
        char want[96];
        snprintf(want, sizeof want, ">%s</text>", r->mode.name);
        assert_non_null(strstr(svg, want));
        snprintf(want, sizeof want, "%.3f ms", r->median_ms);
        assert_non_null(strstr(svg, want));
        if (i > 0) {
            snprintf(want, sizeof want, "(%.2fx eager)", rep.results[0].median_ms / r->median_ms);
            assert_non_null(strstr(svg, want));
        }
    }
    /* bar lengths are the medians on one scale */
    double we = bar_width(svg, "bar eager"), wf = bar_width(svg, "bar full");
    assert_true(we > 0 && wf > 0);
    double want_ratio = rep.results[0].median_ms / rep.results[2].median_ms;
    assert_true(fabs(we / wf - want_ratio) < 0.01 * want_ratio + 0.2 / wf);
    free(svg);
    remove(path);

    /* a failed mode is written as its error, without a bar */
    rep.results[1].ok = 0;
    snprintf(rep.results[1].error.msg, sizeof rep.results[1].error.msg, "capture <failed>");
    gt_error err = {0};
    assert_int_equal(gt_bench_write_svg(&rep, path, &err), GT_OK);
    svg = read_all(path);
    assert_non_null(svg);
    assert_int_equal(count(svg, "<rect class=\"bar "), 2);
    assert_non_null(strstr(svg, "FAILED: capture &lt;failed&gt;"));
    free(svg);
    remove(path);

    /* not an .svg name, or a folder that does not exist: refused, naming the fix */
    snprintf(path, sizeof path, "%s/bench.png", dir);
    assert_int_equal(gt_bench_write_svg(&rep, path, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "*.svg"));
    assert_null(fopen(path, "r"));
    snprintf(path, sizeof path, "%s/no-such-folder/bench.svg", dir);
    assert_int_equal(gt_bench_write_svg(&rep, path, &err), GT_ERR_IO);
    assert_non_null(strstr(err.msg, "no-such-folder"));
    remove(dir);
    gt_bench_report_free(&rep);
}

/* Output paths are checked before any mode runs: a long GPU run is not lost to a typo. */
static void test_cli_bench_refuses_unwritable_outputs_before_running(void **state) {
    (void)state;
    static char out[1 << 16];
    int rc = gt_test_run("bench " TINY_ARGS " --modes eager --steps 1 --warmup 0 --quiet "
                         "--plot bench.png",
                         out, sizeof out);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(out, "name the file *.svg"));
    assert_null(strstr(out, "median_ms")); /* nothing ran */
    rc = gt_test_run("bench " TINY_ARGS " --modes eager --steps 1 --warmup 0 --quiet "
                     "--json /no-such-folder-gt/b.json",
                     out, sizeof out);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(out, "cannot write into the folder /no-such-folder-gt"));
    assert_null(strstr(out, "median_ms"));
}

static void test_harness_flags_select_a_single_mode(void **state) {
    (void)state;
    static char out[1 << 16];
    int rc = gt_test_run("bench " TINY_ARGS " --cuda_graph_impl transformer_engine "
                         "--cuda_graph_scope attn --steps 1 --warmup 0 --quiet",
                         out, sizeof out);
    if (rc) fprintf(stderr, "%s\n", out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "\nattn "));
    assert_null(strstr(out, "\neager "));
    rc = gt_test_run("bench " TINY_ARGS " --cuda_graph_impl local --cuda_graph_scope "
                     "full_iteration --modes eager",
                     out, sizeof out);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "not both"));
}

static long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

/* --parity DIR writes what bench/torch_reference.py parity reads: config, weights, batches
 * (32-byte header + steps x micro-batches x 2 x B x T int32), losses and step-1 gradients. */
static void test_parity_export_writes_config_weights_batches_losses_and_gradients(void **state) {
    (void)state;
    char dir[256], args[1024], path[400];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(args, sizeof args,
             "bench " TINY_ARGS " train.global_batch_size=4 --parity %s/p "
             "--parity-steps 3",
             dir);
    static char out[1 << 16];
    int rc = gt_test_run(args, out, sizeof out);
    if (rc) fprintf(stderr, "%s\n", out);
    assert_int_equal(rc, 0);
    static const char *const files[] = {"config.json", "weights.gtw", "tokens.bin",
                                        "graphtrain_losses.json", "grads_step1.gtw"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/p/%s", dir, files[i]);
        assert_true(file_size(path) > 0);
    }
    snprintf(path, sizeof path, "%s/p/tokens.bin", dir);
    assert_int_equal(file_size(path), 32 + 3 * 2 * 2 * 2 * 16 * 4); /* 2 micro-batches */
    snprintf(path, sizeof path, "%s/p/graphtrain_losses.json", dir);
    char *js = read_all(path);
    assert_non_null(js);
    assert_non_null(strstr(js, "\"steps\": 3"));
    assert_non_null(strstr(js, "\"micro_batches\": 2"));
    assert_non_null(strstr(js, "\"loss\": ["));
    free(js);
    snprintf(path, sizeof path, "%s/p/config.json", dir);
    js = read_all(path);
    assert_non_null(js);
    assert_non_null(strstr(js, "\"model.hidden_size\": 32"));
    assert_non_null(strstr(js, "\"model.hidden_dropout\": 0"));
    free(js);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/p/%s", dir, files[i]);
        remove(path);
    }
    snprintf(path, sizeof path, "%s/p", dir);
    remove(path);
    remove(dir);
}

static void test_cli_export_weights_writes_a_readable_weights_file(void **state) {
    (void)state;
    char dir[256], args[1024], path[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/w.gtw", dir);
    snprintf(args, sizeof args, "bench " TINY_ARGS " --export-weights %s", path);
    static char out[1 << 16];
    int rc = gt_test_run(args, out, sizeof out);
    if (rc) fprintf(stderr, "%s\n", out);
    assert_int_equal(rc, 0);
    gt_weights w;
    gt_error err = {0};
    assert_int_equal(gt_weights_read(path, &w, &err), GT_OK);
    /* embedding, 2 x (qkv, o, gate_up, down, 2 norms), head, final norm */
    assert_int_equal(w.n, 15);
    int i = gt_weights_find(&w, "layers.1.mlp.gu_w");
    assert_true(i >= 0);
    assert_int_equal(w.tensors[i].shape[0], 2 * 64);
    assert_int_equal(w.tensors[i].shape[1], 32);
    gt_weights_free(&w);
    remove(path);
    remove(dir);
}

static void test_moe_attn_mlp_mode_graphs_router_and_preprocess(void **state) {
    (void)state;
    gt_bench_options o;
    gt_bench_options_init(&o);
    gt_error err = {0};
    assert_int_equal(gt_bench_parse_modes(&o, "all", 1, &err), GT_OK);
    assert_int_equal(o.n_modes, 4);
    assert_string_equal(o.modes[0].name, "eager");
    assert_string_equal(o.modes[1].name, "attn");
    assert_string_equal(o.modes[2].name, "attn+moe_router+moe_preprocess");
    assert_int_equal(o.modes[2].scope,
                     GT_SCOPE_ATTN | GT_SCOPE_MOE_ROUTER | GT_SCOPE_MOE_PREPROCESS);
    assert_int_equal(o.modes[2].impl, GT_GRAPH_IMPL_TE);
    assert_string_equal(o.modes[3].name, "full_iteration");
    assert_int_equal(o.modes[3].impl, GT_GRAPH_IMPL_LOCAL);
    assert_int_equal(gt_bench_parse_modes(&o, "attn+mlp", 0, &err), GT_OK);
    assert_int_equal(o.modes[0].scope, GT_SCOPE_ATTN | GT_SCOPE_MLP);
}

static void test_bad_mode_lists_are_refused_naming_the_problem(void **state) {
    (void)state;
    gt_bench_options o;
    gt_bench_options_init(&o);
    gt_error err = {0};
    assert_int_equal(gt_bench_parse_modes(&o, "eager,atn", 0, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "'atn'"));
    assert_int_equal(gt_bench_parse_modes(&o, "attn+full_iteration", 0, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "full_iteration"));
    assert_int_equal(gt_bench_parse_modes(&o, "attn+moe_router", 0, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "num_moe_experts"));
    assert_int_equal(gt_bench_parse_modes(&o, "eager,none", 0, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "twice"));
    assert_int_equal(gt_bench_parse_modes(&o, "", 0, &err), GT_ERR_INVALID);
}

/* WORKLOADS.md's tiny: N = 8 x (qkv 512x1536 + o 512x512 + mlp 3x512x1536) + head 32768x512
 * = 44,040,192; 6 N x 1024 tokens + 6 x 8 layers x 4 x 256^2 x 512 = 277,025,390,592. */
static void test_workload_flops_follow_the_workloads_formula(void **state) {
    (void)state;
    gt_config c;
    gt_config_defaults(&c);
    c.model.num_layers = 8;
    c.model.hidden_size = 512;
    c.model.num_attention_heads = 8;
    c.model.num_query_groups = 8;
    c.model.ffn_hidden_size = 1536;
    c.model.vocab_size = 32768;
    c.model.seq_length = 256;
    c.train.micro_batch_size = 4;
    c.train.global_batch_size = 4;
    gt_bench_workload w;
    memset(&w, 0, sizeof w);
    gt_bench_workload_compute(&w, &c, 61e6, 0);
    assert_int_equal(w.tokens_per_step, 1024);
    assert_true(fabs(w.n_active - 44040192.0) < 0.5);
    assert_true(fabs(w.flops_per_step - 277025390592.0) < 1.0);
    assert_int_equal(w.flops_from_model, 0);
    double limit = 1e3 * (277025390592.0 / 790e12 + (20 * 61e6 + 6 * 44040192.0) / 4.3e12);
    assert_true(fabs(w.limit_ms - limit) < 1e-9);
    /* the model's own figure wins when it gives one */
    gt_bench_workload_compute(&w, &c, 61e6, 1000.0);
    assert_true(fabs(w.flops_per_step - 1024000.0) < 1e-6);
    assert_int_equal(w.flops_from_model, 1);
}

static void test_median_of_odd_and_even_counts(void **state) {
    (void)state;
    double a[] = {5, 1, 3};
    assert_true(gt_median(a, 3) == 3);
    double b[] = {4, 1, 3, 2};
    assert_true(gt_median(b, 4) == 2.5);
}

/* Every step all successful modes ran is compared, not only the ones printed: a 33-step run
 * whose modes part at step 25 is not identical, a failed mode's losses count for nothing, and
 * the shortest successful mode bounds the steps compared. */
static void test_losses_are_compared_over_every_step_the_modes_ran(void **state) {
    (void)state;
    enum { STEPS = 33 };
    static float l[3][STEPS];
    for (int m = 0; m < 3; m++)
        for (int s = 0; s < STEPS; s++)
            l[m][s] = 10.0f - 0.01f * (float)s;
    static gt_bench_report rep; /* large: not on the stack */
    memset(&rep, 0, sizeof rep);
    rep.n = 3;
    for (int m = 0; m < 3; m++)
        rep.results[m].ok = 1, rep.results[m].losses = l[m], rep.results[m].n_losses = STEPS;
    gt_bench_compare_losses(&rep);
    assert_int_equal(rep.loss_steps_compared, STEPS);
    assert_int_equal(rep.losses_identical, 1);
    assert_int_equal(rep.first_mismatch_step, 0);

    l[2][24] = nextafterf(l[2][24], 0.0f); /* one ulp, past the printed steps */
    gt_bench_compare_losses(&rep);
    assert_int_equal(rep.losses_identical, 0);
    assert_int_equal(rep.first_mismatch_step, 25);

    rep.results[2].ok = 0; /* a failed mode: left out */
    gt_bench_compare_losses(&rep);
    assert_int_equal(rep.losses_identical, 1);

    rep.results[2].ok = 1;
    rep.results[2].n_losses = 20; /* the shortest successful mode bounds the comparison */
    gt_bench_compare_losses(&rep);
    assert_int_equal(rep.loss_steps_compared, 20);
    assert_int_equal(rep.losses_identical, 1);

    rep.results[1].ok = rep.results[2].ok = 0; /* one mode: nothing to compare against */
    gt_bench_compare_losses(&rep);
    assert_int_equal(rep.losses_identical, -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bench_json_records_the_runtime_cuda_keys),
        cmocka_unit_test(test_bench_json_has_every_field_and_modes_agree_bitwise),
        cmocka_unit_test(test_losses_are_compared_over_every_step_the_modes_ran),
        cmocka_unit_test(test_mode_whose_capture_fails_is_reported_and_others_still_run),
        cmocka_unit_test(test_modes_in_their_own_processes_match_a_run_in_one_process),
        cmocka_unit_test(test_a_mode_whose_process_dies_is_reported_and_others_still_run),
        cmocka_unit_test(test_cli_bench_writes_json_csv_and_says_losses_are_identical),
        cmocka_unit_test(test_plot_draws_a_bar_per_mode_to_scale_with_its_figures),
        cmocka_unit_test(test_cli_bench_refuses_unwritable_outputs_before_running),
        cmocka_unit_test(test_harness_flags_select_a_single_mode),
        cmocka_unit_test(test_parity_export_writes_config_weights_batches_losses_and_gradients),
        cmocka_unit_test(test_cli_export_weights_writes_a_readable_weights_file),
        cmocka_unit_test(test_moe_attn_mlp_mode_graphs_router_and_preprocess),
        cmocka_unit_test(test_bad_mode_lists_are_refused_naming_the_problem),
        cmocka_unit_test(test_workload_flops_follow_the_workloads_formula),
        cmocka_unit_test(test_median_of_odd_and_even_counts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
