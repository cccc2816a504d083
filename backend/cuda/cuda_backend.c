/* CUDA backend: device memory (tracked bytes and peak), pinned host memory, streams, async
 * copies, planning (scratch sized from recorded shapes, rotary tables) and CUDA stream capture
 * into graphs.
 * The math ops live in the .cu files and cuda_matmul.c. */
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cudnn_attention.h"
#include "core/clock.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gt_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

#define GT_CUDA_SCRATCH_ALIGN 256

int gt_cuda_fail_call(gt_backend *b, cudaError_t e, const char *call, const char *file, int line) {
    if (e == cudaSuccess) return 0;
    gt_backend_fail(b, GT_ERR_DEVICE, "%s failed: %s (%s) at %s:%d", call, cudaGetErrorName(e),
                    cudaGetErrorString(e), file, line);
    return 1;
}

/* Same as GT_CUDA_OP for functions that return a status through gt_error. */
#define GT_CUDA_RET(err, call)                                                                     \
    do {                                                                                           \
        cudaError_t gt_e_ = (call);                                                                \
        if (gt_e_ != cudaSuccess)                                                                  \
            return gt_error_set((err), GT_ERR_DEVICE, "%s failed: %s (%s) at %s:%d", #call,        \
                                cudaGetErrorName(gt_e_), cudaGetErrorString(gt_e_), __FILE__,      \
                                __LINE__);                                                         \
    } while (0)

void *gt_cuda_scratch(gt_backend *b, gt_scratch_kind kind, size_t bytes, const char *what) {
    gt_cuda_impl *im = b->impl;
    if (b->planning) {
        if (bytes > im->scratch_need[kind]) im->scratch_need[kind] = bytes;
        return NULL;
    }
    if (bytes > im->scratch_have[kind] || !im->scratch[kind]) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "%s needs %zu bytes of scratch but only %zu were planned: this shape "
                        "was not seen in the planning pass (run the op while b->planning is "
                        "set, then plan_finish)",
                        what, bytes, im->scratch_have[kind]);
        return NULL;
    }
    return im->scratch[kind];
}

/* ---- memory ---- */

static int track_add(gt_cuda_impl *im, void *ptr, size_t bytes) {
    if (im->n_allocs == im->cap_allocs) {
        int cap = im->cap_allocs ? im->cap_allocs * 2 : 64;
        gt_cuda_alloc_rec *r = realloc(im->allocs, (size_t)cap * sizeof *r);
        if (!r) return 0;
        im->allocs = r;
        im->cap_allocs = cap;
    }
    im->allocs[im->n_allocs].ptr = ptr;
    im->allocs[im->n_allocs].bytes = bytes;
    im->n_allocs++;
    im->allocated += bytes;
    if (im->allocated > im->peak) im->peak = im->allocated;
    return 1;
}

static int cuda_alloc(gt_backend *b, size_t bytes, void **ptr, gt_error *err) {
    gt_cuda_impl *im = b->impl;
    *ptr = NULL;
    cudaError_t e = cudaMalloc(ptr, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaGetLastError();
        cudaMemGetInfo(&fr, &tot);
        *ptr = NULL;
        return gt_error_set(err, e == cudaErrorMemoryAllocation ? GT_ERR_NOMEM : GT_ERR_DEVICE,
                            "cudaMalloc of %zu bytes failed: %s (%zu of %zu bytes free); "
                            "reduce train.micro_batch_size or the model size",
                            bytes, cudaGetErrorString(e), fr, tot);
    }
    /* zeroed like the CPU backend's memory, so arenas start from the same state; allocation
     * happens outside steps, so waiting here is fine (our streams do not wait for the legacy
     * stream the memset runs on) */
    e = cudaMemset(*ptr, 0, bytes ? bytes : 1);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        cudaGetLastError();
        cudaFree(*ptr);
        *ptr = NULL;
        return gt_error_set(err, GT_ERR_DEVICE, "zeroing a new allocation of %zu bytes failed: %s",
                            bytes, cudaGetErrorString(e));
    }
    if (!track_add(im, *ptr, bytes)) {
        cudaFree(*ptr);
        *ptr = NULL;
        return gt_error_set(err, GT_ERR_NOMEM, "out of host memory tracking an allocation");
    }
    return GT_OK;
}

static void cuda_free(gt_backend *b, void *ptr) {
    if (!ptr) return;
    gt_cuda_impl *im = b->impl;
    for (int i = 0; i < im->n_allocs; i++) {
        if (im->allocs[i].ptr == ptr) {
            im->allocated -= im->allocs[i].bytes;
            im->allocs[i] = im->allocs[im->n_allocs - 1];
            im->n_allocs--;
            break;
        }
    }
    cudaFree(ptr);
}

static int cuda_host_alloc(gt_backend *b, size_t bytes, void **ptr, gt_error *err) {
    (void)b;
    *ptr = NULL;
    cudaError_t e = cudaMallocHost(ptr, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError();
        *ptr = NULL;
        return gt_error_set(err, GT_ERR_NOMEM, "cudaMallocHost of %zu bytes failed: %s", bytes,
                            cudaGetErrorString(e));
    }
    memset(*ptr, 0, bytes);
    return GT_OK;
}

static void cuda_host_free(gt_backend *b, void *ptr) {
    (void)b;
    if (ptr) cudaFreeHost(ptr);
}

static void cuda_mem_info(gt_backend *b, size_t *free_bytes, size_t *total_bytes, size_t *peak) {
    gt_cuda_impl *im = b->impl;
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) cudaGetLastError();
    if (free_bytes) *free_bytes = fr;
    if (total_bytes) *total_bytes = tot;
    if (peak) *peak = im->peak;
}

/* ---- streams and copies ---- */

static int cuda_stream_create(gt_backend *b, gt_stream **s, gt_error *err) {
    (void)b;
    *s = calloc(1, sizeof **s);
    if (!*s) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory creating a stream");
    cudaError_t e = cudaStreamCreateWithFlags(&(*s)->cs, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        free(*s);
        *s = NULL;
        return gt_error_set(err, GT_ERR_DEVICE, "cudaStreamCreateWithFlags failed: %s",
                            cudaGetErrorString(e));
    }
    return GT_OK;
}

static void cuda_stream_destroy(gt_backend *b, gt_stream *s) {
    (void)b;
    if (!s) return;
    if (s->capturing) {
        cudaGraph_t g = NULL;
        cudaStreamEndCapture(s->cs, &g);
        if (g) cudaGraphDestroy(g);
        cudaGetLastError();
    }
    cudaStreamDestroy(s->cs);
    free(s);
}

static int cuda_stream_sync(gt_backend *b, gt_stream *s, gt_error *err) {
    cudaError_t e = cudaStreamSynchronize(gt_cuda_stream(s));
    if (e != cudaSuccess) {
        cudaGetLastError();
        return gt_error_set(err, GT_ERR_DEVICE, "cudaStreamSynchronize failed: %s (%s)",
                            cudaGetErrorName(e), cudaGetErrorString(e));
    }
    return gt_backend_check(b, err);
}

static void cuda_memcpy(gt_backend *b, gt_stream *s, void *dst, const void *src, size_t bytes) {
    if (b->planning || bytes == 0) return;
    GT_CUDA_OP(b, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, gt_cuda_stream(s)));
}

static void cuda_memset0(gt_backend *b, gt_stream *s, void *dst, size_t bytes) {
    if (b->planning || bytes == 0) return;
    GT_CUDA_OP(b, cudaMemsetAsync(dst, 0, bytes, gt_cuda_stream(s)));
}

/* ---- planning ---- */

static int cuda_plan_finish(gt_backend *b, gt_error *err) {
    gt_cuda_impl *im = b->impl;
    b->planning = 0;
    int rc = gt_backend_check(b, err);
    if (rc) return rc;
    size_t total = 0, grow = 0;
    for (int k = 0; k < GT_SCRATCH_COUNT; k++) {
        size_t need = (im->scratch_need[k] + GT_CUDA_SCRATCH_ALIGN - 1) &
                      ~(size_t)(GT_CUDA_SCRATCH_ALIGN - 1);
        if (need > im->scratch_have[k]) grow = 1;
        total += need > im->scratch_have[k] ? need : im->scratch_have[k];
    }
    if (grow && im->live_graphs > 0)
        return gt_error_set(err, GT_ERR_INVALID,
                            "a planning pass after graphs were captured needs more op scratch; "
                            "moving it would break the %d live graph(s): plan every shape before "
                            "the first capture",
                            im->live_graphs);
    if (grow) {
        /* a later planning pass saw larger shapes: replace the scratch (only outside steps) */
        void *base = NULL;
        if (total) {
            rc = cuda_alloc(b, total, &base, err);
            if (rc) return gt_error_wrap(err, "allocating op scratch: ");
        }
        if (im->scratch_base) {
            GT_CUDA_RET(err, cudaDeviceSynchronize());
            cuda_free(b, im->scratch_base);
        }
        im->scratch_base = base;
        size_t off = 0;
        for (int k = 0; k < GT_SCRATCH_COUNT; k++) {
            size_t need = (im->scratch_need[k] + GT_CUDA_SCRATCH_ALIGN - 1) &
                          ~(size_t)(GT_CUDA_SCRATCH_ALIGN - 1);
            if (need < im->scratch_have[k]) need = im->scratch_have[k];
            im->scratch_have[k] = need;
            im->scratch[k] = need ? (char *)base + off : NULL;
            off += need;
        }
    }
    rc = gt_cuda_rope_plan_finish(b, err);
    if (rc) return rc;
    return gt_cuda_matmul_plan_finish(b, err);
}

/* ---- capture ---- */

static int cuda_begin_capture(gt_backend *b, gt_stream *s, gt_capture_mode mode, gt_error *err) {
    (void)b;
    if (!s)
        return gt_error_set(err, GT_ERR_INVALID,
                            "begin_capture needs a created stream (the default stream cannot "
                            "be captured)");
    if (s->capturing) return gt_error_set(err, GT_ERR_INVALID, "stream is already capturing");
    enum cudaStreamCaptureMode m =
        mode == GT_CAPTURE_GLOBAL ? cudaStreamCaptureModeGlobal : cudaStreamCaptureModeThreadLocal;
    GT_CUDA_RET(err, cudaStreamBeginCapture(s->cs, m));
    s->capturing = 1;
    s->capture_t0_ms = gt_now_ms();
    return GT_OK;
}

static int cuda_end_capture(gt_backend *b, gt_stream *s, gt_graph **g, gt_graph_info *info,
                            gt_error *err) {
    gt_cuda_impl *im = b->impl;
    *g = NULL;
    if (!s || !s->capturing)
        return gt_error_set(err, GT_ERR_INVALID, "end_capture on a stream that is not capturing");
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(s->cs, &graph);
    s->capturing = 0;
    double t1 = gt_now_ms();
    if (e != cudaSuccess || !graph) {
        if (graph) cudaGraphDestroy(graph);
        cudaGetLastError(); /* capture errors are not sticky: clear them */
        int rc = gt_error_set(err, GT_ERR_DEVICE,
                              "stream capture failed: cudaStreamEndCapture returned %s (%s); an "
                              "op inside the captured region synchronized, copied to the host "
                              "or used a stream that was not part of the capture%s%s",
                              cudaGetErrorName(e), cudaGetErrorString(e),
                              b->sticky.code ? "; first op error: " : "", b->sticky.msg);
        gt_error_clear(&b->sticky);
        return rc;
    }
    if (b->sticky.code != GT_OK) {
        cudaGraphDestroy(graph);
        int rc = gt_backend_check(b, err);
        gt_error_wrap(err, "an op failed during capture: ");
        return rc;
    }
    int replaced = 0;
    if (im->graph_fill) {
        int rc = gt_cuda_graph_memsets_to_kernels(graph, im->pdl, &replaced, err);
        if (rc) {
            cudaGraphDestroy(graph);
            return rc;
        }
    }
    cudaGraphExec_t exec = NULL;
    e = cudaGraphInstantiate(&exec, graph, 0);
    double t2 = gt_now_ms();
    if (e != cudaSuccess) {
        cudaGraphDestroy(graph);
        cudaGetLastError();
        return gt_error_set(err, GT_ERR_DEVICE, "cudaGraphInstantiate failed: %s (%s)",
                            cudaGetErrorName(e), cudaGetErrorString(e));
    }
    gt_graph *out = calloc(1, sizeof *out);
    if (!out) {
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    }
    out->graph = graph;
    out->exec = exec;
    im->live_graphs++;
    if (info) {
        size_t nodes = 0;
        if (cudaGraphGetNodes(graph, NULL, &nodes) != cudaSuccess) cudaGetLastError();
        info->nodes = (int)nodes;
        info->memsets_replaced = replaced;
        info->capture_ms = t1 - s->capture_t0_ms;
        info->instantiate_ms = t2 - t1;
    }
    *g = out;
    return GT_OK;
}

static int cuda_graph_launch(gt_backend *b, gt_graph *g, gt_stream *s, gt_error *err) {
    if (!g) return gt_error_set(err, GT_ERR_INVALID, "graph_launch of a NULL graph");
    if (s && s->capturing)
        return gt_error_set(err, GT_ERR_INVALID, "cannot launch a graph into a capturing stream");
    GT_CUDA_RET(err, cudaGraphLaunch(g->exec, gt_cuda_stream(s)));
    return gt_backend_check(b, err);
}

static void cuda_graph_destroy(gt_backend *b, gt_graph *g) {
    if (!g) return;
    gt_cuda_impl *im = b->impl;
    if (g->exec) cudaGraphExecDestroy(g->exec);
    if (g->graph) cudaGraphDestroy(g->graph);
    im->live_graphs--;
    free(g);
}

static int cuda_live_graphs(gt_backend *b) {
    return ((gt_cuda_impl *)b->impl)->live_graphs;
}

/* ---- lifetime ---- */

static void cuda_destroy(gt_backend *b) {
    if (!b) return;
    gt_cuda_impl *im = b->impl;
    if (im) {
        cudaDeviceSynchronize();
        cudaGetLastError();
        gt_cuda_matmul_destroy(b);
        gt_cuda_rope_destroy(b);
        gt_cudnn_attn_destroy((gt_cudnn_attn *)im->cudnn);
        free(im->attn_plans);
        if (im->scratch_base) cuda_free(b, im->scratch_base);
        free(im->allocs);
        free(im);
    }
    free((void *)b->ops);
    free(b);
}

static void cuda_describe(gt_backend *b, char *buf, size_t n) {
    const gt_cuda_impl *im = b->impl;
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, im->device) != cudaSuccess) {
        cudaGetLastError();
        snprintf(p.name, sizeof p.name, "CUDA device %d", im->device);
        p.major = p.minor = 0;
    }
    char table[96], attn[256];
    gt_cuda_gemm_table_describe(b, table, sizeof table);
    gt_cuda_attention_describe(b, attn, sizeof attn);
    char moe[48] = "";
    if (im->moe_kernel != GT_KERNEL_NONE)
        snprintf(moe, sizeof moe, "moe gemm: %s; ", gt_kernel_name((gt_kernel)im->moe_kernel));
    snprintf(buf, n, "%s (compute capability %d.%d, %d SMs); %s%s%s%spdl %s, graph memset %s; %s",
             p.name, p.major, p.minor, im->sm_count, attn, attn[0] ? "; " : "", moe,
             im->cudnn || im->caps.cudnn ? "" : "no cuDNN; ", im->pdl ? "on" : "off",
             im->graph_fill ? "kernel" : "node", table);
}

/* The runtime.cuda.* settings that depend on the device alone, checked at creation (the shape
 * ones wait for the planning pass): pdl, and wgmma where the sm_90a code cannot run. */
static int check_device_choices(const gt_cuda_impl *im, int *pdl, gt_error *err) {
    int rc = gt_choose_pdl(&im->caps, im->opts.pdl, pdl, err);
    gt_kernel k;
    /* shapes every kernel takes, so that only the device can refuse */
    const gt_attn_shape any = {128, 64, 0.0f, 0};
    if (!rc && im->opts.moe_gemm == GT_CUDA_MOE_WGMMA)
        rc = gt_choose_moe_gemm(&im->caps, im->opts.moe_gemm, 8, 8, &k, err);
    if (!rc && im->opts.attention_bwd == GT_CUDA_ATTN_BWD_WGMMA)
        rc = gt_choose_attention_bwd(&im->caps, im->opts.attention_bwd, GT_KERNEL_CUDNN, &any, &k,
                                     err);
    if (!rc && im->opts.attention == GT_CUDA_ATTN_CUDNN && !im->caps.cudnn)
        rc = gt_choose_attention_fwd(&im->caps, im->opts.attention, &any, &k, err);
    if (!rc && (unsigned)im->opts.graph_memset > (unsigned)GT_CUDA_MEMSET_NODE)
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "runtime.cuda.graph_memset has no value %d; use auto, kernel or node",
                          (int)im->opts.graph_memset);
    return rc;
}

int gt_backend_create_cuda(gt_backend **out, int device, const gt_cuda_config *opts,
                           gt_error *err) {
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cudaGetLastError();
        return gt_error_set(err, GT_ERR_DEVICE,
                            "no usable CUDA GPU (%s); run on a machine with a GPU or set "
                            "runtime.device=cpu",
                            e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    if (device < 0 || device >= count)
        return gt_error_set(err, GT_ERR_INVALID, "CUDA device %d does not exist (%d visible)",
                            device, count);
    GT_CUDA_RET(err, cudaSetDevice(device));
    gt_backend *b = calloc(1, sizeof *b);
    gt_backend_ops *ops = calloc(1, sizeof *ops);
    gt_cuda_impl *im = calloc(1, sizeof *im);
    if (!b || !ops || !im) {
        free(b);
        free(ops);
        free(im);
        return gt_error_set(err, GT_ERR_NOMEM, "out of host memory creating the CUDA backend");
    }
    im->device = device;
    if (opts) im->opts = *opts; /* else all auto (zero) */
    cudaDeviceGetAttribute(&im->caps.cc_major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&im->caps.cc_minor, cudaDevAttrComputeCapabilityMinor, device);
    im->caps.cudnn = gt_cudnn_attn_available();
    int sm90 = im->caps.cc_major == 9 && im->caps.cc_minor == 0;
    int rc = check_device_choices(im, &im->pdl, err);
    if (rc) {
        free(b);
        free(ops);
        free(im);
        return gt_error_wrap(err, "the CUDA backend's kernel choices: ");
    }
    im->graph_fill = gt_choose_graph_memset(im->opts.graph_memset);
    im->moe_kernel = GT_KERNEL_NONE;
    cudaDeviceGetAttribute(&im->sm_count, cudaDevAttrMultiProcessorCount, device);
    ops->alloc = cuda_alloc;
    ops->free = cuda_free;
    ops->host_alloc = cuda_host_alloc;
    ops->host_free = cuda_host_free;
    ops->mem_info = cuda_mem_info;
    ops->stream_create = cuda_stream_create;
    ops->stream_destroy = cuda_stream_destroy;
    ops->stream_sync = cuda_stream_sync;
    ops->memcpy_h2d = cuda_memcpy;
    ops->memcpy_d2h = cuda_memcpy;
    ops->memcpy_d2d = cuda_memcpy;
    ops->memset0 = cuda_memset0;
    ops->plan_finish = cuda_plan_finish;
    ops->begin_capture = cuda_begin_capture;
    ops->end_capture = cuda_end_capture;
    ops->graph_launch = cuda_graph_launch;
    ops->graph_destroy = cuda_graph_destroy;
    ops->live_graphs = cuda_live_graphs;
    ops->describe = cuda_describe;
    ops->destroy = cuda_destroy;
    gt_cuda_register_matmul_ops(ops);
    gt_cuda_register_dense_ops(ops);
    gt_cuda_register_loss_ops(ops);
    gt_cuda_register_attention_ops(ops);
    gt_cuda_register_optim_ops(ops);
    gt_cuda_register_moe_ops(ops);
    gt_cuda_register_fp8_ops(ops);
    gt_cuda_register_moe_fp8_ops(ops);
    gt_cuda_register_fp8_bias_ops(ops);
    gt_cuda_register_mamba_ops(ops);
    gt_cuda_register_qk_norm_ops(ops);
    b->ops = ops;
    b->kind = GT_BACKEND_CUDA;
    b->name = "cuda";
    b->act_bytes = 2; /* bf16 */
    b->fp8_bytes = 1; /* one fp8 code */
    b->impl = im;
    rc = gt_cuda_matmul_init(b, err);
    if (!rc) rc = gt_cuda_attention_init(sm90, err);
    if (!rc) rc = gt_cuda_moe_init(sm90, err);
    if (!rc) rc = gt_cuda_loss_init(err);
    if (rc) {
        cuda_destroy(b);
        return rc;
    }
    *out = b;
    return GT_OK;
}
