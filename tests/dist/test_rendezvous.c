/* The rendezvous that hands NCCL's unique id to every rank without MPI (dist/rendezvous.h):
 * 128 random bytes through a shared file and over TCP between forked processes, and each way
 * it goes wrong (a timeout, a refused connection, a rank of another world size, a stale file
 * of another job), with the error naming it. */
#include "testlib.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dist/rendezvous.h"

#define ID_BYTES 128
#define SLOW_MS 20000.0 /* the successful exchanges: generous, they end as soon as all met */
#define FAST_MS 300.0   /* the failing ones: short, they must time out */

static void random_id(unsigned char *id) {
    FILE *f = fopen("/dev/urandom", "rb");
    assert_non_null(f);
    assert_int_equal(fread(id, 1, ID_BYTES, f), ID_BYTES);
    fclose(f);
}

/* A port nobody listens on right now (the kernel's pick for port 0). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

typedef enum { WAY_FILE, WAY_TCP } way;

/* Runs rank `rank` of `size` in a child: rank 0 sends `want`, the others must get it. The
 * child's exit status: 0 = the bytes arrived, 1 = they differ, 2 = the rendezvous failed. */
static pid_t spawn_rank(way w, const char *where, int port, int rank, int size,
                        const unsigned char *want) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid > 0) return pid;
    unsigned char id[ID_BYTES];
    memset(id, 0, sizeof id);
    if (rank == 0) memcpy(id, want, ID_BYTES);
    gt_rdv_opts o = {rank, size, SLOW_MS, "job-1"};
    gt_error err = {0};
    int rc = w == WAY_FILE ? gt_rdv_file(where, &o, id, ID_BYTES, &err)
                           : gt_rdv_tcp(where, port, &o, id, ID_BYTES, &err);
    if (rc) fprintf(stderr, "rank %d: %s\n", rank, err.msg);
    _exit(rc ? 2 : memcmp(id, want, ID_BYTES) != 0);
}

static void exchange(way w, const char *where, int port, int size, int zero_last) {
    unsigned char want[ID_BYTES];
    random_id(want);
    pid_t pids[8];
    for (int i = 0; i < size; i++) {
        int rank = zero_last ? (i + 1) % size : i; /* rank 0 starts last: the others wait */
        pids[i] = spawn_rank(w, where, port, rank, size, want);
        if (zero_last && i + 1 < size) nanosleep(&(struct timespec){0, 100000000L}, NULL);
    }
    for (int i = 0; i < size; i++) {
        int st = 0;
        assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
}

static void test_file_hands_rank0s_bytes_to_four_ranks(void **state) {
    (void)state;
    char dir[512], path[600];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/nccl_id", dir);
    exchange(WAY_FILE, path, 0, 4, 1);
}

static void test_file_wait_ends_in_a_named_timeout(void **state) {
    (void)state;
    char dir[512], path[600];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/never_written", dir);
    unsigned char id[ID_BYTES];
    gt_rdv_opts o = {1, 2, FAST_MS, ""};
    gt_error err = {0};
    assert_int_not_equal(gt_rdv_file(path, &o, id, ID_BYTES, &err), GT_OK);
    assert_non_null(strstr(err.msg, "timeout"));
    assert_non_null(strstr(err.msg, "never_written"));
}

static void test_file_of_another_world_size_is_refused(void **state) {
    (void)state;
    char dir[512], path[600];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/nccl_id", dir);
    unsigned char id[ID_BYTES];
    random_id(id);
    gt_error err = {0};
    gt_rdv_opts zero = {0, 2, FAST_MS, "t"};
    assert_int_equal(gt_rdv_file(path, &zero, id, ID_BYTES, &err), GT_OK);
    gt_rdv_opts other = {1, 3, FAST_MS, "t"};
    assert_int_equal(gt_rdv_file(path, &other, id, ID_BYTES, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "wrong world size"));
}

static void test_file_of_another_job_is_not_read(void **state) {
    (void)state;
    char dir[512], path[600];
    gt_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/nccl_id", dir);
    unsigned char old[ID_BYTES], got[ID_BYTES];
    random_id(old);
    memset(got, 0, sizeof got);
    gt_error err = {0};
    gt_rdv_opts zero = {0, 2, FAST_MS, "job-old"};
    assert_int_equal(gt_rdv_file(path, &zero, old, ID_BYTES, &err), GT_OK);
    gt_rdv_opts one = {1, 2, FAST_MS, "job-new"};
    assert_int_not_equal(gt_rdv_file(path, &one, got, ID_BYTES, &err), GT_OK);
    assert_non_null(strstr(err.msg, "another job"));
    assert_int_not_equal(memcmp(old, got, ID_BYTES), 0);
}

static void test_tcp_hands_rank0s_bytes_to_four_ranks(void **state) {
    (void)state;
    exchange(WAY_TCP, "127.0.0.1", free_port(), 4, 0);
}

static void test_tcp_ranks_retry_until_rank0_listens(void **state) {
    (void)state;
    exchange(WAY_TCP, "localhost", free_port(), 3, 1);
}

static void test_tcp_without_rank0_is_a_refused_connection(void **state) {
    (void)state;
    unsigned char id[ID_BYTES];
    gt_rdv_opts o = {1, 2, FAST_MS, ""};
    gt_error err = {0};
    assert_int_not_equal(gt_rdv_tcp("127.0.0.1", free_port(), &o, id, ID_BYTES, &err), GT_OK);
    assert_non_null(strstr(err.msg, "connection refused"));
}

static void test_tcp_rank0_alone_times_out(void **state) {
    (void)state;
    unsigned char id[ID_BYTES];
    random_id(id);
    gt_rdv_opts o = {0, 3, FAST_MS, ""};
    gt_error err = {0};
    assert_int_not_equal(gt_rdv_tcp("127.0.0.1", free_port(), &o, id, ID_BYTES, &err), GT_OK);
    assert_non_null(strstr(err.msg, "timeout"));
    assert_non_null(strstr(err.msg, "2 of the 2"));
}

static void test_tcp_rank_of_another_world_size_is_refused_on_both_sides(void **state) {
    (void)state;
    int port = free_port();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        unsigned char id[ID_BYTES];
        gt_rdv_opts o = {1, 3, SLOW_MS, ""};
        gt_error err = {0};
        int rc = gt_rdv_tcp("127.0.0.1", port, &o, id, ID_BYTES, &err);
        _exit(rc == GT_ERR_INVALID && strstr(err.msg, "wrong world size") ? 0 : 1);
    }
    unsigned char id[ID_BYTES];
    random_id(id);
    gt_rdv_opts o = {0, 2, SLOW_MS, ""};
    gt_error err = {0};
    assert_int_equal(gt_rdv_tcp("127.0.0.1", port, &o, id, ID_BYTES, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "wrong world size"));
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_bad_arguments_are_named(void **state) {
    (void)state;
    unsigned char id[ID_BYTES];
    gt_error err = {0};
    gt_rdv_opts o = {2, 2, FAST_MS, ""};
    assert_int_equal(gt_rdv_file("/tmp/x", &o, id, ID_BYTES, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "outside a world of 2"));
    gt_rdv_opts ok = {1, 2, FAST_MS, ""};
    assert_int_equal(gt_rdv_tcp("127.0.0.1", 70000, &ok, id, ID_BYTES, &err), GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "MASTER_PORT=70000"));
    assert_int_equal(gt_rdv_tcp("no-such-host.invalid", 1234, &ok, id, ID_BYTES, &err),
                     GT_ERR_INVALID);
    assert_non_null(strstr(err.msg, "MASTER_ADDR=no-such-host.invalid"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_hands_rank0s_bytes_to_four_ranks),
        cmocka_unit_test(test_file_wait_ends_in_a_named_timeout),
        cmocka_unit_test(test_file_of_another_world_size_is_refused),
        cmocka_unit_test(test_file_of_another_job_is_not_read),
        cmocka_unit_test(test_tcp_hands_rank0s_bytes_to_four_ranks),
        cmocka_unit_test(test_tcp_ranks_retry_until_rank0_listens),
        cmocka_unit_test(test_tcp_without_rank0_is_a_refused_connection),
        cmocka_unit_test(test_tcp_rank0_alone_times_out),
        cmocka_unit_test(test_tcp_rank_of_another_world_size_is_refused_on_both_sides),
        cmocka_unit_test(test_bad_arguments_are_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
