/* CPU reference: moe ops (placeholder until implemented). */
#include "backend/cpu/cpu_backend.h"

void gt_cpu_register_moe_ops(gt_backend_ops *ops) {
    (void)ops;
}
