/* Host stand-in for backend/cuda/cuda_common.cuh (run_ssd.sh puts it in its place), so k_mamba_ssd.cu compiles with g++ and its
 * kernels run on the CPU (dev/cuda_emu/run_ssd.sh): a std::thread per CUDA thread, blocks one
 * after another, __syncthreads as a block barrier, warp sums through shared slots, bf16 held as
 * fp32, a small GT_MAX_GRID so the grid-stride loops wrap. For checking kernel index math on a
 * machine without a GPU; not a performance model. */
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>
extern "C" {
#include "backend/backend.h"
}
using std::min;
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline std::barrier<> *g_block_bar;
inline std::vector<std::barrier<> *> g_warp_bar;
inline float g_slots[1024];
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __shared__ static
#define GT_PDL_ENTRY()                                                                             \
    do {                                                                                           \
    } while (0)
typedef struct {
    float v;
} bf16;
static inline float ldf(const bf16 *p) {
    return p->v;
}
static inline bf16 tobf(float x) {
    bf16 b;
    b.v = x;
    return b;
}
static inline void __syncthreads() {
    g_block_bar->arrive_and_wait();
}
static inline float warp_sum(float v) {
    int t = threadIdx.x, w = t / 32;
    g_slots[t] = v;
    g_warp_bar[w]->arrive_and_wait();
    float s = 0;
    for (int i = 0; i < 32; i++)
        s += g_slots[w * 32 + i];
    g_warp_bar[w]->arrive_and_wait();
    return s;
}
static inline float block_sum(float v, float *sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    float r = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(r);
}
#define GT_MAX_GRID 3u
static inline unsigned gt_grid(size_t n, int threads) {
    size_t g = (n + (size_t)threads - 1) / (size_t)threads;
    if (g < 1) g = 1;
    if (g > 4u * GT_MAX_GRID) g = 4u * GT_MAX_GRID;
    return (unsigned)g;
}
#define GT_GRID_STRIDE(i, n)                                                                       \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)
struct gt_cuda_exec {
    int pdl;
};
static inline gt_cuda_exec gt_cuda_ex(gt_backend *, gt_stream *) {
    return gt_cuda_exec{0};
}
#define GT_CUDA_LAUNCHED(b, what)                                                                  \
    do {                                                                                           \
        (void)(b);                                                                                 \
        (void)(what);                                                                              \
    } while (0)
template <typename... KArgs, typename... Args>
static inline void gt_launch(void (*k)(KArgs...), dim3 grid, dim3 block, size_t, gt_cuda_exec,
                             Args &&...args) {
    gridDim = grid;
    blockDim = block;
    unsigned nt = block.x * block.y;
    for (unsigned by = 0; by < grid.y; by++)
        for (unsigned bx = 0; bx < grid.x; bx++) {
            std::barrier<> bar(nt);
            g_block_bar = &bar;
            std::vector<std::barrier<> *> wb;
            for (unsigned w = 0; w < (nt + 31) / 32; w++)
                wb.push_back(new std::barrier<>(32));
            g_warp_bar = wb;
            std::vector<std::thread> th;
            for (unsigned t = 0; t < nt; t++)
                th.emplace_back([&, t]() {
                    threadIdx = dim3(t % block.x, t / block.x);
                    blockIdx = dim3(bx, by);
                    k(args...);
                });
            for (auto &x : th)
                x.join();
            for (auto *p : wb)
                delete p;
        }
}
