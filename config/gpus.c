/* The GPU table behind runtime.gpu (Bridge's -g): architecture and peak rates per GPU. The
 * H200's figures are graphtrain's own measurements (bf16: a cuBLASLt GEMM and bandwidth: a
 * device-to-device copy, WORKLOADS.md; fp8: `graphtrain tune-gemm --peak`, an 8192^3 E4M3 GEMM
 * with fast accumulation), so MFU says how far a step is from what the GPU really does; the
 * others are NVIDIA's dense datasheet rates. */
#include "config/gpus.h"

#include <string.h>

#define T 1e12
#define GB 1e9

static const gt_gpu_spec k_gpus[] = {
    {"h100", 90, 989 * T, 1979 * T, 3.35e12, 80 * GB, "datasheet (H100 SXM, dense)"},
    {"h200", 90, 790 * T, 1508 * T, 4.3e12, 141 * GB,
     "measured on one H200 (bf16 and bandwidth: WORKLOADS.md; fp8: tune-gemm --peak)"},
    {"b200", 100, 2250 * T, 4500 * T, 8.0e12, 180 * GB, "datasheet (HGX B200, dense)"},
    {"gb200", 100, 2500 * T, 5000 * T, 8.0e12, 186 * GB, "datasheet (GB200 NVL72 per GPU, dense)"},
    {"gb300", 103, 2500 * T, 5000 * T, 8.0e12, 288 * GB, "datasheet (GB300 NVL72 per GPU, dense)"},
};

const char *const gt_gpu_names[] = {"h100", "h200", "b200", "gb200", "gb300", NULL};

const gt_gpu_spec *gt_gpu_find(const char *name) {
    for (size_t i = 0; name && i < sizeof k_gpus / sizeof k_gpus[0]; i++)
        if (!strcmp(k_gpus[i].name, name)) return &k_gpus[i];
    return NULL;
}
