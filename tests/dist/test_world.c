/* The world from the launchers' variables (dist/world.h), each launcher and the ways their
 * variables go wrong, through a table standing in for the environment. */
#include "testlib.h"

#include <string.h>

#include "dist/world.h"

typedef struct env_table {
    const char *kv[16][2];
} env_table;

static const char *lookup(void *ctx, const char *name) {
    const env_table *e = ctx;
    for (int i = 0; i < 16 && e->kv[i][0]; i++)
        if (strcmp(e->kv[i][0], name) == 0) return e->kv[i][1];
    return NULL;
}

static void test_no_launcher_is_a_world_of_one(void **state) {
    (void)state;
    env_table e = {{{NULL, NULL}}};
    gt_world w;
    gt_error err = {0};
    assert_int_equal(gt_world_from_env(lookup, &e, &w, &err), GT_OK);
    assert_int_equal(w.size, 1);
    assert_int_equal(w.rank, 0);
    assert_int_equal(w.launcher, GT_LAUNCH_NONE);
}

static void test_mpirun_variables_give_rank_node_and_local_rank(void **state) {
    (void)state;
    env_table e = {{{"OMPI_COMM_WORLD_RANK", "5"},
                    {"OMPI_COMM_WORLD_SIZE", "8"},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}};
    gt_world w;
    gt_error err = {0};
    assert_int_equal(gt_world_from_env(lookup, &e, &w, &err), GT_OK);
    assert_int_equal(w.launcher, GT_LAUNCH_MPIRUN);
    assert_int_equal(w.rank, 5);
    assert_int_equal(w.size, 8);
    assert_int_equal(w.local_rank, 1);
    assert_int_equal(w.local_size, 4);
    assert_int_equal(w.nodes, 2);
}

static void test_srun_variables_count_nodes_from_slurm(void **state) {
    (void)state;
    env_table e = {{{"SLURM_PROCID", "3"},
                    {"SLURM_NTASKS", "16"},
                    {"SLURM_LOCALID", "3"},
                    {"SLURM_NNODES", "2"}}};
    gt_world w;
    gt_error err = {0};
    assert_int_equal(gt_world_from_env(lookup, &e, &w, &err), GT_OK);
    assert_int_equal(w.launcher, GT_LAUNCH_SRUN);
    assert_int_equal(w.nodes, 2);
    assert_int_equal(w.local_size, 8);
    assert_int_equal(w.local_rank, 3);
}

static void test_torchrun_needs_its_rendezvous(void **state) {
    (void)state;
    env_table ok = {{{"RANK", "1"},
                     {"WORLD_SIZE", "2"},
                     {"LOCAL_RANK", "1"},
                     {"LOCAL_WORLD_SIZE", "2"},
                     {"MASTER_ADDR", "127.0.0.1"},
                     {"MASTER_PORT", "29500"}}};
    gt_world w;
    gt_error err = {0};
    assert_int_equal(gt_world_from_env(lookup, &ok, &w, &err), GT_OK);
    assert_int_equal(w.launcher, GT_LAUNCH_TORCHRUN);
    assert_string_equal(w.master_addr, "127.0.0.1");
    assert_int_equal(w.master_port, 29500);
    env_table bad = {{{"RANK", "1"}, {"WORLD_SIZE", "2"}}};
    assert_int_equal(gt_world_from_env(lookup, &bad, &w, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "MASTER_ADDR"));
}

static void test_bad_numbers_and_ranks_are_refused_by_name(void **state) {
    (void)state;
    gt_world w;
    gt_error err = {0};
    env_table word = {{{"OMPI_COMM_WORLD_RANK", "two"}, {"OMPI_COMM_WORLD_SIZE", "4"}}};
    assert_int_equal(gt_world_from_env(lookup, &word, &w, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "OMPI_COMM_WORLD_RANK=two"));
    env_table outside = {{{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}}};
    assert_int_equal(gt_world_from_env(lookup, &outside, &w, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "SLURM_PROCID=4"));
    env_table half = {{{"WORLD_SIZE", "4"}}};
    assert_int_equal(gt_world_from_env(lookup, &half, &w, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "RANK"));
    env_table zero = {{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "0"}}};
    assert_int_equal(gt_world_from_env(lookup, &zero, &w, &err), GT_ERR_INVALID);
}

static void test_mpirun_inside_sbatch_wins_over_inherited_slurm_variables(void **state) {
    (void)state;
    /* every rank of an mpirun in a batch script inherits the script's SLURM_PROCID=0 */
    env_table e = {{{"SLURM_PROCID", "0"},
                    {"SLURM_NTASKS", "1"},
                    {"OMPI_COMM_WORLD_RANK", "3"},
                    {"OMPI_COMM_WORLD_SIZE", "4"}}};
    gt_world w;
    gt_error err = {0};
    assert_int_equal(gt_world_from_env(lookup, &e, &w, &err), GT_OK);
    assert_int_equal(w.launcher, GT_LAUNCH_MPIRUN);
    assert_int_equal(w.rank, 3);
    assert_non_null(strstr(w.note, "srun"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_launcher_is_a_world_of_one),
        cmocka_unit_test(test_mpirun_variables_give_rank_node_and_local_rank),
        cmocka_unit_test(test_srun_variables_count_nodes_from_slurm),
        cmocka_unit_test(test_torchrun_needs_its_rendezvous),
        cmocka_unit_test(test_bad_numbers_and_ranks_are_refused_by_name),
        cmocka_unit_test(test_mpirun_inside_sbatch_wins_over_inherited_slurm_variables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
