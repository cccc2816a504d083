/* The fp8 state's reduction over the ranks (fp8_sync.h): the slots' amaxes and the step's fp8
 * flag packed into one host block, one max all-reduce, unpacked. */
#include "dist/fp8_sync.h"

#include <stdlib.h>

#include "backend/cpu/cpu_backend.h"

struct gt_fp8_sync {
    gt_comm *c;
    gt_backend *b;
    gt_fp8_meta *meta; /* [n] */
    int n;
    float *buf; /* [n + 1]: the amaxes, then 1 where the step's fp8 flag is set */
};

int gt_fp8_sync_create(gt_fp8_sync **out, gt_comm *c, gt_backend *b, gt_fp8_meta *meta, int n_meta,
                       gt_error *err) {
    *out = NULL;
    if (b->kind != GT_BACKEND_CPU)
        return gt_error_set(err, GT_ERR_UNSUPPORTED,
                            "the data-parallel fp8 amax reduction runs on the CPU backend only "
                            "(validate refuses it on GPUs: engine_no_fp8_data_parallel_gpu); "
                            "use runtime.device=cpu");
    if (n_meta < 0 || (n_meta > 0 && !meta))
        return gt_error_set(err, GT_ERR_INVALID, "fp8 sync: %d slots without their state", n_meta);
    gt_fp8_sync *f = calloc(1, sizeof *f);
    if (f) f->buf = malloc(((size_t)n_meta + 1) * sizeof *f->buf);
    if (!f || !f->buf) {
        gt_fp8_sync_destroy(f);
        return gt_error_set(err, GT_ERR_NOMEM, "out of host memory for the fp8 amax reduction");
    }
    f->c = c;
    f->b = b;
    f->meta = meta;
    f->n = n_meta;
    *out = f;
    return GT_OK;
}

void gt_fp8_sync_destroy(gt_fp8_sync *f) {
    if (!f) return;
    free(f->buf);
    free(f);
}

typedef struct pack_args {
    gt_fp8_sync *f;
    gt_step_state *st;
} pack_args;

static void k_pack(const void *p) {
    const pack_args *a = p;
    const gt_fp8_sync *f = a->f;
    for (int i = 0; i < f->n; i++)
        f->buf[i] = f->meta[i].amax;
    f->buf[f->n] = (a->st->nan_flags & GT_NAN_FP8) ? 1.0f : 0.0f;
}

static void k_unpack(const void *p) {
    const pack_args *a = p;
    const gt_fp8_sync *f = a->f;
    for (int i = 0; i < f->n; i++)
        f->meta[i].amax = f->buf[i];
    if (f->buf[f->n] != 0.0f) a->st->nan_flags |= GT_NAN_FP8;
}

void gt_fp8_sync_step(gt_fp8_sync *f, gt_stream *s, gt_step_state *st) {
    if (!f) return;
    pack_args a = {f, st};
    gt_cpu_submit(f->b, s, k_pack, &a, sizeof a);
    gt_comm_all_reduce_max(f->c, s, f->buf, (size_t)f->n + 1);
    gt_cpu_submit(f->b, s, k_unpack, &a, sizeof a);
}
