/* Picks the decode op table of a backend; see decode_ops.h. */
#include "backend/decode_ops.h"

const gt_decode_ops *gt_decode_ops_of(gt_backend *b, gt_error *err) {
    if (b->kind == GT_BACKEND_CPU) return gt_cpu_decode_ops();
#ifdef GT_HAVE_CUDA
    if (b->kind == GT_BACKEND_CUDA) return gt_cuda_decode_ops();
#endif
    gt_error_set(err, GT_ERR_UNSUPPORTED,
                 "the %s backend has no decode ops in this build (generate runs on the cpu and "
                 "cuda backends)",
                 b->name ? b->name : "unknown");
    return NULL;
}
