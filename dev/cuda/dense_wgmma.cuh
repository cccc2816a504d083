/* A dev/ prototype, not part of the engine: a dense forward GEMM on
 * Hopper's warpgroup MMA, out[M, N] = A[M, K] W[N, K]^T (bf16 in and out, fp32 sums), with
 * 128 x 256 block tiles (two consumer warpgroups of 64 x 256, m64n256k16) and a 4-stage TMA
 * ring of k steps of 64 fed by one producer warp; one block an SM, launched one block a tile,
 * as a persistent grid, or as a persistent grid of two-block clusters sharing the W tile by TMA
 * multicast; and a ping-pong kernel of 64 x 256 tiles whose two consumer warpgroups take turns.
 * It measures how far larger tiles, a deeper ring, a persistent grid, halved W traffic and
 * stores overlapped with the next main loop take graphtrain's own GEMM toward cuBLASLt on dense
 * shapes (own_vs_lt prints it next to k_moe_wgmma.cu's 128 x 128 kernel; docs/design.md says
 * what came of it). Every variant stores its results straight from the registers.
 * Needs the helpers of backend/cuda/k_moe_wgmma.cu and wgmma_maps.cu, included first. */
#define DW_BM 128
#define DW_BN 256
#define DW_BK 64
#define DW_STAGES 4
#define DW_A_BYTES (DW_BM * DW_BK * 2)
#define DW_STAGE_BYTES (DW_A_BYTES + DW_BN * DW_BK * 2)
#define DW_SMEM (DW_STAGES * DW_STAGE_BYTES + 2 * DW_STAGES * 8 + 1024)
#define DW_THREADS 384
/* programmatic dependent launch for the prototypes, as runtime.cuda.pdl=on gives the backend */
static const int dev_pdl = 1;

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

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* The ring of a block: the 1024-aligned stages, then `stages` full mbarriers (one arrival, the
 * producer's, plus the bytes) and `stages` empty ones (empty_count arrivals). Thread 0 sets
 * them up; the caller syncs the block (or cluster) before use. */
static __device__ __forceinline__ unsigned char *dw_ring(unsigned char *raw, int stages,
                                                         int stage_bytes, int empty_count,
                                                         uint64_t **full, uint64_t **empty) {
    unsigned char *sm = (unsigned char *)(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
    *full = (uint64_t *)(sm + stages * stage_bytes);
    *empty = *full + stages;
    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; s++) {
            mb_init(&(*full)[s], 1);
            mb_init(&(*empty)[s], empty_count);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    return sm;
}

/* One k step of a warpgroup: d += the 64 rows of A at a times the 256 rows of W at b (both
 * K-major, 128-byte swizzle), committed as one group; returns with one group in flight. */
static __device__ __forceinline__ void dw_kstep(float *d, const unsigned char *a,
                                                const unsigned char *b) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < DW_BK / 16; kk++)
        dw_mma256(d, wg_desc<false>(a, kk), wg_desc<false>(b, kk));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
}

/* A warpgroup's finished 64 x 256 tile, rows from row0 and columns from n0, into out[M][N] in
 * bf16. Accumulator layout: warp q holds rows 16q..16q+15; per n8 block j, d[4j..4j+1] is row
 * lane/4, columns 8j + 2(lane%4) + {0,1}, and d[4j+2..3] the same 8 rows further. */
static __device__ __forceinline__ void dw_store(bf16 *out, const float *d, int row0, int n0, int M,
                                                int N) {
    int lane = threadIdx.x & 31, q = (threadIdx.x >> 5) & 3;
    int row = row0 + q * 16 + (lane >> 2);
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
/* The producer thread of a block alone (no cluster): for tiles first, first + step, ... below
 * `tiles` (tn across N), every k step into the ring, A's BM rows from the tile's m0 and W's
 * DW_BN rows from its n0. The ring's stage index runs on across tiles. */
template <int STAGES, int STAGE_BYTES, int BM>
static __device__ __forceinline__ void
dw_produce(unsigned char *sm, uint64_t *full, uint64_t *empty, const CUtensorMap *tA,
           const CUtensorMap *tW, int first, int step, int tiles, int tn, int iters) {
    int g = 0;
    for (int t = first; t < tiles; t += step) {
        int m0 = (t / tn) * BM, n0 = (t % tn) * DW_BN;
        for (int it = 0; it < iters; it++, g++) {
            int s = g % STAGES;
            if (g >= STAGES) mb_wait(&empty[s], ((g / STAGES) + 1) & 1);
            mb_expect_tx(&full[s], STAGE_BYTES);
            unsigned char *st = sm + s * STAGE_BYTES;
            tma_load(st, tA, &full[s], it * DW_BK, m0, 0);
            tma_load(st + BM * DW_BK * 2, tW, &full[s], it * DW_BK, n0, 0);
        }
    }
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
    uint64_t *full, *empty;
    unsigned char *sm = dw_ring(dw_raw, DW_STAGES, DW_STAGE_BYTES, 8, &full, &empty);
    __syncthreads();
    int tn = (N + DW_BN - 1) / DW_BN, tiles = tn * ((M + DW_BM - 1) / DW_BM);
    int first = PERSIST ? blockIdx.x : blockIdx.y * tn + blockIdx.x;
    int step = PERSIST ? gridDim.x : tiles;
    int iters = (K + DW_BK - 1) / DW_BK;
    int wg = threadIdx.x >> 7;
    if (wg == 2) {
        if (threadIdx.x == 256)
            dw_produce<DW_STAGES, DW_STAGE_BYTES, DW_BM>(sm, full, empty, &tA, &tW, first, step,
                                                         tiles, tn, iters);
        return;
    }
    int lane = threadIdx.x & 31;
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
            dw_kstep(d, st + wg * 64 * 128, st + DW_A_BYTES);
            if (it > 0 && lane == 0) mb_arrive(&empty[(g - 1) % DW_STAGES]);
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        if (lane == 0) mb_arrive(&empty[(g - 1) % DW_STAGES]); /* the tile's last stage */
        dw_store(out, d, m0 + wg * 64, n0, M, N);
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
    uint64_t *full, *empty;
    unsigned char *sm = dw_ring(dw_raw, DW_STAGES, DW_STAGE_BYTES, 4, &full, &empty);
    uint32_t rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
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
                dw_kstep(d, st + wg * 64 * 128, st + DW_A_BYTES);
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
            dw_store(out, d, m0 + wg * 64, n0, M, N);
        }
    }
    cluster_sync_all();
#endif
}

/* Raises kernel k's shared-memory limit to smem and reads the SM count; 0 on failure. */
template <typename Kernel> static int dw_prepare(Kernel k, int smem, int *sms) {
    return cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) ==
               cudaSuccess &&
           cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess;
}

/* The cluster kernel: grid of the SMs rounded down to pairs, clusters of two along M. */
static int dense_wgmma_mc(cudaStream_t cs, bf16 *out, const bf16 *A, const bf16 *w, int M, int N,
                          int K) {
    static int sms;
    if (!sms && !dw_prepare(k_dense_wgmma_mc, DW_SMEM, &sms)) return 0;
    if (!gt_moe_gemm_ok(out, A, w, N, K)) return 0;
    CUtensorMap tA, tW;
    if (!gt_wg_map(&tA, A, K, M, 1, DW_BK, DW_BM) || !gt_wg_map(&tW, w, K, N, 1, DW_BK, DW_BN / 2))
        return 0;
    int supers = ((N + DW_BN - 1) / DW_BN) * ((M + 2 * DW_BM - 1) / (2 * DW_BM));
    int clusters = supers < sms / 2 ? supers : sms / 2;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = 2;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = dev_pdl;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(2 * clusters);
    cfg.blockDim = dim3(DW_THREADS);
    cfg.dynamicSmemBytes = DW_SMEM;
    cfg.stream = cs;
    cfg.attrs = at;
    cfg.numAttrs = 2;
    return cudaLaunchKernelEx(&cfg, k_dense_wgmma_mc, out, tA, tW, M, N, K) == cudaSuccess;
}

/* Ping-pong: the two consumer warpgroups take turns. Each owns whole 64 x 256 tiles (the
 * block's i-th tile goes to warpgroup i % 2); while one runs its main loop, the other stores
 * its last tile's results. A warpgroup starts a main loop only once the other has issued all
 * of its own (named barriers 2 and 3), so the tensor cores serve one at a time, and no full
 * barrier is waited on more than one phase ahead. One arrival (by the warpgroup that read it)
 * frees a stage. 5 stages of 40 KiB. */
#define PP_BM 64
#define PP_STAGES 5
#define PP_A_BYTES (PP_BM * DW_BK * 2)
#define PP_STAGE_BYTES (PP_A_BYTES + DW_BN * DW_BK * 2)
#define PP_SMEM (PP_STAGES * PP_STAGE_BYTES + 2 * PP_STAGES * 8 + 1024)

__global__ void __launch_bounds__(DW_THREADS, 1)
    k_dense_wgmma_pp(bf16 *out, const __grid_constant__ CUtensorMap tA,
                     const __grid_constant__ CUtensorMap tW, int M, int N, int K) {
    GT_PDL_ENTRY();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char dw_raw[];
    uint64_t *full, *empty;
    unsigned char *sm = dw_ring(dw_raw, PP_STAGES, PP_STAGE_BYTES, 1, &full, &empty);
    __syncthreads();
    int tn = (N + DW_BN - 1) / DW_BN, tiles = tn * ((M + PP_BM - 1) / PP_BM);
    int iters = (K + DW_BK - 1) / DW_BK;
    int wg = threadIdx.x >> 7;
    if (wg == 2) {
        if (threadIdx.x == 256)
            dw_produce<PP_STAGES, PP_STAGE_BYTES, PP_BM>(sm, full, empty, &tA, &tW, blockIdx.x,
                                                         gridDim.x, tiles, tn, iters);
        return;
    }
    bool leader = (threadIdx.x & 127) == 0;
    int i = 0; /* the block's tile count so far */
    for (int t = blockIdx.x; t < tiles; t += gridDim.x, i++) {
        if ((i & 1) != wg) continue;
        int m0 = (t / tn) * PP_BM, n0 = (t % tn) * DW_BN, g0 = i * iters;
        /* my turn once the other warpgroup issued the previous tile's main loop */
        if (i > 0) asm volatile("bar.sync %0, 256;\n" ::"r"(2 + wg) : "memory");
        float d[128];
#pragma unroll
        for (int k = 0; k < 128; k++)
            d[k] = 0.0f;
        for (int it = 0; it < iters; it++) {
            int g = g0 + it, s = g % PP_STAGES;
            mb_wait(&full[s], (g / PP_STAGES) & 1);
            const unsigned char *st = sm + s * PP_STAGE_BYTES;
            dw_kstep(d, st, st + PP_A_BYTES);
            if (it > 0 && leader) mb_arrive(&empty[(g - 1) % PP_STAGES]);
        }
        /* the other warpgroup's turn, if the block has a next tile */
        if (t + (int)gridDim.x < tiles)
            asm volatile("bar.arrive %0, 256;\n" ::"r"(3 - wg) : "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        if (leader) mb_arrive(&empty[(g0 + iters - 1) % PP_STAGES]);
        dw_store(out, d, m0, n0, M, N);
    }
#endif
}

static int dense_wgmma_pp(cudaStream_t cs, bf16 *out, const bf16 *A, const bf16 *w, int M, int N,
                          int K) {
    static int sms;
    if (!sms && !dw_prepare(k_dense_wgmma_pp, PP_SMEM, &sms)) return 0;
    if (!gt_moe_gemm_ok(out, A, w, N, K)) return 0;
    CUtensorMap tA, tW;
    if (!gt_wg_map(&tA, A, K, M, 1, DW_BK, PP_BM) || !gt_wg_map(&tW, w, K, N, 1, DW_BK, DW_BN))
        return 0;
    int tiles = ((N + DW_BN - 1) / DW_BN) * ((M + PP_BM - 1) / PP_BM);
    gt_launch(k_dense_wgmma_pp, dim3(tiles < sms ? tiles : sms), DW_THREADS, PP_SMEM,
              gt_cuda_exec{cs, dev_pdl}, out, tA, tW, M, N, K);
    return 1;
}

/* 1 when launched; 0 when the shape or the tensor maps are refused */
static int dense_wgmma(cudaStream_t cs, bf16 *out, const bf16 *A, const bf16 *w, int M, int N,
                       int K, int persist) {
    static int sms, ready;
    if (!ready) {
        if (!dw_prepare(k_dense_wgmma<false>, DW_SMEM, &sms) ||
            !dw_prepare(k_dense_wgmma<true>, DW_SMEM, &sms))
            return 0;
        ready = 1;
    }
    if (!gt_moe_gemm_ok(out, A, w, N, K)) return 0;
    CUtensorMap tA, tW;
    if (!gt_wg_map(&tA, A, K, M, 1, DW_BK, DW_BM) || !gt_wg_map(&tW, w, K, N, 1, DW_BK, DW_BN))
        return 0;
    dim3 grid((N + DW_BN - 1) / DW_BN, (M + DW_BM - 1) / DW_BM);
    int tiles = (int)(grid.x * grid.y);
    if (persist)
        gt_launch(k_dense_wgmma<true>, dim3(tiles < sms ? tiles : sms), DW_THREADS, DW_SMEM,
                  gt_cuda_exec{cs, dev_pdl}, out, tA, tW, M, N, K);
    else
        gt_launch(k_dense_wgmma<false>, grid, DW_THREADS, DW_SMEM, gt_cuda_exec{cs, dev_pdl}, out,
                  tA, tW, M, N, K);
    return 1;
}
