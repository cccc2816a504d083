/* Bench plot: one SVG, a horizontal bar a mode. A bar is the median step time, a whisker
 * runs from the fastest to the slowest timed step, and a dashed line marks the workload's
 * step-time limit. Beside each bar: median, speed-up over eager, MFU, graphs/nodes and peak
 * memory; a failed mode gets its error instead. Plain SVG 1.1: any browser shows it, no
 * plotting library needed. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"

#define MIB (1024.0 * 1024.0)
#define PLOT_W 1160
#define PLOT_LABEL_W 190 /* mode names */
#define PLOT_BAR_W 400   /* the time axis */
#define PLOT_TOP 74
#define PLOT_ROW 34
#define PLOT_TICKS 5

/* Text content and attribute values: the five XML specials escaped. */
static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        case '\'':
            fputs("&apos;", f);
            break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t') fputc(*s, f);
            break;
        }
    }
}

/* A round number of ms per tick, so that PLOT_TICKS of them cover at least span. */
static double tick_step(double span) {
    double raw = span / PLOT_TICKS, mag = pow(10.0, floor(log10(raw)));
    double steps[] = {1, 2, 2.5, 5, 10};
    for (int i = 0; i < 5; i++)
        if (steps[i] * mag >= raw) return steps[i] * mag;
    return 10 * mag;
}

static double eager_median(const gt_bench_report *rep) {
    for (int i = 0; i < rep->n; i++)
        if (rep->results[i].ok && rep->results[i].mode.impl == GT_GRAPH_IMPL_NONE)
            return rep->results[i].median_ms;
    return 0;
}

static void plot_row(FILE *f, const gt_bench_result *r, int y, double scale, double eager) {
    int x0 = PLOT_LABEL_W;
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", x0 - 10, y + 21);
    xml_text(f, r->mode.name);
    fputs("</text>\n", f);
    if (!r->ok) {
        fprintf(f, "<text class=\"failed\" x=\"%d\" y=\"%d\">FAILED: ", x0 + 4, y + 21);
        xml_text(f, r->error.msg);
        fputs("</text>\n", f);
        return;
    }
    const char *cls = r->mode.impl == GT_GRAPH_IMPL_NONE    ? "bar eager"
                      : r->mode.impl == GT_GRAPH_IMPL_LOCAL ? "bar full"
                                                            : "bar scoped";
    double xm = x0 + r->median_ms * scale, xa = x0 + r->min_ms * scale, xb = x0 + r->max_ms * scale;
    fprintf(f, "<rect class=\"%s\" x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\"/>\n", cls, x0,
            y + 6, xm - x0, PLOT_ROW - 12);
    fprintf(f, "<path class=\"whisker\" d=\"M%.1f %d V%d M%.1f %d H%.1f M%.1f %d V%d\"/>\n", xa,
            y + 10, y + PLOT_ROW - 10, xa, y + PLOT_ROW / 2, xb, xb, y + 10, y + PLOT_ROW - 10);
    char speed[48] = "";
    if (eager > 0 && r->mode.impl != GT_GRAPH_IMPL_NONE)
        snprintf(speed, sizeof speed, " (%.2fx eager)", eager / r->median_ms);
    fprintf(f,
            "<text x=\"%.1f\" y=\"%d\">%.3f ms%s · MFU %.1f%% · %d graph%s / %d nodes · peak "
            "%.1f MiB</text>\n",
            xb + 8, y + 21, r->median_ms, speed, 100 * r->mfu, r->graphs, r->graphs == 1 ? "" : "s",
            r->nodes, r->peak_bytes / MIB);
}

int gt_bench_svg_path_check(const char *path, gt_error *err) {
    const char *dot = strrchr(path, '.');
    if (!dot || strcmp(dot, ".svg") != 0)
        return gt_error_set(err, GT_ERR_INVALID,
                            "bench: --plot writes an SVG image; name the file *.svg (got '%s')",
                            path);
    return GT_OK;
}

int gt_bench_write_svg(const gt_bench_report *rep, const char *path, gt_error *err) {
    int rc = gt_bench_svg_path_check(path, err);
    if (rc) return rc;
    const gt_bench_workload *w = &rep->w;
    double top = w->limit_ms > 0 ? w->limit_ms : 0;
    for (int i = 0; i < rep->n; i++)
        if (rep->results[i].ok && rep->results[i].max_ms > top) top = rep->results[i].max_ms;
    if (!(top > 0)) top = 1;
    double step = tick_step(top), axis = ceil(top / step) * step, scale = PLOT_BAR_W / axis;
    int h = PLOT_TOP + rep->n * PLOT_ROW + 46;
    FILE *f = fopen(path, "w");
    if (!f)
        return gt_error_set(err, GT_ERR_IO,
                            "bench: cannot write the plot to %s: %s; check the path", path,
                            strerror(errno));
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "font-family=\"sans-serif\" font-size=\"13\">\n"
            "<style>.eager{fill:#a0a0a0}.scoped{fill:#6f9fd8}.full{fill:#2b5797}"
            ".whisker{stroke:#222;stroke-width:1.5;fill:none}.grid{stroke:#ddd}"
            ".limit{stroke:#c0392b;stroke-dasharray:5 4}.failed{fill:#c0392b}"
            ".small{font-size:11px;fill:#555}</style>\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            PLOT_W, h);
    fputs("<text x=\"12\" y=\"24\" font-size=\"16\" font-weight=\"bold\">graphtrain bench: ", f);
    xml_text(f, w->label);
    fprintf(f, " on %s, %d tokens a step, ms per step</text>\n", w->backend, w->tokens_per_step);
    fprintf(f,
            "<text class=\"small\" x=\"12\" y=\"44\">bar: median of the timed steps; whisker: "
            "fastest to slowest; dashed: step-time limit %.4g ms (FLOPs at %.0f TFLOP/s + bytes "
            "at %.1f TB/s); losses bitwise identical across modes: %s</text>\n",
            w->limit_ms, w->peak_flops / 1e12, w->peak_bytes_s / 1e12,
            rep->losses_identical > 0    ? "yes"
            : rep->losses_identical == 0 ? "NO"
                                         : "n/a");
    if (w->backend_detail[0]) {
        fputs("<text class=\"small\" x=\"12\" y=\"60\">", f);
        xml_text(f, w->backend_detail);
        fputs("</text>\n", f);
    }
    int y_axis = PLOT_TOP + rep->n * PLOT_ROW;
    for (int t = 0; t * step <= axis + 1e-9 * axis; t++) {
        double x = PLOT_LABEL_W + t * step * scale;
        fprintf(f, "<line class=\"grid\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>\n", x,
                PLOT_TOP - 4, x, y_axis);
        fprintf(f, "<text class=\"small\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n",
                x, y_axis + 16, t * step);
    }
    fprintf(f, "<text class=\"small\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">ms</text>\n",
            PLOT_LABEL_W + PLOT_BAR_W / 2, y_axis + 32);
    double eager = eager_median(rep);
    for (int i = 0; i < rep->n; i++)
        plot_row(f, &rep->results[i], PLOT_TOP + i * PLOT_ROW, scale, eager);
    if (w->limit_ms > 0) {
        double x = PLOT_LABEL_W + w->limit_ms * scale;
        fprintf(f, "<line class=\"limit\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>\n", x,
                PLOT_TOP - 8, x, y_axis);
    }
    fputs("</svg>\n", f);
    if (fclose(f) != 0)
        return gt_error_set(err, GT_ERR_IO, "bench: writing the plot to %s failed: %s", path,
                            strerror(errno));
    return GT_OK;
}
