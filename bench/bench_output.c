/* Bench output: the table on stdout (modes, then the losses side by side), one JSON document
 * and a CSV with one row per mode. Field names are the same in JSON and CSV. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bench/bench.h"
#include "config/cuda_keys.h"
#include "core/json.h"

#define MIB (1024.0 * 1024.0)

static const char *impl_name(gt_graph_impl impl) {
    switch (impl) {
    case GT_GRAPH_IMPL_LOCAL:
        return "local";
    case GT_GRAPH_IMPL_TE:
        return "transformer_engine";
    default:
        return "none";
    }
}

static const char *identical_text(const gt_bench_report *rep) {
    return rep->losses_identical > 0 ? "yes" : rep->losses_identical == 0 ? "NO" : "n/a";
}

void gt_bench_print_table(const gt_bench_report *rep, FILE *f) {
    const gt_bench_workload *w = &rep->w;
    fprintf(f, "workload %s on %s: %d tokens/step, %.4g params (%.4g active), %.4g FLOP/step%s\n",
            w->label, w->backend, w->tokens_per_step, w->n_params, w->n_active, w->flops_per_step,
            w->flops_from_model ? " (model)" : "");
    if (w->backend_detail[0]) fprintf(f, "backend: %s\n", w->backend_detail);
    fprintf(f,
            "step-time limit %.4f ms = FLOPs/%.0f TFLOP/s + %.4g bytes/%.1f TB/s "
            "(bytes = %.0f*params + %d*2*GEMM params; peak rates of %s%s)\n",
            w->limit_ms, w->peak_flops / 1e12, w->bytes_per_step, w->peak_bytes_s / 1e12,
            GT_BENCH_ADAMW_BYTES, GT_BENCH_GEMM_PASSES, w->gpu,
            w->gpu_defaulted ? ", runtime.gpu unset; -g names the GPU" : "");
    if (w->peak_fp8)
        fprintf(f,
                "fp8: TFLOP/s counts the step's FLOPs as bf16's (the same matmuls); MFU and the "
                "limit are against the fp8 peak %.0f TFLOP/s\n",
                w->peak_flops / 1e12);
    fprintf(f, "%-32s %10s %10s %10s %12s %9s %7s %7s %9s %9s %6s %7s %10s %6s\n", "mode",
            "median_ms", "min_ms", "max_ms", "tokens/s", "TFLOP/s", "MFU", "limit", "capt_ms",
            "inst_ms", "graphs", "nodes", "peak_MiB", "x_eager");
    for (int i = 0; i < rep->n; i++) {
        const gt_bench_result *r = &rep->results[i];
        if (!r->ok) {
            fprintf(f, "%-32s FAILED: %s\n", r->mode.name, r->error.msg);
            continue;
        }
        fprintf(f,
                "%-32s %10.3f %10.3f %10.3f %12.0f %9.2f %6.1f%% %6.1f%% %9.2f %9.2f %6d %7d "
                "%10.1f %6.3f\n",
                r->mode.name, r->median_ms, r->min_ms, r->max_ms, r->tokens_per_s, r->tflops,
                100 * r->mfu, 100 * r->limit_fraction, r->capture_ms, r->instantiate_ms, r->graphs,
                r->nodes, r->peak_bytes / MIB, r->peak_ratio);
    }
    for (int i = 0; i < rep->n; i++) {
        const gt_bench_result *r = &rep->results[i];
        if (r->ok && r->comm_measured)
            fprintf(f,
                    "data parallel %s: %d ranks, %.0f tokens/s per GPU, %.0f in total; step "
                    "%.3f ms, without its collectives %.3f ms, the collectives alone %.3f ms: "
                    "%.0f%% of the communication hidden behind compute\n",
                    r->mode.name, r->ranks, r->tokens_per_s_per_gpu, r->tokens_per_s, r->median_ms,
                    r->compute_ms, r->comm_ms, 100 * r->hidden_fraction);
    }
    for (int i = 0; i < rep->n; i++) {
        const gt_bench_result *r = &rep->results[i];
        if (r->ok && r->mode.impl != GT_GRAPH_IMPL_NONE && !r->capture_step)
            fprintf(f, "note: mode %s never captured a graph (runner reports '%s')\n", r->mode.name,
                    r->graph_mode);
        if (r->ok && r->timed_unreplayed)
            fprintf(f,
                    "note: mode %s: %d of its %d timed steps did not replay graphs (capture "
                    "after step %d); raise --warmup\n",
                    r->mode.name, r->timed_unreplayed, r->timed, r->capture_step);
    }
    int width = 16; /* loss columns: as wide as the longest mode name */
    for (int i = 0; i < rep->n; i++) {
        int len = (int)strlen(rep->results[i].mode.name);
        if (rep->results[i].ok && len > width) width = len;
    }
    int shown = rep->loss_steps_compared < GT_BENCH_LOSS_STEPS ? rep->loss_steps_compared
                                                               : GT_BENCH_LOSS_STEPS;
    fprintf(f, "losses, first %d steps:\n%-6s", shown, "step");
    for (int i = 0; i < rep->n; i++)
        if (rep->results[i].ok) fprintf(f, " %*s", width, rep->results[i].mode.name);
    fprintf(f, "\n");
    for (int s = 0; s < shown; s++) {
        fprintf(f, "%-6d", s + 1);
        for (int i = 0; i < rep->n; i++)
            if (rep->results[i].ok) fprintf(f, " %*.9g", width, rep->results[i].losses[s]);
        fprintf(f, "\n");
    }
    fprintf(f, "losses bitwise identical across modes over the first %d steps: %s",
            rep->loss_steps_compared, identical_text(rep));
    if (rep->losses_identical == 0)
        fprintf(f, " (first mismatch at step %d)", rep->first_mismatch_step);
    fprintf(f, "\n");
}

/* JSON through core/json.h: NaN/Inf numbers become null (a failed mode's timings). */
static void num(cJSON *o, const char *k, double v) {
    cJSON_AddNumberToObject(o, k, v);
}

static cJSON *json_result(const gt_bench_result *r) {
    char scope[GT_BENCH_NAME_MAX];
    gt_bench_scope_name(r->mode.scope, scope, sizeof scope);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "mode", r->mode.name);
    cJSON_AddStringToObject(o, "cuda_graph_impl", impl_name(r->mode.impl));
    cJSON_AddStringToObject(o, "cuda_graph_scope", scope);
    cJSON_AddBoolToObject(o, "ok", r->ok);
    cJSON_AddStringToObject(o, "error", r->ok ? "" : r->error.msg);
    cJSON_AddStringToObject(o, "graph_mode", r->graph_mode);
    num(o, "steps_total", r->steps_total);
    num(o, "capture_step", r->capture_step);
    num(o, "timed_steps", r->timed);
    num(o, "timed_unreplayed", r->timed_unreplayed);
    num(o, "median_ms", r->median_ms);
    num(o, "min_ms", r->min_ms);
    num(o, "max_ms", r->max_ms);
    num(o, "mean_ms", r->mean_ms);
    num(o, "tokens_per_s", r->tokens_per_s);
    /* data parallelism: every rank's tokens (tokens_per_s) and one GPU's; the communication
     * measured (bench_dp.c), null without a communicator */
    num(o, "ranks", r->ranks);
    num(o, "tokens_per_s_total", r->tokens_per_s);
    num(o, "tokens_per_s_per_gpu", r->tokens_per_s_per_gpu);
    num(o, "compute_ms", r->comm_measured ? r->compute_ms : NAN);
    num(o, "comm_ms", r->comm_measured ? r->comm_ms : NAN);
    num(o, "hidden_fraction", r->comm_measured ? r->hidden_fraction : NAN);
    num(o, "tflops", r->tflops);
    num(o, "mfu", r->mfu);
    num(o, "limit_fraction", r->limit_fraction);
    num(o, "capture_ms", r->capture_ms);
    num(o, "instantiate_ms", r->instantiate_ms);
    num(o, "graphs", r->graphs);
    num(o, "nodes", r->nodes);
    num(o, "fallbacks", r->fallbacks);
    num(o, "peak_bytes", (double)r->peak_bytes);
    num(o, "peak_ratio_to_eager", r->peak_ratio > 0 ? r->peak_ratio : NAN);
    cJSON *losses = cJSON_AddArrayToObject(o, "losses");
    for (int s = 0; losses && s < r->n_losses; s++)
        cJSON_AddItemToArray(losses, cJSON_CreateNumber(r->losses[s]));
    return o;
}

int gt_bench_write_json(const gt_bench_report *rep, const char *path, gt_error *err) {
    const gt_bench_workload *w = &rep->w;
    char date[32];
    time_t now = time(NULL);
    struct tm tmv;
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tmv));
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "workload", w->label);
    cJSON_AddStringToObject(o, "backend", w->backend);
    cJSON_AddStringToObject(o, "backend_detail", w->backend_detail);
    cJSON_AddStringToObject(o, "date", date);
    cJSON *cuda = cJSON_AddObjectToObject(o, "runtime_cuda"); /* the kernel choices it ran */
    for (int i = 0; cuda && i < GT_CUDA_CHOICES; i++)
        cJSON_AddStringToObject(cuda, gt_cuda_key_name(i) + strlen("runtime.cuda."),
                                gt_config_cuda_value(&w->cuda, i));
    num(o, "tokens_per_step", w->tokens_per_step);
    num(o, "n_params", w->n_params);
    num(o, "n_active_params", w->n_active);
    num(o, "n_gemm_params", w->n_gemm);
    num(o, "flops_per_step", w->flops_per_step);
    cJSON_AddStringToObject(o, "flops_source", w->flops_from_model ? "model" : "bench");
    num(o, "bytes_per_step", w->bytes_per_step);
    num(o, "limit_ms", w->limit_ms);
    cJSON_AddStringToObject(o, "peak_gpu", w->gpu);
    num(o, "peak_tflops", w->peak_flops / 1e12);
    cJSON_AddStringToObject(o, "peak_precision", w->peak_fp8 ? "fp8" : "bf16");
    num(o, "peak_tb_per_s", w->peak_bytes_s / 1e12);
    cJSON_AddStringToObject(o, "flops_formula",
                            "6*N_active*tokens + 6*layers*micro_batch*seq^2*d_model");
    char formula[160];
    snprintf(formula, sizeof formula, "flops/%.4g + (20*n_params + 3*2*n_gemm_params)/%.4g seconds",
             w->peak_flops, w->peak_bytes_s);
    cJSON_AddStringToObject(o, "limit_formula", formula);
    num(o, "loss_steps_compared", rep->loss_steps_compared);
    if (rep->losses_identical < 0)
        cJSON_AddNullToObject(o, "losses_identical");
    else
        cJSON_AddBoolToObject(o, "losses_identical", rep->losses_identical > 0);
    num(o, "first_mismatch_step", rep->first_mismatch_step);
    cJSON *modes = cJSON_AddArrayToObject(o, "modes");
    for (int i = 0; modes && i < rep->n; i++)
        cJSON_AddItemToArray(modes, json_result(&rep->results[i]));
    int rc = gt_json_write_file(path, o, err);
    cJSON_Delete(o);
    if (rc) return gt_error_wrap(err, "bench: ");
    return GT_OK;
}

int gt_bench_write_csv(const gt_bench_report *rep, const char *path, gt_error *err) {
    FILE *f = fopen(path, "w");
    if (!f)
        return gt_error_set(err, GT_ERR_IO, "bench: cannot write CSV to %s: %s; check the path",
                            path, strerror(errno));
    fprintf(f, "workload,backend,mode,cuda_graph_impl,cuda_graph_scope,ok,median_ms,min_ms,"
               "max_ms,tokens_per_s,tflops,mfu,limit_ms,limit_fraction,capture_ms,"
               "instantiate_ms,graphs,nodes,peak_bytes,peak_ratio_to_eager,losses_identical,"
               "ranks,tokens_per_s_per_gpu,compute_ms,comm_ms,hidden_fraction\n");
    for (int i = 0; i < rep->n; i++) {
        const gt_bench_result *r = &rep->results[i];
        char scope[GT_BENCH_NAME_MAX];
        gt_bench_scope_name(r->mode.scope, scope, sizeof scope);
        fprintf(f,
                "%s,%s,%s,%s,%s,%d,%.6f,%.6f,%.6f,%.1f,%.4f,%.6f,%.6f,%.6f,%.3f,%.3f,%d,%d,"
                "%zu,%.4f,%s,%d,%.1f,%.6f,%.6f,%.4f\n",
                rep->w.label, rep->w.backend, r->mode.name, impl_name(r->mode.impl), scope, r->ok,
                r->median_ms, r->min_ms, r->max_ms, r->tokens_per_s, r->tflops, r->mfu,
                rep->w.limit_ms, r->limit_fraction, r->capture_ms, r->instantiate_ms, r->graphs,
                r->nodes, r->peak_bytes, r->peak_ratio, identical_text(rep), r->ranks,
                r->tokens_per_s_per_gpu, r->compute_ms, r->comm_ms, r->hidden_fraction);
    }
    if (fclose(f) != 0)
        return gt_error_set(err, GT_ERR_IO, "bench: writing %s failed: %s", path, strerror(errno));
    return GT_OK;
}
