/* Building and printing a validation report: findings added one by one; one block per finding
 * (severity, rule, keys, why, fix) for people, or a JSON array for machines. */
#include <stdarg.h>
#include <string.h>

#include "config/rules.h"

gt_finding *gt_report_addv(gt_report *r, gt_severity sev, const char *rule, const char *const *keys,
                           const char *fix, const char *fmt, va_list ap) {
    if (sev == GT_SEVERITY_ERROR)
        r->errors++;
    else
        r->notes++;
    if (r->count >= GT_REPORT_MAX) {
        r->dropped++;
        return NULL;
    }
    gt_finding *f = &r->findings[r->count++];
    memset(f, 0, sizeof *f);
    f->severity = sev;
    f->rule = rule;
    for (int i = 0; i < GT_FINDING_KEYS_MAX - 1 && keys[i]; i++)
        f->keys[f->n_keys++] = keys[i];
    vsnprintf(f->message, sizeof f->message, fmt, ap);
    snprintf(f->fix, sizeof f->fix, "%s", fix);
    return f;
}

gt_finding *gt_report_add(gt_report *r, gt_severity sev, const char *rule, const char *const *keys,
                          const char *fix, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    gt_finding *f = gt_report_addv(r, sev, rule, keys, fix, fmt, ap);
    va_end(ap);
    return f;
}

int gt_report_has(const gt_report *r, const char *rule) {
    for (int i = 0; i < r->count; i++)
        if (!strcmp(r->findings[i].rule, rule)) return 1;
    return 0;
}

void gt_report_print(const gt_report *r, FILE *out) {
    for (int i = 0; i < r->count; i++) {
        const gt_finding *f = &r->findings[i];
        fprintf(out, "%s [%s] ", f->severity == GT_SEVERITY_ERROR ? "error" : "note", f->rule);
        for (int k = 0; k < f->n_keys; k++)
            fprintf(out, "%s%s", k ? ", " : "", f->keys[k]);
        fprintf(out, "\n  why: %s\n  fix: %s\n", f->message, f->fix);
    }
    if (r->dropped) fprintf(out, "(%d more findings not shown)\n", r->dropped);
    char apart[96] = "";
    if (r->unsupported)
        snprintf(apart, sizeof apart, " (%d setting%s graphtrain cannot run yet)", r->unsupported,
                 r->unsupported == 1 ? "" : "s");
    if (r->errors)
        fprintf(out, "%d error%s%s, %d note%s: the configuration is not valid\n", r->errors,
                r->errors == 1 ? "" : "s", apart, r->notes, r->notes == 1 ? "" : "s");
    else
        fprintf(out, "configuration is valid (%d note%s)\n", r->notes, r->notes == 1 ? "" : "s");
}

void gt_report_print_json(const gt_report *r, FILE *out) {
    fputc('[', out);
    for (int i = 0; i < r->count; i++) {
        const gt_finding *f = &r->findings[i];
        fprintf(out, "%s{\"severity\": \"%s\", \"rule\": ", i ? ", " : "",
                f->severity == GT_SEVERITY_ERROR ? "error" : "note");
        gt_json_write_string(out, f->rule);
        fputs(", \"keys\": [", out);
        for (int k = 0; k < f->n_keys; k++) {
            if (k) fputs(", ", out);
            gt_json_write_string(out, f->keys[k]);
        }
        fputs("], \"message\": ", out);
        gt_json_write_string(out, f->message);
        fputs(", \"fix\": ", out);
        gt_json_write_string(out, f->fix);
        fputc('}', out);
    }
    fputc(']', out);
}
