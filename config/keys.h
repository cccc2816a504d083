/* The key table: one entry per configuration key (dotted name with Bridge's nesting, type,
 * default, allowed values, range, one-line doc, place in gt_config). Defaults, YAML recipes,
 * key=value overrides, printing the resolved config and the README reference all read it. */
#ifndef GT_CONFIG_KEYS_H
#define GT_CONFIG_KEYS_H

#include <stddef.h>
#include <stdio.h>

#include "config/config.h"
#include "core/error.h"
#include "core/json.h"

typedef enum {
    GT_KEY_INT,    /* int */
    GT_KEY_U64,    /* uint64_t */
    GT_KEY_DOUBLE, /* double */
    GT_KEY_BOOL,   /* bool */
    GT_KEY_ENUM,   /* C enum (int-sized); value i is names[i] */
    GT_KEY_SET,    /* uint32_t bit set; bit i is names[i] */
    GT_KEY_STRING, /* char[size] */
    GT_KEY_TRI,    /* int: -1 = unset, else 0/1 (NCCL_GRAPH_REGISTER style) */
} gt_key_type;

typedef struct gt_key {
    const char *name; /* dotted: "model.cuda_graph_scope" */
    gt_key_type type;
    size_t offset;            /* offsetof(gt_config, ...) */
    size_t size;              /* sizeof the field (string buffer size) */
    const char *def;          /* default, in the syntax a user writes */
    const char *const *names; /* ENUM/SET: allowed values, NULL-terminated */
    double min, max;          /* INT/U64/DOUBLE: inclusive range */
    const char *doc;          /* one line */
    const char *null_value;   /* what YAML null / None means for this key; NULL = not allowed */
} gt_key;

/* The whole table, in printing order; *count receives the number of entries. */
const gt_key *gt_config_keys(size_t *count);
/* Looks a key up by name (accepting the few documented aliases); NULL when unknown. */
const gt_key *gt_config_find_key(const char *name);
/* Closest known key name to an unknown one, or NULL when nothing is close. */
const char *gt_config_suggest_key(const char *name);

/* Key-table defaults, nothing from the environment. */
void gt_config_defaults(gt_config *cfg);
/* env.* from PYTORCH_CUDA_ALLOC_CONF (expandable_segments:True) and NCCL_GRAPH_REGISTER. */
void gt_config_read_env(gt_config *cfg);
/* Sets one key from its text form. Unknown keys get a "did you mean"; bad values name the
 * key, the value, what is allowed. Setting model.cuda_graph_impl=none clears the scope list,
 * as Bridge does. Returns GT_OK or GT_ERR_INVALID. */
int gt_config_set(gt_config *cfg, const char *key, const char *value, gt_error *err);
/* Applies "key=value" (the command-line form). */
int gt_config_override(gt_config *cfg, const char *key_eq_value, gt_error *err);
/* Loads a YAML file with Bridge's nesting (model: {num_layers: 8}). Lists become a,b,c.
 * Errors carry "file:line: ". Returns GT_OK, GT_ERR_IO (unreadable) or GT_ERR_INVALID. */
int gt_config_load_yaml(gt_config *cfg, const char *path, gt_error *err);
/* The same, and *complete says whether the whole file was read: 1 when it loaded, or when
 * every failure was a bad key or value (each such setting keeps its earlier value); 0 after
 * a syntax or structure error, or when the file could not be read. */
int gt_config_load_yaml_read(gt_config *cfg, const char *path, int *complete, gt_error *err);
/* The same from memory; name is used in messages in place of the file name. */
int gt_config_load_yaml_string(gt_config *cfg, const char *text, size_t len, const char *name,
                               gt_error *err);
/* Normalisation Bridge applies after all settings: impl=none empties the scope list. */
void gt_config_finalize(gt_config *cfg);

/* Handle-style API (include/graphtrain.h's sketch): create = malloc + defaults + environment;
 * destroy accepts NULL; load_recipe = load_yaml + finalize; apply_override = override +
 * finalize. */
int gt_config_create(gt_config **cfg, gt_error *err);
void gt_config_destroy(gt_config *cfg);
int gt_config_load_recipe(gt_config *cfg, const char *path, gt_error *err);
int gt_config_apply_override(gt_config *cfg, const char *key_eq_value, gt_error *err);

/* The allowed names of an enum or flag key as "a | b | c" into buf[n] (truncated to fit). */
void gt_config_list_names(const char *const *names, char *buf, size_t n);
/* Writes one key's current value as text (the syntax gt_config_set accepts). */
void gt_config_format_value(const gt_config *cfg, const gt_key *key, char *buf, size_t n);
/* Prints the resolved configuration, one "key = value" line per key. */
void gt_config_print(const gt_config *cfg, FILE *out);
/* The resolved configuration as one JSON object of dotted keys (cJSON, freed by the caller
 * with cJSON_Delete); NULL when out of memory. */
cJSON *gt_config_to_json(const gt_config *cfg);
/* Prints it on one line (no trailing newline): GT_OK, GT_ERR_IO or GT_ERR_NOMEM. */
int gt_config_print_json(const gt_config *cfg, FILE *out);
/* Prints the Markdown configuration reference generated from the key table. */
void gt_config_print_reference(FILE *out);

#endif
