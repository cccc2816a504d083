/* The file and TCP rendezvous (rendezvous.h). Both carry a small header with a magic number,
 * the sender's world size and the byte count, so a rank of another job or world size is told
 * so by name instead of joining a communicator that never completes. */
#include "dist/rendezvous.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"

#define RDV_FILE_MAGIC "GTRDVID1"
#define RDV_TCP_MAGIC 0x47545244u /* "GTRD" */
#define RDV_TAG_MAX 128
#define RDV_POLL_MS 50

enum { RDV_OK = 0, RDV_WRONG_SIZE = 1, RDV_BAD_RANK = 2 };

typedef struct rdv_file_head {
    char magic[8];
    int32_t size, n;
    char tag[RDV_TAG_MAX];
} rdv_file_head;

typedef struct rdv_hello {
    uint32_t magic;
    int32_t rank, size;
} rdv_hello;

typedef struct rdv_reply {
    uint32_t magic;
    int32_t status, size, n;
} rdv_reply;

static int check_opts(const gt_rdv_opts *o, size_t n, gt_error *err) {
    if (o->size < 1 || o->rank < 0 || o->rank >= o->size)
        return gt_error_set(err, GT_ERR_INVALID, "rendezvous: rank %d is outside a world of %d",
                            o->rank, o->size);
    if (n == 0 || n > GT_RDV_MAX_BYTES)
        return gt_error_set(err, GT_ERR_INVALID, "rendezvous of %zu bytes: 1 to %d are carried", n,
                            GT_RDV_MAX_BYTES);
    if (o->tag && strlen(o->tag) >= RDV_TAG_MAX)
        return gt_error_set(err, GT_ERR_INVALID, "rendezvous: the job tag is longer than %d",
                            RDV_TAG_MAX - 1);
    return GT_OK;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* sock: send without SIGPIPE (a peer that went away is an error, not the end of the process) */
static int write_all(int fd, const void *p, size_t n, int sock) {
    const char *c = p;
    while (n) {
        ssize_t w = sock ? send(fd, c, n, MSG_NOSIGNAL) : write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* 0: all n bytes; -1: an error or the end of the stream first */
static int read_all(int fd, void *p, size_t n) {
    char *c = p;
    while (n) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

/* ---- file ---- */

static int file_write(const char *path, const gt_rdv_opts *o, const void *id, size_t n,
                      gt_error *err) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return gt_error_set(err, GT_ERR_INVALID, "rendezvous file path too long: %s", path);
    rdv_file_head h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, RDV_FILE_MAGIC, sizeof h.magic);
    h.size = o->size;
    h.n = (int32_t)n;
    snprintf(h.tag, sizeof h.tag, "%s", o->tag ? o->tag : "");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return gt_error_set(err, GT_ERR_IO,
                            "rank 0 cannot create the rendezvous file %s: %s; point it at a "
                            "writable folder every rank sees",
                            tmp, strerror(errno));
    int bad = write_all(fd, &h, sizeof h, 0) || write_all(fd, id, n, 0) || fsync(fd);
    bad |= close(fd) != 0;
    if (bad || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return gt_error_set(err, GT_ERR_IO, "rank 0 cannot write the rendezvous file %s: %s", path,
                            strerror(e));
    }
    return GT_OK;
}

/* 1: read and matching; 0: not there yet (or another job's: *stale); <0: an error in err */
static int file_try_read(const char *path, const gt_rdv_opts *o, void *id, size_t n, int *stale,
                         gt_error *err) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    rdv_file_head h;
    int got = read_all(fd, &h, sizeof h) == 0;
    char bytes[GT_RDV_MAX_BYTES];
    int whole = got && h.n > 0 && h.n <= GT_RDV_MAX_BYTES && read_all(fd, bytes, (size_t)h.n) == 0;
    close(fd);
    if (!got || memcmp(h.magic, RDV_FILE_MAGIC, sizeof h.magic) != 0) {
        gt_error_set(err, GT_ERR_INVALID,
                     "%s is not a graphtrain rendezvous file; point the rendezvous at a path "
                     "of its own (nothing else should write there)",
                     path);
        return -1;
    }
    h.tag[RDV_TAG_MAX - 1] = '\0';
    if (strcmp(h.tag, o->tag ? o->tag : "") != 0) {
        *stale = 1;
        return 0;
    }
    if (h.size != o->size) {
        gt_error_set(err, GT_ERR_INVALID,
                     "wrong world size: rank 0 wrote the rendezvous file %s for a world of %d, "
                     "this rank (%d) is in a world of %d; start every rank with the same number "
                     "of processes",
                     path, (int)h.size, o->rank, o->size);
        return -1;
    }
    if (!whole || (size_t)h.n != n) {
        gt_error_set(err, GT_ERR_INVALID,
                     "the rendezvous file %s holds %d bytes, %zu expected; every rank must run "
                     "the same graphtrain build",
                     path, (int)h.n, n);
        return -1;
    }
    memcpy(id, bytes, n);
    return 1;
}

int gt_rdv_file(const char *path, const gt_rdv_opts *o, void *id, size_t n, gt_error *err) {
    int rc = check_opts(o, n, err);
    if (rc) return rc;
    if (!path || !*path)
        return gt_error_set(err, GT_ERR_INVALID, "the rendezvous file path is empty");
    if (o->rank == 0) return file_write(path, o, id, n, err);
    double deadline = gt_now_ms() + o->timeout_ms;
    int stale = 0;
    for (;;) {
        int got = file_try_read(path, o, id, n, &stale, err);
        if (got < 0) return err ? err->code : GT_ERR_INVALID;
        if (got > 0) return GT_OK;
        if (gt_now_ms() >= deadline) break;
        sleep_ms(RDV_POLL_MS);
    }
    if (stale)
        return gt_error_set(err, GT_ERR_DEVICE,
                            "timeout: rank %d waited %.0f s for rank 0's rendezvous file %s, "
                            "and found only one another job wrote (job tag not '%s'); is rank 0 "
                            "running, and does it see the same path?",
                            o->rank, o->timeout_ms / 1000.0, path, o->tag ? o->tag : "");
    return gt_error_set(err, GT_ERR_DEVICE,
                        "timeout: rank %d waited %.0f s for rank 0 to write the rendezvous file "
                        "%s; check that rank 0 started and that every rank sees the same "
                        "(shared) path",
                        o->rank, o->timeout_ms / 1000.0, path);
}

/* ---- TCP ---- */

static void set_timeouts(int fd, double ms) {
    if (ms < 1) ms = 1;
    struct timeval tv = {(time_t)(ms / 1000.0), (long)((long long)ms % 1000) * 1000L};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static int tcp_serve(int port, const gt_rdv_opts *o, const void *id, size_t n, gt_error *err) {
    int ls = socket(AF_INET6, SOCK_STREAM, 0);
    int v6 = ls >= 0;
    if (!v6) ls = socket(AF_INET, SOCK_STREAM, 0);
    if (ls < 0)
        return gt_error_set(err, GT_ERR_IO, "rank 0 cannot open a socket: %s", strerror(errno));
    int one = 1, zero = 0;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int bound;
    if (v6) {
        setsockopt(ls, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero); /* IPv4 clients too */
        struct sockaddr_in6 a6;
        memset(&a6, 0, sizeof a6);
        a6.sin6_family = AF_INET6;
        a6.sin6_addr = in6addr_any;
        a6.sin6_port = htons((uint16_t)port);
        bound = bind(ls, (struct sockaddr *)&a6, sizeof a6) == 0;
    } else {
        struct sockaddr_in a4;
        memset(&a4, 0, sizeof a4);
        a4.sin_family = AF_INET;
        a4.sin_addr.s_addr = htonl(INADDR_ANY);
        a4.sin_port = htons((uint16_t)port);
        bound = bind(ls, (struct sockaddr *)&a4, sizeof a4) == 0;
    }
    if (!bound || listen(ls, o->size) != 0) {
        int e = errno;
        close(ls);
        return gt_error_set(err, GT_ERR_IO,
                            "rank 0 cannot listen on port %d: %s; pick a free MASTER_PORT (under "
                            "torchrun's agent store graphtrain takes MASTER_PORT + 1)",
                            port, strerror(e));
    }
    double deadline = gt_now_ms() + o->timeout_ms;
    char *served = calloc((size_t)o->size, 1); /* [size] ranks answered */
    if (!served) {
        close(ls);
        return gt_error_set(err, GT_ERR_NOMEM, "out of host memory for the rendezvous");
    }
    int left = o->size - 1, rc = GT_OK;
    while (left > 0 && rc == GT_OK) {
        double rem = deadline - gt_now_ms();
        if (rem <= 0) {
            rc = gt_error_set(err, GT_ERR_DEVICE,
                              "timeout: rank 0 waited %.0f s on port %d and %d of the %d other "
                              "ranks did not connect; check that they started and reach "
                              "MASTER_ADDR:MASTER_PORT",
                              o->timeout_ms / 1000.0, port, left, o->size - 1);
            break;
        }
        struct pollfd p = {ls, POLLIN, 0};
        int pr = poll(&p, 1, rem > 1e9 ? 1000000000 : (int)rem + 1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) continue; /* the deadline check above ends it */
        int cs = accept(ls, NULL, NULL);
        if (cs < 0) continue;
        set_timeouts(cs, rem);
        rdv_hello h;
        if (read_all(cs, &h, sizeof h) != 0 || h.magic != RDV_TCP_MAGIC) {
            close(cs); /* not one of ours (a port probe): ignored */
            continue;
        }
        rdv_reply r = {RDV_TCP_MAGIC, RDV_OK, o->size, (int32_t)n};
        if (h.size != o->size)
            r.status = RDV_WRONG_SIZE;
        else if (h.rank <= 0 || h.rank >= o->size || served[h.rank])
            r.status = RDV_BAD_RANK;
        int sent =
            write_all(cs, &r, sizeof r, 1) == 0 && (r.status || write_all(cs, id, n, 1) == 0);
        close(cs);
        if (r.status == RDV_WRONG_SIZE)
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "wrong world size: rank %d connected to rank 0 with a world of %d, "
                              "rank 0 has %d; start every rank with the same WORLD_SIZE",
                              (int)h.rank, (int)h.size, o->size);
        else if (r.status == RDV_BAD_RANK)
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "rank %d connected to rank 0 twice or is outside the world of %d; "
                              "give every process its own RANK",
                              (int)h.rank, o->size);
        else if (sent) {
            served[h.rank] = 1;
            left--;
        }
    }
    free(served);
    close(ls);
    return rc;
}

static int tcp_reply(int fd, const char *addr, int port, const gt_rdv_opts *o, void *id, size_t n,
                     gt_error *err) {
    rdv_hello h = {RDV_TCP_MAGIC, o->rank, o->size};
    rdv_reply r;
    if (write_all(fd, &h, sizeof h, 1) != 0 || read_all(fd, &r, sizeof r) != 0 ||
        r.magic != RDV_TCP_MAGIC)
        return gt_error_set(err, GT_ERR_DEVICE,
                            "rank %d reached %s:%d but got no rendezvous answer; is something "
                            "other than graphtrain's rank 0 listening there?",
                            o->rank, addr, port);
    if (r.status == RDV_WRONG_SIZE)
        return gt_error_set(err, GT_ERR_INVALID,
                            "wrong world size: rank 0 (%s:%d) is in a world of %d, this rank "
                            "(%d) in a world of %d; start every rank with the same WORLD_SIZE",
                            addr, port, (int)r.size, o->rank, o->size);
    if (r.status != RDV_OK)
        return gt_error_set(err, GT_ERR_INVALID,
                            "rank 0 refused rank %d: another process has the same RANK", o->rank);
    if ((size_t)r.n != n || read_all(fd, id, n) != 0)
        return gt_error_set(err, GT_ERR_DEVICE,
                            "rank %d got %d of %zu rendezvous bytes from %s:%d; every rank must "
                            "run the same graphtrain build",
                            o->rank, (int)r.n, n, addr, port);
    return GT_OK;
}

static int tcp_connect(const char *addr, int port, const gt_rdv_opts *o, void *id, size_t n,
                       gt_error *err) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    double deadline = gt_now_ms() + o->timeout_ms;
    int last = 0, gai = 0;
    for (;;) {
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof hints);
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        gai = getaddrinfo(addr, ps, &hints, &res);
        if (gai != 0 && gai != EAI_AGAIN)
            return gt_error_set(err, GT_ERR_INVALID,
                                "MASTER_ADDR=%s cannot be resolved (%s); set it to rank 0's host "
                                "name or address",
                                addr, gai_strerror(gai));
        for (struct addrinfo *a = res; a; a = a->ai_next) {
            double rem = deadline - gt_now_ms();
            int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
            if (fd < 0) continue;
            set_timeouts(fd, rem);
            if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
                freeaddrinfo(res);
                int rc = tcp_reply(fd, addr, port, o, id, n, err);
                close(fd);
                return rc;
            }
            last = errno;
            close(fd);
        }
        if (res) freeaddrinfo(res);
        if (gt_now_ms() >= deadline) break;
        sleep_ms(RDV_POLL_MS * 2);
    }
    if (gai != 0)
        return gt_error_set(err, GT_ERR_INVALID,
                            "MASTER_ADDR=%s could not be resolved within %.0f s (%s); set it to "
                            "rank 0's host name or address",
                            addr, o->timeout_ms / 1000.0, gai_strerror(gai));
    if (last == ECONNREFUSED)
        return gt_error_set(err, GT_ERR_DEVICE,
                            "connection refused: rank %d tried %s:%d for %.0f s and rank 0 never "
                            "listened there; check that rank 0 started and that every rank has "
                            "the same MASTER_ADDR and MASTER_PORT",
                            o->rank, addr, port, o->timeout_ms / 1000.0);
    return gt_error_set(err, GT_ERR_DEVICE,
                        "timeout: rank %d could not reach rank 0 at %s:%d within %.0f s (%s); "
                        "check the address, the port and the network between the nodes",
                        o->rank, addr, port, o->timeout_ms / 1000.0,
                        last ? strerror(last) : "no answer");
}

int gt_rdv_tcp(const char *addr, int port, const gt_rdv_opts *o, void *id, size_t n,
               gt_error *err) {
    int rc = check_opts(o, n, err);
    if (rc) return rc;
    if (port < 1 || port > 65535)
        return gt_error_set(err, GT_ERR_INVALID, "MASTER_PORT=%d is not a TCP port (1-65535)",
                            port);
    if (o->size == 1) return GT_OK;
    if (o->rank == 0) return tcp_serve(port, o, id, n, err);
    if (!addr || !*addr)
        return gt_error_set(err, GT_ERR_INVALID,
                            "the TCP rendezvous needs MASTER_ADDR (rank 0's host); torchrun sets "
                            "it");
    return tcp_connect(addr, port, o, id, n, err);
}
