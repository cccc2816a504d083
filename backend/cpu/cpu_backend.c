/* CPU backend: memory, streams, copies, and capture by recording submitted kernels. */
#include "backend/cpu/cpu_backend.h"
#include "core/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cpu_node {
    gt_cpu_kernel fn;
    size_t arg_off; /* offset of the argument bytes in the graph's arg buffer */
} cpu_node;

struct gt_graph {
    cpu_node *nodes;
    int count, cap;
    unsigned char *args; /* argument bytes of every node, 16-byte aligned each */
    size_t args_used, args_cap;
};

struct gt_stream {
    gt_graph *recording; /* non-NULL while capturing */
    int capture_failed;
};

typedef struct cpu_impl {
    int live_graphs;
    size_t allocated, peak;
} cpu_impl;

/* Allocation header so free() can keep the byte count exact. */
typedef struct cpu_block {
    size_t bytes;
    size_t pad_;
} cpu_block;

static int cpu_alloc(gt_backend *b, size_t bytes, void **ptr, gt_error *err) {
    cpu_impl *im = b->impl;
    cpu_block *blk = NULL;
    /* 256-byte alignment like the device, so arena offsets behave the same */
    if (posix_memalign((void **)&blk, 256, bytes + 256) != 0)
        return gt_error_set(err, GT_ERR_NOMEM,
                            "out of host memory allocating %zu bytes; reduce "
                            "train.micro_batch_size or the model size",
                            bytes);
    blk->bytes = bytes;
    memset((char *)blk + 256, 0, bytes);
    im->allocated += bytes;
    if (im->allocated > im->peak) im->peak = im->allocated;
    *ptr = (char *)blk + 256;
    return GT_OK;
}

static void cpu_free(gt_backend *b, void *ptr) {
    if (!ptr) return;
    cpu_impl *im = b->impl;
    cpu_block *blk = (cpu_block *)((char *)ptr - 256);
    im->allocated -= blk->bytes;
    free(blk);
}

static int cpu_host_alloc(gt_backend *b, size_t bytes, void **ptr, gt_error *err) {
    (void)b;
    *ptr = calloc(1, bytes ? bytes : 1);
    if (!*ptr) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory (%zu bytes)", bytes);
    return GT_OK;
}

static void cpu_host_free(gt_backend *b, void *ptr) {
    (void)b;
    free(ptr);
}

static void cpu_mem_info(gt_backend *b, size_t *free_bytes, size_t *total_bytes, size_t *peak) {
    cpu_impl *im = b->impl;
    if (free_bytes) *free_bytes = 0;
    if (total_bytes) *total_bytes = 0;
    if (peak) *peak = im->peak;
}

static int cpu_stream_create(gt_backend *b, gt_stream **s, gt_error *err) {
    (void)b;
    *s = calloc(1, sizeof **s);
    if (!*s) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory creating a stream");
    return GT_OK;
}

static void graph_free(gt_graph *g) {
    if (!g) return;
    free(g->nodes);
    free(g->args);
    free(g);
}

static void cpu_stream_destroy(gt_backend *b, gt_stream *s) {
    (void)b;
    if (!s) return;
    graph_free(s->recording);
    free(s);
}

/* A sync inside a captured region is a bug that CUDA rejects (cudaErrorStreamCaptureUnsupported)
 * and that invalidates the capture; the CPU does the same, so CI catches it. */
static int cpu_stream_sync(gt_backend *b, gt_stream *s, gt_error *err) {
    if (s && s->recording) {
        static const char msg[] =
            "stream_sync called while the stream is capturing a graph; nothing inside a "
            "captured step may synchronize: move the sync after end_capture (the capture is "
            "invalidated)";
        s->capture_failed = 1;
        gt_backend_fail(b, GT_ERR_INVALID, "%s", msg);
        return gt_error_set(err, GT_ERR_INVALID, "%s", msg);
    }
    return gt_backend_check(b, err);
}

void gt_cpu_submit(gt_backend *b, gt_stream *s, gt_cpu_kernel fn, const void *args, size_t size) {
    if (b->planning) return;
    gt_graph *g = s ? s->recording : NULL;
    if (!g) {
        fn(args);
        return;
    }
    if (s->capture_failed) return;
    size_t need = (size + 15) & ~(size_t)15;
    if (g->count == g->cap) {
        int cap = g->cap ? g->cap * 2 : 256;
        cpu_node *n = realloc(g->nodes, (size_t)cap * sizeof *n);
        if (!n) goto oom;
        g->nodes = n;
        g->cap = cap;
    }
    if (g->args_used + need > g->args_cap) {
        size_t cap = g->args_cap ? g->args_cap * 2 : 16384;
        while (cap < g->args_used + need)
            cap *= 2;
        unsigned char *a = realloc(g->args, cap);
        if (!a) goto oom;
        g->args = a;
        g->args_cap = cap;
    }
    memcpy(g->args + g->args_used, args, size);
    g->nodes[g->count].fn = fn;
    g->nodes[g->count].arg_off = g->args_used;
    g->count++;
    g->args_used += need;
    return;
oom:
    s->capture_failed = 1;
    gt_backend_fail(b, GT_ERR_NOMEM, "out of host memory recording a graph");
}

typedef struct copy_args {
    void *dst;
    const void *src;
    size_t bytes;
} copy_args;

static void k_copy(const void *p) {
    const copy_args *a = p;
    memmove(a->dst, a->src, a->bytes);
}

static void k_zero(const void *p) {
    const copy_args *a = p;
    memset(a->dst, 0, a->bytes);
}

static void cpu_memcpy(gt_backend *b, gt_stream *s, void *dst, const void *src, size_t bytes) {
    copy_args a = {dst, src, bytes};
    gt_cpu_submit(b, s, k_copy, &a, sizeof a);
}

static void cpu_memset0(gt_backend *b, gt_stream *s, void *dst, size_t bytes) {
    copy_args a = {dst, NULL, bytes};
    gt_cpu_submit(b, s, k_zero, &a, sizeof a);
}

static void cpu_to_float(gt_backend *b, gt_stream *s, float *dst, const void *src, size_t n) {
    cpu_memcpy(b, s, dst, src, n * sizeof(float));
}

static void cpu_from_float(gt_backend *b, gt_stream *s, void *dst, const float *src, size_t n) {
    cpu_memcpy(b, s, dst, src, n * sizeof(float));
}

static int cpu_plan_finish(gt_backend *b, gt_error *err) {
    b->planning = 0;
    return gt_backend_check(b, err);
}

static int cpu_begin_capture(gt_backend *b, gt_stream *s, gt_capture_mode mode, gt_error *err) {
    (void)b;
    (void)mode;
    if (s->recording)
        return gt_error_set(err, GT_ERR_INVALID, "stream is already capturing a graph");
    s->recording = calloc(1, sizeof *s->recording);
    if (!s->recording) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    s->capture_failed = 0;
    return GT_OK;
}

static int cpu_end_capture(gt_backend *b, gt_stream *s, gt_graph **g, gt_graph_info *info,
                           gt_error *err) {
    cpu_impl *im = b->impl;
    *g = NULL;
    if (!s->recording)
        return gt_error_set(err, GT_ERR_INVALID, "end_capture on a stream that is not capturing");
    double t0 = gt_now_ms();
    gt_graph *rec = s->recording;
    s->recording = NULL;
    /* An op that failed while recording (sticky error) invalidates the capture, as a
     * failed launch or a stream sync invalidates a CUDA stream capture. */
    if (s->capture_failed || b->sticky.code != GT_OK) {
        graph_free(rec);
        s->capture_failed = 0;
        int code = gt_backend_check(b, err);
        if (code == GT_OK)
            code = gt_error_set(err, GT_ERR_DEVICE, "capture failed while recording the graph");
        return code;
    }
    *g = rec;
    im->live_graphs++;
    if (info) {
        info->nodes = rec->count;
        info->capture_ms = 0;
        info->instantiate_ms = gt_now_ms() - t0;
    }
    return GT_OK;
}

static int cpu_graph_launch(gt_backend *b, gt_graph *g, gt_stream *s, gt_error *err) {
    if (s && s->recording)
        return gt_error_set(err, GT_ERR_INVALID, "cannot launch a graph into a capturing stream");
    for (int i = 0; i < g->count; i++)
        g->nodes[i].fn(g->args + g->nodes[i].arg_off);
    return gt_backend_check(b, err);
}

static void cpu_graph_destroy(gt_backend *b, gt_graph *g) {
    if (!g) return;
    cpu_impl *im = b->impl;
    im->live_graphs--;
    graph_free(g);
}

static int cpu_live_graphs(gt_backend *b) {
    return ((cpu_impl *)b->impl)->live_graphs;
}

static void cpu_destroy(gt_backend *b) {
    free(b->impl);
    free((void *)b->ops);
    free(b);
}

static void cpu_describe(gt_backend *b, char *buf, size_t n) {
    (void)b;
    snprintf(buf, n, "CPU reference kernels, fp32 activations, one thread");
}

int gt_backend_create_cpu(gt_backend **out, gt_error *err) {
    *out = NULL;
    gt_backend *b = calloc(1, sizeof *b);
    gt_backend_ops *ops = calloc(1, sizeof *ops);
    cpu_impl *im = calloc(1, sizeof *im);
    if (!b || !ops || !im) {
        free(b);
        free(ops);
        free(im);
        return gt_error_set(err, GT_ERR_NOMEM, "out of host memory creating the CPU backend");
    }
    ops->alloc = cpu_alloc;
    ops->free = cpu_free;
    ops->host_alloc = cpu_host_alloc;
    ops->host_free = cpu_host_free;
    ops->mem_info = cpu_mem_info;
    ops->stream_create = cpu_stream_create;
    ops->stream_destroy = cpu_stream_destroy;
    ops->stream_sync = cpu_stream_sync;
    ops->memcpy_h2d = cpu_memcpy;
    ops->memcpy_d2h = cpu_memcpy;
    ops->memcpy_d2d = cpu_memcpy;
    ops->memset0 = cpu_memset0;
    ops->to_float = cpu_to_float;
    ops->from_float = cpu_from_float;
    ops->plan_finish = cpu_plan_finish;
    ops->begin_capture = cpu_begin_capture;
    ops->end_capture = cpu_end_capture;
    ops->graph_launch = cpu_graph_launch;
    ops->graph_destroy = cpu_graph_destroy;
    ops->live_graphs = cpu_live_graphs;
    ops->describe = cpu_describe;
    ops->destroy = cpu_destroy;
    gt_cpu_register_dense_ops(ops);
    gt_cpu_register_optim_ops(ops);
    gt_cpu_register_moe_ops(ops);
    gt_cpu_register_fp8_ops(ops);
    gt_cpu_register_mamba_ops(ops);
    b->ops = ops;
    b->kind = GT_BACKEND_CPU;
    b->name = "cpu";
    b->act_bytes = sizeof(float);
    b->fp8_bytes = sizeof(float); /* each FP8 element as its code's value */
    b->impl = im;
    *out = b;
    return GT_OK;
}
