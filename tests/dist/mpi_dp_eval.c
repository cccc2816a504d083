/* Evaluation under data parallelism, run by ctest under mpiexec at 2 and 4 ranks: each rank
 * evaluates its slice of the held-out batches and the losses are summed over ranks in batch
 * order, so the N-rank evaluation loss is bitwise that of one process with the same weights
 * (rank 0 alone through a world of one) and agrees with the evaluation of a process without
 * a communicator, which accumulates it inside the forward the same way. */
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/keys.h"
#include "dist/comm.h"
#include "train/trainer.h"

static gt_comm *C;   /* the job's world */
static gt_comm *ONE; /* rank 0's world of one */
static int RANK;

static const char *real_env(void *ctx, const char *name) {
    (void)ctx;
    return getenv(name);
}

static void eval_config(gt_config *c) {
    gt_config_defaults(c);
    static const char *kv[] = {
        "runtime.device=cpu",          "model.num_layers=1",       "model.hidden_size=32",
        "model.num_attention_heads=2", "model.num_query_groups=2", "model.ffn_hidden_size=64",
        "model.vocab_size=64",         "model.seq_length=16",      "train.micro_batch_size=2",
        "train.global_batch_size=8",   "train.eval_interval=1",    "train.eval_iters=6",
        "logger.log_interval=1000",    "train.train_iters=4",      NULL};
    for (int i = 0; kv[i]; i++) {
        gt_error err = {0};
        if (gt_config_override(c, kv[i], &err)) fail_msg("override %s: %s", kv[i], err.msg);
    }
    gt_config_finalize(c);
}

/* the evaluation loss after `steps` training steps, over comm (NULL: no communicator) */
static float eval_after(const gt_config *c, gt_comm *comm, int steps) {
    gt_trainer *t = NULL;
    gt_error err = {0};
    if (gt_trainer_create_dp(&t, c, comm, &err)) fail_msg("rank %d: create: %s", RANK, err.msg);
    for (int i = 0; i < steps; i++) {
        gt_step_stats s;
        if (gt_trainer_step(t, &s, &err)) fail_msg("rank %d: step: %s", RANK, err.msg);
    }
    float loss = 0;
    if (gt_trainer_eval(t, &loss, &err)) fail_msg("rank %d: eval: %s", RANK, err.msg);
    gt_trainer_destroy(t);
    return loss;
}

static int group_setup(void **state) {
    (void)state;
    gt_error err = {0};
    gt_world w, one = gt_world_single();
    if (gt_world_from_env(real_env, NULL, &w, &err) || w.size < 2 ||
        gt_comm_create(&C, &w, NULL, &err) || gt_comm_create(&ONE, &one, NULL, &err)) {
        fprintf(stderr, "mpi_dp_eval: run under mpiexec with 2 or more ranks (%s)\n", err.msg);
        return -1;
    }
    RANK = gt_comm_rank(C);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    gt_comm_destroy(ONE);
    gt_comm_destroy(C);
    return 0;
}

static void test_eval_at_n_ranks_equals_one_process_bitwise(void **state) {
    (void)state;
    gt_config c;
    eval_config(&c);
    float at_n = eval_after(&c, C, 2);
    float lead = at_n;
    gt_error err = {0};
    if (gt_comm_broadcast(C, &lead, sizeof lead, 0, &err)) fail_msg("%s", err.msg);
    assert_memory_equal(&lead, &at_n, sizeof lead); /* every rank has the same loss */
    if (RANK == 0) {
        float one = eval_after(&c, ONE, 2);
        assert_memory_equal(&at_n, &one, sizeof one);
        float before = eval_after(&c, ONE, 0);
        assert_true(before != one); /* the training steps changed it: a real evaluation */
    }
    assert_int_equal(gt_comm_barrier(C, &err), GT_OK);
}

static void test_eval_before_training_equals_a_process_without_a_communicator(void **state) {
    (void)state;
    gt_config c;
    eval_config(&c);
    float at_n = eval_after(&c, C, 0);
    if (RANK == 0) {
        float plain = eval_after(&c, NULL, 0);
        assert_memory_equal(&at_n, &plain, sizeof plain);
    }
    gt_error err = {0};
    assert_int_equal(gt_comm_barrier(C, &err), GT_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eval_at_n_ranks_equals_one_process_bitwise),
        cmocka_unit_test(test_eval_before_training_equals_a_process_without_a_communicator),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
