/* Handing rank 0's bytes (NCCL's unique id) to every rank of a job before any communicator
 * exists, when there is no MPI to broadcast them: through a file on a filesystem all ranks
 * share, or over TCP at torchrun's MASTER_ADDR:MASTER_PORT. Plain C and POSIX, so both run
 * and are tested between CPU processes. Every wait has a deadline; errors name what was
 * waited for (a timeout, a refused connection, a rank of another world size) and the fix. */
#ifndef GT_DIST_RENDEZVOUS_H
#define GT_DIST_RENDEZVOUS_H

#include <stddef.h>

#include "core/error.h"

/* Bytes a rendezvous carries at most (NCCL_UNIQUE_ID_BYTES is 128). */
#define GT_RDV_MAX_BYTES 256

typedef struct gt_rdv_opts {
    int rank, size;
    double timeout_ms; /* how long a rank waits for the others, in all */
    /* the job the bytes belong to (a launcher's job id, "" when none): a file left by another
     * job with a different tag is not read, so a stale id cannot join the wrong job */
    const char *tag;
} gt_rdv_opts;

/* Rank 0 writes id[0..n) to path (a temporary file renamed into place, so no rank reads half
 * of it); the others poll for it until the deadline and check its world size and tag. */
int gt_rdv_file(const char *path, const gt_rdv_opts *o, void *id, size_t n, gt_error *err);

/* Rank 0 listens on port (every address) and answers each of the size - 1 other ranks, which
 * connect to addr:port, retrying until the deadline (rank 0 may start later). */
int gt_rdv_tcp(const char *addr, int port, const gt_rdv_opts *o, void *id, size_t n, gt_error *err);

#endif
