/* Printing a validation report: one block per finding (severity, rule, keys, why, fix) for
 * people, or a JSON array (core/json.h) for machines. */
#include <stdlib.h>
#include <string.h>

#include "config/rules.h"
#include "core/json.h"

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
    if (r->errors)
        fprintf(out, "%d error%s, %d note%s: the configuration is not valid\n", r->errors,
                r->errors == 1 ? "" : "s", r->notes, r->notes == 1 ? "" : "s");
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
