/* The checkpoint folder: Megatron's layout (iteration folders, latest file, the configuration
 * beside the weights), checkpoint.most_recent_k, auto-resume when checkpoint.load is the save
 * folder, refusal of another run's folder (unless checkpoint.overwrite=true), the writer
 * lock naming its holder, stale temporary files removed, and a bad save path refused before
 * step 1. */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/keys.h"
#include "train/checkpoint.h"
#include "train/ckpt_dir.h"
#include "train/train_loop.h"

static void set(gt_config *c, const char *kv) {
    gt_error err = {0};
    if (gt_config_override(c, kv, &err) != GT_OK) fail_msg("override %s: %s", kv, err.msg);
}

static void setf(gt_config *c, const char *key, const char *value) {
    char kv[700];
    snprintf(kv, sizeof kv, "%s=%s", key, value);
    set(c, kv);
}

static void tiny_config(gt_config *c, const char *save, int iters) {
    gt_config_defaults(c);
    static const char *kv[] = {
        "runtime.device=cpu", "model.num_layers=1", "model.hidden_size=32",
        "model.num_attention_heads=2", "model.num_query_groups=2", "model.ffn_hidden_size=64",
        "model.vocab_size=64", "model.seq_length=16", "train.micro_batch_size=2",
        "train.global_batch_size=2", "model.cuda_graph_impl=none", "logger.log_interval=1000",
        /* a schedule of its own, so resuming with more train_iters
         * keeps every step's learning rate */
        "scheduler.lr_decay_iters=100", NULL};
    for (int i = 0; kv[i]; i++)
        set(c, kv[i]);
    char n[32];
    snprintf(n, sizeof n, "%d", iters);
    setf(c, "train.train_iters", n);
    if (save) setf(c, "checkpoint.save", save);
    gt_config_finalize(c);
}

/* Runs the loop; returns its status, the result and the message. */
static int run(const gt_config *c, gt_train_result *res, gt_error *err) {
    FILE *sink = tmpfile();
    gt_train_run_opts o = {.out = sink, .quiet = 1};
    memset(err, 0, sizeof *err);
    int rc = gt_train_run(c, &o, res, err);
    fclose(sink);
    return rc;
}

static void run_ok(const gt_config *c, gt_train_result *res) {
    gt_error err;
    if (run(c, res, &err) != GT_OK) fail_msg("train: %s", err.msg);
}

static int exists(const char *dir, const char *name) {
    char p[700];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0;
}

static long long latest(const char *save) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s", save, GT_CKPT_LATEST_FILE);
    FILE *f = fopen(p, "r");
    if (!f) return -1;
    long long v = -1;
    if (fscanf(f, "%lld", &v) != 1) v = -2;
    fclose(f);
    return v;
}

static void test_saves_go_to_iteration_folders_named_by_the_latest_file(void **state) {
    (void)state;
    char dir[256], save[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(save, sizeof save, "%s/ck", dir);
    gt_config c;
    tiny_config(&c, save, 4);
    set(&c, "checkpoint.save_interval=2");
    gt_train_result res;
    run_ok(&c, &res);
    assert_int_equal(res.saved, 2);
    assert_true(exists(save, "iter_0000002/checkpoint.bin"));
    assert_true(exists(save, "iter_0000004/checkpoint.bin"));
    assert_false(exists(save, "checkpoint.bin"));
    assert_int_equal(latest(save), 4);
    /* the resolved configuration beside the weights */
    char p[700], text[65536];
    snprintf(p, sizeof p, "%s/iter_0000004/%s", save, GT_CKPT_CONFIG_FILE);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    size_t got = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[got] = '\0';
    assert_non_null(strstr(text, "train.train_iters"));
    assert_non_null(strstr(text, "= 4"));
    assert_non_null(strstr(text, save));
}

static void test_most_recent_k_keeps_only_the_newest_iterations(void **state) {
    (void)state;
    char dir[256], save[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(save, sizeof save, "%s/ck", dir);
    gt_config c;
    tiny_config(&c, save, 5);
    set(&c, "checkpoint.save_interval=1");
    set(&c, "checkpoint.most_recent_k=2");
    gt_train_result res;
    run_ok(&c, &res);
    assert_int_equal(res.saved, 5);
    assert_false(exists(save, "iter_0000001"));
    assert_false(exists(save, "iter_0000003"));
    assert_true(exists(save, "iter_0000004/checkpoint.bin"));
    assert_true(exists(save, "iter_0000005/checkpoint.bin"));
    assert_int_equal(latest(save), 5);
}

static void test_most_recent_k_zero_is_refused(void **state) {
    (void)state;
    char dir[256], save[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(save, sizeof save, "%s/ck", dir);
    gt_config c;
    tiny_config(&c, save, 2);
    set(&c, "checkpoint.most_recent_k=0");
    gt_train_result res;
    gt_error err;
    assert_int_equal(run(&c, &res, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "checkpoint.most_recent_k=0"));
    assert_int_equal(res.last_step, 0);
}

static void test_load_equal_to_save_starts_fresh_then_resumes_the_latest(void **state) {
    (void)state;
    char dir[256], save[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(save, sizeof save, "%s/ck", dir);
    gt_config c;
    tiny_config(&c, save, 3);
    setf(&c, "checkpoint.load", save); /* empty folder: a fresh start */
    gt_train_result res;
    run_ok(&c, &res);
    assert_int_equal(res.first_step, 1);
    assert_int_equal(res.last_step, 3);
    set(&c, "train.train_iters=5"); /* the restarted job, same command */
    run_ok(&c, &res);
    assert_int_equal(res.first_step, 4);
    assert_int_equal(res.last_step, 5);
    assert_int_equal(latest(save), 5);
}

static void test_fresh_run_into_a_folder_with_checkpoints_is_refused(void **state) {
    (void)state;
    char dir[256], save[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(save, sizeof save, "%s/ck", dir);
    gt_config c;
    tiny_config(&c, save, 2);
    gt_train_result res;
    run_ok(&c, &res);
    gt_error err;
    assert_int_equal(run(&c, &res, &err), GT_ERR_INVALID);
    assert_int_equal(res.last_step, 0);
    assert_non_null(strstr(err.msg, "already holds checkpoints"));
    assert_non_null(strstr(err.msg, "checkpoint.overwrite=true"));
    assert_non_null(strstr(err.msg, "checkpoint.load="));
    assert_true(exists(save, "iter_0000002/checkpoint.bin"));
}

static void test_overwrite_true_replaces_the_earlier_checkpoints(void **state) {
    (void)state;
    char dir[256], save[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(save, sizeof save, "%s/ck", dir);
    gt_config c;
    tiny_config(&c, save, 3);
    gt_train_result res;
    run_ok(&c, &res);
    set(&c, "train.train_iters=2");
    set(&c, "checkpoint.overwrite=true");
    run_ok(&c, &res);
    assert_int_equal(res.first_step, 1);
    assert_false(exists(save, "iter_0000003"));
    assert_true(exists(save, "iter_0000002/checkpoint.bin"));
    assert_int_equal(latest(save), 2);
}

static void test_second_writer_is_refused_naming_the_holder_pid(void **state) {
    (void)state;
    char dir[256], save[300], pid[32];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(save, sizeof save, "%s/ck", dir);
    gt_config c;
    tiny_config(&c, save, 2);
    gt_ckpt_dir first, second;
    char resume[GT_PATH_MAX];
    gt_error err = {0};
    FILE *sink = tmpfile();
    assert_int_equal(gt_ckpt_dir_open(&first, &c, resume, sizeof resume, sink, &err), GT_OK);
    /* flock locks open files, so a second open in this process conflicts like another one */
    assert_int_equal(gt_ckpt_dir_open(&second, &c, resume, sizeof resume, sink, &err),
                     GT_ERR_INVALID);
    snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
    if (!strstr(err.msg, pid) || !strstr(err.msg, "in use by another graphtrain run"))
        fail_msg("expected the holder's %s, got: %s", pid, err.msg);
    gt_ckpt_dir_close(&first);
    assert_int_equal(gt_ckpt_dir_open(&second, &c, resume, sizeof resume, sink, &err), GT_OK);
    gt_ckpt_dir_close(&second);
    fclose(sink);
}

static void test_stale_temporary_files_are_removed_at_start(void **state) {
    (void)state;
    char dir[256], save[300], p[700];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(save, sizeof save, "%s/ck", dir);
    gt_config c;
    tiny_config(&c, save, 2);
    gt_train_result res;
    run_ok(&c, &res);
    snprintf(p, sizeof p, "%s/iter_0000002/checkpoint.bin.tmp.4242", save);
    gt_test_write_text(p, "half a checkpoint");
    snprintf(p, sizeof p, "%s/%s.tmp.77", save, GT_CKPT_LATEST_FILE);
    gt_test_write_text(p, "1");
    snprintf(p, sizeof p, "%s/notes.tmp.txt", save); /* not one of ours */
    gt_test_write_text(p, "keep");
    set(&c, "train.train_iters=3");
    setf(&c, "checkpoint.load", save);
    run_ok(&c, &res);
    assert_false(exists(save, "iter_0000002/checkpoint.bin.tmp.4242"));
    assert_false(exists(save, GT_CKPT_LATEST_FILE ".tmp.77"));
    assert_true(exists(save, "notes.tmp.txt"));
    assert_true(exists(save, "iter_0000002/checkpoint.bin"));
}

static void test_unwritable_save_path_is_refused_before_step_1(void **state) {
    (void)state;
    char dir[256], file[300], save[400];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(file, sizeof file, "%s/plain_file", dir);
    gt_test_write_text(file, "x");
    snprintf(save, sizeof save, "%s/ck", file); /* below a regular file: cannot exist */
    gt_config c;
    tiny_config(&c, save, 2);
    gt_train_result res;
    gt_error err;
    assert_int_not_equal(run(&c, &res, &err), GT_OK);
    assert_int_equal(res.last_step, 0);
    assert_non_null(strstr(err.msg, "checkpoint.save="));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_saves_go_to_iteration_folders_named_by_the_latest_file),
        cmocka_unit_test(test_most_recent_k_keeps_only_the_newest_iterations),
        cmocka_unit_test(test_most_recent_k_zero_is_refused),
        cmocka_unit_test(test_load_equal_to_save_starts_fresh_then_resumes_the_latest),
        cmocka_unit_test(test_fresh_run_into_a_folder_with_checkpoints_is_refused),
        cmocka_unit_test(test_overwrite_true_replaces_the_earlier_checkpoints),
        cmocka_unit_test(test_second_writer_is_refused_naming_the_holder_pid),
        cmocka_unit_test(test_stale_temporary_files_are_removed_at_start),
        cmocka_unit_test(test_unwritable_save_path_is_refused_before_step_1),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
