/* Printing a validation report: one block per finding (severity, rule, keys, why, fix) for
 * people, or a JSON array (core/json.h) for machines. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "config/rules.h"
#include "core/json.h"

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

static cJSON *finding_json(const gt_finding *f) {
    cJSON *o = cJSON_CreateObject(), *keys = cJSON_CreateArray();
    for (int k = 0; keys && k < f->n_keys; k++)
        cJSON_AddItemToArray(keys, cJSON_CreateString(f->keys[k]));
    int ok = o && keys && cJSON_GetArraySize(keys) == f->n_keys &&
             cJSON_AddStringToObject(o, "severity",
                                     f->severity == GT_SEVERITY_ERROR ? "error" : "note") &&
             cJSON_AddStringToObject(o, "rule", f->rule) && cJSON_AddItemToObject(o, "keys", keys);
    if (!ok) cJSON_Delete(keys);
    ok = ok && cJSON_AddStringToObject(o, "message", f->message) &&
         cJSON_AddStringToObject(o, "fix", f->fix);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

cJSON *gt_report_to_json(const gt_report *r) {
    cJSON *list = cJSON_CreateArray();
    for (int i = 0; list && i < r->count; i++) {
        cJSON *f = finding_json(&r->findings[i]);
        if (!f || !cJSON_AddItemToArray(list, f)) {
            cJSON_Delete(f);
            cJSON_Delete(list);
            return NULL;
        }
    }
    return list;
}

int gt_report_print_json(const gt_report *r, FILE *out) {
    cJSON *list = gt_report_to_json(r);
    char *text = gt_json_print(list, GT_JSON_LINE);
    cJSON_Delete(list);
    if (!text) return GT_ERR_NOMEM;
    int rc = fputs(text, out) < 0 ? GT_ERR_IO : GT_OK;
    free(text);
    return rc;
}
