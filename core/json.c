/* Printing cJSON trees with the project's separators and checked writes; see json.h. */
#include "core/json.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* cJSON's compact text has no spaces; outside strings each ',' and ':' gets one after it. */
static char *spaced(const char *s) {
    size_t n = strlen(s), extra = 0;
    int in_str = 0, esc = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (esc)
                esc = 0;
            else if (c == '\\')
                esc = 1;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == ',' || c == ':') {
            extra++;
        }
    }
    char *out = malloc(n + extra + 1);
    if (!out) return NULL;
    size_t j = 0;
    in_str = esc = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        out[j++] = c;
        if (in_str) {
            if (esc)
                esc = 0;
            else if (c == '\\')
                esc = 1;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == ',' || c == ':') {
            out[j++] = ' ';
        }
    }
    out[j] = '\0';
    return out;
}

/* cJSON's formatted text indents with tabs and puts a tab after each ':'. A string never holds
 * a raw tab (cJSON writes it as \t), so every tab is layout: ": " after a colon, two spaces
 * elsewhere. */
static char *indented(const char *s) {
    size_t n = strlen(s), tabs = 0;
    for (size_t i = 0; i < n; i++)
        tabs += s[i] == '\t';
    char *out = malloc(n + tabs + 1);
    if (!out) return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\t') {
            out[j++] = s[i];
        } else if (i > 0 && s[i - 1] == ':') {
            out[j++] = ' ';
        } else {
            out[j++] = ' ';
            out[j++] = ' ';
        }
    }
    out[j] = '\0';
    return out;
}

char *gt_json_print(const cJSON *item, gt_json_style style) {
    if (!item) return NULL;
    char *raw = style == GT_JSON_INDENT ? cJSON_Print(item) : cJSON_PrintUnformatted(item);
    if (!raw) return NULL;
    char *out = style == GT_JSON_INDENT ? indented(raw) : spaced(raw);
    cJSON_free(raw);
    return out;
}

int gt_json_write(FILE *f, const cJSON *item, gt_json_style style, const char *what,
                  gt_error *err) {
    char *text = gt_json_print(item, style);
    if (!text)
        return gt_error_set(err, GT_ERR_NOMEM, "%s: out of host memory building a JSON record",
                            what);
    errno = 0;
    int bad = fputs(text, f) < 0 || fputc('\n', f) == EOF || fflush(f) != 0 || ferror(f);
    int e = errno;
    free(text);
    if (bad)
        return gt_error_set(err, GT_ERR_IO,
                            "%s: write failed: %s; free disk space or write somewhere else", what,
                            e ? strerror(e) : "I/O error");
    return GT_OK;
}

int gt_json_write_file(const char *path, const cJSON *item, gt_error *err) {
    FILE *f = fopen(path, "w");
    if (!f)
        return gt_error_set(err, GT_ERR_IO, "cannot write %s: %s; check the path", path,
                            strerror(errno));
    int rc = gt_json_write(f, item, GT_JSON_INDENT, path, err);
    errno = 0;
    if (fclose(f) != 0 && rc == GT_OK)
        rc = gt_error_set(err, GT_ERR_IO,
                          "%s: closing failed: %s; free disk space or write somewhere else", path,
                          errno ? strerror(errno) : "I/O error");
    return rc;
}

cJSON *gt_json_u64(unsigned long long v) {
    char digits[32];
    snprintf(digits, sizeof digits, "%llu", v);
    return cJSON_CreateRaw(digits);
}

cJSON *gt_json_float(float v) {
    if (!isfinite(v)) return cJSON_CreateNull();
    char text[32];
    snprintf(text, sizeof text, "%.9g", (double)v);
    return cJSON_CreateRaw(text);
}
