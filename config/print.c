/* Printing the configuration from the key table: the resolved values (text, or JSON through
 * core/json.h) and the Markdown reference that the README and docs/config-reference.md include. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/keys.h"
#include "config/rules.h"
#include "core/json.h"

static const void *cfield(const gt_config *cfg, const gt_key *k) {
    return (const char *)cfg + k->offset;
}

void gt_config_print(const gt_config *cfg, FILE *out) {
    size_t count;
    const gt_key *keys = gt_config_keys(&count);
    for (size_t i = 0; i < count; i++) {
        char v[600];
        gt_config_format_value(cfg, &keys[i], v, sizeof v);
        const char *shown = *v ? v : keys[i].type == GT_KEY_SET ? "[]" : "\"\"";
        fprintf(out, "  %-44s = %s\n", keys[i].name, shown);
    }
}

/* Each key's value with its JSON type: numbers, booleans, null for an unset tri-state, a list
 * of names for a set, text otherwise. */
static cJSON *value_json(const gt_config *cfg, const gt_key *k) {
    const void *f = cfield(cfg, k);
    switch (k->type) {
    case GT_KEY_INT:
        return cJSON_CreateNumber(*(const int *)f);
    case GT_KEY_U64:
        return gt_json_u64((unsigned long long)*(const uint64_t *)f);
    case GT_KEY_DOUBLE:
        return cJSON_CreateNumber(*(const double *)f);
    case GT_KEY_BOOL:
        return cJSON_CreateBool(*(const bool *)f);
    case GT_KEY_TRI: {
        int t = *(const int *)f;
        return t < 0 ? cJSON_CreateNull() : cJSON_CreateNumber(t);
    }
    case GT_KEY_SET: {
        cJSON *list = cJSON_CreateArray();
        uint32_t bits = *(const uint32_t *)f;
        for (int i = 0; list && k->names[i]; i++)
            if (bits & (1u << i)) cJSON_AddItemToArray(list, cJSON_CreateString(k->names[i]));
        return list;
    }
    default: {
        char v[600];
        gt_config_format_value(cfg, k, v, sizeof v);
        return cJSON_CreateString(v);
    }
    }
}

cJSON *gt_config_to_json(const gt_config *cfg) {
    size_t count;
    const gt_key *keys = gt_config_keys(&count);
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; o && i < count; i++) {
        cJSON *v = value_json(cfg, &keys[i]);
        if (!v || !cJSON_AddItemToObject(o, keys[i].name, v)) {
            cJSON_Delete(v);
            cJSON_Delete(o);
            return NULL;
        }
    }
    return o;
}

int gt_config_print_json(const gt_config *cfg, FILE *out) {
    cJSON *o = gt_config_to_json(cfg);
    char *text = gt_json_print(o, GT_JSON_LINE);
    cJSON_Delete(o);
    if (!text) return GT_ERR_NOMEM;
    int rc = fputs(text, out) < 0 ? GT_ERR_IO : GT_OK;
    free(text);
    return rc;
}

static const char *type_name(const gt_key *k) {
    switch (k->type) {
    case GT_KEY_INT:
        return "int";
    case GT_KEY_U64:
        return "uint64";
    case GT_KEY_DOUBLE:
        return "float";
    case GT_KEY_BOOL:
        return "bool";
    case GT_KEY_ENUM:
        return "enum";
    case GT_KEY_SET:
        return "list";
    case GT_KEY_STRING:
        return "string";
    case GT_KEY_TRI:
        return "0/1/unset";
    }
    return "?";
}

void gt_config_print_reference(FILE *out) {
    size_t count;
    const gt_key *keys = gt_config_keys(&count);
    fputs("| key | type | default | allowed | description |\n", out);
    fputs("|---|---|---|---|---|\n", out);
    for (size_t i = 0; i < count; i++) {
        const gt_key *k = &keys[i];
        char allowed[256] = "";
        if (k->names)
            gt_config_list_names(k->names, allowed, sizeof allowed);
        else if (k->type == GT_KEY_INT || k->type == GT_KEY_DOUBLE)
            snprintf(allowed, sizeof allowed, "%.10g .. %.10g", k->min, k->max);
        else if (k->type == GT_KEY_BOOL)
            snprintf(allowed, sizeof allowed, "true, false");
        else if (k->type == GT_KEY_TRI)
            snprintf(allowed, sizeof allowed, "0, 1, unset");
        else if (k->type == GT_KEY_U64)
            snprintf(allowed, sizeof allowed, "0 .. 2^64-1");
        else if (k->type == GT_KEY_STRING)
            snprintf(allowed, sizeof allowed, "text");
        /* a Markdown table cell cannot hold a bare '|' */
        char cell[400];
        size_t j = 0;
        for (const char *p = allowed; *p && j + 3 < sizeof cell; p++) {
            if (*p == '|') cell[j++] = '\\';
            cell[j++] = *p;
        }
        cell[j] = '\0';
        fprintf(out, "| `%s` | %s | `%s` | %s | %s |\n", k->name, type_name(k),
                *k->def ? k->def : "\"\"", cell, k->doc);
    }
}
