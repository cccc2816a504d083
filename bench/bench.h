/* The benchmark harness behind `graphtrain bench`: for each graph mode (eager, TE-style
 * scopes, full iteration) it builds a trainer, runs warmup and capture, times steady-state
 * steps, and derives throughput, MFU, the step-time limit, graph and memory statistics and the
 * per-step losses that must agree bitwise across modes. Output: table, JSON, CSV, SVG plot. */
#ifndef GT_BENCH_BENCH_H
#define GT_BENCH_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "core/error.h"
#include "dist/comm.h"
#include "graphtrain.h"

#define GT_BENCH_MAX_MODES 8
#define GT_BENCH_NAME_MAX 96
#define GT_BENCH_LOSS_STEPS 10    /* steps every mode runs at least, printed side by side */
#define GT_BENCH_ADAMW_BYTES 20.0 /* bytes AdamW streams per parameter (WORKLOADS.md) */
#define GT_BENCH_GEMM_PASSES 3    /* forward, backward-data, backward-weight */

/* One mode: which Bridge settings it runs with. */
typedef struct gt_bench_mode {
    char name[GT_BENCH_NAME_MAX]; /* "eager", "attn", "attn+mlp", "full_iteration", ... */
    gt_graph_impl impl;
    uint32_t scope; /* GT_SCOPE_* bits */
} gt_bench_mode;

typedef struct gt_bench_options {
    int steps;  /* timed steady-state steps (default 30) */
    int warmup; /* untimed steps after the capture step (default 3) */
    int n_modes;
    gt_bench_mode modes[GT_BENCH_MAX_MODES];
    const char *label; /* workload name for the output, e.g. the recipe; may be NULL */
    int quiet;         /* no progress lines on stderr */
    int same_process;  /* 1: every mode in this process; 0 (default): each in a child process */
    /* data parallelism: every rank runs the bench over comm (NULL: one process), each mode in
     * this process; the results are rank 0's */
    gt_comm *comm;
} gt_bench_options;

/* Static figures of the workload (same for every mode). */
typedef struct gt_bench_workload {
    char label[GT_BENCH_NAME_MAX];
    char backend[16];         /* "cpu" or "cuda" */
    char backend_detail[256]; /* the backend's describe(): device and kernel choices */
    int tokens_per_step;
    double n_params;       /* every parameter */
    double n_active;       /* parameters a token passes through (FLOPs formula's N) */
    double n_gemm;         /* parameters read by the GEMMs (every matrix but the embedding) */
    double flops_per_step; /* 6*N_active*tokens + 6*layers*B*T^2*d */
    double bytes_per_step; /* ADAMW_BYTES*n_params + GEMM_PASSES*2*n_gemm */
    double limit_ms;       /* flops/peak_flops + bytes/peak_bytes_s, in ms */
    /* peak rates of the GPU runtime.gpu names (config/gpus.c; GT_GPU_DEFAULT when empty) */
    char gpu[16];
    int gpu_defaulted; /* runtime.gpu was empty */
    double peak_flops, peak_bytes_s;
    int peak_fp8; /* an fp8 recipe: peak_flops is the fp8 rate, the FLOPs stay bf16's count */
    int flops_from_model; /* 1 if gt_model_get_info's flops_per_token was used */
    gt_cuda_config cuda;  /* runtime.cuda.* as resolved (the GT_CUDA_* aliases applied) */
} gt_bench_workload;

typedef struct gt_bench_result {
    gt_bench_mode mode;
    char graph_mode[GT_BENCH_NAME_MAX]; /* what the graph runner says it did */
    int ok;                             /* 0: the mode failed; error holds why */
    gt_error error;
    int steps_total;      /* steps run: eager warmup + capture + warmup + timed */
    int capture_step;     /* 1-based step that captured; 0 = none */
    int timed;            /* timed steps */
    int timed_unreplayed; /* timed steps of a graph mode that did not replay (should be 0) */
    double median_ms, min_ms, max_ms, mean_ms;
    double tokens_per_s, tflops, mfu, limit_fraction; /* tokens_per_s, tflops: every rank's */
    /* data parallelism (bench_dp.c), measured on rank 0: ranks 1 without a communicator */
    int ranks;
    double tokens_per_s_per_gpu; /* tokens_per_s / ranks */
    int comm_measured;           /* the three below were measured (a communicator) */
    double compute_ms;           /* T0: median step with the collectives left out */
    double comm_ms;              /* C: median of the step's collectives alone */
    double hidden_fraction;      /* (T0 + C - T) / C, clamped to [0, 1]; T = median_ms */
    double capture_ms, instantiate_ms;
    int graphs, nodes, fallbacks;
    size_t peak_bytes;
    double peak_ratio; /* peak / eager's peak; 0 when no eager mode ran */
    int n_losses;
    float *losses; /* [n_losses] loss of every step run, step 1 first */
} gt_bench_result;

typedef struct gt_bench_report {
    gt_bench_workload w;
    int n;
    gt_bench_result results[GT_BENCH_MAX_MODES];
    int loss_steps_compared; /* steps compared across the successful modes: all they ran */
    int losses_identical;    /* 1 if they agree bitwise, -1 when fewer than 2 modes ran */
    int first_mismatch_step; /* 1-based, 0 if none */
} gt_bench_report;

/* Compares the losses of the successful modes bitwise over every step all of them ran (the
 * pre-capture, warmup and timed steps alike): sets loss_steps_compared, losses_identical and
 * first_mismatch_step. gt_bench_run calls it. */
void gt_bench_compare_losses(gt_bench_report *rep);

/* Defaults: 30 timed steps, 3 warmup steps, no modes. */
void gt_bench_options_init(gt_bench_options *o);

/* Parses "eager,attn,attn+mlp,full_iteration" or "all" into o->modes. moe says whether the
 * model has MoE layers: then "attn+mlp" means attn+moe_router+moe_preprocess (dropless MoE
 * graphs only the router and preprocessing, as Bridge does), and "all" uses it too. */
int gt_bench_parse_modes(gt_bench_options *o, const char *list, int moe, gt_error *err);
/* The single mode a config's model.cuda_graph_impl / cuda_graph_scope select. */
void gt_bench_mode_from_config(gt_bench_mode *m, const gt_config *cfg);
/* Writes a config's scope bits as "attn+mlp" (or "none"). */
void gt_bench_scope_name(uint32_t scope, char *buf, size_t n);

/* Workload figures from a config (and flops_per_token from the model when nonzero). */
void gt_bench_workload_compute(gt_bench_workload *w, const gt_config *cfg, double n_params,
                               double model_flops_per_token);

/* Runs every mode of o on copies of cfg (mock data, train_iters raised as needed). A mode that
 * fails is recorded with ok = 0 and its error; the run continues with the next mode. Returns
 * an error only when nothing could run. Free with gt_bench_report_free.
 * Unless o->same_process, each mode runs in a child process of its own (fork) and sends its
 * result back through a pipe, so a mode is timed as a run of its own would be: in one process,
 * the third trainer with cuDNN attention lost most of what programmatic launch gains (tiny's
 * full_iteration 1.76 ms after two other modes against 1.67 ms alone, H200, 2026-11-29). A
 * child that dies fails its mode, naming the signal or exit status. */
int gt_bench_run(const gt_config *cfg, const gt_bench_options *o, gt_bench_report *rep,
                 gt_error *err);
void gt_bench_report_free(gt_bench_report *rep);

/* Data parallelism (bench/bench_dp.c): after the timed steps of trainer t, C is timed (the
 * step's collectives alone, o->steps times); then a trainer with the collectives left out
 * (gt_comm_set_skip) runs the mode's steps for T0; r gets them, the hidden share and the
 * per-GPU rates. A failure fails the mode. */
int gt_bench_dp_measure_comm(gt_trainer *t, const gt_bench_options *o, gt_bench_result *r);
int gt_bench_dp_measure_compute(const gt_config *c, const gt_bench_options *o, int total,
                                gt_bench_result *r);
/* per-GPU rates from the totals, MFU and the limit per GPU (every rank runs the same) */
void gt_bench_dp_finish(gt_bench_result *r, int ranks);

/* Outputs (bench/bench_output.c). */
void gt_bench_print_table(const gt_bench_report *rep, FILE *f);
int gt_bench_write_json(const gt_bench_report *rep, const char *path, gt_error *err);
int gt_bench_write_csv(const gt_bench_report *rep, const char *path, gt_error *err);
/* An SVG bar chart of the modes (bench/bench_plot.c); path must end in .svg, which
 * gt_bench_svg_path_check says before any work. */
int gt_bench_write_svg(const gt_bench_report *rep, const char *path, gt_error *err);
int gt_bench_svg_path_check(const char *path, gt_error *err);

/* Parity export for bench/torch_reference.py (bench/parity.c): writes into dir config.json,
 * weights.gtw (initial master weights, bench/weights_io.h), tokens.bin (every step's batches),
 * graphtrain_losses.json (loss, aux_loss, lr, grad_norm per step) and grads_step1.gtw (the
 * fp32 gradients of step 1), running `steps` steps without dropout. */
#define GT_PARITY_TOKENS_MAGIC 0x4b545447u /* "GTTK" read as a little-endian u32 */
int gt_bench_parity(const gt_config *cfg, const char *dir, int steps, gt_error *err);

#endif
