/* CUDA decode ops (backend/decode_ops.h): bf16 tensors, fp32 math, fixed reduction orders
 * (no atomics on values), so a replayed decode graph gives the bits of the eager step. Each
 * reads the position and counters from the device-resident decode state. */
#include <stdint.h>

#include "backend/cuda/cuda_common.cuh"
#include "core/philox.h"
extern "C" {
#include "backend/decode_ops.h"
}

#define DEC_THREADS 256
#define DEC_WARPS (DEC_THREADS / GT_WARP)
#define SAMPLE_THREADS 1024
#define DEC_MAX_HD 512 /* per-lane accumulators of the attention's value pass: hd / 32 */

/* ---- rope at a position ---- */

/* Pair i's inverse frequency and the angle at t: the expressions (and fp32 operation order)
 * of k_attention.cu's rotary table, so the decode steps turn a row exactly as the prefill
 * turned the same position */
static __device__ __forceinline__ float dec_rope_scaled_freq(float f, float factor) {
    const float pi = 3.14159265358979323846f, orig = (float)GT_ROPE_ORIGINAL_MAX;
    const float lo = (float)GT_ROPE_LOW_FREQ_FACTOR, hi = (float)GT_ROPE_HIGH_FREQ_FACTOR;
    float wavelen = 2.0f * pi / f;
    if (wavelen < orig / hi) return f;
    if (wavelen > orig / lo) return f / factor;
    float smooth = (orig / wavelen - lo) / (hi - lo);
    return (1.0f - smooth) * f / factor + smooth * f;
}

__global__ void k_dec_rope_at(bf16 *qkv, const gt_decode_state *st, int H, int KV, int hd,
                              float theta, float factor) {
    GT_PDL_ENTRY();
    int half = hd / 2, t = st->pos;
    float l2t = log2f(theta);
    for (int q = threadIdx.x; q < (H + KV) * half; q += blockDim.x) {
        int hh = q / half, i = q - hh * half;
        float f = exp2f(-2.0f * (float)i / (float)hd * l2t);
        float ang = (float)t * (factor > 0.0f ? dec_rope_scaled_freq(f, factor) : f);
        float sn, cs;
        sincosf(ang, &sn, &cs);
        bf16 *x = qkv + hh * hd;
        float a = ldf(x + i), b = ldf(x + i + half);
        x[i] = tobf(__fmaf_rn(a, cs, -__fmul_rn(b, sn)));
        x[i + half] = tobf(__fmaf_rn(a, sn, __fmul_rn(b, cs)));
    }
}

static void cuda_rope_at(gt_backend *b, gt_stream *s, void *qkv, const gt_decode_state *st, int H,
                         int KV, int hd, float theta, float factor) {
    if (!qkv || !st || H <= 0 || KV <= 0 || hd <= 0 || hd % 2 || !(theta > 0.0f) ||
        !(factor >= 0.0f)) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "decode rope_at: bad arguments H=%d KV=%d hd=%d theta=%g (an even head "
                        "size, theta > 0, a decode state)",
                        H, KV, hd, (double)theta);
        return;
    }
    if (b->planning) return;
    gt_launch(k_dec_rope_at, 1, DEC_THREADS, 0, gt_cuda_ex(b, s), (bf16 *)qkv, st, H, KV, hd, theta,
              factor);
    GT_CUDA_LAUNCHED(b, "decode rope_at");
}

/* ---- KV cache append ---- */

__global__ void k_dec_kv_store(bf16 *kc, bf16 *vc, const bf16 *qkv, int n,
                               const gt_decode_state *st, int H, int KV, int hd) {
    GT_PDL_ENTRY();
    int w = KV * hd, C = (H + 2 * KV) * hd, p0 = st ? st->pos : 0;
    size_t total = (size_t)n * w;
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < total;
         q += (size_t)gridDim.x * blockDim.x) {
        size_t r = q / w, c = q - r * w;
        const bf16 *row = qkv + r * C + (size_t)H * hd;
        kc[(p0 + r) * w + c] = row[c];
        vc[(p0 + r) * w + c] = row[w + c];
    }
}

static void cuda_kv_store(gt_backend *b, gt_stream *s, void *kc, void *vc, const void *qkv, int n,
                          const gt_decode_state *st, int H, int KV, int hd) {
    if (!kc || !vc || !qkv || n <= 0 || H <= 0 || KV <= 0 || hd <= 0) {
        gt_backend_fail(b, GT_ERR_INVALID, "decode kv_store: bad arguments n=%d H=%d KV=%d hd=%d",
                        n, H, KV, hd);
        return;
    }
    if (b->planning) return;
    gt_launch(k_dec_kv_store, gt_grid((size_t)n * KV * hd, DEC_THREADS), DEC_THREADS, 0,
              gt_cuda_ex(b, s), (bf16 *)kc, (bf16 *)vc, (const bf16 *)qkv, n, st, H, KV, hd);
    GT_CUDA_LAUNCHED(b, "decode kv_store");
}

/* ---- attention of one query over the cache ----
 * One block per query head. Warps take cache rows in turn: the scores (a warp's lanes over
 * the head dimension, a shuffle sum) go to ws, then the exponentials and their sum (a block
 * sum), then each warp sums its rows' weighted values per lane and the block adds the warps'
 * partial rows in warp order. */
__global__ void k_dec_attention(bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc,
                                const gt_decode_state *st, int L, int H, int KV, int hd,
                                float *ws) {
    GT_PDL_ENTRY();
    extern __shared__ float sm[]; /* q [hd], then part [DEC_WARPS][hd] */
    __shared__ float red[32];
    float *qs = sm, *part = sm + hd;
    int h = blockIdx.x, lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    int n = st->pos + 1, w = KV * hd, kvh = h / (H / KV);
    if (n > L) n = L; /* the decoder never steps past its cache; never read past it */
    float scale = rsqrtf((float)hd), *sc = ws + (size_t)h * L;
    for (int c = threadIdx.x; c < hd; c += blockDim.x)
        qs[c] = ldf(q + (size_t)h * hd + c);
    __syncthreads();
    float mx = -INFINITY;
    for (int j = wid; j < n; j += DEC_WARPS) {
        const bf16 *k = kc + (size_t)j * w + (size_t)kvh * hd;
        float d = 0.0f;
        for (int c = lane; c < hd; c += GT_WARP)
            d += qs[c] * ldf(k + c);
        d = warp_sum(d) * scale;
        if (lane == 0) sc[j] = d;
        mx = fmaxf(mx, d);
    }
    if (lane == 0) red[wid] = mx;
    __syncthreads(); /* also makes the scores in ws visible to the block */
    mx = red[0];
    for (int i = 1; i < DEC_WARPS; i++)
        mx = fmaxf(mx, red[i]);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        float e = __expf(sc[j] - mx);
        sc[j] = e;
        sum += e;
    }
    sum = block_sum(sum, red); /* its barriers publish the exponentials */
    float acc[DEC_MAX_HD / GT_WARP];
#pragma unroll
    for (int u = 0; u < DEC_MAX_HD / GT_WARP; u++)
        acc[u] = 0.0f;
    for (int j = wid; j < n; j += DEC_WARPS) {
        float e = sc[j];
        const bf16 *v = vc + (size_t)j * w + (size_t)kvh * hd;
#pragma unroll
        for (int u = 0; u < DEC_MAX_HD / GT_WARP; u++) {
            int c = lane + u * GT_WARP;
            if (c < hd) acc[u] += e * ldf(v + c);
        }
    }
#pragma unroll
    for (int u = 0; u < DEC_MAX_HD / GT_WARP; u++) {
        int c = lane + u * GT_WARP;
        if (c < hd) part[wid * hd + c] = acc[u];
    }
    __syncthreads();
    for (int c = threadIdx.x; c < hd; c += blockDim.x) {
        float o = 0.0f;
        for (int i = 0; i < DEC_WARPS; i++)
            o += part[i * hd + c];
        out[(size_t)h * hd + c] = tobf(o / sum);
    }
}

static void cuda_decode_attention(gt_backend *b, gt_stream *s, void *out, const void *q,
                                  const void *kc, const void *vc, const gt_decode_state *st, int L,
                                  int H, int KV, int hd, float *ws) {
    if (!out || !q || !kc || !vc || !st || !ws || L <= 0 || H <= 0 || KV <= 0 || H % KV ||
        hd <= 0 || hd > DEC_MAX_HD) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "decode attention: bad arguments L=%d H=%d KV=%d hd=%d (H a multiple of "
                        "KV, hd <= %d)",
                        L, H, KV, hd, DEC_MAX_HD);
        return;
    }
    if (b->planning) return;
    size_t smem = (size_t)(1 + DEC_WARPS) * hd * sizeof(float);
    gt_launch(k_dec_attention, H, DEC_THREADS, smem, gt_cuda_ex(b, s), (bf16 *)out, (const bf16 *)q,
              (const bf16 *)kc, (const bf16 *)vc, st, L, H, KV, hd, ws);
    GT_CUDA_LAUNCHED(b, "decode attention");
}

/* ---- sampling ----
 * One block of SAMPLE_THREADS; thread t owns the contiguous ids [t * chunk, (t + 1) * chunk).
 * The cuts (decode_ops.h) are found bit by bit over the ordered float keys, each bit a block
 * reduction; the draw walks the kept weights in id order from per-thread prefix sums. */

static __device__ __forceinline__ uint32_t dec_key(float x) {
    return gt_sample_key(__float_as_uint(x));
}

static __device__ float sample_sum(float v, float *sh) {
    return block_sum(v, sh);
}

static __device__ int sample_count(int v, int *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    int r = lane < nw ? sh[lane] : 0;
    for (int o = 16; o > 0; o >>= 1)
        r += __shfl_xor_sync(0xffffffffu, r, o);
    return r;
}

__global__ void k_dec_sample(gt_decode_state *st, const bf16 *logits, int V, gt_sample_params p,
                             float *ws) {
    GT_PDL_ENTRY();
    __shared__ float shf[32];
    __shared__ int shi[32];
    __shared__ float bestv[32];
    __shared__ int besti[32];
    __shared__ double pre[SAMPLE_THREADS];
    __shared__ int pick, last_kept;
    __shared__ double u_sh;
    int t = threadIdx.x, lane = t & 31, wid = t >> 5, nw = blockDim.x >> 5;
    int chunk = (V + blockDim.x - 1) / blockDim.x, lo = t * chunk;
    int hi = lo + chunk < V ? lo + chunk : V;
    /* the largest logit, the lowest id among equals */
    float bv = -INFINITY;
    int bi = V;
    for (int i = lo; i < hi; i++) {
        float l = ldf(logits + i);
        if (bi == V || l > bv) bv = l, bi = i;
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi < V && (bi == V || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi;
    }
    if (lane == 0) bestv[wid] = bv, besti[wid] = bi;
    __syncthreads();
    bv = bestv[0], bi = besti[0];
    for (int i = 1; i < nw; i++)
        if (besti[i] < V && (bi == V || bestv[i] > bv || (bestv[i] == bv && besti[i] < bi)))
            bv = bestv[i], bi = besti[i];
    int id = bi;
    if (p.temperature > 0.0f) {
        uint32_t tk = 0;
        if (p.top_k > 0 && p.top_k < V)
            for (int bit = 31; bit >= 0; bit--) {
                uint32_t c = tk | (1u << bit);
                int cnt = 0;
                for (int i = lo; i < hi; i++)
                    cnt += dec_key(ldf(logits + i)) >= c;
                if (sample_count(cnt, shi) >= p.top_k) tk = c;
            }
        float local = 0.0f;
        for (int i = lo; i < hi; i++) {
            float l = ldf(logits + i);
            float wgt = dec_key(l) >= tk ? expf((l - bv) / p.temperature) : 0.0f;
            ws[i] = wgt; /* each thread reads back only its own ids */
            local += wgt;
        }
        float total = sample_sum(local, shf);
        uint32_t tp = 0;
        if (p.top_p < 1.0f)
            for (int bit = 31; bit >= 0; bit--) {
                uint32_t c = tp | (1u << bit);
                float m = 0.0f;
                for (int i = lo; i < hi; i++)
                    if (dec_key(ldf(logits + i)) >= c) m += ws[i];
                if (sample_sum(m, shf) >= p.top_p * total) tp = c;
            }
        uint32_t th = tk > tp ? tk : tp;
        double kept = 0.0;
        int last = -1;
        for (int i = lo; i < hi; i++)
            if (dec_key(ldf(logits + i)) >= th) kept += ws[i], last = i;
        pre[t] = kept;
        if (t == 0) pick = V, last_kept = -1;
        __syncthreads();
        if (last >= 0) atomicMax(&last_kept, last);
        if (t == 0) {
            double acc = 0.0;
            for (int i = 0; i < (int)blockDim.x; i++) {
                double c = pre[i];
                pre[i] = acc;
                acc += c;
            }
            gt_philox4 ctr;
            ctr.v[0] = st->draws, ctr.v[1] = 0, ctr.v[2] = GT_SAMPLE_PHILOX_TAG, ctr.v[3] = 0;
            gt_philox4 r = gt_philox4x32_10(ctr, p.seed);
            u_sh = gt_sample_uniform_bits(r.v[0], r.v[1]) * acc;
        }
        __syncthreads();
        double u = u_sh, acc = pre[t];
        if (u >= acc)
            for (int i = lo; i < hi; i++)
                if (dec_key(ldf(logits + i)) >= th) {
                    acc += ws[i];
                    if (u < acc) {
                        atomicMin(&pick, i);
                        break;
                    }
                }
        __syncthreads();
        id = pick < V ? pick : last_kept;
    }
    if (t == 0) {
        st->token = id;
        st->pos += 1;
        st->draws += 1;
    }
}

static void cuda_sample(gt_backend *b, gt_stream *s, gt_decode_state *st, const void *logits, int V,
                        gt_sample_params p, float *ws) {
    if (!st || !logits || !ws || V <= 0 || p.top_k < 0 || !(p.top_p > 0.0f)) {
        gt_backend_fail(b, GT_ERR_INVALID,
                        "decode sample: bad arguments V=%d top_k=%d top_p=%g (top_k >= 0, "
                        "top_p > 0)",
                        V, p.top_k, (double)p.top_p);
        return;
    }
    if (b->planning) return;
    gt_launch(k_dec_sample, 1, SAMPLE_THREADS, 0, gt_cuda_ex(b, s), st, (const bf16 *)logits, V, p,
              ws);
    GT_CUDA_LAUNCHED(b, "decode sample");
}

static const gt_decode_ops cuda_decode_ops = {
    cuda_rope_at,
    cuda_kv_store,
    cuda_decode_attention,
    cuda_sample,
};

extern "C" const gt_decode_ops *gt_cuda_decode_ops(void) {
    return &cuda_decode_ops;
}
