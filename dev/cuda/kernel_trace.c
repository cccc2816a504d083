/* A CUPTI injection library for `scripts/gpu.sh timeline`: records every kernel, memset and
 * memcpy the process runs on the GPU, graph nodes included, with start and end times, and
 * writes them as CSV at exit to $GT_KERNEL_TRACE (default kernel_trace.csv). Load it with
 * CUDA_INJECTION64_PATH=/path/libgt_kernel_trace.so; the dev/ build (-DGT_DEV=ON) makes it
 * when the toolkit has CUPTI. Concurrent-kernel tracing does not serialize kernels, so the
 * gaps between them are the ones of an untraced run, give or take the tracing's own cost. */
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define TRACE_BUFFER_BYTES ((size_t)8 << 20)

static FILE *trace_out;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, TRACE_BUFFER_BYTES);
    *size = *buffer ? TRACE_BUFFER_BYTES : 0;
    *max_records = 0;
}

static void row(uint64_t start, uint64_t end, uint32_t stream, uint32_t graph, uint64_t node,
                const char *name) {
    fprintf(trace_out, "%llu,%llu,%u,%u,%llu,\"%s\"\n", (unsigned long long)start,
            (unsigned long long)(end - start), stream, graph, (unsigned long long)node, name);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer,
                                      size_t size, size_t valid) {
    (void)ctx, (void)stream_id, (void)size;
    CUpti_Activity *rec = NULL;
    while (trace_out && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
            rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            row(k->start, k->end, k->streamId, k->graphId, k->graphNodeId, k->name);
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
            row(m->start, m->end, m->streamId, m->graphId, m->graphNodeId, "[CUDA memset]");
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
            row(m->start, m->end, m->streamId, m->graphId, m->graphNodeId, "[CUDA memcpy]");
        }
    }
    free(buffer);
}

static void trace_finish(void) {
    cuptiActivityFlushAll(1);
    if (trace_out) fclose(trace_out);
    trace_out = NULL;
}

int InitializeInjection(void) {
    const char *path = getenv("GT_KERNEL_TRACE");
    trace_out = fopen(path && *path ? path : "kernel_trace.csv", "w");
    if (!trace_out) {
        fprintf(stderr, "kernel_trace: cannot write %s\n",
                path && *path ? path : "kernel_trace.csv");
        return 0;
    }
    fprintf(trace_out, "Start (ns),Duration (ns),Stream,Graph,Node,Name\n");
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS) {
        fprintf(stderr, "kernel_trace: CUPTI activity tracing could not be enabled\n");
        fclose(trace_out);
        trace_out = NULL;
        return 0;
    }
    atexit(trace_finish);
    return 1;
}
