/* Printing the configuration from the key table: the resolved values (text or JSON) and the
 * Markdown reference that the README and docs/config-reference.md include. */
#include <stdint.h>
#include <string.h>

#include "config/keys.h"
#include "config/rules.h"

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

void gt_json_write_string(FILE *out, const char *s) {
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", out);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

void gt_config_print_json(const gt_config *cfg, FILE *out) {
    size_t count;
    const gt_key *keys = gt_config_keys(&count);
    fputc('{', out);
    for (size_t i = 0; i < count; i++) {
        const gt_key *k = &keys[i];
        char v[600];
        gt_config_format_value(cfg, k, v, sizeof v);
        fprintf(out, "%s", i ? ", " : "");
        gt_json_write_string(out, k->name);
        fputs(": ", out);
        switch (k->type) {
        case GT_KEY_INT:
        case GT_KEY_U64:
        case GT_KEY_DOUBLE:
        case GT_KEY_BOOL:
            fputs(v, out);
            break;
        case GT_KEY_TRI:
            fputs(*(const int *)cfield(cfg, k) < 0 ? "null" : v, out);
            break;
        case GT_KEY_SET: {
            fputc('[', out);
            char *save = NULL;
            int first = 1;
            for (char *t = strtok_r(v, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (!first) fputs(", ", out);
                gt_json_write_string(out, t);
                first = 0;
            }
            fputc(']', out);
            break;
        }
        default:
            gt_json_write_string(out, v);
            break;
        }
    }
    fputc('}', out);
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
