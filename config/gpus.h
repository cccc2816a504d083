/* The GPUs a configuration may target (Bridge's -g / runtime.gpu) and their peak rates, one
 * table (config/gpus.c): runtime.gpu accepts only these names, the rules read the
 * architecture, bench its rates. */
#ifndef GT_CONFIG_GPUS_H
#define GT_CONFIG_GPUS_H

typedef struct gt_gpu_spec {
    const char *name;    /* as -g spells it: "h100" */
    int sm;              /* compute capability x 10: 90 Hopper, 100 Blackwell */
    double bf16_flops;   /* dense bf16 tensor-core FLOP/s */
    double fp8_flops;    /* dense fp8 tensor-core FLOP/s */
    double bytes_per_s;  /* memory bandwidth */
    double memory_bytes; /* device memory */
    const char *source;  /* where the rates come from (measured or datasheet) */
} gt_gpu_spec;

/* NULL-terminated names in table order; runtime.gpu's allowed values. */
extern const char *const gt_gpu_names[];

/* The entry for name (exact), or NULL. */
const gt_gpu_spec *gt_gpu_find(const char *name);

/* The GPU whose rates are used when runtime.gpu is empty: the one graphtrain is measured on. */
#define GT_GPU_DEFAULT "h200"

#endif
