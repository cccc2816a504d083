/* Evaluation under data parallelism, run by ctest under mpiexec at 2 and 4 ranks: each rank
 * evaluates its slice of the held-out batches and the losses are summed over ranks in batch
 * order, so the N-rank evaluation loss is bitwise that of one process with the same weights
 * (rank 0 alone through a world of one) and agrees with the evaluation of a process without
 * a communicator, which accumulates it inside the forward the same way. */
#define MPF_NAME "mpi_dp_eval"
#include "mpi_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/keys.h"
#include "dist/comm.h"
#include "train/trainer.h"

static void eval_config(gt_config *c) {
    mpf_small_model(c, 1);
    mpf_set(c, "train.eval_interval=1");
    mpf_set(c, "train.eval_iters=6");
    mpf_set(c, "train.train_iters=4");
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
    return cmocka_run_group_tests(tests, mpf_group_setup, mpf_group_teardown);
}
