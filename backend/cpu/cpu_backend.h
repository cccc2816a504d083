/* CPU backend internals: fp32 reference ops run on the calling thread. Every op packs its
 * arguments into a struct and submits it like a kernel launch: run at once in eager mode,
 * appended to the stream's recording while capturing. A recorded graph replays the same
 * kernels with the same argument bytes, so anything an op passed by value is frozen exactly
 * as in a CUDA graph: per-step values must come from the step state, and the CPU replay
 * equality tests catch a violation. */
#ifndef GT_BACKEND_CPU_CPU_BACKEND_H
#define GT_BACKEND_CPU_CPU_BACKEND_H

#include "backend/backend.h"

typedef void (*gt_cpu_kernel)(const void *args);

/* Runs fn(args) now, or records fn with a copy of the args when s is capturing. */
void gt_cpu_submit(gt_backend *b, gt_stream *s, gt_cpu_kernel fn, const void *args, size_t size);

/* Fills the math entries of the op table (backend/cpu/cpu_*.c). */
void gt_cpu_register_dense_ops(gt_backend_ops *ops);
void gt_cpu_register_optim_ops(gt_backend_ops *ops);
void gt_cpu_register_moe_ops(gt_backend_ops *ops);
void gt_cpu_register_fp8_ops(gt_backend_ops *ops);      /* cpu_fp8.c */
void gt_cpu_register_fp8_bias_ops(gt_backend_ops *ops); /* cpu_fp8_bias.c, by the one above */
void gt_cpu_register_moe_fp8_ops(gt_backend_ops *ops);  /* cpu_moe_fp8.c, by the one above */
void gt_cpu_register_mamba_ops(gt_backend_ops *ops);
/* called by gt_cpu_register_dense_ops: rope and attention (cpu_attention.c), cross entropy
 * and loss_accumulate (cpu_loss.c) */
void gt_cpu_register_attention_ops(gt_backend_ops *ops);
void gt_cpu_register_loss_ops(gt_backend_ops *ops);
void gt_cpu_register_qk_norm_ops(gt_backend_ops *ops); /* cpu_qk_norm.c */
/* called by gt_cpu_register_moe_ops: router, aux loss, router backward (cpu_router.c) */
void gt_cpu_register_router_ops(gt_backend_ops *ops);

#endif
