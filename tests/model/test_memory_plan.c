/* The memory plan: what a configuration needs on the device, computed without allocating, and
 * the refusal of a run that cannot fit, naming the estimate and the knobs to turn: on the
 * device, on the host for the CPU backend (exit 2 before allocating), and in validate against
 * the GPU -g names. */
#include "testlib.h"

#include <stdio.h>
#include <string.h>

#include "config/keys.h"
#include "model/memory_plan.h"
#include "model/model.h"

static void tiny_config(gt_config *c) {
    gt_config_defaults(c);
    c->model.num_layers = 2;
    c->model.hidden_size = 64;
    c->model.num_attention_heads = 4;
    c->model.num_query_groups = 2;
    c->model.ffn_hidden_size = 128;
    c->model.vocab_size = 256;
    c->model.seq_length = 32;
    c->train.micro_batch_size = 2;
    c->train.global_batch_size = 2;
}

/* the plan of tiny_config (c keeps that config) */
static void tiny_plan(gt_config *c, gt_memory_plan *p) {
    gt_error err = {0};
    tiny_config(c);
    assert_int_equal(gt_memory_plan_compute(c, 2, p, &err), GT_OK);
}

static void test_plan_adds_up_its_parts(void **state) {
    (void)state;
    gt_config c;
    gt_memory_plan p;
    gt_error err = {0};
    tiny_plan(&c, &p);
    assert_int_equal(p.total,
                     p.params + p.grads + p.activations + p.scratch + p.optimizer + p.workspace);
    gt_model_info mi;
    assert_int_equal(gt_model_plan(&c, 2, &mi, &err), GT_OK);
    /* bf16 parameters (act_bytes 2): the master is their int16 low halves, 2 bytes */
    assert_int_equal(p.optimizer, mi.n_params * (2 + 4 + 4));
    assert_int_equal(p.params, mi.param_bytes);
    /* fp32 parameters (the cpu backend): an fp32 master */
    gt_memory_plan p4;
    assert_int_equal(gt_memory_plan_compute(&c, 4, &p4, &err), GT_OK);
    gt_model_info mi4;
    assert_int_equal(gt_model_plan(&c, 4, &mi4, &err), GT_OK);
    assert_int_equal(p4.optimizer, 3 * mi4.n_params * sizeof(float));
}

/* bf16 Adam moments (the precision-aware optimizer) hold 2 bytes a parameter each in the plan
 */
static void test_bf16_moments_shrink_the_optimizer_state(void **state) {
    (void)state;
    gt_config c;
    gt_memory_plan p;
    gt_error err = {0};
    tiny_plan(&c, &p);
    c.optimizer.use_precision_aware_optimizer = true;
    c.optimizer.exp_avg_sq_dtype = GT_STATE_BF16;
    gt_memory_plan one;
    assert_int_equal(gt_memory_plan_compute(&c, 2, &one, &err), GT_OK);
    c.optimizer.exp_avg_dtype = GT_STATE_BF16;
    gt_memory_plan both;
    assert_int_equal(gt_memory_plan_compute(&c, 2, &both, &err), GT_OK);
    gt_model_info mi;
    assert_int_equal(gt_model_plan(&c, 2, &mi, &err), GT_OK);
    assert_int_equal(one.optimizer, mi.n_params * (2 + 4 + 2));
    assert_int_equal(both.optimizer, mi.n_params * (2 + 2 + 2));
    assert_int_equal(p.total - both.total, mi.n_params * 4);
}

static void test_activations_grow_with_the_micro_batch(void **state) {
    (void)state;
    gt_config c;
    gt_memory_plan small, big;
    gt_error err = {0};
    tiny_plan(&c, &small);
    c.train.micro_batch_size = 8;
    c.train.global_batch_size = 8;
    assert_int_equal(gt_memory_plan_compute(&c, 2, &big, &err), GT_OK);
    assert_true(big.activations > 3 * small.activations);
    assert_int_equal(big.params, small.params);
}

static void test_run_that_cannot_fit_is_refused_with_the_knobs(void **state) {
    (void)state;
    gt_config c;
    gt_memory_plan p;
    gt_error err = {0};
    tiny_plan(&c, &p);
    /* a configuration this device cannot hold: bad input (exit 2), not a failed allocation */
    assert_int_equal(gt_memory_plan_check_fit(&p, p.total - 1, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "nothing was allocated"));
    assert_non_null(strstr(err.msg, "train.micro_batch_size"));
    assert_non_null(strstr(err.msg, "model.seq_length"));
}

static void test_run_that_fits_or_unknown_free_memory_passes(void **state) {
    (void)state;
    gt_config c;
    gt_memory_plan p;
    gt_error err = {0};
    tiny_plan(&c, &p);
    assert_int_equal(gt_memory_plan_check_fit(&p, p.total, &err), GT_OK);
    assert_int_equal(gt_memory_plan_check_fit(&p, 0, &err), GT_OK); /* cpu: not known */
}

static void test_validate_prints_the_memory_plan(void **state) {
    (void)state;
    char out[16384];
    int rc = gt_test_run("validate --recipe tiny", out, sizeof out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "memory plan on the cuda backend"));
    assert_non_null(strstr(out, "total"));
}

static void test_host_fit_refuses_a_plan_beyond_the_available_memory(void **state) {
    (void)state;
    gt_config c;
    gt_memory_plan p;
    gt_error err = {0};
    tiny_plan(&c, &p);
    assert_int_equal(gt_memory_plan_check_host_fit(&p, p.total - 1, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "host memory"));
    assert_non_null(strstr(err.msg, "MemAvailable"));
    assert_non_null(strstr(err.msg, "nothing was allocated"));
    assert_non_null(strstr(err.msg, "train.micro_batch_size"));
    assert_int_equal(gt_memory_plan_check_host_fit(&p, p.total, &err), GT_OK);
}

static void test_meminfo_gives_mem_available_in_bytes(void **state) {
    (void)state;
    const char *text = "MemTotal:       131072000 kB\n"
                       "MemFree:         1000000 kB\n"
                       "MemAvailable:   24041816 kB\n"
                       "Buffers:          123456 kB\n";
    assert_true(gt_memory_parse_meminfo(text) == (size_t)24041816 * 1024);
    assert_true(gt_memory_parse_meminfo("MemTotal: 10 kB\n") == 0);
    assert_true(gt_memory_parse_meminfo("MemAvailable: lots\n") == 0);
    assert_true(gt_memory_host_available() > 0); /* this machine's */
}

/* ~36 TB of parameters, gradients and Adam state: far beyond any host */
#define HUGE_CPU_RUN                                                                               \
    "train runtime.device=cpu model.num_layers=64 model.hidden_size=65536 "                        \
    "model.num_attention_heads=64 model.ffn_hidden_size=65536 train.train_iters=1"

static void test_cpu_run_beyond_host_memory_exits_2_before_allocating(void **state) {
    (void)state;
    char out[16384];
    int rc = gt_test_run(HUGE_CPU_RUN, out, sizeof out);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "of host memory"));
    assert_non_null(strstr(out, "nothing was allocated"));
    assert_non_null(strstr(out, "model.hidden_size"));
}

static void test_validate_says_whether_the_plan_fits_the_gpu_named(void **state) {
    (void)state;
    char out[16384];
    assert_int_equal(gt_test_run("validate --recipe tiny -g h100", out, sizeof out), 0);
    assert_non_null(strstr(out, "fit: fits on one h100 (80 GiB)"));
    assert_non_null(strstr(out, "memory per GPU:"));
    /* about 105 GiB: more than an h100 holds, less than an h200 */
    const char *big = "validate --recipe tiny model.num_layers=32 model.hidden_size=4096 "
                      "model.num_attention_heads=32 model.num_query_groups=32 "
                      "model.ffn_hidden_size=11008 model.vocab_size=32000 model.seq_length=256";
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s -g h100", big);
    assert_int_equal(gt_test_run(cmd, out, sizeof out), 2);
    assert_non_null(strstr(out, "fit: does not fit on one h100 (80 GiB)"));
    assert_non_null(strstr(out, "plan_fits_gpu_memory"));
    snprintf(cmd, sizeof cmd, "%s -g h200", big);
    assert_int_equal(gt_test_run(cmd, out, sizeof out), 0);
    assert_non_null(strstr(out, "fit: fits on one h200 (141 GiB)"));
}

/* the distributed optimizer: a rank holds rank 0's shards, ceil(bucket / dp) of every bucket
 * (cut from the last parameter back), the rest of the plan unchanged */
static void test_the_distributed_optimizer_plans_one_ranks_shards(void **state) {
    (void)state;
    gt_config c;
    gt_memory_plan whole, sharded;
    gt_error err = {0};
    tiny_plan(&c, &whole);
    c.ddp.bucket_size = 1000;
    c.runtime.num_gpus = 3;
    c.optimizer.use_distributed_optimizer = true;
    assert_int_equal(gt_memory_plan_compute(&c, 2, &sharded, &err), GT_OK);
    gt_model_info mi;
    assert_int_equal(gt_model_plan(&c, 2, &mi, &err), GT_OK);
    size_t n = mi.n_params, mine = 0;
    for (size_t end = n; end > 0; end -= end < 1000 ? end : 1000)
        mine += ((end < 1000 ? end : 1000) + 2) / 3;
    assert_true(n > 3000 && n % 1000 != 0);
    assert_int_equal(sharded.opt_shards, 3);
    assert_int_equal(sharded.optimizer, mine * (2 + 4 + 4));
    assert_int_equal(sharded.optimizer_whole, whole.optimizer);
    assert_int_equal(whole.total - sharded.total, whole.optimizer - sharded.optimizer);
    /* one GPU, or the replicated optimizer: every parameter's state */
    c.runtime.num_gpus = 1;
    assert_int_equal(gt_memory_plan_compute(&c, 2, &sharded, &err), GT_OK);
    assert_int_equal(sharded.optimizer, whole.optimizer);
    c.runtime.num_gpus = 3;
    c.optimizer.use_distributed_optimizer = false;
    assert_int_equal(gt_memory_plan_compute(&c, 2, &sharded, &err), GT_OK);
    assert_int_equal(sharded.optimizer, whole.optimizer);
    /* ddp.data_parallel_size names the world as well; the trainer passes its own */
    c.optimizer.use_distributed_optimizer = true;
    c.runtime.num_gpus = 1;
    assert_int_equal(gt_memory_plan_compute_dp(&c, 2, 3, &sharded, &err), GT_OK);
    assert_int_equal(sharded.optimizer, mine * (2 + 4 + 4));
}

/* about 105 GiB on one GPU, of which 62 are the optimizer state: at 8 ranks it fits an h100
 * only when the distributed optimizer shards that state */
static void test_validate_fits_8_gpus_only_with_the_distributed_optimizer(void **state) {
    (void)state;
    char out[32768], cmd[768];
    const char *big = "validate --recipe tiny -g h100 runtime.num_gpus=8 "
                      "train.micro_batch_size=1 train.global_batch_size=8 model.num_layers=32 "
                      "model.hidden_size=4096 model.num_attention_heads=32 "
                      "model.num_query_groups=32 model.ffn_hidden_size=11008 "
                      "model.vocab_size=32000 model.seq_length=256";
    snprintf(cmd, sizeof cmd, "%s optimizer.use_distributed_optimizer=false", big);
    assert_int_equal(gt_test_run(cmd, out, sizeof out), 2);
    assert_non_null(strstr(out, "fit: does not fit on one h100 (80 GiB)"));
    assert_non_null(strstr(out, "optimizer.use_distributed_optimizer=true"));
    snprintf(cmd, sizeof cmd, "%s optimizer.use_distributed_optimizer=true", big);
    assert_int_equal(gt_test_run(cmd, out, sizeof out), 0);
    assert_non_null(strstr(out, "fit: fits on one h100 (80 GiB)"));
    assert_non_null(strstr(out, "split over 8 data-parallel ranks"));
    assert_non_null(strstr(out, "its 1/8 of the optimizer state"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_adds_up_its_parts),
        cmocka_unit_test(test_bf16_moments_shrink_the_optimizer_state),
        cmocka_unit_test(test_activations_grow_with_the_micro_batch),
        cmocka_unit_test(test_run_that_cannot_fit_is_refused_with_the_knobs),
        cmocka_unit_test(test_run_that_fits_or_unknown_free_memory_passes),
        cmocka_unit_test(test_validate_prints_the_memory_plan),
        cmocka_unit_test(test_host_fit_refuses_a_plan_beyond_the_available_memory),
        cmocka_unit_test(test_meminfo_gives_mem_available_in_bytes),
        cmocka_unit_test(test_cpu_run_beyond_host_memory_exits_2_before_allocating),
        cmocka_unit_test(test_validate_says_whether_the_plan_fits_the_gpu_named),
        cmocka_unit_test(test_the_distributed_optimizer_plans_one_ranks_shards),
        cmocka_unit_test(test_validate_fits_8_gpus_only_with_the_distributed_optimizer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
