/* A prototype for the GPU scripts, not part of the engine: a dense forward GEMM on
 * Hopper's warpgroup MMA, out[M, N] = A[M, K] W[N, K]^T (bf16 in and out, fp32 sums), with
 * 128 x 256 block tiles (two consumer warpgroups of 64 x 256, m64n256k16) and a 4-stage TMA
 * ring of k steps of 64 fed by one producer warp; one block an SM, launched one block a tile,
 * as a persistent grid, or as a persistent grid of two-block clusters sharing the W tile by TMA
 * multicast. It measures how far larger tiles, a deeper ring, a persistent grid and halved W
 * traffic take graphtrain's own GEMM toward cuBLASLt on dense shapes (own_vs_lt prints it next
 * to k_moe_wgmma.cu's 128 x 128 kernel; docs/benchmarks.md, stop 19, has the figures). The
 * results are stored straight from the registers.
 * Needs the helpers of backend/cuda/k_moe_wgmma.cu, included first. */
#define DW_BM 128
#define DW_BN 256
#define DW_BK 64
#define DW_STAGES 4
#define DW_A_BYTES (DW_BM * DW_BK * 2)
#define DW_STAGE_BYTES (DW_A_BYTES + DW_BN * DW_BK * 2)
#define DW_SMEM (DW_STAGES * DW_STAGE_BYTES + 2 * DW_STAGES * 8 + 1024)
#define DW_THREADS 384

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* d[128] += A (64 x 16) @ B (16 x 256) for the warpgroup, both operands K-major */
static __device__ __forceinline__ void dw_mma256(float *d, uint64_t da, uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, "
        "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, "
        "%55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, "
        "%73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, "
        "%91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, "
        "%107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, "
        "%122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
          "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
          "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
          "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
          "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
          "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
          "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
          "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(1));
}
#endif

/* PERSIST: a grid of one block an SM walks the tiles (row-major over N tiles), and the ring
 * runs on across tiles, so the producer loads the next tile's first k steps while the
 * consumers store the last one's results; else one block a tile. */
template <bool PERSIST>
__global__ void __launch_bounds__(DW_THREADS, 1)
    k_dense_wgmma(bf16 *out, const __grid_constant__ CUtensorMap tA,
                  const __grid_constant__ CUtensorMap tW, int M, int N, int K) {
    GT_PDL_ENTRY();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char dw_raw[];
    unsigned char *sm = (unsigned char *)(((uintptr_t)dw_raw + 1023) & ~(uintptr_t)1023);
    uint64_t *full = (uint64_t *)(sm + DW_STAGES * DW_STAGE_BYTES), *empty = full + DW_STAGES;
    if (threadIdx.x == 0) {
        for (int s = 0; s < DW_STAGES; s++) {
            mb_init(&full[s], 1);
            mb_init(&empty[s], 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    int tn = (N + DW_BN - 1) / DW_BN, tiles = tn * ((M + DW_BM - 1) / DW_BM);
    int first = PERSIST ? blockIdx.x : blockIdx.y * tn + blockIdx.x;
    int step = PERSIST ? gridDim.x : tiles;
    int iters = (K + DW_BK - 1) / DW_BK;
    int wg = threadIdx.x >> 7;
    if (wg == 2) {
        if (threadIdx.x != 256) return;
        int g = 0; /* k steps issued so far, over all tiles */
        for (int t = first; t < tiles; t += step) {
            int m0 = (t / tn) * DW_BM, n0 = (t % tn) * DW_BN;
            for (int it = 0; it < iters; it++, g++) {
                int s = g % DW_STAGES;
                if (g >= DW_STAGES) mb_wait(&empty[s], ((g / DW_STAGES) + 1) & 1);
                mb_expect_tx(&full[s], DW_STAGE_BYTES);
                unsigned char *st = sm + s * DW_STAGE_BYTES;
                tma_load(st, &tA, &full[s], it * DW_BK, m0, 0);
                tma_load(st + DW_A_BYTES, &tW, &full[s], it * DW_BK, n0, 0);
            }
        }
        return;
    }
    int lane = threadIdx.x & 31, q = (threadIdx.x >> 5) & 3;
    int g = 0;
    for (int t = first; t < tiles; t += step) {
        int m0 = (t / tn) * DW_BM, n0 = (t % tn) * DW_BN;
        float d[128];
#pragma unroll
        for (int i = 0; i < 128; i++)
            d[i] = 0.0f;
        for (int it = 0; it < iters; it++, g++) {
            int s = g % DW_STAGES;
            mb_wait(&full[s], (g / DW_STAGES) & 1);
            const unsigned char *st = sm + s * DW_STAGE_BYTES;
            const unsigned char *as = st + wg * 64 * 128, *bs = st + DW_A_BYTES;
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
            for (int kk = 0; kk < DW_BK / 16; kk++)
                dw_mma256(d, wg_desc<false>(as, kk), wg_desc<false>(bs, kk));
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
            if (it > 0 && lane == 0) mb_arrive(&empty[(g - 1) % DW_STAGES]);
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        if (lane == 0) mb_arrive(&empty[(g - 1) % DW_STAGES]); /* the tile's last stage */
        int row = m0 + wg * 64 + q * 16 + (lane >> 2);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int r = row + 8 * h;
            if (r >= M) continue;
#pragma unroll
            for (int j = 0; j < 32; j++) {
                int col = n0 + 8 * j + 2 * (lane & 3);
                if (col < N)
                    *(__nv_bfloat162 *)(out + (size_t)r * N + col) =
                        __floats2bfloat162_rn(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
            }
        }
    }
#endif
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* one TMA box into the same offset of the shared memory of every block in mask, each block's
 * mbarrier at bar's offset counting the bytes */
static __device__ __forceinline__ void tma_load_mc(void *dst, const CUtensorMap *map, uint64_t *bar,
                                                   int x, int y, uint16_t mask) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%0], [%1, {%3, %4, %5}], [%2], %6;\n" ::"r"(gt_smem_u32(dst)),
        "l"((uint64_t)map), "r"(gt_smem_u32(bar)), "r"(x), "r"(y), "r"(0), "h"(mask)
        : "memory");
}

/* an arrival on the mbarrier at bar's offset in block `rank` of the cluster (release at the
 * block's scope, as CUTLASS's cluster barriers do) */
static __device__ __forceinline__ void mb_arrive_cluster(uint64_t *bar, uint32_t rank) {
    asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(gt_smem_u32(bar)),
                 "r"(rank)
                 : "memory");
}

static __device__ __forceinline__ void cluster_sync_all(void) {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
#endif

/* The persistent kernel in clusters of two blocks stacked along M: a cluster takes 256 x 256
 * of the output, each block its 128 rows, and each block's producer loads its own A tile and
 * half of the shared W tile, which TMA multicasts into both blocks. A stage is then free
 * again only once the consumers of both blocks are done with it: one thread of each consumer
 * warpgroup (its wgmma groups complete for all four warps at once) arrives on the empty
 * barrier of both blocks (4 arrivals a phase). The blocks sync as a cluster after
 * setting up their barriers and before exiting, so no remote write or arrival meets a block
 * that is not there. */
__global__ void __launch_bounds__(DW_THREADS, 1)
    k_dense_wgmma_mc(bf16 *out, const __grid_constant__ CUtensorMap tA,
                     const __grid_constant__ CUtensorMap tW, int M, int N, int K) {
    GT_PDL_ENTRY();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char dw_raw[];
    unsigned char *sm = (unsigned char *)(((uintptr_t)dw_raw + 1023) & ~(uintptr_t)1023);
    uint64_t *full = (uint64_t *)(sm + DW_STAGES * DW_STAGE_BYTES), *empty = full + DW_STAGES;
    uint32_t rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    if (threadIdx.x == 0) {
        for (int s = 0; s < DW_STAGES; s++) {
            mb_init(&full[s], 1);
            mb_init(&empty[s], 4);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    cluster_sync_all();
    int tn = (N + DW_BN - 1) / DW_BN, tm2 = (M + 2 * DW_BM - 1) / (2 * DW_BM), supers = tn * tm2;
    int first = blockIdx.x / 2, step = gridDim.x / 2;
    int iters = (K + DW_BK - 1) / DW_BK;
    int wg = threadIdx.x >> 7;
    if (wg == 2) {
        if (threadIdx.x == 256) {
            int g = 0;
            for (int t = first; t < supers; t += step) {
                int m0 = ((t / tn) * 2 + (int)rank) * DW_BM, n0 = (t % tn) * DW_BN;
                for (int it = 0; it < iters; it++, g++) {
                    int s = g % DW_STAGES;
                    if (g >= DW_STAGES) mb_wait(&empty[s], ((g / DW_STAGES) + 1) & 1);
                    mb_expect_tx(&full[s], DW_STAGE_BYTES);
                    unsigned char *st = sm + s * DW_STAGE_BYTES;
                    tma_load(st, &tA, &full[s], it * DW_BK, m0, 0);
                    tma_load_mc(st + DW_A_BYTES + rank * (DW_BN / 2) * 128, &tW, &full[s],
                                it * DW_BK, n0 + (int)rank * (DW_BN / 2), 0x3);
                }
            }
        }
    } else {
        int lane = threadIdx.x & 31, q = (threadIdx.x >> 5) & 3;
        int g = 0;
        for (int t = first; t < supers; t += step) {
            int m0 = ((t / tn) * 2 + (int)rank) * DW_BM, n0 = (t % tn) * DW_BN;
            float d[128];
#pragma unroll
            for (int i = 0; i < 128; i++)
                d[i] = 0.0f;
            for (int it = 0; it < iters; it++, g++) {
                int s = g % DW_STAGES;
                mb_wait(&full[s], (g / DW_STAGES) & 1);
                const unsigned char *st = sm + s * DW_STAGE_BYTES;
                const unsigned char *as = st + wg * 64 * 128, *bs = st + DW_A_BYTES;
                asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
                for (int kk = 0; kk < DW_BK / 16; kk++)
                    dw_mma256(d, wg_desc<false>(as, kk), wg_desc<false>(bs, kk));
                asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
                asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
                if (it > 0 && (threadIdx.x & 127) == 0) {
                    mb_arrive_cluster(&empty[(g - 1) % DW_STAGES], 0);
                    mb_arrive_cluster(&empty[(g - 1) % DW_STAGES], 1);
                }
            }
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
            if ((threadIdx.x & 127) == 0) {
                mb_arrive_cluster(&empty[(g - 1) % DW_STAGES], 0);
                mb_arrive_cluster(&empty[(g - 1) % DW_STAGES], 1);
            }
            int row = m0 + wg * 64 + q * 16 + (lane >> 2);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int r = row + 8 * h;
                if (r >= M) continue;
#pragma unroll
                for (int j = 0; j < 32; j++) {
                    int col = n0 + 8 * j + 2 * (lane & 3);
                    if (col < N)
                        *(__nv_bfloat162 *)(out + (size_t)r * N + col) =
                            __floats2bfloat162_rn(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
                }
            }
        }
    }
    cluster_sync_all();
#endif
}

/* The cluster kernel: grid of the SMs rounded down to pairs, clusters of two along M. */
static int dense_wgmma_mc(cudaStream_t cs, bf16 *out, const bf16 *A, const bf16 *w, int M, int N,
                          int K) {
    static int attr, sms;
    if (!attr) {
        if (cudaFuncSetAttribute(k_dense_wgmma_mc, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 DW_SMEM) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess)
            return 0;
        attr = 1;
    }
    if (!gt_moe_gemm_ok(out, A, w, N, K)) return 0;
    CUtensorMap tA, tW;
    if (!wg_map(&tA, A, K, M, 1, DW_BK, DW_BM) || !wg_map(&tW, w, K, N, 1, DW_BK, DW_BN / 2))
        return 0;
    int supers = ((N + DW_BN - 1) / DW_BN) * ((M + 2 * DW_BM - 1) / (2 * DW_BM));
    int clusters = supers < sms / 2 ? supers : sms / 2;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = 2;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = gt_cuda_pdl;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(2 * clusters);
    cfg.blockDim = dim3(DW_THREADS);
    cfg.dynamicSmemBytes = DW_SMEM;
    cfg.stream = cs;
    cfg.attrs = at;
    cfg.numAttrs = 2;
    return cudaLaunchKernelEx(&cfg, k_dense_wgmma_mc, out, tA, tW, M, N, K) == cudaSuccess;
}

/* 1 when launched; 0 when the shape or the tensor maps are refused */
static int dense_wgmma(cudaStream_t cs, bf16 *out, const bf16 *A, const bf16 *w, int M, int N,
                       int K, int persist) {
    static int attr, sms;
    if (!attr) {
        if (cudaFuncSetAttribute(k_dense_wgmma<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 DW_SMEM) != cudaSuccess ||
            cudaFuncSetAttribute(k_dense_wgmma<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 DW_SMEM) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess)
            return 0;
        attr = 1;
    }
    if (!gt_moe_gemm_ok(out, A, w, N, K)) return 0;
    CUtensorMap tA, tW;
    if (!wg_map(&tA, A, K, M, 1, DW_BK, DW_BM) || !wg_map(&tW, w, K, N, 1, DW_BK, DW_BN)) return 0;
    dim3 grid((N + DW_BN - 1) / DW_BN, (M + DW_BM - 1) / DW_BM);
    int tiles = (int)(grid.x * grid.y);
    if (persist)
        gt_launch(k_dense_wgmma<true>, dim3(tiles < sms ? tiles : sms), DW_THREADS, DW_SMEM, cs,
                  out, tA, tW, M, N, K);
    else
        gt_launch(k_dense_wgmma<false>, grid, DW_THREADS, DW_SMEM, cs, out, tA, tW, M, N, K);
    return 1;
}
