/* The fp8 state's reduction over the ranks (fp8_sync.h): the slots' amaxes and the step's fp8
 * flag packed into one block, one max all-reduce, unpacked: CPU-backend kernels over host
 * memory under MPI, CUDA kernels over device memory around NCCL's all-reduce on the GPU. */
#include "dist/fp8_sync.h"

#include <stddef.h>
#include <stdlib.h>

#include "backend/cpu/cpu_backend.h"

#ifdef GT_HAVE_NCCL
#include "backend/cuda/cuda_backend.h"
#include "dist/comm_cuda.h"
#endif

_Static_assert(offsetof(gt_fp8_meta, amax) % sizeof(float) == 0 &&
                   sizeof(gt_fp8_meta) % sizeof(float) == 0,
               "the GPU packing reads the slots' amaxes as floats at a stride");

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
    if (b->kind != GT_BACKEND_CPU && !gt_comm_uses_nccl(c))
        return gt_error_set(err, GT_ERR_UNSUPPORTED,
                            "the data-parallel fp8 amax reduction on the %s backend needs an "
                            "NCCL communicator bound to it (gt_comm_bind)",
                            b->name);
    if (n_meta < 0 || (n_meta > 0 && !meta))
        return gt_error_set(err, GT_ERR_INVALID, "fp8 sync: %d slots without their state", n_meta);
    gt_fp8_sync *f = calloc(1, sizeof *f);
    size_t bytes = ((size_t)n_meta + 1) * sizeof *f->buf;
    if (!f) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory for the fp8 amax reduction");
    f->c = c;
    f->b = b;
    if (b->kind != GT_BACKEND_CPU) { /* device memory the all-reduce reads and writes */
        int rc = b->ops->alloc(b, bytes, (void **)&f->buf, err);
        if (rc) {
            free(f);
            return gt_error_wrap(err, "the fp8 amax reduction's buffer: ");
        }
    } else if (!(f->buf = malloc(bytes))) {
        free(f);
        return gt_error_set(err, GT_ERR_NOMEM, "out of host memory for the fp8 amax reduction");
    }
    f->meta = meta;
    f->n = n_meta;
    *out = f;
    return GT_OK;
}

void gt_fp8_sync_destroy(gt_fp8_sync *f) {
    if (!f) return;
    if (f->b && f->b->kind != GT_BACKEND_CPU) {
        if (f->buf) f->b->ops->free(f->b, f->buf);
    } else {
        free(f->buf);
    }
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

#ifdef GT_HAVE_NCCL
/* the GPU's packing: the slots' amax fields at a stride of whole slots, the flag word */
static void cuda_pack(gt_fp8_sync *f, gt_stream *s, gt_step_state *st, int unpack) {
    if (f->b->planning) return;
    float *amax = f->n ? &f->meta[0].amax : NULL;
    size_t stride = sizeof(gt_fp8_meta) / sizeof(float);
    cudaStream_t cs = gt_cuda_stream(s);
    cudaError_t e =
        unpack ? gt_dist_cuda_fp8_unpack(cs, f->buf, amax, stride, f->n, &st->nan_flags, GT_NAN_FP8)
               : gt_dist_cuda_fp8_pack(cs, f->buf, amax, stride, f->n, &st->nan_flags, GT_NAN_FP8);
    if (e != cudaSuccess)
        gt_cuda_fail_call(f->b, e, unpack ? "k_fp8_unpack" : "k_fp8_pack", __FILE__, __LINE__);
}
#endif

void gt_fp8_sync_step(gt_fp8_sync *f, gt_stream *s, gt_step_state *st) {
    if (!f) return;
#ifdef GT_HAVE_NCCL
    if (f->b->kind == GT_BACKEND_CUDA) {
        cuda_pack(f, s, st, 0);
        gt_comm_all_reduce_max(f->c, s, f->buf, (size_t)f->n + 1);
        cuda_pack(f, s, st, 1);
        return;
    }
#endif
    pack_args a = {f, st};
    gt_cpu_submit(f->b, s, k_pack, &a, sizeof a);
    gt_comm_all_reduce_max(f->c, s, f->buf, (size_t)f->n + 1);
    gt_cpu_submit(f->b, s, k_unpack, &a, sizeof a);
}
