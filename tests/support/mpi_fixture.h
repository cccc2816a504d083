/* Shared by the tests/dist/mpi_*.c binaries that ctest runs under mpiexec: the job's world and
 * rank 0's world of one (made by the group setup), config overrides that fail the test, the
 * small CPU model they train, and a check that every rank holds rank 0's bytes. Define
 * MPF_NAME (the binary's name, for the setup's message) before including it. */
#ifndef GT_TESTS_MPI_FIXTURE_H
#define GT_TESTS_MPI_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/keys.h"
#include "dist/comm.h"
#include "testlib.h"

static gt_comm *C;   /* the job's world */
static gt_comm *ONE; /* rank 0's world of one */
static int RANK, SIZE;

static inline const char *mpf_real_env(void *ctx, const char *name) {
    (void)ctx;
    return getenv(name);
}

static inline void mpf_set(gt_config *c, const char *kv) {
    gt_error err = {0};
    if (gt_config_override(c, kv, &err) != GT_OK) fail_msg("override %s: %s", kv, err.msg);
}

/* defaults plus the small model every data-parallel test trains: `layers` layers of d=32 (2
 * heads), vocab 64, seq 16, 4 micro-batches of 2 per global batch (2 per rank at 2 ranks, 1 at
 * 4); the caller adds its own keys, then finalizes */
static inline void mpf_small_model(gt_config *c, int layers) {
    gt_config_defaults(c);
    static const char *kv[] = {"runtime.device=cpu",
                               "model.hidden_size=32",
                               "model.num_attention_heads=2",
                               "model.num_query_groups=2",
                               "model.ffn_hidden_size=64",
                               "model.vocab_size=64",
                               "model.seq_length=16",
                               "train.micro_batch_size=2",
                               "train.global_batch_size=8",
                               "logger.log_interval=1000",
                               NULL};
    for (int i = 0; kv[i]; i++)
        mpf_set(c, kv[i]);
    char k[48];
    snprintf(k, sizeof k, "model.num_layers=%d", layers);
    mpf_set(c, k);
}

/* every rank holds rank 0's n bytes at p: the ranks agree among themselves */
static inline void mpf_assert_ranks_agree(const void *p, size_t n) {
    void *lead = malloc(n);
    memcpy(lead, p, n);
    gt_error err = {0};
    if (gt_comm_broadcast(C, lead, n, 0, &err)) fail_msg("%s", err.msg);
    assert_memory_equal(lead, p, n);
    free(lead);
}

static inline int mpf_group_setup(void **state) {
    (void)state;
    gt_error err = {0};
    gt_world w, one = gt_world_single();
    if (gt_world_from_env(mpf_real_env, NULL, &w, &err) || w.size < 2 ||
        gt_comm_create(&C, &w, NULL, &err) || gt_comm_create(&ONE, &one, NULL, &err)) {
        fprintf(stderr, "%s: run under mpiexec with 2 or more ranks (%s)\n", MPF_NAME, err.msg);
        return -1;
    }
    RANK = gt_comm_rank(C);
    SIZE = gt_comm_size(C);
    return 0;
}

static inline int mpf_group_teardown(void **state) {
    (void)state;
    gt_comm_destroy(ONE);
    gt_comm_destroy(C);
    return 0;
}

#endif
