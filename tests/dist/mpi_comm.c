/* Collectives between CPU-backend processes (dist/comm.h), run by ctest under mpiexec at 2 and
 * 4 ranks: rank-order sums equal to adding the ranks' buffers in rank order, bit for bit; MPI's
 * own order within rounding; shards that need not divide evenly; collectives captured in a CPU
 * graph run again at every replay; a rank-order sum larger than the reserve is refused. */
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"

enum { N = 1001 }; /* no world size here divides it */

typedef struct fixture {
    gt_backend *b;
    gt_stream *s;
    gt_comm *c;
    int rank, size;
} fixture;

static fixture F;

static const char *real_env(void *ctx, const char *name) {
    (void)ctx;
    return getenv(name);
}

/* rank r's test buffer: xorshift values of like magnitude, so rounding depends on the order */
static void fill(float *x, size_t n, int r, int salt) {
    uint32_t s = 0x9e3779b9u * (uint32_t)(r + 1) + (uint32_t)salt;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        x[i] = (float)((s >> 8) * (1.0 / 8388608.0)) + 0.1f * (float)(i % 7);
    }
}

/* the sum in rank order, as rank-order collectives must give it */
static void expected_sum(float *out, size_t n, int size, int salt) {
    float *tmp = malloc(n * sizeof *tmp);
    assert_non_null(tmp);
    fill(out, n, 0, salt);
    for (int r = 1; r < size; r++) {
        fill(tmp, n, r, salt);
        for (size_t i = 0; i < n; i++)
            out[i] += tmp[i];
    }
    free(tmp);
}

static int group_setup(void **state) {
    (void)state;
    gt_error err = {0};
    gt_world w;
    if (gt_world_from_env(real_env, NULL, &w, &err) || w.size < 2) {
        fprintf(stderr, "mpi_comm: run under mpiexec with 2 or more ranks (%s)\n", err.msg);
        return -1;
    }
    if (gt_backend_create_cpu(&F.b, &err) || F.b->ops->stream_create(F.b, &F.s, &err) ||
        gt_comm_create(&F.c, &w, F.b, &err) || gt_comm_reserve(F.c, N, &err)) {
        fprintf(stderr, "mpi_comm: %s\n", err.msg);
        return -1;
    }
    F.rank = gt_comm_rank(F.c);
    F.size = gt_comm_size(F.c);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    gt_comm_destroy(F.c);
    F.b->ops->stream_destroy(F.b, F.s);
    gt_backend_destroy(F.b);
    return 0;
}

static void test_rank_order_all_reduce_is_the_sum_in_rank_order_bit_for_bit(void **state) {
    (void)state;
    float *buf = malloc(N * sizeof *buf), *want = malloc(N * sizeof *want);
    fill(buf, N, F.rank, 1);
    expected_sum(want, N, F.size, 1);
    gt_comm_all_reduce_sum(F.c, F.s, buf, N, GT_REDUCE_RANK_ORDER);
    assert_memory_equal(buf, want, N * sizeof *buf);
    if (F.size >= 3) { /* the data tells orders apart: the reverse order differs somewhere */
        float *rev = calloc(N, sizeof *rev), *tmp = malloc(N * sizeof *tmp);
        for (int r = F.size - 1; r >= 0; r--) {
            fill(tmp, N, r, 1);
            for (int i = 0; i < N; i++)
                rev[i] += tmp[i];
        }
        int differ = 0;
        for (int i = 0; i < N; i++)
            differ += rev[i] != want[i];
        assert_true(differ > 0);
        free(rev), free(tmp);
    }
    free(buf), free(want);
}

static void test_library_all_reduce_agrees_within_rounding(void **state) {
    (void)state;
    float *buf = malloc(N * sizeof *buf), *want = malloc(N * sizeof *want);
    fill(buf, N, F.rank, 2);
    expected_sum(want, N, F.size, 2);
    gt_comm_all_reduce_sum(F.c, F.s, buf, N, GT_REDUCE_LIBRARY);
    for (int i = 0; i < N; i++)
        assert_float_equal(buf[i], want[i], 1e-5f * fabsf(want[i]));
    free(buf), free(want);
}

static void test_reduce_scatter_leaves_each_rank_its_uneven_shard(void **state) {
    (void)state;
    float *in = malloc(N * sizeof *in), *want = malloc(N * sizeof *want);
    float *out = calloc(N, sizeof *out);
    fill(in, N, F.rank, 3);
    expected_sum(want, N, F.size, 3);
    size_t first = 0, count = 0;
    gt_comm_shard(N, F.size, F.rank, &first, &count);
    assert_int_equal(count, N / F.size + ((size_t)F.rank < N % (size_t)F.size ? 1 : 0));
    gt_comm_reduce_scatter_sum(F.c, F.s, out, in, N, GT_REDUCE_RANK_ORDER);
    assert_memory_equal(out, want + first, count * sizeof *out);
    memset(out, 0, N * sizeof *out);
    gt_comm_reduce_scatter_sum(F.c, F.s, out, in, N, GT_REDUCE_LIBRARY);
    for (size_t i = 0; i < count; i++)
        assert_float_equal(out[i], want[first + i], 1e-5f * fabsf(want[first + i]));
    free(in), free(want), free(out);
}

static void test_all_gather_brings_every_shard_to_every_rank(void **state) {
    (void)state;
    int32_t buf[N];
    for (int i = 0; i < N; i++)
        buf[i] = -1;
    size_t first = 0, count = 0;
    gt_comm_shard(N, F.size, F.rank, &first, &count);
    for (size_t i = first; i < first + count; i++)
        buf[i] = (int32_t)(i * 3 + 1);
    gt_comm_all_gather(F.c, F.s, buf, N, sizeof buf[0]);
    for (int i = 0; i < N; i++)
        assert_int_equal(buf[i], i * 3 + 1);
}

static void test_a_captured_all_reduce_runs_again_at_every_replay(void **state) {
    (void)state;
    gt_error err = {0};
    float *buf = malloc(N * sizeof *buf), *want = malloc(N * sizeof *want);
    fill(buf, N, F.rank, 4);
    assert_int_equal(F.b->ops->begin_capture(F.b, F.s, GT_CAPTURE_THREAD_LOCAL, &err), GT_OK);
    gt_comm_all_reduce_sum(F.c, F.s, buf, N, GT_REDUCE_RANK_ORDER);
    gt_graph *g = NULL;
    gt_graph_info info;
    assert_int_equal(F.b->ops->end_capture(F.b, F.s, &g, &info, &err), GT_OK);
    for (int salt = 5; salt < 7; salt++) {
        fill(buf, N, F.rank, salt);
        expected_sum(want, N, F.size, salt);
        assert_int_equal(F.b->ops->graph_launch(F.b, g, F.s, &err), GT_OK);
        assert_memory_equal(buf, want, N * sizeof *buf);
    }
    F.b->ops->graph_destroy(F.b, g);
    free(buf), free(want);
}

static void test_a_rank_order_sum_past_the_reserve_is_refused_by_name(void **state) {
    (void)state;
    size_t big = 4 * N;
    float *buf = calloc(big, sizeof *buf);
    gt_comm_all_reduce_sum(F.c, F.s, buf, big, GT_REDUCE_RANK_ORDER);
    gt_error err = {0};
    assert_int_equal(gt_backend_check(F.b, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "gt_comm_reserve"));
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rank_order_all_reduce_is_the_sum_in_rank_order_bit_for_bit),
        cmocka_unit_test(test_library_all_reduce_agrees_within_rounding),
        cmocka_unit_test(test_reduce_scatter_leaves_each_rank_its_uneven_shard),
        cmocka_unit_test(test_all_gather_brings_every_shard_to_every_rank),
        cmocka_unit_test(test_a_captured_all_reduce_runs_again_at_every_replay),
        cmocka_unit_test(test_a_rank_order_sum_past_the_reserve_is_refused_by_name),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
