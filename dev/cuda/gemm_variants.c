/* Whether cuBLASLt has faster algorithms than the 8 its heuristic offers, per GEMM shape of a
 * workload: the heuristic's answers (256-byte aligned operands, as the backend plans them),
 * their configurations, and the variants of their algorithm ids over tiles, stages, cluster
 * shapes, custom options and CTA swizzling that cublasLtMatmulAlgoCheck accepts; up to
 * MAX_TIMED of them, spread evenly over the accepted ones, timed alone (CUDA events, 10
 * launches after 3 warm-up launches, random bf16 operands). Prints the heuristic's best, the
 * best variants and their configurations. A dev/ tool (-DGT_DEV=ON, run by scripts/gpu.sh); not
 * part of the engine (graphtrain tune-gemm times the heuristic's answers inside the step).
 * Usage: gemm_variants TOKENS D QKV FFN VOCAB [MAX_TIMED]   (one layer's shapes and the head) */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lt_problem.h"

#define WS_BYTES ((size_t)32 << 20)
#define HEUR 8
#define MAX_IDS 64
#define MAX_ACCEPTED 65536 /* accepted variants kept for timing */

static const char *const kind_names[] = {"fwd", "bwd_data", "bwd_weight"};

typedef struct cfg {
    int32_t id, splitk;
    uint32_t tile, stages, reduction, swizzle, custom;
    uint16_t inner, cluster;
} cfg;

static cfg read_cfg(const cublasLtMatmulAlgo_t *a) {
    cfg c;
    memset(&c, 0, sizeof c);
    const struct {
        cublasLtMatmulAlgoConfigAttributes_t attr;
        void *field;
        size_t size;
    } fields[] = {
        {CUBLASLT_ALGO_CONFIG_ID, &c.id, sizeof c.id},
        {CUBLASLT_ALGO_CONFIG_TILE_ID, &c.tile, sizeof c.tile},
        {CUBLASLT_ALGO_CONFIG_STAGES_ID, &c.stages, sizeof c.stages},
        {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &c.splitk, sizeof c.splitk},
        {CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &c.reduction, sizeof c.reduction},
        {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &c.swizzle, sizeof c.swizzle},
        {CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &c.custom, sizeof c.custom},
        {CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &c.inner, sizeof c.inner},
        {CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &c.cluster, sizeof c.cluster},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        size_t w = 0;
        cublasLtMatmulAlgoConfigGetAttribute(a, fields[i].attr, fields[i].field, fields[i].size,
                                             &w);
    }
    return c;
}

static void print_cfg(const cfg *c) {
    printf("id %3d tile %3u stages %3u splitk %d red %u swz %u custom %u inner %u cluster %u",
           c->id, c->tile, c->stages, c->splitk, c->reduction, c->swizzle, c->custom, c->inner,
           c->cluster);
}

typedef struct run_ctx {
    cublasLtHandle_t lt;
    lt_problem *p;
    void *A, *B, *C, *ws;
    float beta;
    cudaEvent_t e0, e1;
} run_ctx;

/* microseconds a launch, or -1 when a launch fails */
static float time_algo(run_ctx *r, const cublasLtMatmulAlgo_t *a) {
    float alpha = 1.0f;
    for (int i = 0; i < 13; i++) {
        if (i == 3) cudaEventRecord(r->e0, 0);
        if (cublasLtMatmul(r->lt, r->p->desc, &alpha, r->A, r->p->la, r->B, r->p->lb, &r->beta,
                           r->C, r->p->lc, r->C, r->p->lc, a, r->ws, WS_BYTES,
                           0) != CUBLAS_STATUS_SUCCESS)
            return -1;
    }
    cudaEventRecord(r->e1, 0);
    if (cudaEventSynchronize(r->e1) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    float ms = 0;
    cudaEventElapsedTime(&ms, r->e0, r->e1);
    return ms * 1e3f / 10;
}

typedef struct timed {
    cublasLtMatmulAlgo_t a;
    float us;
} timed;

static int by_time(const void *x, const void *y) {
    float a = ((const timed *)x)->us, b = ((const timed *)y)->us;
    return (a > b) - (a < b);
}

static void sweep(cublasLtHandle_t lt, void *ws, int kind, int M, int N, int K, int max_timed) {
    lt_problem p;
    cublasLtMatmulHeuristicResult_t res[HEUR];
    int found = lt_problem_build(lt, &p, kind, M, N, K, WS_BYTES, res, HEUR);
    run_ctx r = {lt,
                 &p,
                 lt_dev_random(p.a_elems * 2, 1),
                 lt_dev_random(p.b_elems * 2, 2),
                 lt_dev_random(p.c_elems * (p.c_fp32 ? 4 : 2), 3),
                 ws,
                 kind == LT_BWD_WEIGHT ? 1.0f : 0.0f,
                 NULL,
                 NULL};
    cudaEventCreate(&r.e0);
    cudaEventCreate(&r.e1);
    printf("== %s M=%d N=%d K=%d\n", kind_names[kind], M, N, K);
    float heur_best = 1e30f;
    int32_t ids[MAX_IDS];
    int n_ids = 0;
    for (int i = 0; i < found; i++) {
        cfg c = read_cfg(&res[i].algo);
        float us = time_algo(&r, &res[i].algo);
        if (us > 0 && us < heur_best) heur_best = us;
        printf("  heuristic #%d %8.2f us  ", i, us);
        print_cfg(&c);
        printf("\n");
        int seen = 0;
        for (int j = 0; j < n_ids; j++)
            seen |= ids[j] == c.id;
        if (!seen && n_ids < MAX_IDS) ids[n_ids++] = c.id;
    }
    timed *all = malloc((size_t)max_timed * sizeof *all);
    cublasLtMatmulAlgo_t *accepted = malloc(MAX_ACCEPTED * sizeof *accepted);
    int n_timed = 0;
    long checked = 0, valid = 0;
    for (int t = 0; t < n_ids; t++) {
        cublasLtMatmulAlgo_t base;
        if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF,
                                   p.c_fp32 ? CUDA_R_32F : CUDA_R_16BF,
                                   p.c_fp32 ? CUDA_R_32F : CUDA_R_16BF, ids[t],
                                   &base) != CUBLAS_STATUS_SUCCESS)
            continue;
        size_t w = 0;
        uint32_t tiles[1024], stages[256];
        int nt = 0, ns = 0;
        if (cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_TILE_IDS, tiles,
                                              sizeof tiles, &w) == CUBLAS_STATUS_SUCCESS)
            nt = (int)(w / sizeof tiles[0]);
        if (cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_STAGES_IDS, stages,
                                              sizeof stages, &w) == CUBLAS_STATUS_SUCCESS)
            ns = (int)(w / sizeof stages[0]);
        int32_t swz_ok = 0;
        cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swz_ok,
                                          sizeof swz_ok, &w);
        int32_t custom_max = 0;
        cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &custom_max,
                                          sizeof custom_max, &w);
        printf("  algo id %d: %d tiles, %d stages, swizzle %s, custom options to %d\n", ids[t], nt,
               ns, swz_ok ? "yes" : "no", custom_max);
        /* ids that list no tiles (the nvjet kernels): every tile id, the stages the heuristic
         * used, custom options 0..7 */
        if (nt == 0)
            for (uint32_t x = 0; x < CUBLASLT_MATMUL_TILE_END && nt < 1024; x++)
                tiles[nt++] = x;
        if (ns == 0)
            for (int i = 0; i < found; i++) {
                cfg c = read_cfg(&res[i].algo);
                int seen = 0;
                for (int j = 0; j < ns; j++)
                    seen |= stages[j] == c.stages;
                if (!seen && c.id == ids[t]) stages[ns++] = c.stages;
            }
        if (custom_max < 7) custom_max = 7;
        for (int a = 0; a < nt; a++)
            for (int s = 0; s < ns; s++)
                for (uint16_t cl = 0; cl < CUBLASLT_CLUSTER_SHAPE_END; cl++)
                    for (uint32_t cu = 0; cu <= (uint32_t)custom_max; cu++)
                        for (uint32_t sw = 0; sw <= (swz_ok ? 1u : 0u); sw++) {
                            cublasLtMatmulAlgo_t v = base;
                            cublasLtMatmulAlgoConfigSetAttribute(&v, CUBLASLT_ALGO_CONFIG_TILE_ID,
                                                                 &tiles[a], sizeof tiles[a]);
                            cublasLtMatmulAlgoConfigSetAttribute(&v, CUBLASLT_ALGO_CONFIG_STAGES_ID,
                                                                 &stages[s], sizeof stages[s]);
                            cublasLtMatmulAlgoConfigSetAttribute(
                                &v, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl, sizeof cl);
                            cublasLtMatmulAlgoConfigSetAttribute(
                                &v, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &cu, sizeof cu);
                            cublasLtMatmulAlgoConfigSetAttribute(
                                &v, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &sw, sizeof sw);
                            cublasLtMatmulHeuristicResult_t chk;
                            checked++;
                            if (cublasLtMatmulAlgoCheck(lt, p.desc, p.la, p.lb, p.lc, p.lc, &v,
                                                        &chk) != CUBLAS_STATUS_SUCCESS ||
                                chk.workspaceSize > WS_BYTES)
                                continue;
                            if (valid < MAX_ACCEPTED) accepted[valid] = v;
                            valid++;
                        }
    }
    /* time an even spread of the accepted variants (every one when there are few enough) */
    long kept = valid < MAX_ACCEPTED ? valid : MAX_ACCEPTED;
    double stride = kept > max_timed ? (double)kept / max_timed : 1.0;
    for (double x = 0; (long)x < kept && n_timed < max_timed; x += stride) {
        float us = time_algo(&r, &accepted[(long)x]);
        if (us > 0) all[n_timed].a = accepted[(long)x], all[n_timed++].us = us;
    }
    qsort(all, (size_t)n_timed, sizeof *all, by_time);
    printf("  variants: %ld checked, %ld accepted, %d timed (every %.1fth); heuristic best %.2f "
           "us\n",
           checked, valid, n_timed, stride, heur_best);
    for (int i = 0; i < n_timed && i < 5; i++) {
        cfg c = read_cfg(&all[i].a);
        printf("  variant %8.2f us (%+5.1f%%)  ", all[i].us,
               100.0 * (all[i].us - heur_best) / heur_best);
        print_cfg(&c);
        printf("\n");
    }
    fflush(stdout);
    free(all);
    free(accepted);
    cudaFree(r.A), cudaFree(r.B), cudaFree(r.C);
    cudaEventDestroy(r.e0), cudaEventDestroy(r.e1);
    lt_problem_destroy(&p);
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: gemm_variants TOKENS D QKV FFN VOCAB [MAX_TIMED]\n");
        return 2;
    }
    int T, shapes[5][2], max_timed = argc == 7 ? atoi(argv[6]) : 400;
    lt_workload_shapes(argv, &T, shapes);
    cublasLtHandle_t lt;
    void *ws;
    lt_open("gemm_variants", &lt, &ws, WS_BYTES);
    for (int s = 0; s < 5; s++)
        for (int k = 0; k < 3; k++)
            sweep(lt, ws, k, T, shapes[s][0], shapes[s][1], max_timed);
    cudaFree(ws);
    cublasLtDestroy(lt);
    return 0;
}
