/* `graphtrain bench` under several ranks, run by ctest under mpiexec at 2 and 4 ranks: every
 * rank runs the modes over the job's communicator and rank 0's report has the data-parallel
 * figures, measured: the ranks, tokens/s in total = ranks x per GPU, the step's collectives
 * alone (C > 0), the step without them (T0 > 0), the hidden share in [0, 1]; in the JSON too.
 * One process without a communicator reports one rank and no communication. */
#define MPF_NAME "mpi_dp_bench"
#include "mpi_fixture.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "core/json.h"

static void bench_config(gt_config *c) {
    mpf_small_model(c, 1);
    mpf_set(c, "train.train_iters=20");
    gt_config_finalize(c);
}

static void run_bench(gt_comm *comm, gt_bench_report *rep) {
    gt_config c;
    bench_config(&c);
    gt_bench_options o;
    gt_bench_options_init(&o);
    o.steps = 3;
    o.warmup = 1;
    o.quiet = 1;
    o.same_process = 1;
    o.comm = comm;
    gt_error err = {0};
    if (gt_bench_parse_modes(&o, "eager,full_iteration", 0, &err)) fail_msg("%s", err.msg);
    if (gt_bench_run(&c, &o, rep, &err)) fail_msg("rank %d: bench: %s", RANK, err.msg);
}

static void test_bench_at_n_ranks_reports_measured_communication(void **state) {
    (void)state;
    gt_bench_report rep;
    run_bench(C, &rep);
    assert_int_equal(rep.n, 2);
    assert_int_equal(rep.losses_identical, 1); /* eager and full_iteration, bitwise */
    for (int i = 0; i < rep.n; i++) {
        const gt_bench_result *r = &rep.results[i];
        if (!r->ok) fail_msg("mode %s: %s", r->mode.name, r->error.msg);
        assert_int_equal(r->ranks, SIZE);
        assert_true(r->comm_measured);
        assert_true(r->tokens_per_s > 0);
        assert_float_equal(r->tokens_per_s, SIZE * r->tokens_per_s_per_gpu, 1e-9 * r->tokens_per_s);
        assert_true(r->comm_ms > 0);
        assert_true(r->compute_ms > 0);
        assert_true(r->hidden_fraction >= 0 && r->hidden_fraction <= 1);
    }
    if (RANK == 0) { /* the JSON carries them */
        char dir[256], path[300];
        gt_test_tmpdir(dir, sizeof dir);
        snprintf(path, sizeof path, "%s/bench.json", dir);
        gt_error err = {0};
        assert_int_equal(gt_bench_write_json(&rep, path, &err), GT_OK);
        static char text[1 << 16];
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        text[fread(text, 1, sizeof text - 1, f)] = '\0';
        fclose(f);
        cJSON *doc = cJSON_Parse(text);
        assert_non_null(doc);
        const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "modes"), 0);
        assert_int_equal(cJSON_GetObjectItem(m, "ranks")->valuedouble, SIZE);
        double total = cJSON_GetObjectItem(m, "tokens_per_s_total")->valuedouble;
        double per = cJSON_GetObjectItem(m, "tokens_per_s_per_gpu")->valuedouble;
        assert_float_equal(total, SIZE * per, 1e-6 * total);
        double hidden = cJSON_GetObjectItem(m, "hidden_fraction")->valuedouble;
        assert_true(hidden >= 0 && hidden <= 1);
        assert_true(cJSON_GetObjectItem(m, "comm_ms")->valuedouble > 0);
        assert_true(cJSON_GetObjectItem(m, "compute_ms")->valuedouble > 0);
        cJSON_Delete(doc);
    }
    gt_bench_report_free(&rep);
}

static void test_bench_of_one_process_reports_one_rank_and_no_communication(void **state) {
    (void)state;
    if (RANK == 0) {
        gt_bench_report rep;
        run_bench(NULL, &rep);
        for (int i = 0; i < rep.n; i++) {
            assert_true(rep.results[i].ok);
            assert_int_equal(rep.results[i].ranks, 1);
            assert_false(rep.results[i].comm_measured);
            assert_true(rep.results[i].tokens_per_s == rep.results[i].tokens_per_s_per_gpu);
        }
        gt_bench_report_free(&rep);
    }
    gt_error err = {0};
    assert_int_equal(gt_comm_barrier(C, &err), GT_OK);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bench_at_n_ranks_reports_measured_communication),
        cmocka_unit_test(test_bench_of_one_process_reports_one_rank_and_no_communication),
    };
    return cmocka_run_group_tests(tests, mpf_group_setup, mpf_group_teardown);
}
