/* Shared pieces of the attention kernels (k_attention.cu: fp32 SIMT reference kernels;
 * k_attention_mma.cu, k_attention_wgmma.cu: tensor-core kernels): the launch geometry, the dropout
 * multiplier with the CPU reference's element index, and the per-entry backward math. */
#ifndef GT_BACKEND_CUDA_ATTENTION_CUH
#define GT_BACKEND_CUDA_ATTENTION_CUH

#include "backend/cuda/cuda_common.cuh"
#include "core/philox.h"

typedef struct attn_geo {
    int B, T, H, KV, C; /* C = (H + 2KV) * hd: row stride of qkv */
    float scale, p, keep_scale;
    uint64_t seed;
    uint32_t site;
} attn_geo;

static __device__ __forceinline__ float drop_mult(const attn_geo &g, uint32_t micro, uint32_t step,
                                                  int b, int h, int i, int j) {
    if (g.p <= 0.0f) return 1.0f;
    uint64_t idx = (((uint64_t)b * g.H + h) * g.T + i) * (uint64_t)g.T + j;
    return gt_dropout_keep(g.seed, g.site, micro, step, idx, g.p) ? g.keep_scale : 0.0f;
}

/* Probability and dS of one (query r, key c) entry of the current tiles. */
static __device__ __forceinline__ void p_ds(const attn_geo &g, uint32_t micro, uint32_t step, int b,
                                            int h, int i, int j, float s, float dp, float lse_i,
                                            float D_i, float *pd, float *ds) {
    if (j > i || i >= g.T || j >= g.T) {
        *pd = 0.0f;
        *ds = 0.0f;
        return;
    }
    float pr = expf(s * g.scale - lse_i);
    float mult = drop_mult(g, micro, step, b, h, i, j);
    *pd = pr * mult;
    *ds = pr * (dp * mult - D_i);
}

/* mma.sync path for head size 64 (k_attention_mma.cu). Each returns 0 without launching
 * anything when the call does not fit it (head size, pointer alignment). */
int gt_cuda_attn_mma_fwd(gt_cuda_exec cs, void *out, float *lse, const void *qkv, const attn_geo *g,
                         int hd, const gt_step_state *st);
int gt_cuda_attn_mma_bwd(gt_cuda_exec cs, void *dqkv, const void *dout, const void *qkv,
                         const float *lse, const float *D, const attn_geo *g, int hd,
                         const gt_step_state *st);
cudaError_t gt_cuda_attn_mma_init(void);
/* warpgroup-MMA backward for head size 64 (k_attention_wgmma.cu, sm_90a: only on compute
 * capability 9.0), without dropout and with T % 128 == 0; 0 when the call does not fit. It
 * computes D = rowsum(dO * O) itself, into D ([B, H, T] fp32 scratch). The init also looks up
 * the driver's tensor-map encoder. */
cudaError_t gt_cuda_attn_wgmma_init(void);
int gt_cuda_attn_wgmma_bwd(gt_cuda_exec cs, void *dqkv, const void *dout, const void *qkv,
                           const void *out, const float *lse, float *D, const attn_geo *g, int hd);

#endif
