/* Memory plan of a configuration; see memory_plan.h. */
#include "model/memory_plan.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"

#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * 1024.0 * 1024.0)
/* cuBLASLt's fixed workspace plus reduction partials and the other small scratch regions */
#define WORKSPACE_FIXED ((size_t)96 << 20)

/* Megatron's bucket when ddp.bucket_size is unset: max(40M, 1M x data-parallel size) */
#define DP_BUCKET_MIN 40000000u
#define DP_BUCKET_PER_RANK 1000000u

size_t gt_memory_dp_bucket_elems(const gt_config *cfg, int dp_size) {
    size_t bucket = cfg->ddp.bucket_size > 0 ? (size_t)cfg->ddp.bucket_size : 0;
    if (bucket == 0) {
        bucket = (size_t)DP_BUCKET_PER_RANK * (size_t)(dp_size > 0 ? dp_size : 1);
        if (bucket < DP_BUCKET_MIN) bucket = DP_BUCKET_MIN;
    }
    return bucket;
}

int gt_memory_dp_size(const gt_config *cfg) {
    if (cfg->ddp.data_parallel_size > 0) return cfg->ddp.data_parallel_size;
    const gt_model_config *m = &cfg->model;
    long model_par = (long)m->tensor_model_parallel_size * m->pipeline_model_parallel_size *
                     m->context_parallel_size;
    long dp = model_par > 0 ? cfg->runtime.num_gpus / model_par : cfg->runtime.num_gpus;
    return dp > 0 ? (int)dp : 1;
}

/* rank 0's elements of the sharded state: the buckets are cut from the last parameter back
 * (grad_sync.h), and the first n % dp ranks own one more element of each */
static size_t largest_shard(size_t n, size_t bucket, int dp) {
    size_t total = 0;
    for (size_t end = n; end > 0;) {
        size_t len = end < bucket ? end : bucket;
        total += (len + (size_t)dp - 1) / (size_t)dp;
        end -= len;
    }
    return total;
}

int gt_memory_plan_compute(const gt_config *cfg, size_t act_bytes, gt_memory_plan *p,
                           gt_error *err) {
    return gt_memory_plan_compute_dp(cfg, act_bytes, gt_memory_dp_size(cfg), p, err);
}

int gt_memory_plan_compute_dp(const gt_config *cfg, size_t act_bytes, int dp_size,
                              gt_memory_plan *p, gt_error *err) {
    gt_model_info mi = {0};
    int rc = gt_model_plan(cfg, act_bytes, &mi, err);
    if (rc) return rc;
    p->params = mi.param_bytes;
    p->grads = mi.grad_bytes;
    p->activations = mi.act_bytes;
    p->scratch = mi.scratch_bytes;
    size_t per = gt_master_elem_bytes(act_bytes) +
                 gt_state_dtype_bytes(cfg->optimizer.exp_avg_dtype) +
                 gt_state_dtype_bytes(cfg->optimizer.exp_avg_sq_dtype);
    p->optimizer_whole = mi.n_params * per;
    p->opt_shards = cfg->optimizer.use_distributed_optimizer && dp_size > 1 ? dp_size : 1;
    p->optimizer =
        p->opt_shards > 1
            ? largest_shard(mi.n_params, gt_memory_dp_bucket_elems(cfg, dp_size), dp_size) * per
            : p->optimizer_whole;
    /* cuDNN's deterministic attention backward needs B*H*T*T*2 bytes of workspace (the
     * largest single allowance); count it whenever the model has attention */
    const gt_model_config *m = &cfg->model;
    size_t attn_ws = (size_t)cfg->train.micro_batch_size * (size_t)m->num_attention_heads *
                     (size_t)m->seq_length * (size_t)m->seq_length * 2;
    p->workspace = WORKSPACE_FIXED + (act_bytes == 2 ? attn_ws : 0);
    p->total = p->params + p->grads + p->activations + p->scratch + p->optimizer + p->workspace;
    p->activations_without_recompute = p->activations;
    if (cfg->model.recompute_granularity != GT_RECOMPUTE_NONE) {
        gt_config plain = *cfg;
        plain.model.recompute_granularity = GT_RECOMPUTE_NONE;
        if ((rc = gt_model_plan(&plain, act_bytes, &mi, err))) return rc;
        p->activations_without_recompute = mi.act_bytes;
    }
    return GT_OK;
}

void gt_memory_plan_print(const gt_memory_plan *p, const char *backend, FILE *f) {
    fprintf(f, "memory plan on the %s backend (allocated once, graphs add nothing):\n", backend);
    fprintf(f, "  parameters   %10.1f MiB\n", (double)p->params / MIB);
    fprintf(f, "  gradients    %10.1f MiB  (fp32)\n", (double)p->grads / MIB);
    if (p->opt_shards > 1)
        fprintf(f,
                "  optimizer    %10.1f MiB  (per rank: its shards of %.1f MiB, split over %d "
                "data-parallel ranks by optimizer.use_distributed_optimizer)\n",
                (double)p->optimizer / MIB, (double)p->optimizer_whole / MIB, p->opt_shards);
    else
        fprintf(f,
                "  optimizer    %10.1f MiB  (master: fp32, or its low halves beside bf16 "
                "parameters; Adam m and v: fp32, or bf16 if set)\n",
                (double)p->optimizer / MIB);
    if (p->activations_without_recompute != p->activations)
        fprintf(f, "  activations  %10.1f MiB  (recompute; %.1f MiB without it)\n",
                (double)p->activations / MIB, (double)p->activations_without_recompute / MIB);
    else
        fprintf(f, "  activations  %10.1f MiB\n", (double)p->activations / MIB);
    fprintf(f, "  scratch      %10.1f MiB\n", (double)p->scratch / MIB);
    fprintf(f, "  workspaces   %10.1f MiB  (allowance: GEMM, attention, reductions)\n",
            (double)p->workspace / MIB);
    fprintf(f, "  total        %10.2f GiB\n", (double)p->total / GIB);
}

/* The refusal of a plan that needs more than `have` bytes of `where` memory. */
static int fit_error(const gt_memory_plan *p, size_t have, const char *where, const char *source,
                     const char *more, gt_error *err) {
    return gt_error_set(
        err, GT_ERR_INVALID,
        "this run needs about %.2f GiB of %s memory (parameters %.2f, gradients %.2f, "
        "optimizer %.2f, activations %.2f, scratch and workspaces %.2f GiB) but only %.2f GiB "
        "are %s; nothing was allocated. Lower train.micro_batch_size (activations scale "
        "with it) or model.seq_length, recompute activations (model.recompute_granularity="
        "selective or full), use fewer model.num_layers or a smaller model.hidden_size, %s",
        (double)p->total / GIB, where, (double)p->params / GIB, (double)p->grads / GIB,
        (double)p->optimizer / GIB, (double)p->activations / GIB,
        (double)(p->scratch + p->workspace) / GIB, (double)have / GIB, source, more);
}

int gt_memory_plan_check_fit(const gt_memory_plan *p, size_t free_bytes, gt_error *err) {
    if (free_bytes == 0 || p->total <= free_bytes) return GT_OK;
    return fit_error(p, free_bytes, "device", "free", "or free the GPU of other processes", err);
}

int gt_memory_plan_check_host_fit(const gt_memory_plan *p, size_t avail_bytes, gt_error *err) {
    if (avail_bytes == 0 || p->total <= avail_bytes) return GT_OK;
    return fit_error(p, avail_bytes, "host",
                     "available (MemAvailable; the CPU backend keeps "
                     "every arena in host memory)",
                     "close other programs, or train on a GPU (runtime.device=cuda)", err);
}

size_t gt_memory_parse_meminfo(const char *text) {
    static const char key[] = "MemAvailable:";
    for (const char *line = text; line && *line;
         line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, key, sizeof key - 1)) continue;
        char *end = NULL;
        errno = 0;
        unsigned long long kib = strtoull(line + sizeof key - 1, &end, 10);
        if (errno || end == line + sizeof key - 1) return 0;
        while (*end == ' ' || *end == '\t')
            end++;
        if (strncmp(end, "kB", 2) || kib > SIZE_MAX / 1024) return 0;
        return (size_t)kib * 1024;
    }
    return 0;
}

size_t gt_memory_host_available(void) {
    char buf[8192];
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        size_t avail = gt_memory_parse_meminfo(buf);
        if (avail) return avail;
    }
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0 || (unsigned long)pages > SIZE_MAX / (unsigned long)page) return 0;
    return (size_t)pages * (size_t)page;
}

/* GPU memory as NVIDIA states it (its "GB" of HBM are GiB: an H100's 80 show as 81559 MiB) */
static const struct {
    const char *name;
    double gib;
} k_gpus[] = {
    {"h100", 80}, {"h200", 141}, {"b200", 180}, {"gb200", 186}, {"gb300", 279},
};

size_t gt_memory_gpu_bytes(const char *gpu) {
    for (size_t i = 0; gpu && i < sizeof k_gpus / sizeof k_gpus[0]; i++)
        if (!strcmp(k_gpus[i].name, gpu)) return (size_t)(k_gpus[i].gib * GIB);
    return 0;
}
