/* Bench output: the table on stdout (modes, then the losses side by side), one JSON document
 * and a CSV with one row per mode. Field names are the same in JSON and CSV. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bench/bench.h"
#include "config/cuda_keys.h"

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
    fprintf(f, "losses, first %d steps:\n%-6s", rep->loss_steps_compared, "step");
    for (int i = 0; i < rep->n; i++)
        if (rep->results[i].ok) fprintf(f, " %*s", width, rep->results[i].mode.name);
    fprintf(f, "\n");
    for (int s = 0; s < rep->loss_steps_compared; s++) {
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

/* JSON numbers: finite values only (NaN/Inf become null). */
static void json_num(FILE *f, double v) {
    if (isfinite(v))
        fprintf(f, "%.9g", v);
    else
        fprintf(f, "null");
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void json_field_num(FILE *f, const char *k, double v, int comma) {
    fprintf(f, "\"%s\": ", k);
    json_num(f, v);
    if (comma) fprintf(f, ", ");
}

static void json_field_str(FILE *f, const char *k, const char *v, int comma) {
    fprintf(f, "\"%s\": ", k);
    json_str(f, v);
    if (comma) fprintf(f, ", ");
}

static void json_result(FILE *f, const gt_bench_result *r) {
    char scope[GT_BENCH_NAME_MAX];
    gt_bench_scope_name(r->mode.scope, scope, sizeof scope);
    fprintf(f, "    {");
    json_field_str(f, "mode", r->mode.name, 1);
    json_field_str(f, "cuda_graph_impl", impl_name(r->mode.impl), 1);
    json_field_str(f, "cuda_graph_scope", scope, 1);
    fprintf(f, "\"ok\": %s, ", r->ok ? "true" : "false");
    json_field_str(f, "error", r->ok ? "" : r->error.msg, 1);
    json_field_str(f, "graph_mode", r->graph_mode, 1);
    fprintf(f, "\n     ");
    json_field_num(f, "steps_total", r->steps_total, 1);
    json_field_num(f, "capture_step", r->capture_step, 1);
    json_field_num(f, "timed_steps", r->timed, 1);
    json_field_num(f, "timed_unreplayed", r->timed_unreplayed, 1);
    json_field_num(f, "median_ms", r->median_ms, 1);
    json_field_num(f, "min_ms", r->min_ms, 1);
    json_field_num(f, "max_ms", r->max_ms, 1);
    json_field_num(f, "mean_ms", r->mean_ms, 1);
    fprintf(f, "\n     ");
    json_field_num(f, "tokens_per_s", r->tokens_per_s, 1);
    json_field_num(f, "tflops", r->tflops, 1);
    json_field_num(f, "mfu", r->mfu, 1);
    json_field_num(f, "limit_fraction", r->limit_fraction, 1);
    fprintf(f, "\n     ");
    json_field_num(f, "capture_ms", r->capture_ms, 1);
    json_field_num(f, "instantiate_ms", r->instantiate_ms, 1);
    json_field_num(f, "graphs", r->graphs, 1);
    json_field_num(f, "nodes", r->nodes, 1);
    json_field_num(f, "fallbacks", r->fallbacks, 1);
    json_field_num(f, "peak_bytes", (double)r->peak_bytes, 1);
    json_field_num(f, "peak_ratio_to_eager", r->peak_ratio > 0 ? r->peak_ratio : NAN, 1);
    fprintf(f, "\n     \"losses\": [");
    for (int s = 0; s < r->n_losses; s++) {
        if (s) fprintf(f, ", ");
        json_num(f, r->losses[s]);
    }
    fprintf(f, "]}");
}

int gt_bench_write_json(const gt_bench_report *rep, const char *path, gt_error *err) {
    FILE *f = fopen(path, "w");
    if (!f)
        return gt_error_set(err, GT_ERR_IO, "bench: cannot write JSON to %s: %s; check the path",
                            path, strerror(errno));
    const gt_bench_workload *w = &rep->w;
    char date[32];
    time_t now = time(NULL);
    struct tm tmv;
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tmv));
    fprintf(f, "{\n  ");
    json_field_str(f, "workload", w->label, 1);
    json_field_str(f, "backend", w->backend, 1);
    json_field_str(f, "backend_detail", w->backend_detail, 1);
    json_field_str(f, "date", date, 1);
    fprintf(f, "\n  \"runtime_cuda\": {"); /* the kernel choices the run was set up with */
    for (int i = 0; i < GT_CUDA_CHOICES; i++)
        json_field_str(f, gt_cuda_key_name(i) + strlen("runtime.cuda."),
                       gt_config_cuda_value(&w->cuda, i), i + 1 < GT_CUDA_CHOICES);
    fprintf(f, "}, ");
    fprintf(f, "\n  ");
    json_field_num(f, "tokens_per_step", w->tokens_per_step, 1);
    json_field_num(f, "n_params", w->n_params, 1);
    json_field_num(f, "n_active_params", w->n_active, 1);
    json_field_num(f, "n_gemm_params", w->n_gemm, 1);
    fprintf(f, "\n  ");
    json_field_num(f, "flops_per_step", w->flops_per_step, 1);
    json_field_str(f, "flops_source", w->flops_from_model ? "model" : "bench", 1);
    json_field_num(f, "bytes_per_step", w->bytes_per_step, 1);
    json_field_num(f, "limit_ms", w->limit_ms, 1);
    fprintf(f, "\n  ");
    json_field_str(f, "peak_gpu", w->gpu, 1);
    json_field_num(f, "peak_tflops", w->peak_flops / 1e12, 1);
    json_field_num(f, "peak_tb_per_s", w->peak_bytes_s / 1e12, 1);
    json_field_str(f, "flops_formula", "6*N_active*tokens + 6*layers*micro_batch*seq^2*d_model", 1);
    char formula[160];
    snprintf(formula, sizeof formula, "flops/%.4g + (20*n_params + 3*2*n_gemm_params)/%.4g seconds",
             w->peak_flops, w->peak_bytes_s);
    json_field_str(f, "limit_formula", formula, 1);
    fprintf(f, "\n  ");
    json_field_num(f, "loss_steps_compared", rep->loss_steps_compared, 1);
    fprintf(f, "\"losses_identical\": %s, ",
            rep->losses_identical > 0    ? "true"
            : rep->losses_identical == 0 ? "false"
                                         : "null");
    json_field_num(f, "first_mismatch_step", rep->first_mismatch_step, 1);
    fprintf(f, "\n  \"modes\": [\n");
    for (int i = 0; i < rep->n; i++) {
        json_result(f, &rep->results[i]);
        fprintf(f, "%s\n", i + 1 < rep->n ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    if (fclose(f) != 0)
        return gt_error_set(err, GT_ERR_IO, "bench: writing %s failed: %s", path, strerror(errno));
    return GT_OK;
}

int gt_bench_write_csv(const gt_bench_report *rep, const char *path, gt_error *err) {
    FILE *f = fopen(path, "w");
    if (!f)
        return gt_error_set(err, GT_ERR_IO, "bench: cannot write CSV to %s: %s; check the path",
                            path, strerror(errno));
    fprintf(f, "workload,backend,mode,cuda_graph_impl,cuda_graph_scope,ok,median_ms,min_ms,"
               "max_ms,tokens_per_s,tflops,mfu,limit_ms,limit_fraction,capture_ms,"
               "instantiate_ms,graphs,nodes,peak_bytes,peak_ratio_to_eager,losses_identical\n");
    for (int i = 0; i < rep->n; i++) {
        const gt_bench_result *r = &rep->results[i];
        char scope[GT_BENCH_NAME_MAX];
        gt_bench_scope_name(r->mode.scope, scope, sizeof scope);
        fprintf(f,
                "%s,%s,%s,%s,%s,%d,%.6f,%.6f,%.6f,%.1f,%.4f,%.6f,%.6f,%.6f,%.3f,%.3f,%d,%d,"
                "%zu,%.4f,%s\n",
                rep->w.label, rep->w.backend, r->mode.name, impl_name(r->mode.impl), scope, r->ok,
                r->median_ms, r->min_ms, r->max_ms, r->tokens_per_s, r->tflops, r->mfu,
                rep->w.limit_ms, r->limit_fraction, r->capture_ms, r->instantiate_ms, r->graphs,
                r->nodes, r->peak_bytes, r->peak_ratio, identical_text(rep));
    }
    if (fclose(f) != 0)
        return gt_error_set(err, GT_ERR_IO, "bench: writing %s failed: %s", path, strerror(errno));
    return GT_OK;
}
