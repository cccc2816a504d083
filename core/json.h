/* The project's one JSON writer: documents are built as cJSON trees (libcjson, Debian's
 * libcjson-dev) and printed here, so every JSON graphtrain writes is escaped and formed by one
 * library. Output uses Python json.dumps's separators (", " and ": "); NaN and Inf print as
 * null (cJSON's rule), so callers that must keep them say so in a field of their own. */
#ifndef GT_CORE_JSON_H
#define GT_CORE_JSON_H

#include <stdio.h>

#include <cjson/cJSON.h>

#include "core/error.h"

typedef enum {
    GT_JSON_LINE,   /* one line: {"a": 1, "b": [1, 2]} (JSONL records, --json output) */
    GT_JSON_INDENT, /* one key a line, two spaces a level (files people read too) */
} gt_json_style;

/* The text of item in that style, NUL-terminated, freed by the caller with free(); NULL when
 * out of memory (item NULL counts as out of memory: a failed cJSON_Create* returns NULL). */
char *gt_json_print(const cJSON *item, gt_json_style style);

/* Writes item and a newline to f and flushes it. what names the destination in messages
 * ("logger.metrics_file=x.jsonl"). GT_ERR_IO when the write or the flush fails (disk full:
 * /dev/full), GT_ERR_NOMEM when the text cannot be built. */
int gt_json_write(FILE *f, const cJSON *item, gt_json_style style, const char *what, gt_error *err);

/* Writes item (indented) to a new file at path, checking the write and the close. */
int gt_json_write_file(const char *path, const cJSON *item, gt_error *err);

/* An exact unsigned 64-bit integer (seeds): a double would round above 2^53. NULL when out of
 * memory. */
cJSON *gt_json_u64(unsigned long long v);

/* A float with the 9 significant digits that give it back exactly (4.17014313, not the
 * 17-digit 4.1701431274414062 of its double); null when not finite. NULL when out of memory. */
cJSON *gt_json_float(float v);

#endif
