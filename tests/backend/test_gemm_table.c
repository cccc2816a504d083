/* GEMM algorithm tables (runtime.gemm_table): the text format round-trips, every bad line of
 * a file is reported at once with its line, unreadable files are refused by name, a relative
 * path is found in the recipes folder, the CPU backend reads a table but uses nothing, and
 * tune-gemm refuses what it cannot run. */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/gemm_table.h"
#include "cli/args.h"
#include "train/trainer.h"

#define ALGO                                                                                       \
    "00000014000000420000000100000023000000000000000000030000000000010001fc34000000010000000e00"   \
    "00000e00000044000e000e0000000000000000"

static const char *k_good =
    "# a comment\n"
    "device NVIDIA H200 (132 SMs)   # trailing comment\n"
    "cublaslt 130100\n"
    "\n"
    "gemm matmul_fwd M=8192 N=2304 K=768 batch=1 sa=0 sb=0 sc=0 algo=" ALGO "\n"
    "gemm matmul_bwd_weight K=768 M=8192 N=768 batch=12 sa=6291456 "
    "sb=6291456 sc=589824 algo=" ALGO "\n";

static void test_a_table_round_trips_through_its_text(void **state) {
    (void)state;
    gt_gemm_table t;
    gt_error err = {0};
    assert_int_equal(gt_gemm_table_parse(&t, k_good, "good", &err), GT_OK);
    assert_string_equal(t.device, "NVIDIA H200 (132 SMs)");
    assert_int_equal(t.cublaslt, 130100);
    assert_int_equal(t.n, 2);
    gt_gemm_shape_key k = {"matmul_bwd_weight", 8192, 768, 768, 12, 6291456, 6291456, 589824};
    const gt_gemm_entry *e = gt_gemm_table_find(&t, &k);
    assert_non_null(e);
    assert_true(e->algo[0] == 0x0000001400000042ull && e->algo[7] == 0);
    k.count = 11;
    assert_null(gt_gemm_table_find(&t, &k));

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_int_equal(gt_gemm_table_write(&t, "first line\nsecond line", f), 0);
    fclose(f);
    assert_non_null(strstr(text, "# first line\n# second line\n"));
    gt_gemm_table u;
    assert_int_equal(gt_gemm_table_parse(&u, text, "written", &err), GT_OK);
    assert_int_equal(u.n, t.n);
    assert_string_equal(u.device, t.device);
    assert_int_equal(u.cublaslt, t.cublaslt);
    for (int i = 0; i < t.n; i++) {
        assert_memory_equal(&u.e[i].key, &t.e[i].key, sizeof t.e[i].key);
        assert_memory_equal(u.e[i].algo, t.e[i].algo, sizeof t.e[i].algo);
    }
    /* put replaces the entry of the same shape */
    gt_gemm_entry x = t.e[0];
    x.algo[3] = 42;
    assert_int_equal(gt_gemm_table_put(&u, &x, &err), GT_OK);
    assert_int_equal(u.n, 2);
    assert_true(gt_gemm_table_find(&u, &x.key)->algo[3] == 42);
    free(text);
    gt_gemm_table_free(&t);
    gt_gemm_table_free(&u);
}

static void test_every_bad_line_is_reported_at_once(void **state) {
    (void)state;
    const char *bad =
        "device NVIDIA H200 (132 SMs)\n"
        "cublaslt 13.1\n"                                                           /* line 2 */
        "gemm matmul_fwd M=0 N=1 K=1 batch=1 sa=0 sb=0 sc=0 algo=" ALGO "\n"        /* 3 */
        "gemm matmul_fwd M=1 N=1 K=1 batch=1 sa=0 sb=0 algo=12\n"                   /* 4 */
        "gemm matmul_fwd M=1 N=1 K=1 batch=1 sa=0 sb=0 sc=0 tile=3 algo=" ALGO "\n" /* 5 */
        "gemm matmul_fwd M=2 N=1 K=1 batch=1 sa=0 sb=0 sc=0 algo=" ALGO "\n"        /* 6 */
        "gemm matmul_fwd M=2 N=1 K=1 batch=1 sa=0 sb=0 sc=0 algo=" ALGO "\n"        /* 7 */
        "cuda 13\n";                                                                /* line 8 */
    gt_gemm_table t;
    gt_error err = {0};
    assert_int_equal(gt_gemm_table_parse(&t, bad, "t.gemm", &err), GT_ERR_INVALID);
    const char *want[] = {"t.gemm:2: cublaslt '13.1' is not a version number",
                          "t.gemm:3: M='0' is not a whole number in range",
                          "t.gemm:4: algo is not 128 hexadecimal digits",
                          "t.gemm:4: gemm line without sc=",
                          "t.gemm:5: unknown field 'tile'",
                          "t.gemm:7: a second entry for matmul_fwd M=2",
                          "t.gemm:8: unknown item 'cuda'",
                          "graphtrain tune-gemm"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(err.msg, want[i])) fail_msg("'%s' missing from: %s", want[i], err.msg);
    assert_int_equal(err.count, 8); /* line 4 has two */
    assert_int_equal(t.n, 0);
    assert_null(t.e);

    assert_int_equal(gt_gemm_table_parse(&t, "gemm matmul_fwd\n", "h", &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "h: no device line"));
    assert_non_null(strstr(err.msg, "h: no cublaslt line"));
    assert_non_null(strstr(err.msg, "h:1: gemm line without M="));
}

static void test_unreadable_files_are_refused_by_name(void **state) {
    (void)state;
    char dir[512], path[600];
    gt_test_tmpdir(dir, sizeof dir);
    gt_gemm_table t;
    gt_error err = {0};
    snprintf(path, sizeof path, "%s/missing.gemm", dir);
    assert_int_equal(gt_gemm_table_load(&t, path, &err), GT_ERR_IO);
    assert_non_null(strstr(err.msg, "missing.gemm"));
    assert_non_null(strstr(err.msg, "runtime.gemm_table="));

    snprintf(path, sizeof path, "%s/binary.gemm", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite("device x\0y", 1, 10, f);
    fclose(f);
    assert_int_equal(gt_gemm_table_load(&t, path, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "NUL bytes"));

    snprintf(path, sizeof path, "%s/ok.gemm", dir);
    gt_test_write_text(path, k_good);
    assert_int_equal(gt_gemm_table_load(&t, path, &err), GT_OK);
    assert_int_equal(t.n, 2);
    gt_gemm_table_free(&t);
}

/* The recipes folder holds the shipped tables; a recipe names them relative to it. */
static void test_a_relative_table_is_found_in_the_recipes_folder(void **state) {
    (void)state;
    char dir[512], sub[600], path[700];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/gemm", dir);
    char cmd[800];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", sub);
    assert_int_equal(system(cmd), 0);
    snprintf(path, sizeof path, "%s/gemm/x.gemm", dir);
    gt_test_write_text(path, k_good);
    snprintf(path, sizeof path, "%s/r.yaml", dir);
    gt_test_write_text(path, "runtime:\n  gemm_table: gemm/x.gemm\n  device: cpu\n");
    setenv("GT_RECIPE_DIR", dir, 1);
    char *argv[] = {"train", "--recipe", "r", NULL};
    char *rest[4];
    int n_rest = 0;
    gt_config cfg;
    gt_error err = {0};
    assert_int_equal(gt_cli_load_config(3, argv, &cfg, &n_rest, rest, NULL, &err), GT_OK);
    snprintf(path, sizeof path, "%s/gemm/x.gemm", dir);
    assert_string_equal(cfg.runtime.gemm_table, path);
    /* not found anywhere: left as written, for the loader to name */
    char *argv2[] = {"train", "--recipe", "r", "runtime.gemm_table=gemm/none.gemm", NULL};
    assert_int_equal(gt_cli_load_config(4, argv2, &cfg, &n_rest, rest, NULL, &err), GT_OK);
    assert_string_equal(cfg.runtime.gemm_table, "gemm/none.gemm");
    unsetenv("GT_RECIPE_DIR");
}

/* A CPU trainer reads the table (so a bad one fails anywhere) and runs without it. */
static void test_the_cpu_trainer_reads_a_table_and_uses_none(void **state) {
    (void)state;
    char dir[512], path[600];
    gt_test_tmpdir(dir, sizeof dir);
    char recipe[600];
    gt_config cfg;
    gt_error err = {0};
    char *rest[14];
    int n_rest = 0;
    char *argv[] = {"train",
                    "--recipe",
                    recipe,
                    "runtime.device=cpu",
                    "model.num_layers=1",
                    "model.hidden_size=32",
                    "model.num_attention_heads=2",
                    "model.num_query_groups=2",
                    "model.ffn_hidden_size=64",
                    "model.vocab_size=64",
                    "model.seq_length=16",
                    "train.micro_batch_size=2",
                    "train.global_batch_size=2",
                    NULL};
    gt_test_source_path("recipes/tiny.yaml", recipe, sizeof recipe);
    assert_int_equal(gt_cli_load_config(13, argv, &cfg, &n_rest, rest, NULL, &err), GT_OK);

    snprintf(path, sizeof path, "%s/bad.gemm", dir);
    gt_test_write_text(path, "device x\ncublaslt 1\ngemm matmul_fwd M=1\n");
    snprintf(cfg.runtime.gemm_table, sizeof cfg.runtime.gemm_table, "%s", path);
    gt_trainer *t = NULL;
    assert_int_equal(gt_trainer_create(&t, &cfg, &err), GT_ERR_INVALID);
    assert_null(t);
    assert_non_null(strstr(err.msg, "bad.gemm:3: gemm line without N="));

    snprintf(path, sizeof path, "%s/good.gemm", dir);
    gt_test_write_text(path, k_good);
    snprintf(cfg.runtime.gemm_table, sizeof cfg.runtime.gemm_table, "%s", path);
    if (gt_trainer_create(&t, &cfg, &err) != GT_OK) fail_msg("%s", err.msg);
    gt_step_stats st;
    if (gt_trainer_step(t, &st, &err) != GT_OK) fail_msg("%s", err.msg);
    assert_false(gt_trainer_backend(t)->ops->gemm_table_set);
    gt_trainer_destroy(t);
}

/* graphtrain tune-gemm refuses bad flags and a backend without cuBLASLt, writing nothing. */
static void test_tune_gemm_refuses_bad_input_and_writes_nothing(void **state) {
    (void)state;
    enum { OUT = 64 * 1024 };
    char *out = malloc(OUT);
    char dir[512], recipes[600], args[1400];
    setenv("GT_RECIPE_DIR", gt_test_source_path("recipes", recipes, sizeof recipes), 1);
    assert_int_equal(gt_test_run("tune-gemm --help", out, OUT), 0);
    assert_non_null(strstr(out, "runtime.gemm_table=FILE"));
    assert_int_equal(gt_test_run("tune-gemm --recipe tiny", out, OUT), 2);
    assert_non_null(strstr(out, "--out FILE is required"));
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(args, sizeof args, "tune-gemm --recipe tiny --out %s/t.gemm --samples 2", dir);
    assert_int_equal(gt_test_run(args, out, OUT), 2);
    assert_non_null(strstr(out, "--samples needs a whole number from 3 to 500, got '2'"));
    snprintf(args, sizeof args, "tune-gemm --recipe tiny --out %s/t.gemm --min-gain x", dir);
    assert_int_equal(gt_test_run(args, out, OUT), 2);
    assert_non_null(strstr(out, "--min-gain needs a percentage"));
    snprintf(args, sizeof args,
             "tune-gemm --recipe tiny --out %s/t.gemm runtime.device=cpu model.num_layers=1 "
             "model.hidden_size=32 model.num_attention_heads=2 model.num_query_groups=2 "
             "model.ffn_hidden_size=64 model.vocab_size=64 model.seq_length=16",
             dir);
    assert_int_equal(gt_test_run(args, out, OUT), 1);
    assert_non_null(strstr(out, "needs the CUDA backend"));
    assert_non_null(strstr(out, "nothing was written"));
    snprintf(args, sizeof args, "%s/t.gemm", dir);
    FILE *f = fopen(args, "r");
    assert_null(f);
    unsetenv("GT_RECIPE_DIR");
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_table_round_trips_through_its_text),
        cmocka_unit_test(test_every_bad_line_is_reported_at_once),
        cmocka_unit_test(test_unreadable_files_are_refused_by_name),
        cmocka_unit_test(test_a_relative_table_is_found_in_the_recipes_folder),
        cmocka_unit_test(test_the_cpu_trainer_reads_a_table_and_uses_none),
        cmocka_unit_test(test_tune_gemm_refuses_bad_input_and_writes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
