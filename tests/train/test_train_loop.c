/* The training loop on a tiny CPU model: the loss falls on learnable data, NaN injection stops
 * at the named step without touching the weights, batch-shape errors name the fix, eager and
 * full-iteration graph steps agree bitwise, metrics go to JSONL, and Ctrl-C through the binary
 * exits 130 (SIGTERM 143, named) leaving a loadable checkpoint. */
#include "testlib.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config/keys.h"
#include "shard_fixture.h"
#include "train/checkpoint.h"
#include "train/train_loop.h"
#include "train/trainer.h"

#define PERIOD 7 /* the repeating pattern of the learnable shard */

static void set(gt_config *c, const char *kv) {
    gt_error err = {0};
    if (gt_config_override(c, kv, &err) != GT_OK) fail_msg("override %s: %s", kv, err.msg);
}

static void tiny_config(gt_config *c) {
    gt_config_defaults(c);
    static const char *kv[] = {"runtime.device=cpu",         "model.num_layers=1",
                               "model.hidden_size=32",       "model.num_attention_heads=2",
                               "model.num_query_groups=2",   "model.ffn_hidden_size=64",
                               "model.vocab_size=64",        "model.seq_length=16",
                               "train.micro_batch_size=2",   "train.global_batch_size=2",
                               "model.cuda_graph_impl=none", "logger.log_interval=1000",
                               "train.train_iters=10",       NULL};
    for (int i = 0; kv[i]; i++)
        set(c, kv[i]);
    gt_config_finalize(c);
}

/* A shard of a repeating sequence 0..PERIOD-1 (next token fully predictable) plus a val shard. */
static void write_pattern_shards(const char *prefix) {
    gt_test_write_pattern_set(prefix, 64, 4096, PERIOD, 512);
}

static void test_tiny_model_loss_falls_on_repetitive_shard(void **state) {
    (void)state;
    char dir[256], prefix[300], kv[400];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(prefix, sizeof prefix, "%s/pattern", dir);
    write_pattern_shards(prefix);
    gt_config c;
    tiny_config(&c);
    set(&c, "dataset.source=shards");
    snprintf(kv, sizeof kv, "dataset.data_path=%s", prefix);
    set(&c, kv);
    set(&c, "train.train_iters=50");
    set(&c, "optimizer.lr=0.01");
    set(&c, "optimizer.min_lr=0.001");
    set(&c, "train.eval_interval=50");
    set(&c, "train.eval_iters=2");
    FILE *sink = tmpfile();
    gt_train_run_opts o = {.out = sink, .quiet = 1};
    gt_train_result res;
    gt_error err = {0};
    int rc = gt_train_run(&c, &o, &res, &err);
    fclose(sink);
    assert_int_equal(rc, GT_OK);
    assert_int_equal(res.first_step, 1);
    assert_int_equal(res.last_step, 50);
    /* uniform guessing over 64 tokens gives ln 64 = 4.16; the pattern is learnable */
    assert_true(res.first_loss > 3.5f);
    assert_true(res.last_loss < 0.5f * res.first_loss);
    assert_true(isfinite(res.last_eval_loss));
    assert_true(res.last_eval_loss < 0.5f * res.first_loss);
}

static void test_nan_injection_stops_at_step_k_and_keeps_weights(void **state) {
    (void)state;
    gt_config c;
    tiny_config(&c);
    set(&c, "debug.inject_nan_at_step=3");
    gt_trainer *t = NULL;
    gt_error err = {0};
    assert_int_equal(gt_trainer_create(&t, &c, &err), GT_OK);
    gt_step_stats s;
    assert_int_equal(gt_trainer_step(t, &s, &err), GT_OK);
    assert_int_equal(gt_trainer_step(t, &s, &err), GT_OK);
    size_t n = gt_model_get_info(gt_trainer_model(t))->n_params;
    float *before = malloc(n * sizeof *before), *after = malloc(n * sizeof *after);
    assert_int_equal(gt_trainer_read_master(t, before, &err), GT_OK);
    assert_int_equal(gt_trainer_step(t, &s, &err), GT_ERR_NUMERIC);
    assert_int_equal(s.step, 3);
    assert_true(s.skipped);
    assert_non_null(strstr(err.msg, "step 3"));
    assert_non_null(strstr(err.msg, "loss"));
    assert_non_null(strstr(err.msg, "skipped"));
    assert_int_equal(gt_trainer_read_master(t, after, &err), GT_OK);
    assert_memory_equal(before, after, n * sizeof *before);
    free(before);
    free(after);
    gt_trainer_destroy(t);
}

static void test_nan_in_gradient_is_named_when_loss_check_is_off(void **state) {
    (void)state;
    gt_config c;
    tiny_config(&c);
    set(&c, "debug.inject_nan_at_step=2");
    set(&c, "rerun_state_machine.check_for_nan_in_loss=false");
    gt_trainer *t = NULL;
    gt_error err = {0};
    assert_int_equal(gt_trainer_create(&t, &c, &err), GT_OK);
    gt_step_stats s;
    assert_int_equal(gt_trainer_step(t, &s, &err), GT_OK);
    assert_int_equal(gt_trainer_step(t, &s, &err), GT_ERR_NUMERIC);
    assert_int_equal(s.nan_flags, GT_NAN_GRAD);
    assert_non_null(strstr(err.msg, "step 2"));
    assert_non_null(strstr(err.msg, "ddp.check_for_nan_in_grad"));
    assert_null(strstr(err.msg, "check_for_nan_in_loss"));
    gt_trainer_destroy(t);
}

static void test_evaluation_reads_the_same_held_out_batches_each_time(void **state) {
    (void)state;
    gt_config c;
    tiny_config(&c);
    set(&c, "train.eval_interval=5");
    set(&c, "train.eval_iters=3");
    gt_trainer *t = NULL;
    gt_error err = {0};
    assert_int_equal(gt_trainer_create(&t, &c, &err), GT_OK);
    float e1, e2, e3;
    assert_int_equal(gt_trainer_eval(t, &e1, &err), GT_OK);
    assert_int_equal(gt_trainer_eval(t, &e2, &err), GT_OK);
    gt_step_stats s;
    for (int i = 0; i < 3; i++)
        assert_int_equal(gt_trainer_step(t, &s, &err), GT_OK);
    assert_int_equal(gt_trainer_eval(t, &e3, &err), GT_OK);
    assert_memory_equal(&e1, &e2, sizeof e1);
    assert_true(e3 != e1);               /* the weights changed */
    assert_true(e1 > 3.5f && e1 < 5.0f); /* about ln 64 before training */
    gt_trainer_destroy(t);
}

static void test_global_batch_not_multiple_of_micro_is_refused_with_fix(void **state) {
    (void)state;
    gt_config c;
    tiny_config(&c);
    set(&c, "train.micro_batch_size=2");
    set(&c, "train.global_batch_size=5");
    gt_trainer *t = NULL;
    gt_error err = {0};
    assert_int_equal(gt_trainer_create(&t, &c, &err), GT_ERR_INVALID);
    assert_null(t);
    assert_non_null(strstr(err.msg, "train.global_batch_size=4"));
    assert_non_null(strstr(err.msg, "train.micro_batch_size=2"));
}

static void run_losses(const gt_config *c, int steps, float *loss, gt_step_mode *modes) {
    gt_trainer *t = NULL;
    gt_error err = {0};
    if (gt_trainer_create(&t, c, &err) != GT_OK) fail_msg("create: %s", err.msg);
    for (int i = 0; i < steps; i++) {
        gt_step_stats s;
        if (gt_trainer_step(t, &s, &err) != GT_OK) fail_msg("step %d: %s", i + 1, err.msg);
        loss[i] = s.loss;
        if (modes) modes[i] = s.mode;
    }
    gt_trainer_destroy(t);
}

static void test_full_iteration_graph_losses_equal_eager_bitwise(void **state) {
    (void)state;
    enum { STEPS = 6 };
    gt_config eager, graph;
    tiny_config(&eager);
    set(&eager, "train.global_batch_size=4"); /* two micro-batches per step */
    set(&eager, "model.hidden_dropout=0.1");
    graph = eager;
    set(&graph, "model.cuda_graph_impl=local");
    set(&graph, "model.cuda_graph_scope=full_iteration");
    set(&graph, "model.cuda_graph_warmup_steps=2");
    gt_config_finalize(&graph);
    float le[STEPS], lg[STEPS];
    gt_step_mode mg[STEPS];
    run_losses(&eager, STEPS, le, NULL);
    run_losses(&graph, STEPS, lg, mg);
    assert_int_equal(mg[0], GT_STEP_EAGER);
    assert_int_equal(mg[2], GT_STEP_CAPTURED);
    assert_int_equal(mg[STEPS - 1], GT_STEP_REPLAYED);
    assert_memory_equal(le, lg, sizeof le);
    assert_true(le[0] != le[STEPS - 1]); /* the steps really differ */
}

static void test_metrics_file_has_one_json_line_per_logged_step(void **state) {
    (void)state;
    char dir[256], kv[400], path[300];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    gt_config c;
    tiny_config(&c);
    set(&c, "train.train_iters=4");
    set(&c, "logger.log_interval=2");
    snprintf(kv, sizeof kv, "logger.metrics_file=%s", path);
    set(&c, kv);
    FILE *sink = tmpfile();
    gt_train_run_opts o = {.out = sink, .quiet = 1};
    gt_error err = {0};
    assert_int_equal(gt_train_run(&c, &o, NULL, &err), GT_OK);
    fclose(sink);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[1024];
    int lines = 0, steps[8] = {0};
    /* the run record (configuration and versions, tests/train/test_metrics.c) comes first */
    enum { RUN_RECORD_MAX = 1 << 16 };
    char *run_record = malloc(RUN_RECORD_MAX);
    assert_non_null(run_record);
    assert_non_null(fgets(run_record, RUN_RECORD_MAX, f));
    assert_non_null(strstr(run_record, "\"record\": \"run\""));
    free(run_record);
    while (fgets(line, sizeof line, f) && lines < 8) {
        assert_int_equal(line[0], '{');
        assert_non_null(strstr(line, "\"loss\""));
        assert_non_null(strstr(line, "\"mode\": \"eager\""));
        assert_int_equal(sscanf(line, "{\"step\": %d", &steps[lines]), 1);
        lines++;
    }
    fclose(f);
    assert_int_equal(lines, 3); /* step 1 (always), 2, 4 */
    assert_int_equal(steps[0], 1);
    assert_int_equal(steps[1], 2);
    assert_int_equal(steps[2], 4);
}

/* Runs the binary, waits for its first progress line, sends sig; the run must save, name the
 * signal and exit with status (128 + sig). */
static void signal_saves_and_exits(int sig, int status_want, const char *name) {
    const char *bin = getenv("GT_BINARY");
    if (!bin) skip();
    char dir[256], ckpt[300], kv_save[400];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    snprintf(kv_save, sizeof kv_save, "checkpoint.save=%s", ckpt);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(pipefd[1], 1);
        close(pipefd[0]);
        close(pipefd[1]);
        execl(bin, bin, "train", "runtime.device=cpu", "model.num_layers=1", "model.hidden_size=32",
              "model.num_attention_heads=2", "model.ffn_hidden_size=64", "model.vocab_size=64",
              "model.seq_length=16", "train.micro_batch_size=2", "train.global_batch_size=2",
              "train.train_iters=1000000", "logger.log_interval=1", kv_save, (char *)NULL);
        _exit(127);
    }
    close(pipefd[1]);
    FILE *out = fdopen(pipefd[0], "r");
    char line[1024];
    int saw_step = 0;
    while (fgets(line, sizeof line, out))
        if (!strncmp(line, "step ", 5)) {
            saw_step = 1;
            break;
        }
    assert_true(saw_step);
    kill(pid, sig);
    int saw_saved = 0, saw_interrupt = 0;
    while (fgets(line, sizeof line, out)) {
        if (strstr(line, "saved checkpoint")) saw_saved = 1;
        if (strstr(line, "interrupted") && strstr(line, name)) saw_interrupt = 1;
    }
    fclose(out);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), status_want);
    assert_true(saw_saved);
    assert_true(saw_interrupt);
    gt_ckpt_meta meta;
    float *master, *m, *v;
    gt_error err = {0};
    assert_int_equal(gt_ckpt_read(ckpt, &meta, &master, &m, &v, &err), GT_OK);
    assert_true(meta.state.step >= 1);
    free(master);
    free(m);
    free(v);
}

static void test_sigint_exits_130_and_leaves_loadable_checkpoint(void **state) {
    (void)state;
    signal_saves_and_exits(SIGINT, 130, "SIGINT");
}

/* what Slurm sends before preemption: saved like Ctrl-C, named, 128 + 15 */
static void test_sigterm_saves_and_exits_143_naming_sigterm(void **state) {
    (void)state;
    signal_saves_and_exits(SIGTERM, 143, "SIGTERM");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_model_loss_falls_on_repetitive_shard),
        cmocka_unit_test(test_nan_injection_stops_at_step_k_and_keeps_weights),
        cmocka_unit_test(test_nan_in_gradient_is_named_when_loss_check_is_off),
        cmocka_unit_test(test_evaluation_reads_the_same_held_out_batches_each_time),
        cmocka_unit_test(test_global_batch_not_multiple_of_micro_is_refused_with_fix),
        cmocka_unit_test(test_full_iteration_graph_losses_equal_eager_bitwise),
        cmocka_unit_test(test_metrics_file_has_one_json_line_per_logged_step),
        cmocka_unit_test(test_sigint_exits_130_and_leaves_loadable_checkpoint),
        cmocka_unit_test(test_sigterm_saves_and_exits_143_naming_sigterm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
