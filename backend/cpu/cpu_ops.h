/* Helpers shared by the CPU reference op files (cpu_dense.c, cpu_attention.c, cpu_loss.c,
 * cpu_optim.c, cpu_router.c, cpu_moe.c): the enqueue-time argument check. */
#ifndef GT_BACKEND_CPU_CPU_OPS_H
#define GT_BACKEND_CPU_CPU_OPS_H

#include "backend/cpu/cpu_backend.h"

/* Shape checks run when an op is enqueued (also while planning, so a bad shape is reported
 * when the trainer is built, not in the middle of a step): the op is not enqueued and the
 * message goes to the sticky error that gt_backend_check() returns. */
#define CPU_REQUIRE(b, cond, ...)                                                                  \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            gt_backend_fail((b), GT_ERR_INVALID, __VA_ARGS__);                                     \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#endif
