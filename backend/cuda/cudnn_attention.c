/* cuDNN fused attention through the backend API (plain C, no cudnn-frontend): builds the
 * "composite" SDPA operation graphs (matmul, pointwise, reduction and reshape ops that cuDNN's
 * runtime fusion recognises as flash attention) for causal GQA on packed qkv, picks engines,
 * caches a forward/backward plan pair per shape. Recipe:
 * shared/reference/cudnn-sdpa-backend-api.md. */
#include "backend/cuda/cudnn_attention.h"

#ifdef GT_HAVE_CUDNN

#include <cudnn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    MAX_DESCS = 256,  /* descriptors one pass is built from (kept alive with its plan) */
    MAX_OPS = 32,     /* operations of one graph: 14 forward, 21-23 backward */
    MAX_IO = 16,      /* non-virtual tensors of one pass */
    MAX_CFGS = 16,    /* engine configs tried per heuristics mode */
    MAX_PACKS = 64,   /* variant packs cached per pass: one per layer's buffer set */
    WS_ALIGN = 256,   /* alignment of the regions carved from the workspace */
    TENSOR_ALIGN = 16 /* every pointer handed to cuDNN is 16-byte aligned */
};

/* First cuDNN version without the bf16 bugs of 9.10.0/9.10.1, and the last one whose graph
 * replay reads out of bounds when T is not a multiple of 128 (no padding mask here). */
#define CUDNN_BF16_FIXED 91002
#define CUDNN_REPLAY_PAD_BUG_LAST 91500
#define SEQ_PAD 128

/* Builds one operation graph. Errors are sticky: after the first failure every helper is a
 * no-op, so graph code reads as a straight list of ops and is checked once at the end. */
typedef struct builder {
    cudnnHandle_t h;
    cudnnBackendDescriptor_t descs[MAX_DESCS];
    int ndesc;
    cudnnBackendDescriptor_t ops[MAX_OPS];
    int nops;
    int64_t next_uid;
    cudnnStatus_t st;
    char what[160]; /* the call that failed first */
} builder;

typedef struct tensor {
    cudnnBackendDescriptor_t d;
    int64_t uid;
} tensor;

typedef struct layout {
    int64_t dim[4], str[4]; /* logical [B, heads, rows, cols]; physical order in the strides */
} layout;

/* A variant pack (uid -> pointer table) built once per buffer set, so eager calls of every
 * layer reuse theirs instead of creating a descriptor per call. */
typedef struct var_pack {
    cudnnBackendDescriptor_t d;
    void *ptrs[MAX_IO];
    void *ws;
} var_pack;

/* One pass (forward or backward) of one shape: its plan and its cached variant packs. */
typedef struct attn_pass {
    builder b;
    cudnnBackendDescriptor_t plan;
    int64_t ws_bytes;
    int64_t engine; /* global engine index, for logs */
    int nio;
    int64_t uids[MAX_IO]; /* uid of each non-virtual tensor, in the order calls pass pointers */
    var_pack packs[MAX_PACKS];
    int npacks, next_evict;
} attn_pass;

typedef struct attn_plan {
    int B, T, H, KV, hd;
    attn_pass fwd, bwd;
    int has_bwd;       /* 0: planned for the forward alone (graphtrain runs its own backward) */
    size_t sums_bytes; /* backward: softmax_sum [B,H,T] fp32 at the start of the workspace */
    size_t ws_total;
    float scale, neg_inf, one; /* by-value scalars: the variant pack points at these */
} attn_plan;

struct gt_cudnn_attn {
    cudnnHandle_t h;
    cudaStream_t stream; /* for the warm-up runs at plan time */
    attn_plan **plans;
    int nplans, cap;
};

static size_t align_up(size_t n) {
    return (n + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
}

/* ---- sticky builder helpers ---- */

static void gb_fail(builder *g, cudnnStatus_t st, const char *what) {
    if (g->st) return;
    g->st = st;
    char last[96] = "";
    cudnnGetLastErrorString(last, sizeof last);
    snprintf(g->what, sizeof g->what, "%s: %s%s%s", what, cudnnGetErrorString(st),
             last[0] ? " / " : "", last);
}

static cudnnBackendDescriptor_t gb_new(builder *g, cudnnBackendDescriptorType_t type,
                                       const char *what) {
    if (g->st) return NULL;
    if (g->ndesc == MAX_DESCS) {
        gb_fail(g, CUDNN_STATUS_BAD_PARAM, "too many descriptors in one attention graph");
        return NULL;
    }
    cudnnBackendDescriptor_t d = NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(type, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        gb_fail(g, st, what);
        return NULL;
    }
    g->descs[g->ndesc++] = d;
    return d;
}

static void gb_set(builder *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                   cudnnBackendAttributeType_t type, int64_t n, const void *v, const char *what) {
    if (g->st) return;
    cudnnStatus_t st = cudnnBackendSetAttribute(d, name, type, n, v);
    if (st != CUDNN_STATUS_SUCCESS) gb_fail(g, st, what);
}
#define SET(g, d, name, type, n, v) gb_set((g), (d), (name), (type), (n), (v), #name)

static void gb_fin(builder *g, cudnnBackendDescriptor_t d, const char *what) {
    if (g->st) return;
    cudnnStatus_t st = cudnnBackendFinalize(d);
    if (st != CUDNN_STATUS_SUCCESS) gb_fail(g, st, what);
}

static void gb_op(builder *g, cudnnBackendDescriptor_t op) {
    if (g->st) return;
    if (g->nops == MAX_OPS) {
        gb_fail(g, CUDNN_STATUS_BAD_PARAM, "too many operations in one attention graph");
        return;
    }
    g->ops[g->nops++] = op;
}

static layout lay(int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t s0, int64_t s1,
                  int64_t s2, int64_t s3) {
    layout l = {{d0, d1, d2, d3}, {s0, s1, s2, s3}};
    return l;
}
static layout dense(int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    return lay(d0, d1, d2, d3, d1 * d2 * d3, d2 * d3, d3, 1);
}
/* the same memory seen with the last two dimensions swapped (Kᵀ from K, Pᵀ from P) */
static layout transposed(layout l) {
    return lay(l.dim[0], l.dim[1], l.dim[3], l.dim[2], l.str[0], l.str[1], l.str[3], l.str[2]);
}

typedef enum { T_IO, T_VIRTUAL, T_BY_VALUE } tensor_kind;

static tensor gb_tensor(builder *g, cudnnDataType_t dt, layout l, tensor_kind kind) {
    tensor t = {NULL, g->next_uid++};
    int64_t align = TENSOR_ALIGN;
    bool yes = true;
    t.d = gb_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "create tensor");
    SET(g, t.d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    SET(g, t.d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, l.dim);
    SET(g, t.d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, l.str);
    SET(g, t.d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t.uid);
    SET(g, t.d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    if (kind == T_VIRTUAL) SET(g, t.d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
    if (kind == T_BY_VALUE) SET(g, t.d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
    gb_fin(g, t.d, "finalize tensor");
    return t;
}
static tensor virt(builder *g, cudnnDataType_t dt, layout l) {
    return gb_tensor(g, dt, l, T_VIRTUAL);
}

/* y = mode(x[, b][, t]) computed in `prec`; axis >= 0 only for GEN_INDEX */
static tensor gb_pw(builder *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, tensor x,
                    const tensor *b, const tensor *t, tensor y, int64_t axis) {
    cudnnBackendDescriptor_t pw = gb_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "create pointwise");
    SET(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    SET(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) SET(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    gb_fin(g, pw, "finalize pointwise");
    cudnnBackendDescriptor_t op =
        gb_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "create pointwise op");
    SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.d);
    if (b)
        SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b->d);
    if (t)
        SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t->d);
    SET(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.d);
    gb_fin(g, op, "finalize pointwise op");
    gb_op(g, op);
    return y;
}
static tensor pw1(builder *g, cudnnPointwiseMode_t mode, tensor x, tensor y) {
    return gb_pw(g, mode, CUDNN_DATA_FLOAT, x, NULL, NULL, y, -1);
}
static tensor pw2(builder *g, cudnnPointwiseMode_t mode, tensor x, tensor b, tensor y) {
    return gb_pw(g, mode, CUDNN_DATA_FLOAT, x, &b, NULL, y, -1);
}

static tensor gb_matmul(builder *g, tensor a, tensor b, tensor c) {
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t mm = gb_new(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "create matmul");
    SET(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    gb_fin(g, mm, "finalize matmul");
    cudnnBackendDescriptor_t op =
        gb_new(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "create matmul op");
    SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a.d);
    SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b.d);
    SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c.d);
    SET(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
    gb_fin(g, op, "finalize matmul op");
    gb_op(g, op);
    return c;
}

static tensor gb_reduce(builder *g, cudnnReduceTensorOp_t mode, tensor x, tensor y) {
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t rd = gb_new(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "create reduction");
    SET(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    SET(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    gb_fin(g, rd, "finalize reduction");
    cudnnBackendDescriptor_t op =
        gb_new(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "create reduction op");
    SET(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.d);
    SET(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.d);
    SET(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd);
    gb_fin(g, op, "finalize reduction op");
    gb_op(g, op);
    return y;
}

static tensor gb_reshape(builder *g, tensor x, tensor y) {
    cudnnBackendDescriptor_t op =
        gb_new(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "create reshape op");
    SET(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.d);
    SET(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.d);
    gb_fin(g, op, "finalize reshape op");
    gb_op(g, op);
    return y;
}

/* Causal mask, top-left aligned: keep score[row][col] where row >= col, else neg_inf. The
 * index math precision FLOAT and INT32 outputs are what the fusion matcher accepts. */
static tensor gb_causal(builder *g, tensor x, tensor neg_inf, layout l) {
    tensor row = gb_pw(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL,
                       virt(g, CUDNN_DATA_INT32, l), 2);
    tensor col = gb_pw(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL,
                       virt(g, CUDNN_DATA_INT32, l), 3);
    tensor mask = gb_pw(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, &col, NULL,
                        virt(g, CUDNN_DATA_BOOLEAN, l), -1);
    return gb_pw(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, &neg_inf, &mask,
                 virt(g, CUDNN_DATA_FLOAT, l), -1);
}

/* ---- the two graphs ---- */

/* Layouts shared by both passes: packed qkv rows of W = (H + 2KV)*hd elements per token. */
typedef struct attn_layouts {
    layout q, k, o, stats, scores, scalar;
} attn_layouts;

static attn_layouts make_layouts(const attn_plan *p) {
    int64_t B = p->B, T = p->T, H = p->H, KV = p->KV, hd = p->hd;
    int64_t W = (H + 2 * KV) * hd, HD = H * hd;
    attn_layouts L;
    L.q = lay(B, H, T, hd, T * W, hd, W, 1);   /* also dQ in dqkv */
    L.k = lay(B, KV, T, hd, T * W, hd, W, 1);  /* K and V (and dK, dV) */
    L.o = lay(B, H, T, hd, T * HD, hd, HD, 1); /* out and dout */
    L.stats = lay(B, H, T, 1, H * T, T, 1, 1); /* lse and softmax_sum */
    L.scores = dense(B, H, T, T);
    L.scalar = dense(1, 1, 1, 1);
    return L;
}

static void record_io(attn_pass *p, const tensor *io, int n) {
    p->nio = n;
    for (int i = 0; i < n; i++)
        p->uids[i] = io[i].uid;
}

/* Forward with stats, 14 ops. IO order: q, kt, v, o, stats, scale, neg_inf. */
static void build_fwd(attn_plan *p) {
    builder *g = &p->fwd.b;
    attn_layouts L = make_layouts(p);
    const cudnnDataType_t F = CUDNN_DATA_FLOAT, BF = CUDNN_DATA_BFLOAT16;
    tensor q = gb_tensor(g, BF, L.q, T_IO);
    tensor kt = gb_tensor(g, BF, transposed(L.k), T_IO);
    tensor v = gb_tensor(g, BF, L.k, T_IO);
    tensor o = gb_tensor(g, BF, L.o, T_IO);
    tensor stats = gb_tensor(g, F, L.stats, T_IO);
    tensor scale = gb_tensor(g, F, L.scalar, T_BY_VALUE);
    tensor ninf = gb_tensor(g, F, L.scalar, T_BY_VALUE);

    tensor s = gb_matmul(g, q, kt, virt(g, F, L.scores));
    s = pw2(g, CUDNN_POINTWISE_MUL, s, scale, virt(g, F, L.scores));
    s = gb_causal(g, s, ninf, L.scores);
    tensor m = gb_reduce(g, CUDNN_REDUCE_TENSOR_MAX, s, virt(g, F, L.stats));
    tensor e = pw2(g, CUDNN_POINTWISE_SUB, s, m, virt(g, F, L.scores));
    e = pw1(g, CUDNN_POINTWISE_EXP, e, virt(g, F, L.scores));
    tensor z = gb_reduce(g, CUDNN_REDUCE_TENSOR_ADD, e, virt(g, F, L.stats));
    tensor logz = pw1(g, CUDNN_POINTWISE_LOG, z, virt(g, F, L.stats));
    pw2(g, CUDNN_POINTWISE_ADD, m, logz, stats); /* lse = max + log(sum exp(s - max)) */
    tensor pr = pw2(g, CUDNN_POINTWISE_DIV, e, z, virt(g, BF, L.scores)); /* P must be bf16 */
    gb_matmul(g, pr, v, o);

    const tensor io[] = {q, kt, v, o, stats, scale, ninf};
    record_io(&p->fwd, io, (int)(sizeof io / sizeof io[0]));
}

/* Backward, direct-dQ (deterministic) form, 21 ops (23 with GQA head reductions).
 * IO order: q, kt, vt, o, do, stats, scale, neg_inf, one, softmax_sum, dq, dk, dv. */
static void build_bwd(attn_plan *p) {
    builder *g = &p->bwd.b;
    attn_layouts L = make_layouts(p);
    const cudnnDataType_t F = CUDNN_DATA_FLOAT, BF = CUDNN_DATA_BFLOAT16;
    int64_t B = p->B, T = p->T, H = p->H, hd = p->hd;
    int gqa = p->KV != p->H;
    tensor q = gb_tensor(g, BF, L.q, T_IO);
    tensor kt = gb_tensor(g, BF, transposed(L.k), T_IO);
    tensor vt = gb_tensor(g, BF, transposed(L.k), T_IO);
    tensor o = gb_tensor(g, BF, L.o, T_IO);
    tensor dout = gb_tensor(g, BF, L.o, T_IO);
    tensor stats = gb_tensor(g, F, L.stats, T_IO);
    tensor scale = gb_tensor(g, F, L.scalar, T_BY_VALUE);
    tensor ninf = gb_tensor(g, F, L.scalar, T_BY_VALUE);
    tensor one = gb_tensor(g, F, L.scalar, T_BY_VALUE);
    tensor sums = gb_tensor(g, F, L.stats, T_IO);
    tensor dq = gb_tensor(g, BF, L.q, T_IO);
    tensor dk = gb_tensor(g, BF, L.k, T_IO);
    tensor dv = gb_tensor(g, BF, L.k, T_IO);
    /* per-query-head dK/dV before the sum over each kv group (GQA only) */
    layout full = dense(B, H, T, hd);

    /* softmax_sum = rowsum(dO * O) (x1.0: the dropout-scale slot the matcher expects) */
    tensor t = pw2(g, CUDNN_POINTWISE_MUL, dout, o,
                   virt(g, F, lay(B, H, T, hd, H * T * hd, T * hd, H * hd, 1)));
    t = gb_reduce(g, CUDNN_REDUCE_TENSOR_ADD, t, virt(g, F, L.stats));
    pw2(g, CUDNN_POINTWISE_MUL, t, one, sums);

    /* P = exp(scale * Q Kᵀ - lse), causal */
    tensor s = gb_matmul(g, q, kt, virt(g, F, L.scores));
    s = pw2(g, CUDNN_POINTWISE_MUL, s, scale, virt(g, F, L.scores));
    s = pw2(g, CUDNN_POINTWISE_SUB, s, stats, virt(g, F, L.scores));
    s = gb_causal(g, s, ninf, L.scores);
    tensor pr = pw1(g, CUDNN_POINTWISE_EXP, s, virt(g, F, L.scores));

    /* dV = Pᵀ dO (summed over the group's query heads) */
    tensor pt = gb_reshape(g, pr, virt(g, BF, transposed(L.scores)));
    if (gqa)
        gb_reduce(g, CUDNN_REDUCE_TENSOR_ADD, gb_matmul(g, pt, dout, virt(g, BF, full)), dv);
    else
        gb_matmul(g, pt, dout, dv);

    /* dS = scale * P * (dO Vᵀ - softmax_sum) */
    tensor ds = gb_matmul(g, dout, vt, virt(g, F, L.scores));
    ds = pw2(g, CUDNN_POINTWISE_SUB, ds, sums, virt(g, F, L.scores));
    ds = pw2(g, CUDNN_POINTWISE_MUL, ds, pr, virt(g, F, L.scores));
    ds = pw2(g, CUDNN_POINTWISE_MUL, ds, scale, virt(g, F, L.scores));

    /* dK = dSᵀ Q (summed over the group's query heads) */
    tensor dst = gb_reshape(g, ds, virt(g, BF, transposed(L.scores)));
    if (gqa)
        gb_reduce(g, CUDNN_REDUCE_TENSOR_ADD, gb_matmul(g, dst, q, virt(g, BF, full)), dk);
    else
        gb_matmul(g, dst, q, dk);

    /* dQ = dS K written directly (no fp32 atomics accumulator: deterministic) */
    tensor k = gb_reshape(g, kt, virt(g, F, L.k));
    gb_matmul(g, ds, k, dq);

    const tensor io[] = {q, kt, vt, o, dout, stats, scale, ninf, one, sums, dq, dk, dv};
    record_io(&p->bwd, io, (int)(sizeof io / sizeof io[0]));
}

/* ---- engine choice ---- */

/* Global index and determinism of the engine behind a config; 0 when they can be read. */
static int engine_info(cudnnBackendDescriptor_t cfg, int64_t *index, int *nondeterministic) {
    cudnnBackendDescriptor_t eng = NULL;
    int64_t n = 0;
    *index = -1;
    *nondeterministic = 0;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng)) return -1;
    int rc = -1;
    if (!cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                  1, &n, &eng)) {
        cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
        cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                 index);
        if (!cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                      CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                                      &n, notes)) {
            for (int64_t i = 0; i < n && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++)
                if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) *nondeterministic = 1;
            rc = 0;
        }
    }
    cudnnBackendDestroyDescriptor(eng);
    return rc;
}

/* Op graph -> heuristics (mode A, then fallback) -> first config whose plan finalizes. */
static int choose_plan(attn_pass *p, int deterministic, const char *pass, gt_error *err) {
    builder *g = &p->b;
    cudnnBackendDescriptor_t graph =
        gb_new(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "create operation graph");
    SET(g, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &g->h);
    SET(g, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops);
    gb_fin(g, graph, "finalize operation graph");
    if (g->st)
        return gt_error_set(
            err, g->st == CUDNN_STATUS_NOT_SUPPORTED ? GT_ERR_UNSUPPORTED : GT_ERR_DEVICE,
            "cudnn attention %s graph: %s", pass, g->what);

    const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    int tried = 0, skipped = 0;
    char last[160] = "no engine config offered";
    for (int m = 0; m < 2; m++) {
        cudnnBackendDescriptor_t heur =
            gb_new(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "create heuristics");
        SET(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
            &graph);
        SET(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m]);
        gb_fin(g, heur, "finalize heuristics");
        int64_t n = 0;
        if (!g->st)
            cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL);
        if (n > MAX_CFGS) n = MAX_CFGS;
        cudnnBackendDescriptor_t cfgs[MAX_CFGS];
        for (int64_t i = 0; i < n; i++)
            cfgs[i] = gb_new(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "create engine config");
        int64_t got = 0;
        if (!g->st && n > 0 &&
            cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got, cfgs))
            got = 0;
        if (g->st) { /* heuristics failures are not fatal: try the next mode */
            snprintf(last, sizeof last, "%s", g->what);
            g->st = CUDNN_STATUS_SUCCESS;
            continue;
        }
        for (int64_t i = 0; i < got; i++) {
            int64_t index = -1;
            int nondet = 0;
            engine_info(cfgs[i], &index, &nondet);
            if (deterministic && nondet) {
                skipped++;
                continue;
            }
            tried++;
            cudnnBackendDescriptor_t plan = NULL;
            cudnnStatus_t st =
                cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
            if (!st)
                st = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                                              CUDNN_TYPE_HANDLE, 1, &g->h);
            if (!st)
                st = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
            if (!st) st = cudnnBackendFinalize(plan);
            int64_t ws = 0, cnt = 0;
            if (!st)
                st = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                              CUDNN_TYPE_INT64, 1, &cnt, &ws);
            if (st) {
                char why[96] = "";
                cudnnGetLastErrorString(why, sizeof why);
                snprintf(last, sizeof last, "engine %lld: %s %s", (long long)index,
                         cudnnGetErrorString(st), why);
                if (plan) cudnnBackendDestroyDescriptor(plan);
                continue;
            }
            p->plan = plan;
            p->ws_bytes = ws;
            p->engine = index;
            return GT_OK;
        }
    }
    return gt_error_set(err, GT_ERR_UNSUPPORTED,
                        "cudnn attention %s: no engine could run this shape (%d configs tried, "
                        "%d non-deterministic skipped; last: %s); use the built-in attention "
                        "kernel for it (CUDNN_LOGLEVEL_DBG=2 shows why)",
                        pass, tried, skipped, last);
}

/* ---- execution ---- */

/* The cached variant pack for these pointers, built on a miss (host work only, so also fine
 * during capture); the oldest entry is replaced when the cache is full. */
static cudnnStatus_t get_pack(attn_pass *p, void *const *ptrs, void *ws,
                              cudnnBackendDescriptor_t *out) {
    size_t bytes = (size_t)p->nio * sizeof *ptrs;
    for (int i = 0; i < p->npacks; i++)
        if (p->packs[i].ws == ws && !memcmp(p->packs[i].ptrs, ptrs, bytes)) {
            *out = p->packs[i].d;
            return CUDNN_STATUS_SUCCESS;
        }
    cudnnBackendDescriptor_t d = NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &d);
    if (!st)
        st = cudnnBackendSetAttribute(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                      p->nio, p->uids);
    if (!st)
        st = cudnnBackendSetAttribute(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                      p->nio, ptrs);
    if (!st)
        st = cudnnBackendSetAttribute(d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                                      &ws);
    if (!st) st = cudnnBackendFinalize(d);
    if (st) {
        if (d) cudnnBackendDestroyDescriptor(d);
        return st;
    }
    int slot = p->npacks < MAX_PACKS ? p->npacks++ : p->next_evict++ % MAX_PACKS;
    if (p->packs[slot].d) cudnnBackendDestroyDescriptor(p->packs[slot].d);
    p->packs[slot].d = d;
    memcpy(p->packs[slot].ptrs, ptrs, bytes);
    p->packs[slot].ws = ws;
    *out = d;
    return CUDNN_STATUS_SUCCESS;
}

static int run_pass(gt_cudnn_attn *a, attn_pass *p, cudaStream_t stream, void *const *ptrs,
                    void *ws, const char *pass, gt_error *err) {
    cudnnBackendDescriptor_t pack = NULL;
    cudnnStatus_t st = get_pack(p, ptrs, ws, &pack);
    if (!st) st = cudnnSetStream(a->h, stream);
    if (!st) st = cudnnBackendExecute(a->h, p->plan, pack);
    if (st) {
        char why[160] = "";
        cudnnGetLastErrorString(why, sizeof why);
        return gt_error_set(err, GT_ERR_DEVICE,
                            "cudnn attention %s failed: %s %s (check that every buffer is a "
                            "live device allocation of the planned shape)",
                            pass, cudnnGetErrorString(st), why);
    }
    return GT_OK;
}

static attn_plan *find_plan(const gt_cudnn_attn *a, int B, int T, int H, int KV, int hd) {
    for (int i = 0; i < a->nplans; i++) {
        attn_plan *p = a->plans[i];
        if (p->B == B && p->T == T && p->H == H && p->KV == KV && p->hd == hd) return p;
    }
    return NULL;
}

static int misaligned(const void *p) {
    return ((uintptr_t)p % TENSOR_ALIGN) != 0;
}

static int lookup(gt_cudnn_attn *a, attn_plan **out, int B, int T, int H, int KV, int hd,
                  const void *const *bufs, int nbufs, const void *ws, const char *pass,
                  gt_error *err) {
    if (!a) return gt_error_set(err, GT_ERR_INVALID, "cudnn attention %s: handle is NULL", pass);
    *out = find_plan(a, B, T, H, KV, hd);
    if (!*out)
        return gt_error_set(err, GT_ERR_INVALID,
                            "cudnn attention %s: shape B=%d T=%d H=%d KV=%d hd=%d was not "
                            "planned; call gt_cudnn_attn_plan for it at start-up (outside "
                            "capture)",
                            pass, B, T, H, KV, hd);
    for (int i = 0; i < nbufs; i++)
        if (!bufs[i] || misaligned(bufs[i]))
            return gt_error_set(err, GT_ERR_INVALID,
                                "cudnn attention %s: buffer %d is NULL or not %d-byte aligned",
                                pass, i, TENSOR_ALIGN);
    if ((*out)->ws_total && (!ws || ((uintptr_t)ws % WS_ALIGN)))
        return gt_error_set(err, GT_ERR_INVALID,
                            "cudnn attention %s: workspace is NULL or not %d-byte aligned; pass "
                            "a buffer of the bytes gt_cudnn_attn_plan returned",
                            pass, WS_ALIGN);
    return GT_OK;
}

static int exec_fwd(gt_cudnn_attn *a, attn_plan *p, cudaStream_t stream, void *out, float *lse,
                    const void *qkv, void *ws, gt_error *err) {
    char *q = (char *)(uintptr_t)qkv; /* cuDNN takes void *; inputs are only read */
    size_t hb = (size_t)p->hd * sizeof(uint16_t);
    void *ptrs[] = {
        q,          q + (size_t)p->H * hb, q + (size_t)(p->H + p->KV) * hb, out, lse, &p->scale,
        &p->neg_inf};
    return run_pass(a, &p->fwd, stream, ptrs, ws, "forward", err);
}

static int exec_bwd(gt_cudnn_attn *a, attn_plan *p, cudaStream_t stream, void *dqkv,
                    const void *dout, const void *qkv, const void *out, const float *lse, void *ws,
                    gt_error *err) {
    char *q = (char *)(uintptr_t)qkv, *dq = dqkv;
    size_t hb = (size_t)p->hd * sizeof(uint16_t);
    size_t koff = (size_t)p->H * hb, voff = (size_t)(p->H + p->KV) * hb;
    char *w = ws;
    void *ptrs[] = {q,
                    q + koff,
                    q + voff,
                    (void *)(uintptr_t)out,
                    (void *)(uintptr_t)dout,
                    (void *)(uintptr_t)lse,
                    &p->scale,
                    &p->neg_inf,
                    &p->one,
                    w,
                    dq,
                    dq + koff,
                    dq + voff};
    return run_pass(a, &p->bwd, stream, ptrs, w + p->sums_bytes, "backward", err);
}

/* Runs both passes once on zeroed scratch buffers so kernels are loaded (and any lazy
 * initialisation done) before the first capture, as cuDNN advises. */
static int warm_up(gt_cudnn_attn *a, attn_plan *p, gt_error *err) {
    size_t tok = (size_t)p->B * p->T;
    size_t qkv_b = align_up(tok * (size_t)(p->H + 2 * p->KV) * p->hd * 2);
    size_t o_b = align_up(tok * (size_t)p->H * p->hd * 2);
    size_t lse_b = align_up((size_t)p->B * p->H * p->T * 4);
    size_t total = 2 * qkv_b + 2 * o_b + lse_b + p->ws_total;
    char *buf = NULL;
    cudaError_t ce = cudaMalloc((void **)&buf, total);
    if (ce != cudaSuccess)
        return gt_error_set(err, GT_ERR_NOMEM,
                            "cudnn attention plan: warm-up needs %zu MiB of device memory: %s; "
                            "plan attention before allocating the model's buffers",
                            total >> 20, cudaGetErrorString(ce));
    char *qkv = buf, *dqkv = qkv + qkv_b, *out = dqkv + qkv_b, *dout = out + o_b;
    float *lse = (float *)(void *)(dout + o_b); /* byte offset into one allocation */
    char *ws = (char *)lse + lse_b;
    int rc = GT_OK;
    ce = cudaMemsetAsync(buf, 0, total, a->stream);
    if (ce != cudaSuccess)
        rc = gt_error_set(err, GT_ERR_DEVICE, "cudnn attention warm-up memset: %s",
                          cudaGetErrorString(ce));
    if (!rc) rc = exec_fwd(a, p, a->stream, out, lse, qkv, ws, err);
    if (!rc && p->has_bwd) rc = exec_bwd(a, p, a->stream, dqkv, dout, qkv, out, lse, ws, err);
    ce = cudaStreamSynchronize(a->stream);
    if (!rc && ce != cudaSuccess)
        rc = gt_error_set(err, GT_ERR_DEVICE, "cudnn attention warm-up run: %s",
                          cudaGetErrorString(ce));
    cudaFree(buf);
    return rc;
}

static void pass_destroy(attn_pass *p) {
    for (int i = 0; i < p->npacks; i++)
        cudnnBackendDestroyDescriptor(p->packs[i].d);
    if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
    for (int i = p->b.ndesc - 1; i >= 0; i--)
        cudnnBackendDestroyDescriptor(p->b.descs[i]);
    memset(p, 0, sizeof *p);
}

static void plan_free(attn_plan *p) {
    if (!p) return;
    pass_destroy(&p->fwd);
    pass_destroy(&p->bwd);
    free(p);
}

/* ---- public API ---- */

int gt_cudnn_attn_available(void) {
    size_t v = cudnnGetVersion();
    return v >= 90000 && !(v >= 91000 && v < CUDNN_BF16_FIXED);
}

int gt_cudnn_attn_create(gt_cudnn_attn **out, cudaStream_t stream, gt_error *err) {
    if (!out) return gt_error_set(err, GT_ERR_INVALID, "gt_cudnn_attn_create: out is NULL");
    *out = NULL;
    if (!gt_cudnn_attn_available())
        return gt_error_set(err, GT_ERR_UNSUPPORTED,
                            "cudnn attention: loaded cuDNN %zu is too old or has known bf16 "
                            "bugs (need >= 9.0, not 9.10.0/9.10.1); upgrade cuDNN or use the "
                            "built-in attention kernel",
                            cudnnGetVersion());
    gt_cudnn_attn *a = calloc(1, sizeof *a);
    if (!a) return gt_error_set(err, GT_ERR_NOMEM, "cudnn attention: out of host memory");
    cudnnStatus_t st = cudnnCreate(&a->h);
    if (!st) st = cudnnSetStream(a->h, stream);
    if (st) {
        if (a->h) cudnnDestroy(a->h);
        free(a);
        return gt_error_set(err, GT_ERR_DEVICE,
                            "cudnnCreate failed: %s (is a CUDA device visible and the cuDNN "
                            "library on LD_LIBRARY_PATH?)",
                            cudnnGetErrorString(st));
    }
    a->stream = stream;
    *out = a;
    return GT_OK;
}

void gt_cudnn_attn_destroy(gt_cudnn_attn *a) {
    if (!a) return;
    for (int i = 0; i < a->nplans; i++)
        plan_free(a->plans[i]);
    free(a->plans);
    cudnnDestroy(a->h);
    free(a);
}

static int check_shape(int B, int T, int H, int KV, int hd, gt_error *err) {
    if (B < 1 || T < 1 || H < 1 || KV < 1 || hd < 1 || H % KV)
        return gt_error_set(err, GT_ERR_INVALID,
                            "cudnn attention: bad shape B=%d T=%d H=%d KV=%d hd=%d (all must be "
                            "positive and H a multiple of KV)",
                            B, T, H, KV, hd);
    if (hd % 8 || hd > 256 || T < 2)
        return gt_error_set(err, GT_ERR_UNSUPPORTED,
                            "cudnn attention: hd=%d T=%d not supported (hd must be a multiple of "
                            "8 and <= 256, T >= 2); use the built-in attention kernel",
                            hd, T);
    if (cudnnGetVersion() <= CUDNN_REPLAY_PAD_BUG_LAST && T % SEQ_PAD)
        return gt_error_set(err, GT_ERR_UNSUPPORTED,
                            "cudnn attention: cuDNN %zu replays graphs out of bounds when T=%d is "
                            "not a multiple of %d; upgrade to cuDNN > 9.15.0 or use the built-in "
                            "attention kernel",
                            cudnnGetVersion(), T, SEQ_PAD);
    return GT_OK;
}

int gt_cudnn_attn_plan(gt_cudnn_attn *a, int B, int T, int H, int KV, int hd, int with_bwd,
                       size_t *workspace_bytes, gt_error *err) {
    if (!a || !workspace_bytes)
        return gt_error_set(err, GT_ERR_INVALID, "gt_cudnn_attn_plan: handle or output is NULL");
    int rc = check_shape(B, T, H, KV, hd, err);
    if (rc) return rc;
    attn_plan *p = find_plan(a, B, T, H, KV, hd);
    if (p && with_bwd && !p->has_bwd)
        return gt_error_set(err, GT_ERR_INVALID,
                            "cudnn attention: shape B=%d T=%d H=%d KV=%d hd=%d was planned for "
                            "the forward alone; plan it with the backward from the start",
                            B, T, H, KV, hd);
    if (p) {
        *workspace_bytes = p->ws_total;
        return GT_OK;
    }
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(a->stream, &cs) == cudaSuccess && cs != cudaStreamCaptureStatusNone)
        return gt_error_set(err, GT_ERR_INVALID,
                            "gt_cudnn_attn_plan called while the stream is capturing; plan "
                            "every attention shape before the first capture");
    if (a->nplans == a->cap) {
        int cap = a->cap ? 2 * a->cap : 8;
        attn_plan **np = realloc(a->plans, (size_t)cap * sizeof *np);
        if (!np) return gt_error_set(err, GT_ERR_NOMEM, "cudnn attention: out of host memory");
        a->plans = np;
        a->cap = cap;
    }
    p = calloc(1, sizeof *p);
    if (!p) return gt_error_set(err, GT_ERR_NOMEM, "cudnn attention: out of host memory");
    p->B = B, p->T = T, p->H = H, p->KV = KV, p->hd = hd;
    p->scale = 1.0f / sqrtf((float)hd);
    p->neg_inf = -INFINITY;
    p->one = 1.0f;
    p->fwd.b.h = p->bwd.b.h = a->h;
    p->fwd.b.next_uid = p->bwd.b.next_uid = 1;
    p->has_bwd = with_bwd != 0;
    build_fwd(p);
    rc = choose_plan(&p->fwd, 0, "forward", err);
    if (!rc && p->has_bwd) {
        build_bwd(p);
        rc = choose_plan(&p->bwd, 1, "backward", err);
    }
    if (!rc) {
        p->sums_bytes = p->has_bwd ? align_up((size_t)B * H * T * sizeof(float)) : 0;
        size_t f = align_up((size_t)p->fwd.ws_bytes);
        size_t b = p->has_bwd ? p->sums_bytes + align_up((size_t)p->bwd.ws_bytes) : 0;
        p->ws_total = f > b ? f : b;
        rc = warm_up(a, p, err);
    }
    if (rc) {
        gt_error_wrap(err, "planning attention B=%d T=%d H=%d KV=%d hd=%d: ", B, T, H, KV, hd);
        plan_free(p);
        return rc;
    }
    a->plans[a->nplans++] = p;
    *workspace_bytes = p->ws_total;
    return GT_OK;
}

int gt_cudnn_attn_describe(const gt_cudnn_attn *a, int B, int T, int H, int KV, int hd, char *buf,
                           size_t n) {
    const attn_plan *p = a ? find_plan(a, B, T, H, KV, hd) : NULL;
    if (!p || !buf) return GT_ERR_INVALID;
    if (!p->has_bwd)
        snprintf(buf, n,
                 "cuDNN %zu: forward engine %lld (%d ops, ws %lld B), no backward, "
                 "workspace %zu B",
                 cudnnGetVersion(), (long long)p->fwd.engine, p->fwd.b.nops,
                 (long long)p->fwd.ws_bytes, p->ws_total);
    else
        snprintf(buf, n,
                 "cuDNN %zu: forward engine %lld (%d ops, ws %lld B), backward engine %lld (%d "
                 "ops, ws %lld B), workspace %zu B",
                 cudnnGetVersion(), (long long)p->fwd.engine, p->fwd.b.nops,
                 (long long)p->fwd.ws_bytes, (long long)p->bwd.engine, p->bwd.b.nops,
                 (long long)p->bwd.ws_bytes, p->ws_total);
    return GT_OK;
}

int gt_cudnn_attn_fwd(gt_cudnn_attn *a, cudaStream_t stream, void *out, float *lse, const void *qkv,
                      int B, int T, int H, int KV, int hd, void *workspace, gt_error *err) {
    attn_plan *p = NULL;
    const void *bufs[] = {out, lse, qkv};
    int rc = lookup(a, &p, B, T, H, KV, hd, bufs, 3, workspace, "forward", err);
    if (rc) return rc;
    return exec_fwd(a, p, stream, out, lse, qkv, workspace, err);
}

int gt_cudnn_attn_bwd(gt_cudnn_attn *a, cudaStream_t stream, void *dqkv, const void *dout,
                      const void *qkv, const void *out, const float *lse, int B, int T, int H,
                      int KV, int hd, void *workspace, gt_error *err) {
    attn_plan *p = NULL;
    const void *bufs[] = {dqkv, dout, qkv, out, lse};
    int rc = lookup(a, &p, B, T, H, KV, hd, bufs, 5, workspace, "backward", err);
    if (rc) return rc;
    if (!p->has_bwd)
        return gt_error_set(err, GT_ERR_INVALID,
                            "cudnn attention backward: shape B=%d T=%d H=%d KV=%d hd=%d was "
                            "planned for the forward alone (gt_cudnn_attn_plan with_bwd 0)",
                            B, T, H, KV, hd);
    return exec_bwd(a, p, stream, dqkv, dout, qkv, out, lse, workspace, err);
}

#else /* no cuDNN in this build: the caller uses its own attention kernel */

#include <stdio.h>

#define NO_CUDNN_MSG                                                                               \
    "this build has no cuDNN (cudnn.h was not found at configure time); set CUDNN_HOME and "       \
    "reconfigure, or use the built-in attention kernel"

int gt_cudnn_attn_available(void) {
    return 0;
}
int gt_cudnn_attn_create(gt_cudnn_attn **a, cudaStream_t stream, gt_error *err) {
    (void)stream;
    if (a) *a = NULL;
    return gt_error_set(err, GT_ERR_UNSUPPORTED, NO_CUDNN_MSG);
}
void gt_cudnn_attn_destroy(gt_cudnn_attn *a) {
    (void)a;
}
int gt_cudnn_attn_plan(gt_cudnn_attn *a, int B, int T, int H, int KV, int hd, int with_bwd,
                       size_t *workspace_bytes, gt_error *err) {
    (void)a, (void)B, (void)T, (void)H, (void)KV, (void)hd, (void)with_bwd;
    if (workspace_bytes) *workspace_bytes = 0;
    return gt_error_set(err, GT_ERR_UNSUPPORTED, NO_CUDNN_MSG);
}
int gt_cudnn_attn_describe(const gt_cudnn_attn *a, int B, int T, int H, int KV, int hd, char *buf,
                           size_t n) {
    (void)a, (void)B, (void)T, (void)H, (void)KV, (void)hd;
    if (buf && n) snprintf(buf, n, "no cuDNN");
    return GT_ERR_UNSUPPORTED;
}
int gt_cudnn_attn_fwd(gt_cudnn_attn *a, cudaStream_t stream, void *out, float *lse, const void *qkv,
                      int B, int T, int H, int KV, int hd, void *workspace, gt_error *err) {
    (void)a, (void)stream, (void)out, (void)lse, (void)qkv, (void)B, (void)T, (void)H, (void)KV,
        (void)hd, (void)workspace;
    return gt_error_set(err, GT_ERR_UNSUPPORTED, NO_CUDNN_MSG);
}
int gt_cudnn_attn_bwd(gt_cudnn_attn *a, cudaStream_t stream, void *dqkv, const void *dout,
                      const void *qkv, const void *out, const float *lse, int B, int T, int H,
                      int KV, int hd, void *workspace, gt_error *err) {
    (void)a, (void)stream, (void)dqkv, (void)dout, (void)qkv, (void)out, (void)lse, (void)B,
        (void)T, (void)H, (void)KV, (void)hd, (void)workspace;
    return gt_error_set(err, GT_ERR_UNSUPPORTED, NO_CUDNN_MSG);
}

#endif
