/* The one op interface every backend implements (docs/design.md, backend/): memory, copies,
 * streams, graph capture and the math ops of the model and optimizer. cpu/ is the fp32
 * reference; cuda/ runs bf16 kernels and cuBLASLt. Model, training and graph code call only
 * this table, so eager steps, captured steps and CPU tests run the very same code.
 *
 * Conventions shared by every op (the contract both backends are tested against):
 * - Row-major. N = tokens of one micro-batch (B*T). "act" tensors (void *) hold the backend's
 *   compute dtype: fp32 on cpu, bf16 on cuda (b->act_bytes says which). float * tensors are
 *   always fp32 (master weights, gradients, moments, statistics), int32_t * are indices.
 * - Ops never allocate, never synchronize, never read values back to the host. Every op is
 *   enqueued on the stream `s`; on the cpu backend it runs at once, or is recorded when the
 *   stream is capturing. Per-step values (step number, lr, loss...) are read from the
 *   device-resident gt_step_state, never passed by value, so replays see fresh values.
 * - Op errors inside a step (a failed launch, an unplanned shape) do not return: the first one
 *   is kept in b->sticky and reported by gt_backend_check() after the step.
 * - "+=" marks an output that is accumulated into; otherwise outputs are overwritten.
 * - Weight gradients are fp32. Every op that produces one takes `accumulate`: 1 adds into the
 *   gradient (micro-batches after the first), 0 overwrites it (the first micro-batch), so a
 *   step neither zeroes the gradients first nor reads them back in its first backward.
 * - Planning: while b->planning is set, ops only record their shapes (the cuda backend builds
 *   cuBLASLt descriptors, algorithms and attention plans for each) and compute nothing. The
 *   trainer runs one planning pass of the step when it is built, then calls plan_finish. */
#ifndef GT_BACKEND_BACKEND_H
#define GT_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "backend/gemm_table.h"
#include "config/config.h"
#include "core/arena.h"
#include "core/error.h"
#include "core/fp8.h"
#include "core/step_state.h"

typedef struct gt_backend gt_backend;
typedef struct gt_stream gt_stream;
typedef struct gt_graph gt_graph;

typedef enum { GT_BACKEND_CPU = 1, GT_BACKEND_CUDA = 2 } gt_backend_kind;

/* Identifies one use of randomness: with rng.seed, the step counter and micro-batch index
 * (both read from the step state at run time) and the element index it gives the Philox
 * counter (core/philox.h). */
typedef struct gt_rng_site {
    uint64_t seed;
    uint32_t site; /* unique per call site: layer * 16 + which dropout */
    uint32_t pad_;
} gt_rng_site;

typedef struct gt_graph_info {
    int nodes;
    int memsets_replaced; /* memset nodes the backend turned into kernel nodes after capture */
    double capture_ms;
    double instantiate_ms;
} gt_graph_info;

typedef enum { GT_CAPTURE_THREAD_LOCAL = 0, GT_CAPTURE_GLOBAL = 1 } gt_capture_mode;

/* The RMSNorm weight gradient in two steps, so that a model sums all its norms' gradients in
 * one launch: rmsnorm_bwd_part leaves gt_rmsnorm_parts(N) partial rows, fixed by N alone so
 * that the caller sizes and sums them without asking the backend (every backend writes that
 * many), and colsum_many adds them up. */
#define GT_RMSNORM_PARTS_MAX 512
static inline int gt_rmsnorm_parts(int N) {
    int rows = (N + 4 * GT_RMSNORM_PARTS_MAX - 1) / (4 * GT_RMSNORM_PARTS_MAX); /* per quarter */
    if (rows < 1) rows = 1;
    return N > 0 ? (N + 4 * rows - 1) / (4 * rows) : 0;
}
typedef struct gt_colsum_job {
    float *out;        /* [d] */
    const float *part; /* [parts, d] */
    int parts, d;
    int accumulate; /* out += sums; else out = sums */
} gt_colsum_job;
#define GT_COLSUM_MAX_JOBS 64 /* jobs one colsum_many call takes */
/* At least gt_rmsnorm_parts(n) for every n <= N: how many rows to reserve for shapes up to N */
static inline int gt_rmsnorm_parts_bound(int N) {
    int q = (N + 3) / 4;
    return q < GT_RMSNORM_PARTS_MAX ? q : GT_RMSNORM_PARTS_MAX;
}

/* The rows of a flat gradient that may be nonzero: elements [offset, offset + rows * d) of the
 * gradient array are `rows` rows of d, and row r is all zeros wherever dirty[r] == 0 (dirty:
 * rows bytes, in device memory). embedding_bwd keeps the marks of the embedding gradient,
 * whose rows only the step's tokens touch. A hint, never a change of results: grad_norm and
 * adamw may skip the loads of unmarked rows (they are zero) or read them anyway; rows marked
 * that hold zeros are allowed. dirty == NULL: nothing is known. */
typedef struct gt_grad_rows {
    uint8_t *dirty;
    size_t offset, rows;
    int d;
    /* Lazy rows, a contract where the marks are a hint: NULL, or [rows] int32 in device memory,
     * lag[r] the first step whose AdamW update row r has not had yet (rows the step's tokens
     * do not touch have zero gradients, and their update is the same decay every step, so it
     * can wait until the row is read). adamw then updates exactly the rows with
     * lag[r] == st->step + 1 (lazy_catchup set that) and leaves the others alone. */
    int32_t *lag;
} gt_grad_rows;
#define GT_NO_GRAD_ROWS ((gt_grad_rows){NULL, 0, 0, 0, NULL})
/* The optimizer state the lazy-row ops replay AdamW over (the arrays and constants of adamw) */
typedef struct gt_adamw_state {
    void *params, *master, *m, *v;
    size_t n, n_decay;
    gt_adamw_params hp;
    gt_lr_schedule sched; /* lr of a past step s: the schedule at s, as step_begin computed it */
} gt_adamw_state;
/* 1 when element i lies in a lazy row whose update waits at step `step` */
static inline int gt_grad_rows_waits(const gt_grad_rows *r, size_t i, int64_t step) {
    return r->lag && i >= r->offset && i - r->offset < r->rows * (size_t)r->d &&
           r->lag[(i - r->offset) / (size_t)r->d] != step + 1;
}
/* 1 when element i of the gradient lies in a row the marks say is zero */
static inline int gt_grad_rows_zero(const gt_grad_rows *r, size_t i) {
    return r->dirty && i >= r->offset && i - r->offset < r->rows * (size_t)r->d &&
           !r->dirty[(i - r->offset) / (size_t)r->d];
}
/* 1 when the rows lie inside a gradient of n elements (or say nothing) */
static inline int gt_grad_rows_fit(const gt_grad_rows *r, size_t n) {
    return (!r->dirty && !r->lag) ||
           (r->d > 0 && r->offset <= n && r->rows <= (n - r->offset) / (size_t)r->d);
}

/* FP8 linear layers (model.compute_dtype fp8_cs / fp8_ds / fp8_sc). An FP8 tensor holds FP8
 * elements: one byte each on a GPU; on the cpu backend the float value of each code, so the
 * emulation's GEMMs read exact FP8 values (b->fp8_bytes says which). Every FP8 GEMM is "TN":
 * both operands are K-contiguous, as Hopper's FP8 tensor cores need, so the operands of the
 * gradients come from casts that transpose. */
typedef enum { GT_FP8_TENSORWISE, GT_FP8_DELAYED, GT_FP8_BLOCKWISE } gt_fp8_scaling;
#define GT_FP8_TILE 128 /* blockwise: 1 x 128 tiles (activations, gradients), 128 x 128 blocks */
/* The scaling state of one quantized tensor, in device memory. Tensorwise: the cast writes
 * amax, scale and scale_inv from this tensor. Delayed: the cast quantizes with scale and adds
 * its amax into amax (a max over the step's micro-batches); fp8_amax_update turns that into the
 * next step's scale. history: the delayed-scaling amax history ([history_len] floats, element
 * 0 the running step's slot), NULL otherwise. */
typedef struct gt_fp8_meta {
    float scale, scale_inv, amax;
    int32_t format; /* gt_fp8_format of the tensor, fixed when the model is built */
} gt_fp8_meta;
/* How one cast quantizes. tile_rows (blockwise): 1 for 1 x GT_FP8_TILE tiles, GT_FP8_TILE for
 * square blocks (weights); each tile gets a power-of-two scale from its own amax. */
typedef struct gt_fp8_cast_spec {
    gt_fp8_scaling scaling;
    gt_fp8_format format;
    int tile_rows;
    int record; /* 0 (evaluation): the cast leaves meta as it is */
    /* Tensorwise only (NULL otherwise): x's amax, already taken by the kernel that made x
     * (rmsnorm_fwd_amax, swiglu_fwd_amax), so the cast skips its own pass over x, which
     * current scaling needs before it can cast anything. In device memory, as the bits of
     * max |x| (gt_fp8_amax_bits); NULL: the cast takes the amax itself. */
    const uint32_t *amax_bits;
} gt_fp8_cast_spec;
/* An FP8 GEMM operand: K-contiguous [rows, K] elements of `format` and their inverse scales
 * (one float, or blockwise gt_fp8_scale_count(rows, K, tile_rows) of them, laid out as
 * gt_fp8_scale_index says). */
typedef struct gt_fp8_operand {
    const void *q;
    const float *scale_inv;
    int tile_rows;
    gt_fp8_format format;
} gt_fp8_operand;
/* fp8_gemm's out_fp32 flags (plain 0 / 1 keep their meaning) */
#define GT_FP8_OUT_FP32 1
#define GT_FP8_FAST_ACCUM 2
/* Blockwise inverse scales of q [rows, cols], in the layout cuBLASLt's block-scaled GEMMs read
 * (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F / BLK128x128_32F; Transformer Engine's "GEMM ready"
 * format), on every backend so that the CPU emulation checks the GPU's bits directly:
 * 1 x 128 tiles (tile_rows 1): rows contiguous, tile (r, t) at t * ld + r with ld = rows
 * rounded up to 4; 128 x 128 blocks: block (rb, t) at rb * ld + t, ld = ceil(cols / 128)
 * rounded up to 4 (padding never read). */
static inline size_t gt_fp8_scale_ld(int rows, int cols, int tile_rows) {
    size_t n = tile_rows == 1 ? (size_t)rows : (size_t)((cols + GT_FP8_TILE - 1) / GT_FP8_TILE);
    return (n + 3) / 4 * 4;
}
static inline size_t gt_fp8_scale_index(int rows, int cols, int tile_rows, int r, int t) {
    size_t ld = gt_fp8_scale_ld(rows, cols, tile_rows);
    return tile_rows == 1 ? (size_t)t * ld + (size_t)r : (size_t)(r / tile_rows) * ld + (size_t)t;
}
/* Inverse scales a blockwise cast of [rows, cols] with tile_rows writes (padding included) */
static inline size_t gt_fp8_scale_count(int rows, int cols, int tile_rows) {
    size_t ld = gt_fp8_scale_ld(rows, cols, tile_rows);
    return tile_rows == 1 ? (size_t)((cols + GT_FP8_TILE - 1) / GT_FP8_TILE) * ld
                          : (size_t)((rows + tile_rows - 1) / tile_rows) * ld;
}

/* How the router turns softmax probabilities into top-k weights (Megatron's
 * moe_router_pre_softmax and moe_router_topk_scaling_factor). */
typedef struct gt_router_mode {
    int pre_softmax; /* 1: the top-k probabilities as they are; 0: renormalized over the k */
    float scale;     /* multiplies the weights; 1 = unscaled */
} gt_router_mode;

/* The Mamba-2 mixer's shapes (model/model_mamba.c). Its input projection zxbcdt [N, in] holds,
 * per token, z [di] | x [di] | B [G*S] | C [G*S] | dt [H] (Megatron's MambaMixer split), with
 * di = H*P; the convolution runs over the xBC slice, conv = di + 2*G*S channels, and its
 * output xbc [N, conv] holds x | B | C. The ops read their slices in place. */
typedef struct gt_mamba_shape {
    int B, T;       /* sequences and their length: N = B*T tokens */
    int H, P, G, S; /* heads, head dim, groups (of B and C), state size */
    int K;          /* causal convolution width */
    int chunk;      /* SSD chunk length of chunked kernels (the result does not depend on it) */
} gt_mamba_shape;
static inline int gt_mamba_inner(gt_mamba_shape m) {
    return m.H * m.P;
}
static inline int gt_mamba_conv(gt_mamba_shape m) {
    return m.H * m.P + 2 * m.G * m.S;
}
static inline int gt_mamba_in(gt_mamba_shape m) {
    return 2 * m.H * m.P + 2 * m.G * m.S + m.H;
}
/* The chunk length of chunked scans: mamba_chunk_size, at most the sequence (one chunk holds
 * it all then; a longer one would only grow the workspace) */
static inline int gt_mamba_chunk_len(gt_mamba_shape m) {
    int L = m.chunk > 0 ? m.chunk : 1;
    return L < m.T ? L : (m.T > 0 ? m.T : 1);
}
/* The CUDA scan's workspace buffers each start on this many floats (256 bytes) */
#define GT_MAMBA_SSD_WS_ALIGN_FLOATS 64
/* Rounds a chunk product's leading dimension up to whole 16-byte rows of bf16 */
static inline size_t gt_mamba_ssd_ld(size_t n) {
    return (n + 7) / 8 * 8;
}
/* fp32 the SSD scan's forward leaves for its backward (the op's state argument), one per
 * layer: the CUDA chunked scan's (k_mamba_ssd_gemm.cu lays it out, each buffer 256-byte
 * aligned) dt and its cumsum per (sequence, head, token) and C B^T per (sequence, group,
 * chunk) in fp32, the state entering every (sequence, head, chunk) and y's part from it (tokens
 * padded to whole chunks) in bf16, so that its backward recomputes none of them; the CPU's
 * sequential scan keeps none (its backward runs the scan again), so 0 there. */
static inline size_t gt_mamba_ssd_state_floats(gt_mamba_shape m, gt_backend_kind kind) {
    if (kind != GT_BACKEND_CUDA) return 0;
    size_t L = (size_t)gt_mamba_chunk_len(m), nc = ((size_t)m.T + L - 1) / L;
    size_t BH = (size_t)m.B * m.H, Z = BH * nc, ps = (size_t)m.P * (size_t)m.S;
    return 2 * BH * m.T + (size_t)m.B * m.G * nc * L * L + (Z * ps + 1) / 2 +
           (Z * L * m.P + 1) / 2 + 6 * GT_MAMBA_SSD_WS_ALIGN_FLOATS;
}
/* Head widths up to which the CUDA scan's dx product also makes dx and the per-token sums in
 * its epilogue (a block holds a token's whole head row); wider heads keep an fp32 dx */
#define GT_MAMBA_SSD_TOK_MAX_P 64
/* The CUDA scan's state-passing blocks: this many entries of one (sequence, head)'s state
 * each, every block one part of each chunk's <dL/d(state out), state out> */
#define GT_MAMBA_SSD_PASS_ENTRIES 1024
/* The CUDA scan's dB/dC M blocks (k_mamba_ssd_dm.cu): rows and columns of a chunk's L x L
 * each; they also sum the decay gradient's terms from the chunk's own products, per row and
 * per column of each tile */
#define GT_MAMBA_SSD_DM_TILE 64
/* The CUDA gated norm's backward: tokens a block takes (its weight gradient's parts, one per
 * GT_MAMBA_GNORM_TOKENS tokens and channel, are the Mamba workspace's) */
#define GT_MAMBA_GNORM_TOKENS 64
/* fp32 workspace the Mamba ops take (the SSD scan's forward and backward, the gated norm's
 * backward), no value kept between them: enough for every backend. The CPU's: dt and its gradient,
 * A, dA, dD and one head's states over time. The CUDA chunked scan's (k_mamba_ssd_gemm.cu lays it
 * out, each buffer 256-byte aligned; what the forward leaves for the backward is the state's,
 * above): the chunks' own states (forward) or their states' gradients (backward) per (sequence,
 * head, chunk) in fp32, the passed gradients in bf16, an fp32 copy of y's shape (dx's, the tokens
 * padded to whole chunks) where P > GT_MAMBA_SSD_TOK_MAX_P, three sums per token and head and
 * the parts of a fourth (one per GT_MAMBA_SSD_TOK_MAX_P of P), three per chunk and the parts of
 * one per chunk, dC's and dB's decay-weighted dy x^T per (sequence, group, chunk) in bf16 (L rows
 * of L rounded by gt_mamba_ssd_ld), and the chunk products' row and column sums (of the decay
 * gradient's terms) per GT_MAMBA_SSD_DM_TILE tile and (sequence, head, chunk, token). */
static inline size_t gt_mamba_ws_floats(gt_mamba_shape m) {
    size_t N = (size_t)m.B * m.T, H = (size_t)m.H, ps = (size_t)m.P * (size_t)m.S;
    size_t L = (size_t)gt_mamba_chunk_len(m), nc = ((size_t)m.T + L - 1) / L;
    size_t BH = (size_t)m.B * H, Z = BH * nc, ZG = (size_t)m.B * m.G * nc;
    size_t nlt = (ps + GT_MAMBA_SSD_PASS_ENTRIES - 1) / GT_MAMBA_SSD_PASS_ENTRIES;
    size_t cpu = 2 * N * H + 3 * H + ((size_t)m.T + 1) * ps;
    size_t dxs = m.P > GT_MAMBA_SSD_TOK_MAX_P ? Z * L * (size_t)m.P : 0;
    size_t mm = ZG * L * gt_mamba_ssd_ld(L); /* bf16, each of dC's and dB's */
    size_t ntok = 3 + ((size_t)m.P + GT_MAMBA_SSD_TOK_MAX_P - 1) / GT_MAMBA_SSD_TOK_MAX_P;
    size_t nt = (L + GT_MAMBA_SSD_DM_TILE - 1) / GT_MAMBA_SSD_DM_TILE;
    /* 9 buffers, each start rounded up, and the bf16 ones counted as floats */
    size_t cuda = Z * ps + (Z * ps + 1) / 2 + dxs + ntok * BH * m.T + Z * nlt + 3 * Z +
                  2 * ((mm + 1) / 2) + 2 * Z * nt * L + 9 * GT_MAMBA_SSD_WS_ALIGN_FLOATS;
    size_t gnorm = (N + GT_MAMBA_GNORM_TOKENS - 1) / GT_MAMBA_GNORM_TOKENS * H * m.P;
    size_t most = cpu > cuda ? cpu : cuda;
    return most > gnorm ? most : gnorm;
}
/* Llama 3.1's rotary scaling constants, fixed in Megatron's apply_rope_scaling (and Llama
 * 3.1's config: low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192) */
#define GT_ROPE_ORIGINAL_MAX 8192.0
#define GT_ROPE_LOW_FREQ_FACTOR 1.0
#define GT_ROPE_HIGH_FREQ_FACTOR 4.0

typedef struct gt_backend_ops {
    /* ---- memory (only outside steps) ---- */
    int (*alloc)(gt_backend *b, size_t bytes, void **ptr, gt_error *err);
    void (*free)(gt_backend *b, void *ptr);
    int (*host_alloc)(gt_backend *b, size_t bytes, void **ptr, gt_error *err); /* pinned */
    void (*host_free)(gt_backend *b, void *ptr);
    /* free and total device memory, and the peak bytes this backend has allocated */
    void (*mem_info)(gt_backend *b, size_t *free_bytes, size_t *total_bytes, size_t *peak);

    /* ---- streams, copies ---- */
    int (*stream_create)(gt_backend *b, gt_stream **s, gt_error *err);
    void (*stream_destroy)(gt_backend *b, gt_stream *s);
    int (*stream_sync)(gt_backend *b, gt_stream *s, gt_error *err);
    void (*memcpy_h2d)(gt_backend *b, gt_stream *s, void *dst, const void *src, size_t bytes);
    void (*memcpy_d2h)(gt_backend *b, gt_stream *s, void *dst, const void *src, size_t bytes);
    void (*memcpy_d2d)(gt_backend *b, gt_stream *s, void *dst, const void *src, size_t bytes);
    void (*memset0)(gt_backend *b, gt_stream *s, void *dst, size_t bytes);
    /* dtype conversion between act tensors and fp32 */
    void (*to_float)(gt_backend *b, gt_stream *s, float *dst, const void *src, size_t n);
    void (*from_float)(gt_backend *b, gt_stream *s, void *dst, const float *src, size_t n);

    /* ---- planning ---- */
    int (*plan_finish)(gt_backend *b, gt_error *err);

    /* ---- GEMM algorithms (optional: NULL where the backend picks none; cuda) ---- */
    /* Takes a copy of a table (backend/gemm_table.h) before the planning pass, which then
     * runs the table's algorithm for each shape it lists. A table made on another device or
     * library version is set aside with a warning on stderr (and GT_OK). */
    int (*gemm_table_set)(gt_backend *b, const gt_gemm_table *t, gt_error *err);
    /* The device and library version a table made here is for. */
    void (*gemm_table_header)(gt_backend *b, gt_gemm_table *t);
    /* The planned GEMMs: how many, and plan i's shape with the algorithm it runs, how many
     * candidates the library offered and which of them runs (-1: the table's, none of them).
     * gemm_plan_get returns 0 for a plan without an aligned-operand algorithm. */
    int (*gemm_plans)(gt_backend *b);
    int (*gemm_plan_get)(gt_backend *b, int i, gt_gemm_entry *e, int *n_cand, int *choice);
    /* Plan i runs candidate cand from its next launch on; a graph captured before keeps the
     * algorithm it captured. For graphtrain tune-gemm. */
    int (*gemm_choose)(gt_backend *b, int i, int cand, gt_error *err);
    /* Timing for graphtrain tune-gemm: from plan i's next eager launch on (i >= 0), its
     * launches take its candidates in turn, each between two events; -1 stops. Samples start
     * empty. gemm_tune_read, after a stream sync, adds the finished timings and gives each
     * candidate's median in microseconds and its number of samples (GT_GEMM_CANDIDATES). */
    int (*gemm_tune)(gt_backend *b, int i, gt_error *err);
    int (*gemm_tune_read)(gt_backend *b, double *median_us, int *count, gt_error *err);
    /* Optional (graphtrain tune-gemm --peak): the median rate in FLOP/s of reps launches of
     * one n x n x n GEMM, bf16 or (fp8) E4M3 with fast accumulation, both with bf16 out. */
    int (*gemm_peak)(gt_backend *b, int fp8, int n, int reps, double *flops_per_s, gt_error *err);

    /* ---- capture: cuda maps these to stream capture; cpu records the op sequence ---- */
    int (*begin_capture)(gt_backend *b, gt_stream *s, gt_capture_mode mode, gt_error *err);
    /* ends capture and instantiates; on failure no graph is returned and none stays alive */
    int (*end_capture)(gt_backend *b, gt_stream *s, gt_graph **g, gt_graph_info *info,
                       gt_error *err);
    int (*graph_launch)(gt_backend *b, gt_graph *g, gt_stream *s, gt_error *err);
    void (*graph_destroy)(gt_backend *b, gt_graph *g);
    int (*live_graphs)(gt_backend *b); /* graphs created and not destroyed */
    /* One line naming the device and the kernels chosen per op family (the CUDA backend's
     * runtime.cuda.* choices for the planned shapes), for summaries and benchmark reports; at
     * most n bytes with the NUL. */
    void (*describe)(gt_backend *b, char *buf, size_t n);

    /* ---- dense transformer ops ---- */
    /* out[N,d] = wte[tokens[n]] */
    void (*embedding_fwd)(gt_backend *b, gt_stream *s, void *out, const int32_t *tokens,
                          const void *wte, int N, int d);
    /* dwte[V,d] (+)= scatter of dout by token; deterministic (fixed summation order).
     * overwrite: dwte is zeroed first, then summed into. dirty (V bytes, or NULL) marks the
     * rows of dwte that may be nonzero (gt_grad_rows): with it, overwrite zeroes only the
     * marked rows and clears their marks, and every row summed into gets marked; the caller
     * keeps every unmarked row zero. Without it, overwrite zeroes all of dwte. */
    void (*embedding_bwd)(gt_backend *b, gt_stream *s, float *dwte, uint8_t *dirty,
                          const void *dout, const int32_t *tokens, int N, int V, int d,
                          int overwrite);
    /* out = inp * rstd * w, rstd[n] = 1/sqrt(mean(inp[n]^2) + eps) */
    void (*rmsnorm_fwd)(gt_backend *b, gt_stream *s, void *out, float *rstd, const void *inp,
                        const void *w, int N, int d, float eps);
    /* dinp[N,d] += ..., dw[d] (+)= ... (accumulate applies to dw only) */
    void (*rmsnorm_bwd)(gt_backend *b, gt_stream *s, void *dinp, float *dw, const void *dout,
                        const void *inp, const void *w, const float *rstd, int N, int d,
                        int accumulate);
    /* dout_res[N,d] = din_res (zeros if NULL) + the input gradient, the weight gradient left as
     * gt_rmsnorm_parts(N) rows part[p][0..d) whose column sums, in row order, are the dw of
     * this call. dout_res may alias din_res or inp: a residual stream's gradient can be written
     * over the activation it belongs to once the norm has read it. */
    void (*rmsnorm_bwd_part)(gt_backend *b, gt_stream *s, void *dout_res, const void *din_res,
                             float *part, const void *dout, const void *inp, const void *w,
                             const float *rstd, int N, int d);
    /* for each of n <= GT_COLSUM_MAX_JOBS jobs: out[c] (+)= sum over p in order of part[p][c] */
    void (*colsum_many)(gt_backend *b, gt_stream *s, const gt_colsum_job *jobs, int n);
    /* out[n] = a[n] + x[n]; out may alias a or x */
    void (*add)(gt_backend *b, gt_stream *s, void *out, const void *a, const void *x, size_t n);
    /* out = in * keep / (1-p) with keep from Philox(site, step from st); in-place allowed */
    void (*dropout_fwd)(gt_backend *b, gt_stream *s, void *out, const void *in, size_t n, float p,
                        gt_rng_site site, const gt_step_state *st);
    /* dx = dy * keep / (1-p), the same mask as dropout_fwd; in-place allowed */
    void (*dropout_bwd)(gt_backend *b, gt_stream *s, void *dx, const void *dy, size_t n, float p,
                        gt_rng_site site, const gt_step_state *st);
    /* out[M,N] = a[M,K] @ w[N,K]^T (+ bias[N] if bias) (+ res[M,N] if res: the residual add
     * done in the GEMM's epilogue; res must not alias out) */
    void (*matmul_fwd)(gt_backend *b, gt_stream *s, void *out, const void *a, const void *w,
                       const void *bias, const void *res, int M, int N, int K);
    /* da[M,K] = (or += if accumulate) dout[M,N] @ w[N,K] */
    void (*matmul_bwd_data)(gt_backend *b, gt_stream *s, void *da, const void *dout, const void *w,
                            int M, int N, int K, int accumulate);
    /* dw[N,K] (+)= dout[M,N]^T @ a[M,K]; dbias[N] (+)= column sums of dout (if dbias) */
    void (*matmul_bwd_weight)(gt_backend *b, gt_stream *s, float *dw, float *dbias,
                              const void *dout, const void *a, int M, int N, int K, int accumulate);
    /* count matmul_bwd_weight calls without bias in one: for i < count, dw + i * dw_stride
     * (+)= (dout + i * dout_stride)^T @ (a + i * a_stride), strides in elements and > 0; the
     * weight gradients of equal-shaped layers, which one batched GEMM fills the GPU with */
    void (*matmul_bwd_weight_batched)(gt_backend *b, gt_stream *s, float *dw, int64_t dw_stride,
                                      const void *dout, int64_t dout_stride, const void *a,
                                      int64_t a_stride, int M, int N, int K, int count,
                                      int accumulate);
    /* rotary embedding, in place on the q and k heads of qkv[B*T, (H + 2*KV) * hd] (q heads,
     * then k heads, then v heads); position = t; pairs (i, i + hd/2) rotate by
     * t * theta^(-2i/hd) */
    void (*rope_fwd)(gt_backend *b, gt_stream *s, void *qkv, int B, int T, int H, int KV, int hd,
                     float theta);
    /* inverse rotation of the q and k parts of dqkv, in place */
    void (*rope_bwd)(gt_backend *b, gt_stream *s, void *dqkv, int B, int T, int H, int KV, int hd,
                     float theta);
    /* rope_fwd / rope_bwd with Llama 3.1's frequency scaling (model.rope_scaling, Megatron's
     * apply_rope_scaling): pair i's inverse frequency f = theta^(-2i/hd) becomes f / factor
     * where its wavelength 2 pi / f exceeds ORIGINAL_MAX / LOW_FREQ_FACTOR, stays f
     * below ORIGINAL_MAX / HIGH_FREQ_FACTOR, and between them is (1 - s) f / factor + s f with
     * s = (ORIGINAL_MAX / wavelength - LOW_FREQ_FACTOR) / (HIGH_FREQ_FACTOR - LOW_FREQ_FACTOR) */
    void (*rope_scaled_fwd)(gt_backend *b, gt_stream *s, void *qkv, int B, int T, int H, int KV,
                            int hd, float theta, float factor);
    void (*rope_scaled_bwd)(gt_backend *b, gt_stream *s, void *dqkv, int B, int T, int H, int KV,
                            int hd, float theta, float factor);
    /* Per-head RMSNorm of q and k (model.qk_layernorm, Qwen3's q_norm / k_norm), in place on
     * the q and k heads of qkv[N, (H + 2*KV) * hd] (v untouched): each head's hd values x
     * become x * r * w, r = 1/sqrt(mean(x^2) + eps), w = qw[hd] on q heads, kw[hd] on k heads.
     * For the backward, raw[N, (H + KV) * hd] keeps x and rstd[N, H + KV] the r's (either
     * NULL: not kept, as in decoding). */
    void (*qk_norm_fwd)(gt_backend *b, gt_stream *s, void *qkv, void *raw, float *rstd,
                        const void *qw, const void *kw, int N, int H, int KV, int hd, float eps);
    /* Its backward, in place on the q and k heads of dqkv; the weight gradients are left as
     * gt_rmsnorm_parts(N) partial rows qpart[p][0..hd) and kpart[p][0..hd) whose column sums
     * in row order (colsum_many) are dqw and dkw. */
    void (*qk_norm_bwd_part)(gt_backend *b, gt_stream *s, void *dqkv, float *qpart, float *kpart,
                             const void *raw, const float *rstd, const void *qw, const void *kw,
                             int N, int H, int KV, int hd);
    /* causal grouped-query attention. out[B*T, H*hd]; lse[B,H,T] log-sum-exp of the scaled
     * scores (saved for backward); scale 1/sqrt(hd); query head h uses kv head h/(H/KV);
     * dropout p on the probabilities (site, step from st) */
    void (*attention_fwd)(gt_backend *b, gt_stream *s, void *out, float *lse, const void *qkv,
                          int B, int T, int H, int KV, int hd, float p, gt_rng_site site,
                          const gt_step_state *st);
    /* dqkv[B*T, (H+2KV)*hd] overwritten */
    void (*attention_bwd)(gt_backend *b, gt_stream *s, void *dqkv, const void *dout,
                          const void *qkv, const void *out, const float *lse, int B, int T, int H,
                          int KV, int hd, float p, gt_rng_site site, const gt_step_state *st);
    /* out[N,f] = silu(gu[:, :f]) * gu[:, f:] (gate first, then up) */
    void (*swiglu_fwd)(gt_backend *b, gt_stream *s, void *out, const void *gu, int N, int f);
    /* dgu[N,2f] overwritten; dgu may alias gu (the backward can reuse the saved gate/up) */
    void (*swiglu_bwd)(gt_backend *b, gt_stream *s, void *dgu, const void *dout, const void *gu,
                       int N, int f);
    /* losses[n] = -log softmax(logits[n])[targets[n]]; dlogits = (softmax - onehot) * dscale;
     * dlogits may alias logits; targets[n] < 0 are ignored (loss 0, gradient 0) */
    void (*cross_entropy)(gt_backend *b, gt_stream *s, float *losses, void *dlogits,
                          const void *logits, const int32_t *targets, int N, int V, float dscale);
    /* st->loss += scale * sum(losses[0..N)), summed in a fixed order */
    void (*loss_accumulate)(gt_backend *b, gt_stream *s, gt_step_state *st, const float *losses,
                            int N, float scale);

    /* ---- step state and optimizer ---- */
    /* st->lr from st->step and the schedule; zero loss, aux_loss, nan_flags, skipped, micro */
    void (*step_begin)(gt_backend *b, gt_stream *s, gt_step_state *st, gt_lr_schedule sched);
    /* st->micro++ (called after each micro-batch's backward) */
    void (*micro_next)(gt_backend *b, gt_stream *s, gt_step_state *st);
    /* test hook: if st->step == st->inject_nan, set st->loss and grads[0] to NaN, and mark
     * the row of grads[0] when rows cover it */
    void (*inject_nan)(gt_backend *b, gt_stream *s, gt_step_state *st, float *grads,
                       gt_grad_rows rows);
    /* set GT_NAN_LOSS in st->nan_flags when check_loss and st->loss is not finite;
     * grad_norm = ||grads||_2 in a fixed order; set GT_NAN_GRAD when check_grad and the norm
     * is not finite. clip_coef = min(1, clip / (norm + 1e-6)) when clip > 0, else 1. */
    void (*grad_norm)(gt_backend *b, gt_stream *s, gt_step_state *st, const float *grads, size_t n,
                      gt_grad_rows rows, int check_loss, int check_grad, float clip);
    /* AdamW over flat arrays: if st->nan_flags, set st->skipped and change nothing. Otherwise,
     * with t = st->step + 1, g = grads * clip_coef, weight decay on the first n_decay
     * elements: master -= lr * wd * master first (decoupled decay, PyTorch's fused AdamW's
     * order), then master -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps);
     * params = master in compute dtype. m and v are fp32, or bf16 where hp.m_bf16 / hp.v_bf16 say
     * so: the math is fp32, the update uses the new fp32 moments, and storing rounds them to
     * nearest-even (as Transformer Engine's FusedAdam does). With hp.master_lo (backends with
     * bf16 params), master is int16 [n] and the master weight is gt_master_join(params, master):
     * the update is the same fp32 math, then gt_master_split stores it back into both. */
    void (*adamw)(gt_backend *b, gt_stream *s, void *params, void *master, const float *grads,
                  gt_grad_rows rows, void *m, void *v, size_t n, size_t n_decay, gt_adamw_params hp,
                  gt_step_state *st);
    /* Lazy rows (gt_grad_rows.lag), before a step's forward reads them: for each distinct row
     * r among tokens[0..n) (ids outside the rows ignored) with lag[r] <= st->step, apply the
     * updates of steps lag[r] .. st->step - 1 that it missed, each exactly as adamw computed it
     * for a zero gradient at that step, in order; then lag[r] = st->step + 1, so this step's
     * adamw updates the row. Bitwise the state an adamw of every row every step would hold.
     * sweep > 0 (the sweep; 0: none): the rows of slice st->step mod sweep (per =
     * ceil(rows / sweep) rows from slice * per) get the same, so that, with a sweep every
     * step, no row owes more than sweep - 1 updates and a step's replays are spread over rows
     * of like lengths. A row among both the tokens' and the slice's is caught up once. */
    void (*lazy_catchup)(gt_backend *b, gt_stream *s, gt_step_state *st, gt_adamw_state os,
                         gt_grad_rows rows, const int32_t *tokens, int n, int sweep);
    /* Between steps: every row with lag[r] < st->step gets the updates it missed, those of
     * steps lag[r] .. st->step - 1, leaving out the last one when st->skipped says it changed
     * nothing (replay 0: none, the rows being known current); then lag[r] = st->step. After
     * it, params, master and moments are those of an every-row adamw. */
    void (*lazy_flush)(gt_backend *b, gt_stream *s, gt_step_state *st, gt_adamw_state os,
                       gt_grad_rows rows, int replay);
    /* records the first NaN step, then st->step++ */
    void (*step_end)(gt_backend *b, gt_stream *s, gt_step_state *st);

    /* ---- mixture of experts ---- */
    /* probs[N,E] = softmax(logits) in fp32; topk_idx/topk_w[N,k]: the k largest (ties: lower
     * expert first), weights renormalized to sum to 1 (mode.pre_softmax: the probabilities
     * themselves), times mode.scale; counts[E] = tokens routed per expert (before any
     * capacity drop) */
    void (*moe_router_fwd)(gt_backend *b, gt_stream *s, float *probs, int32_t *topk_idx,
                           float *topk_w, int32_t *counts, const void *logits, int N, int E, int k,
                           gt_router_mode mode);
    /* st->aux_loss += coeff * E * sum_e (counts[e] / (N*k)) * mean_n probs[n,e] */
    void (*moe_aux_loss)(gt_backend *b, gt_stream *s, gt_step_state *st, const float *probs,
                         const int32_t *counts, int N, int E, int k, float coeff);
    /* dlogits[N,E] (overwritten) from dtopk_w[N,k] through the scale, renormalization (unless
     * mode.pre_softmax) and softmax, plus the aux-loss gradient (aux_coeff as given to
     * moe_aux_loss; 0 = none); mode as given to moe_router_fwd */
    void (*moe_router_bwd)(gt_backend *b, gt_stream *s, void *dlogits, const float *dtopk_w,
                           const float *probs, const int32_t *topk_idx, const float *topk_w,
                           const int32_t *counts, int N, int E, int k, float aux_coeff,
                           gt_router_mode mode);
    /* Permutation, stable by token order. capacity == 0 (dropless): R = N*k rows, expert e
     * owns rows [offsets[e], offsets[e+1]). capacity C > 0 (drop-and-pad): R = E*C rows,
     * expert e owns [e*C, e*C + C), tokens past C are dropped, unused rows are padding.
     * slot_token[R] = n*k + j of the assignment in that row, or -1 (padding);
     * token_slot[N*k] = row of assignment (n, j), or -1 (dropped); offsets[E+1]. */
    void (*moe_permute)(gt_backend *b, gt_stream *s, int32_t *slot_token, int32_t *token_slot,
                        int32_t *offsets, const int32_t *topk_idx, int N, int E, int k,
                        int capacity);
    /* xe[r] = x[slot_token[r] / k], or zeros for padding rows */
    void (*moe_gather)(gt_backend *b, gt_stream *s, void *xe, const void *x,
                       const int32_t *slot_token, int R, int k, int d);
    /* dx[n] += sum over j of dxe[token_slot[n*k+j]] (skipping -1), per token: deterministic */
    void (*moe_gather_bwd)(gt_backend *b, gt_stream *s, void *dx, const void *dxe,
                           const int32_t *token_slot, int N, int k, int d);
    /* grouped GEMM: rows [offsets[e], offsets[e+1]) of a use expert e's weight:
     * out[R,Nf] = a[R,K] @ w[e][Nf,K]^T; rows outside every group are left untouched */
    void (*moe_matmul_fwd)(gt_backend *b, gt_stream *s, void *out, const void *a, const void *w,
                           const int32_t *offsets, int R, int E, int Nf, int K);
    /* da[R,K] = dout[R,Nf] @ w[e] per group */
    void (*moe_matmul_bwd_data)(gt_backend *b, gt_stream *s, void *da, const void *dout,
                                const void *w, const int32_t *offsets, int R, int E, int Nf, int K);
    /* dw[e][Nf,K] (+)= dout[group]^T @ a[group]; with accumulate 0, experts without rows get
     * zeros */
    void (*moe_matmul_bwd_weight)(gt_backend *b, gt_stream *s, float *dw, const void *dout,
                                  const void *a, const int32_t *offsets, int R, int E, int Nf,
                                  int K, int accumulate);
    /* y[n] = sum_j topk_w[n,j] * ye[token_slot[n*k+j]] (dropped assignments contribute 0) */
    void (*moe_combine_fwd)(gt_backend *b, gt_stream *s, void *y, const void *ye,
                            const float *topk_w, const int32_t *token_slot, int N, int k, int d);
    /* dye[R,d] overwritten (zeros on padding rows); dtopk_w[N,k] overwritten */
    void (*moe_combine_bwd)(gt_backend *b, gt_stream *s, void *dye, float *dtopk_w, const void *dy,
                            const void *ye, const float *topk_w, const int32_t *token_slot,
                            const int32_t *slot_token, int N, int R, int k, int d);

    /* ---- FP8 linear layers (optional: NULL on a backend without them) ---- */
    /* q = fp8(x * scale) of x [rows, cols] (act), or of x^T ([cols, rows]) when transpose;
     * scale_inv gets the inverse scale(s) the GEMM reads (one float, or blockwise one per tile
     * of q, gt_fp8_scale_count(q's rows, q's cols, tile_rows)). meta: the tensor's state
     * (gt_fp8_meta; unused by blockwise, may be NULL there). Sets GT_NAN_FP8 in st->nan_flags
     * when an amax is NaN/Inf or a scale overflows (fp8_max / amax past FLT_MAX): the
     * optimizer then skips the step, as for a NaN loss. Current scaling where amax is 0 keeps
     * scale 1 (Transformer Engine's rule); blockwise scales are powers of two. */
    void (*fp8_cast)(gt_backend *b, gt_stream *s, void *q, float *scale_inv, const void *x,
                     int rows, int cols, int transpose, gt_fp8_cast_spec spec, gt_fp8_meta *meta,
                     gt_step_state *st);
    /* Optional (NULL: two fp8_casts): q = fp8(x * scale) [rows, cols] and qt = fp8(x^T * scale)
     * [cols, rows] from one reading of x (per tensor: one scale; blockwise: each form's own
     * tiles, so the 1 x 128 tiles of qt run along x's columns), all inverse scales written; the
     * same results and scaling state as fp8_cast(transpose 0) then fp8_cast(transpose 1). */
    void (*fp8_cast_pair)(gt_backend *b, gt_stream *s, void *q, float *scale_inv, void *qt,
                          float *scale_inv_t, const void *x, int rows, int cols,
                          gt_fp8_cast_spec spec, gt_fp8_meta *meta, gt_step_state *st);
    /* out[M,N] = sum_k a[m,k] w[n,k] scaled back by the operands' inverse scales, in fp32:
     * tensorwise / delayed, one product (sa * sw) times the whole sum; blockwise, each K tile
     * of GT_FP8_TILE summed on its own, times its tiles' inverse scales, added in K order.
     * Then + bias[n] (if bias) + res[m,n] (if res; not aliasing out). out_fp32: flags,
     * GT_FP8_OUT_FP32: out is fp32 (weight gradients), else act; GT_FP8_FAST_ACCUM: a GPU may
     * sum in the tensor cores' faster, narrower accumulator (Transformer Engine's choice for
     * the forward, not the gradients). accumulate adds into out, else out is overwritten. */
    void (*fp8_gemm)(gt_backend *b, gt_stream *s, void *out, int out_fp32, int accumulate,
                     gt_fp8_operand a, gt_fp8_operand w, gt_fp8_scaling scaling, const void *bias,
                     const void *res, int M, int N, int K);
    /* Delayed scaling, once per step for n tensors (meta[i], history + i * history_len): the
     * step's amax goes into history[0]; amax = the history's max (use_max) or history[0];
     * scale = gt_fp8_scale_from_amax(amax, scale, format of tensor i, margin), scale_inv =
     * 1 / scale; then the history rolls (history[j] = history[j + 1], the step's amax to the
     * end, history[0] = 0), as Transformer Engine's amax_and_scale_update; meta amax = 0.
     * Sets GT_NAN_FP8 when a scale overflows. */
    void (*fp8_amax_update)(gt_backend *b, gt_stream *s, gt_fp8_meta *meta, float *history, int n,
                            int history_len, int use_max, int margin, gt_step_state *st);
    /* dbias[N] (+)= column sums of dout[M, N] (act), in matmul_bwd_weight's order: the bias
     * gradient of an fp8 linear layer, taken from the unquantized gradient as Transformer
     * Engine takes it, since its weight gradient is an fp8 GEMM without a bias output */
    void (*bias_grad)(gt_backend *b, gt_stream *s, float *dbias, const void *dout, int M, int N,
                      int accumulate);
    /* Producers that also take their output's amax for the current-scaling cast that follows
     * (optional: NULL, and the cast takes its own pass over the output). Each is the op of its
     * name and, besides, *amax_bits = max(*amax_bits, gt_fp8_amax_bits(v)) over every output
     * value v as stored (act dtype: on a GPU the bf16-rounded value), which is what the cast's
     * own pass would find; that value goes to the cast as gt_fp8_cast_spec.amax_bits. The
     * caller zeroes *amax_bits on the stream before (memset0), inside the step, so that
     * replays start from zero too. */
    void (*rmsnorm_fwd_amax)(gt_backend *b, gt_stream *s, void *out, float *rstd, const void *inp,
                             const void *w, int N, int d, float eps, uint32_t *amax_bits);
    void (*swiglu_fwd_amax)(gt_backend *b, gt_stream *s, void *out, const void *gu, int N, int f,
                            uint32_t *amax_bits);
    /* The backward's producers of output gradients: the residual gradient a norm's backward
     * writes (dout_res, the o or down projection's output gradient) and SwiGLU's gate/up
     * gradient (dgu, gate/up's) */
    void (*rmsnorm_bwd_part_amax)(gt_backend *b, gt_stream *s, void *dout_res, const void *din_res,
                                  float *part, const void *dout, const void *inp, const void *w,
                                  const float *rstd, int N, int d, uint32_t *amax_bits);
    void (*swiglu_bwd_amax)(gt_backend *b, gt_stream *s, void *dgu, const void *dout,
                            const void *gu, int N, int f, uint32_t *amax_bits);
    /* rope_bwd (factor 0) or rope_scaled_bwd (factor > 0) with the amax of all of dqkv [B T,
     * (H + 2 KV) hd] as it stands after (the v heads, which rope leaves alone, included): qkv's
     * output gradient, where nothing changes it before its cast (no qk norm) */
    void (*rope_bwd_amax)(gt_backend *b, gt_stream *s, void *dqkv, int B, int T, int H, int KV,
                          int hd, float theta, float factor, uint32_t *amax_bits);
    /* ---- FP8 grouped expert GEMMs (optional, as the FP8 ops above; per-tensor scaling) ----
     * The MoE counterparts of fp8_gemm over device offsets, both operands K-contiguous.
     * out[R, Nf] (act): rows [offsets[e], offsets[e+1]) of a.q [R, K] times w.q[e] [Nf, K]^T
     * ([E][Nf][K]), each sum scaled back by a.scale_inv[0] * w.scale_inv[e] (one inverse
     * scale for all of a, one per expert's weight); rows outside every group are left
     * untouched. flags: GT_FP8_FAST_ACCUM as fp8_gemm's. The forward (w the weights) and the
     * data gradient (a the output gradient, w the transposed weight copies) alike. */
    void (*moe_fp8_matmul)(gt_backend *b, gt_stream *s, void *out, int flags, gt_fp8_operand a,
                           gt_fp8_operand w, const int32_t *offsets, int R, int E, int Nf, int K);
    /* dw[e][Nf, K] (+)= sum over expert e's rows r, columns [offsets[e], offsets[e+1]) of the
     * transposed operands, of g.q[n, r] x.q[k, r] (g [Nf, R], x [K, R]), in fp32, scaled back by
     * g.scale_inv[0] * x.scale_inv[0]; accumulate 0 overwrites, zeros for an expert without
     * rows. The weight gradient of the experts. */
    void (*moe_fp8_matmul_wgrad)(gt_backend *b, gt_stream *s, float *dw, gt_fp8_operand g,
                                 gt_fp8_operand x, const int32_t *offsets, int R, int E, int Nf,
                                 int K, int accumulate);
    /* The experts' weight casts, every expert in one pass: each of the count tensors x[e]
     * [rows, cols] (x + e rows cols elements) cast on its own with meta[e], into q[e]
     * [rows, cols] (when q) and qt[e] [cols, rows] (when qt; at least one of the two), inverse
     * scales scale_inv[e] / scale_inv_t[e]: the codes, scales, scaling state and flags that
     * fp8_cast(transpose 0) into q[e] then fp8_cast(transpose 1) into qt[e] of each slice
     * give. Per-tensor scaling only (tensorwise or delayed). */
    void (*fp8_cast_experts)(gt_backend *b, gt_stream *s, void *q, float *scale_inv, void *qt,
                             float *scale_inv_t, const void *x, int count, int rows, int cols,
                             gt_fp8_cast_spec spec, gt_fp8_meta *meta, gt_step_state *st);
    /* ---- Mamba-2 mixer (gt_mamba_shape; act tensors, parameters in act dtype) ---- */
    /* xbc[N, conv] = silu(bias + causal depthwise conv of zxbcdt's xBC slice with w[conv, K]),
     * x = 0 before each sequence's first token */
    void (*mamba_conv_fwd)(gt_backend *b, gt_stream *s, void *xbc, const void *zxbcdt,
                           const void *w, const void *bias, gt_mamba_shape sh);
    /* the xBC slice of dzxbcdt (overwritten; the other columns untouched) from dxbc[N, conv];
     * dw[conv, K], dbias[conv] (+)= */
    void (*mamba_conv_bwd)(gt_backend *b, gt_stream *s, void *dzxbcdt, float *dw, float *dbias,
                           const void *dxbc, const void *zxbcdt, const void *w, const void *bias,
                           gt_mamba_shape sh, int accumulate);
    /* y[N, di] = the SSD scan per sequence from zero state over x, B, C of xbc, with
     * dt = softplus(zxbcdt's dt + dt_bias), A = -exp(A_log) and the skip D (all [H]):
     * S_t = exp(dt_t A) S_{t-1} + dt_t x_t B_t^T, y_t = S_t C_t + D x_t (cpu_mamba.h);
     * ws: gt_mamba_ws_floats of scratch; state: gt_mamba_ssd_state_floats(sh, kind),
     * written for the backward of the same inputs (NULL where that is 0) */
    void (*mamba_ssd_fwd)(gt_backend *b, gt_stream *s, void *y, const void *xbc, const void *zxbcdt,
                          const void *dt_bias, const void *A_log, const void *D, float *ws,
                          float *state, gt_mamba_shape sh);
    /* dxbc[N, conv] (overwritten), the dt slice of dzxbcdt (overwritten), ddt_bias, dA_log, dD
     * [H] (+)= from dy[N, di]; ws as the forward's, state as the forward of these inputs left
     * it */
    void (*mamba_ssd_bwd)(gt_backend *b, gt_stream *s, void *dxbc, void *dzxbcdt, float *ddt_bias,
                          float *dA_log, float *dD, const void *dy, const void *xbc,
                          const void *zxbcdt, const void *dt_bias, const void *A_log, const void *D,
                          float *ws, const float *state, gt_mamba_shape sh, int accumulate);
    /* out[N, di] = rmsnorm(y * silu(z)) * w over G groups of di/G channels (z: zxbcdt's z
     * slice; mamba_ssm's RMSNormGated, norm after the gate); rstd[N, G] kept */
    void (*mamba_gated_norm_fwd)(gt_backend *b, gt_stream *s, void *out, float *rstd, const void *y,
                                 const void *zxbcdt, const void *w, float eps, gt_mamba_shape sh);
    /* dy[N, di] and the z slice of dzxbcdt (overwritten) from dout; dw[di] (+)=; ws:
     * gt_mamba_ws_floats of scratch (NULL: the CUDA backend reads the inputs twice, once for
     * dw) */
    void (*mamba_gated_norm_bwd)(gt_backend *b, gt_stream *s, void *dy, void *dzxbcdt, float *dw,
                                 const void *dout, const void *y, const void *zxbcdt, const void *w,
                                 const float *rstd, float *ws, gt_mamba_shape sh, int accumulate);

    void (*destroy)(gt_backend *b);
} gt_backend_ops;

struct gt_backend {
    const gt_backend_ops *ops;
    gt_backend_kind kind;
    const char *name;
    size_t act_bytes; /* bytes per element of act tensors */
    size_t fp8_bytes; /* bytes per element of FP8 tensors (0: no FP8 ops) */
    int planning;     /* see the planning note above */
    gt_error sticky;  /* first error raised by an op inside a step */
    void *impl;
};

/* The backends. gt_backend_create_cuda returns GT_ERR_UNSUPPORTED in a build without CUDA,
 * GT_ERR_DEVICE when no GPU can be used, and GT_ERR_INVALID (naming the key) when a kernel
 * choice of opts cannot run on this GPU. opts: the runtime.cuda.* settings
 * (gt_config_cuda_settings resolves them from a configuration); NULL = all auto. */
int gt_backend_create_cpu(gt_backend **b, gt_error *err);
int gt_backend_create_cuda(gt_backend **b, int device, const gt_cuda_config *opts, gt_error *err);
void gt_backend_destroy(gt_backend *b);
/* One allocation on b for every tensor the arena plans, its pointers bound (core/arena.h);
 * gt_arena_release frees it. */
int gt_backend_alloc_arena(gt_backend *b, gt_arena *a, gt_error *err);

/* Records an op failure (first one wins); used by backends inside steps. */
void gt_backend_fail(gt_backend *b, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* 1 when rows lie inside a gradient of n elements; else records the op failure, naming op,
 * and returns 0 (grad_norm and adamw of every backend). */
int gt_grad_rows_check(gt_backend *b, const char *op, const gt_grad_rows *rows, size_t n);
/* 1 when step_begin (or op, replaying its rates) can compute this schedule (iterations >= 0,
 * a known style; WSD with annealing steps); else records the op failure, naming op, and returns
 * 0 (every backend). */
int gt_lr_schedule_check(gt_backend *b, const char *op, const gt_lr_schedule *sc);
/* 1 when adamw (or op, replaying it) can take these arguments (a step state, n_decay <= n,
 * betas in [0, 1), eps > 0, weight decay >= 0); else records the op failure, naming op, and
 * returns 0 (every backend). */
int gt_adamw_check(gt_backend *b, const char *op, const gt_step_state *st, size_t n, size_t n_decay,
                   const gt_adamw_params *hp);
/* 1 when lazy_catchup (catchup 1, tokens[0..n), the sweep's period) or lazy_flush (catchup
 * 0, no tokens, sweep 0) can take these arguments; else records the op failure, naming op,
 * and returns 0 (every backend). */
int gt_lazy_rows_check(gt_backend *b, const char *op, const gt_step_state *st,
                       const gt_adamw_state *os, const gt_grad_rows *rows, int catchup,
                       const int32_t *tokens, int n, int sweep);
/* Returns the sticky error, if any, into err and clears it. */
int gt_backend_check(gt_backend *b, gt_error *err);

#endif
