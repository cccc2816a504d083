/* The device memory a configuration needs, computed from the plan without allocating: the
 * model's arenas, the optimizer's, and an allowance for backend workspaces. The trainer
 * refuses a run that cannot fit before it allocates anything; `graphtrain validate` prints
 * the same plan. */
#ifndef GT_MODEL_MEMORY_PLAN_H
#define GT_MODEL_MEMORY_PLAN_H

#include <stddef.h>
#include <stdio.h>

#include "config/config.h"
#include "core/error.h"

typedef struct gt_memory_plan {
    size_t params, grads, activations, scratch; /* model arenas */
    size_t optimizer; /* master + Adam m and v held by one rank: with the distributed optimizer
                       * its shards (rank 0's, the largest: ceil(bucket / dp) of each bucket) */
    size_t optimizer_whole; /* the same for every parameter (optimizer without sharding) */
    int opt_shards;         /* ranks the optimizer state is sharded over; 1: replicated */
    size_t workspace;       /* allowance: cuBLASLt, attention, reductions */
    size_t total;
    /* the activations the same configuration would keep without recompute (equal to
     * activations when model.recompute_granularity is none) */
    size_t activations_without_recompute;
} gt_memory_plan;

/* Bytes of a parameter's master weight beside its compute copy: 2 where the compute copy is
 * bf16 (the master's int16 low halves, core/bf16.h's gt_master_split), else 4 (fp32). */
static inline size_t gt_master_elem_bytes(size_t act_bytes) {
    return act_bytes == 2 ? 2 : 4;
}

/* Megatron's data-parallel bucket in parameters: ddp.bucket_size, or when unset
 * max(40M, 1M x dp_size). The trainer's buckets and the plan's shards both take it. */
size_t gt_memory_dp_bucket_elems(const gt_config *cfg, int dp_size);
/* The data-parallel size a configuration names: ddp.data_parallel_size, or runtime.num_gpus /
 * (tp * pp * cp) when that is 0; at least 1. */
int gt_memory_dp_size(const gt_config *cfg);

/* act_bytes: bytes per compute element (2 for the cuda backend's bf16, 4 for cpu). The
 * optimizer state is one rank's: its shards with optimizer.use_distributed_optimizer over the
 * configuration's data-parallel size (gt_memory_dp_size). */
int gt_memory_plan_compute(const gt_config *cfg, size_t act_bytes, gt_memory_plan *p,
                           gt_error *err);
/* The same over dp_size ranks (the trainer passes the world it runs in). */
int gt_memory_plan_compute_dp(const gt_config *cfg, size_t act_bytes, int dp_size,
                              gt_memory_plan *p, gt_error *err);
void gt_memory_plan_print(const gt_memory_plan *p, const char *backend, FILE *f);
/* GT_ERR_INVALID (a configuration this device cannot hold) with the estimate, the free
 * amount and the knobs to turn when total > free_bytes; free_bytes 0 = not known, passes. */
int gt_memory_plan_check_fit(const gt_memory_plan *p, size_t free_bytes, gt_error *err);
/* The same for a backend whose arenas are host memory (the CPU backend), against
 * avail_bytes, what the host can still give (gt_memory_host_available). */
int gt_memory_plan_check_host_fit(const gt_memory_plan *p, size_t avail_bytes, gt_error *err);

/* Bytes of host memory a new allocation can get: MemAvailable of /proc/meminfo, else the
 * free physical pages sysconf counts; 0 when neither can be read. */
size_t gt_memory_host_available(void);
/* MemAvailable of a /proc/meminfo text, in bytes; 0 when the line is absent or malformed. */
size_t gt_memory_parse_meminfo(const char *text);

/* Memory of one GPU of a kind Bridge's -g names (runtime.gpu: h100, h200, b200, gb200,
 * gb300), in bytes; 0 for a name not in the table. */
size_t gt_memory_gpu_bytes(const char *gpu);

#endif
