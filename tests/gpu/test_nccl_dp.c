/* Data parallelism through NCCL on one GPU (run on the GPU machine): a world of one whose
 * collectives are NCCL's (the all-to-all, the rank-order sum kernel, the shard broadcasts, the
 * losses), in eager steps, per-unit graphs (collectives between the unit graphs) and the
 * full-iteration graph (collectives captured in it). With one micro-batch a step the losses
 * and master weights are bitwise those of the run without NCCL; with several, the gradients
 * are summed once per micro-batch instead of inside the backward, so they agree to rounding,
 * and the graph modes agree with eager bitwise. The first step's loss also matches the CPU
 * backend's to bf16 rounding. A NaN stop and the teardown (graphs before the communicator)
 * end without a hang. fp8_cs and fp8_ds (the amax max-reduce through NCCL) and the
 * distributed optimizer (its compact shards) keep the bits of the runs they replace. Skips when no
 * GPU can be used. */
#include "graphs_fixture.h"

#include <math.h>

#include "dist/comm.h"

#define STEPS 8
#define WARMUP 3

static int g_have_gpu;

static int setup(void **state) {
    (void)state;
    g_have_gpu = gtf_cuda_available();
    return 0;
}

static void gpu_small(gt_config *c, int n_micro) {
    gtf_gpu_dense(c, 2, 256, 4, 2, 512, WARMUP);
    c->train.global_batch_size = c->train.micro_batch_size * n_micro;
}

/* gtf_train_unchecked with a communicator of one rank bound to the trainer's GPU */
static void train_nccl(const gt_config *cfg, int steps, gtf_run *out) {
    gtf_assert_valid(cfg);
    memset(out, 0, sizeof *out);
    out->stop_step = -1;
    gt_world w = gt_world_single();
    gt_comm *comm = NULL;
    gt_error err = {0};
    if (gt_comm_create(&comm, &w, NULL, &err)) fail_msg("gt_comm_create: %s", err.msg);
    gt_trainer *t = NULL;
    if (gt_trainer_create_dp(&t, cfg, comm, &err)) fail_msg("gt_trainer_create_dp: %s", err.msg);
    assert_true(gt_comm_uses_nccl(comm));
    for (int i = 0; i < steps && i < GTF_MAX_STEPS; i++) {
        gt_step_stats st;
        memset(&st, 0, sizeof st);
        int rc = gt_trainer_step(t, &st, &err);
        if (rc != GT_OK) {
            out->rc = rc;
            out->err = err;
            out->stop_step = st.step;
            out->stop_mode = st.mode;
            break;
        }
        out->loss[i] = st.loss;
        out->mode[i] = st.mode;
        out->steps++;
        int agreed = 0; /* the train loop's per-step agreement, through NCCL */
        if (gt_comm_agree_max(comm, 0, &agreed, &err)) fail_msg("agree: %s", err.msg);
    }
    out->n_master = gt_model_get_info(gt_trainer_model(t))->n_params;
    out->master = calloc(out->n_master, sizeof(float));
    assert_non_null(out->master);
    if (gt_trainer_read_master(t, out->master, &err)) fail_msg("read_master: %s", err.msg);
    gt_graph_runner_stats(gt_trainer_graph_runner(t), &out->gs);
    gt_trainer_destroy(t); /* its graphs first, then the communicator */
    int agreed = 0;        /* which outlives the trainer for the host-side calls */
    if (gt_comm_agree_max(comm, 7, &agreed, &err)) fail_msg("agree after: %s", err.msg);
    assert_int_equal(agreed, 7);
    gt_comm_destroy(comm);
}

static void set_mode(gt_config *c, int mode) {
    if (mode == 1) gtf_graphs(c, GT_GRAPH_IMPL_TE, GT_SCOPE_ATTN | GT_SCOPE_MLP);
    if (mode == 2) gtf_graphs(c, GT_GRAPH_IMPL_LOCAL, GT_SCOPE_FULL_ITERATION);
}

static void one_micro_batch_bitwise(int deterministic) {
    for (int mode = 0; mode < 3; mode++) {
        gt_config c;
        gpu_small(&c, 1);
        c.runtime.deterministic = deterministic;
        set_mode(&c, mode);
        gtf_run plain, nccl;
        gtf_train(&c, STEPS, &plain);
        train_nccl(&c, STEPS, &nccl);
        assert_int_equal(nccl.rc, GT_OK);
        gtf_assert_same(&plain, &nccl);
        if (mode > 0) gtf_assert_progress(&nccl, WARMUP);
        if (mode == 2) assert_int_equal(nccl.gs.graphs, 1);
        assert_true(nccl.loss[0] != nccl.loss[STEPS - 1]); /* the steps really train */
        gtf_free(&plain);
        gtf_free(&nccl);
    }
}

static void test_gpu_nccl_rank_order_matches_the_run_without_it_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    one_micro_batch_bitwise(1);
}

static void test_gpu_nccl_library_order_matches_the_run_without_it_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    one_micro_batch_bitwise(0);
}

static void test_gpu_nccl_graph_modes_equal_eager_with_several_micro_batches(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config c;
    gpu_small(&c, 4);
    gtf_run plain, eager;
    gtf_train(&c, STEPS, &plain);
    train_nccl(&c, STEPS, &eager);
    assert_int_equal(eager.rc, GT_OK);
    // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison)
    assert_int_equal(memcmp(&eager.loss[0], &plain.loss[0], sizeof(float)), 0);
    for (int i = 1; i < STEPS; i++) /* the micro-batch sums grouped otherwise */
        assert_float_equal(eager.loss[i], plain.loss[i], 1e-3f * fabsf(plain.loss[i]));
    for (int mode = 1; mode < 3; mode++) {
        gt_config g = c;
        set_mode(&g, mode);
        gtf_run run;
        train_nccl(&g, STEPS, &run);
        assert_int_equal(run.rc, GT_OK);
        gtf_assert_same(&eager, &run);
        gtf_assert_progress(&run, WARMUP);
        gtf_free(&run);
    }
    gtf_free(&plain);
    gtf_free(&eager);
}

/* ddp.overlap_grad_reduce in small buckets: each bucket's reduction left running on the
 * communication stream as the backward ends it (event nodes in the full-iteration capture,
 * issued between the unit graphs in scoped runs), joined per bucket before the next backward
 * and all before the optimizer. One micro-batch: the bits of the run without NCCL; four: those
 * of NCCL without overlap; rank and library order; and overlap_param_gather with the
 * distributed optimizer, the gathers overlapping the later buckets' AdamW. */
static void test_gpu_nccl_overlap_keeps_the_bits_in_every_graph_mode(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    for (int deterministic = 0; deterministic < 2; deterministic++)
        for (int n_micro = 1; n_micro <= 4; n_micro += 3)
            for (int mode = 0; mode < 3; mode++) {
                gt_config c;
                gpu_small(&c, n_micro);
                c.runtime.deterministic = deterministic;
                c.ddp.bucket_size = 100000; /* several buckets, some across two layers */
                set_mode(&c, mode);
                gt_config on = c, gathered = c;
                on.ddp.overlap_grad_reduce = true;
                gathered.ddp.overlap_grad_reduce = true;
                gathered.ddp.overlap_param_gather = true;
                gathered.optimizer.use_distributed_optimizer = true;
                gtf_run ref, run, run_g;
                if (n_micro == 1)
                    gtf_train(&c, STEPS, &ref);
                else
                    train_nccl(&c, STEPS, &ref);
                train_nccl(&on, STEPS, &run);
                train_nccl(&gathered, STEPS, &run_g);
                assert_int_equal(run.rc, GT_OK);
                assert_int_equal(run_g.rc, GT_OK);
                gtf_assert_same(&ref, &run);
                gtf_assert_same(&ref, &run_g);
                if (mode > 0) gtf_assert_progress(&run, WARMUP);
                if (mode == 2) assert_int_equal(run.gs.graphs, 1);
                gtf_free(&ref);
                gtf_free(&run);
                gtf_free(&run_g);
            }
}

static void test_gpu_nccl_first_loss_matches_the_cpu_backend(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config c;
    gpu_small(&c, 2);
    c.model.attention_dropout = 0;
    c.model.hidden_dropout = 0;
    gtf_run gpu, cpu;
    train_nccl(&c, 1, &gpu);
    gt_config cc = c;
    cc.runtime.device = GT_DEVICE_CPU;
    cc.model.compute_dtype = GT_DTYPE_FP32;
    gtf_train_unchecked(&cc, 1, NULL, 0, &cpu);
    assert_int_equal(gpu.rc, GT_OK);
    assert_int_equal(cpu.rc, GT_OK);
    assert_float_equal(gpu.loss[0], cpu.loss[0], 2e-2f * fabsf(cpu.loss[0]));
    gtf_free(&gpu);
    gtf_free(&cpu);
}

static void test_gpu_nccl_nan_stop_in_a_replayed_graph_ends_cleanly(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    gt_config c;
    gpu_small(&c, 2);
    set_mode(&c, 2);
    c.runtime.inject_nan_at_step = WARMUP + 3;
    gtf_run run;
    train_nccl(&c, STEPS, &run); /* returns, the communicator destroyed: no hang */
    gtf_assert_nan_stop_replayed(&run, WARMUP + 3);
    gtf_free(&run);
}

/* fp8 through NCCL (ddp.force_collectives, which validate refused with fp8 on GPUs until the
 * amax reduction ran on NCCL): the amaxes and the fp8 flag max-reduced over a world of one
 * inside the step, eager and in the full-iteration graph, give the run without NCCL's bits */
static void test_gpu_nccl_fp8_matches_the_run_without_it_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    const gt_compute_dtype recipes[] = {GT_DTYPE_FP8_CS, GT_DTYPE_FP8_DS};
    for (int r = 0; r < 2; r++) {
        for (int mode = 0; mode < 3; mode += 2) {
            gt_config c;
            gpu_small(&c, 1);
            c.model.compute_dtype = recipes[r];
            c.ddp.force_collectives = true;
            set_mode(&c, mode);
            gtf_run plain, nccl;
            gt_config alone = c;
            alone.ddp.force_collectives = false;
            gtf_train(&alone, STEPS, &plain);
            train_nccl(&c, STEPS, &nccl);
            assert_int_equal(nccl.rc, GT_OK);
            gtf_assert_same(&plain, &nccl);
            if (mode == 2) assert_int_equal(nccl.gs.graphs, 1);
            assert_true(nccl.loss[0] != nccl.loss[STEPS - 1]);
            gtf_free(&plain);
            gtf_free(&nccl);
        }
    }
}

/* the distributed optimizer on the GPU: the master's int16 low halves and the moments in the
 * compact shard layout (several buckets, in the buckets' order), stepped per bucket and
 * gathered for the read, are the replicated optimizer's bits, eager and full-iteration */
static void test_gpu_nccl_distributed_optimizer_matches_the_replicated_one_bitwise(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    for (int mode = 0; mode < 3; mode += 2) {
        gt_config c;
        gpu_small(&c, 2);
        c.ddp.bucket_size = 300000; /* several buckets, the last one short */
        set_mode(&c, mode);
        gt_config sharded = c;
        sharded.optimizer.use_distributed_optimizer = true;
        gtf_run replicated, dist;
        train_nccl(&c, STEPS, &replicated);
        train_nccl(&sharded, STEPS, &dist);
        assert_int_equal(replicated.rc, GT_OK);
        assert_int_equal(dist.rc, GT_OK);
        assert_true(replicated.n_master > 3 * 300000);
        gtf_assert_same(&replicated, &dist);
        gtf_free(&replicated);
        gtf_free(&dist);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_nccl_rank_order_matches_the_run_without_it_bitwise),
        cmocka_unit_test(test_gpu_nccl_library_order_matches_the_run_without_it_bitwise),
        cmocka_unit_test(test_gpu_nccl_graph_modes_equal_eager_with_several_micro_batches),
        cmocka_unit_test(test_gpu_nccl_overlap_keeps_the_bits_in_every_graph_mode),
        cmocka_unit_test(test_gpu_nccl_first_loss_matches_the_cpu_backend),
        cmocka_unit_test(test_gpu_nccl_nan_stop_in_a_replayed_graph_ends_cleanly),
        cmocka_unit_test(test_gpu_nccl_fp8_matches_the_run_without_it_bitwise),
        cmocka_unit_test(test_gpu_nccl_distributed_optimizer_matches_the_replicated_one_bitwise),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
