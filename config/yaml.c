/* YAML recipes (libyaml): nested mappings become dotted keys (model: {num_layers: 8} ->
 * model.num_layers=8), lists become a,b,c for list keys, and every value goes through
 * gt_config_set. Every bad key, value, duplicate and misplaced list is reported (each with
 * file:line); a syntax error stops at once. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <yaml.h>

#include "config/keys.h"
#include "core/read_file.h"

#define YAML_MAX_DEPTH 8 /* model.x is depth 2; anything deeper is a mistake */
#define YAML_KEY_MAX 256
#define YAML_LIST_MAX 1024        /* joined list text */
#define YAML_FILE_MAX (16u << 20) /* a recipe is a few KiB */
#define YAML_TRAILER_ROOM 96      /* kept free for the "message is full" line */

typedef struct seen_key {
    char name[YAML_KEY_MAX]; /* the key's table name (aliases folded), or the section */
    size_t line;
} seen_key;

typedef struct yaml_ctx {
    yaml_parser_t parser;
    const char *name; /* file name for messages */
    const char *text; /* the whole input, to point at a tab after a syntax error */
    size_t len;
    gt_config *cfg;
    gt_error *err;
    int fatal;      /* syntax or structure error: stop */
    int errors;     /* bad keys/values so far */
    int unshown;    /* errors that did not fit the message */
    int settings;   /* key: value pairs met (good or bad) */
    seen_key *seen; /* keys and sections met so far, for duplicates */
    size_t n_seen, cap_seen;
} yaml_ctx;

/* Appends one "name:line: msg" to the error: every bad setting is listed; only a message too
 * long for the error buffer is cut, and its last line says how many did not fit. */
static void add_error(yaml_ctx *c, int code, size_t line, const char *msg) {
    c->errors++;
    if (!c->err) return;
    if (c->errors == 1) {
        gt_error_set(c->err, code, "%s:%zu: %s", c->name, line, msg);
        return;
    }
    size_t used = strlen(c->err->msg);
    char one[YAML_KEY_MAX + GT_ERROR_MSG_MAX];
    int w = snprintf(one, sizeof one, "\n%s:%zu: %s", c->name, line, msg);
    if (c->unshown || w < 0 || used + (size_t)w + YAML_TRAILER_ROOM >= sizeof c->err->msg) {
        c->unshown++;
        return;
    }
    memcpy(c->err->msg + used, one, (size_t)w + 1);
}

/* Records key (a setting's table name or a section) at line; a second one is an error naming
 * both lines. Returns 1 when it was new. */
static int first_time(yaml_ctx *c, const char *key, size_t line, int section) {
    for (size_t i = 0; i < c->n_seen; i++) {
        if (strcmp(c->seen[i].name, key)) continue;
        char msg[2 * YAML_KEY_MAX + 160];
        if (section)
            snprintf(msg, sizeof msg,
                     "section %s given twice (lines %zu and %zu); merge them into one", key,
                     c->seen[i].line, line);
        else
            snprintf(msg, sizeof msg, "%s set twice (lines %zu and %zu); keep one", key,
                     c->seen[i].line, line);
        add_error(c, GT_ERR_INVALID, line, msg);
        return 0;
    }
    if (c->n_seen == c->cap_seen) {
        size_t cap = c->cap_seen ? 2 * c->cap_seen : 64;
        seen_key *grown = realloc(c->seen, cap * sizeof *grown);
        if (!grown) return 1; /* duplicates go unnoticed rather than the load failing */
        c->seen = grown;
        c->cap_seen = cap;
    }
    snprintf(c->seen[c->n_seen].name, sizeof c->seen[0].name, "%s", key);
    c->seen[c->n_seen++].line = line;
    return 1;
}

/* The name a duplicate is told by: the table's name for a known key (so an alias and its
 * key collide), the text itself otherwise. */
static const char *canonical(const char *key) {
    const gt_key *k = gt_config_find_key(key);
    return k ? k->name : key;
}

static void fatal(yaml_ctx *c, size_t line, const char *msg) {
    c->fatal = 1;
    add_error(c, GT_ERR_INVALID, line, msg);
}

/* Reads the next event; on a syntax error records it with libyaml's position. */
static int next_event(yaml_ctx *c, yaml_event_t *ev) {
    if (yaml_parser_parse(&c->parser, ev)) return 1;
    char msg[512];
    /* libyaml says "found character that cannot start any token" for a tab; say "tab" */
    const char *tab = "";
    size_t at = c->parser.problem_mark.index, start = at;
    while (start > 0 && start <= c->len && c->text[start - 1] != '\n')
        start--;
    for (size_t i = start; c->text && i < c->len && c->text[i] != '\n'; i++)
        if (c->text[i] == '\t') {
            tab = " (a tab on this line: YAML indents with spaces only; replace the tab with "
                  "spaces)";
            break;
        }
    snprintf(msg, sizeof msg, "malformed YAML: %s%s%s%s",
             c->parser.problem ? c->parser.problem : "syntax error", c->parser.context ? " " : "",
             c->parser.context ? c->parser.context : "", tab);
    fatal(c, c->parser.problem_mark.line + 1, msg);
    return 0;
}

/* Is prefix "model" the section of some key ("model.")? */
static int is_section(const char *name) {
    size_t n, len = strlen(name);
    const gt_key *keys = gt_config_keys(&n);
    for (size_t i = 0; i < n; i++)
        if (!strncmp(keys[i].name, name, len) && keys[i].name[len] == '.') return 1;
    return 0;
}

static void apply(yaml_ctx *c, const char *key, const char *value, size_t line) {
    gt_error e = {0};
    c->settings++;
    if (!first_time(c, canonical(key), line, 0)) return;
    if (is_section(key)) {
        char msg[YAML_KEY_MAX + 96];
        snprintf(msg, sizeof msg, "%s is a section, not a setting; indent its settings below '%s:'",
                 key, key);
        add_error(c, GT_ERR_INVALID, line, msg);
        return;
    }
    if (gt_config_set(c->cfg, key, value, &e) != GT_OK) add_error(c, GT_ERR_INVALID, line, e.msg);
}

/* After SEQUENCE_START: scalars until SEQUENCE_END, joined with ',' (Bridge's list keys). */
static void parse_list(yaml_ctx *c, const char *key, size_t line) {
    char joined[YAML_LIST_MAX] = "";
    size_t used = 0;
    int too_long = 0;
    for (;;) {
        yaml_event_t ev;
        if (!next_event(c, &ev)) return;
        yaml_event_type_t t = ev.type;
        if (t == YAML_SCALAR_EVENT) {
            size_t len = ev.data.scalar.length;
            /* a NUL byte inside an item, or no room left: reject rather than cut it */
            if (strlen((const char *)ev.data.scalar.value) != len ||
                used + len + 2 >= sizeof joined) {
                too_long = 1;
            } else {
                if (used) joined[used++] = ',';
                memcpy(joined + used, ev.data.scalar.value, len);
                used += len;
                joined[used] = '\0';
            }
        } else if (t != YAML_SEQUENCE_END_EVENT) {
            char msg[YAML_KEY_MAX + 96];
            snprintf(msg, sizeof msg, "%s: list items must be plain values (one name each)", key);
            fatal(c, ev.start_mark.line + 1, msg);
        }
        yaml_event_delete(&ev);
        if (c->fatal) return;
        if (t == YAML_SEQUENCE_END_EVENT) break;
    }
    const gt_key *k = gt_config_find_key(key);
    if (k && k->type != GT_KEY_SET) {
        /* num_layers: [1] is a mistake, not 1 */
        char msg[YAML_KEY_MAX + 96];
        snprintf(msg, sizeof msg, "%s takes one value, not a list; write %s: VALUE", key,
                 strrchr(key, '.') ? strrchr(key, '.') + 1 : key);
        c->settings++;
        if (first_time(c, k->name, line, 0)) add_error(c, GT_ERR_INVALID, line, msg);
        return;
    }
    if (too_long) {
        char msg[YAML_KEY_MAX + 64];
        snprintf(msg, sizeof msg, "%s: list is too long or holds a NUL byte", key);
        add_error(c, GT_ERR_INVALID, line, msg);
        return;
    }
    apply(c, key, joined, line);
}

/* After MAPPING_START: key/value pairs until MAPPING_END; prefix is "" or "model.". */
static void parse_mapping(yaml_ctx *c, const char *prefix, int depth) {
    if (depth > YAML_MAX_DEPTH) {
        fatal(c, c->parser.mark.line + 1, "nesting is too deep; keys are section.name");
        return;
    }
    for (;;) {
        yaml_event_t kev;
        if (!next_event(c, &kev)) return;
        if (kev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&kev);
            return;
        }
        size_t line = kev.start_mark.line + 1;
        if (kev.type != YAML_SCALAR_EVENT) {
            yaml_event_delete(&kev);
            fatal(c, line, "a key must be a plain name (section or setting)");
            return;
        }
        char key[YAML_KEY_MAX];
        int n = snprintf(
            key, sizeof key, "%s%.*s", prefix,
            (int)(kev.data.scalar.length < YAML_KEY_MAX ? kev.data.scalar.length : YAML_KEY_MAX),
            (const char *)kev.data.scalar.value);
        yaml_event_delete(&kev);
        if (n < 0 || (size_t)n >= sizeof key || strlen(key) != (size_t)n) {
            fatal(c, line, "key is too long or contains a NUL byte");
            return;
        }
        const size_t key_line = line; /* a section is told by its name's line */
        yaml_event_t vev;
        if (!next_event(c, &vev)) return;
        line = vev.start_mark.line + 1;
        switch (vev.type) {
        case YAML_SCALAR_EVENT:
            if (strlen((const char *)vev.data.scalar.value) != vev.data.scalar.length) {
                char msg[YAML_KEY_MAX + 48];
                snprintf(msg, sizeof msg, "%s: value contains a NUL byte", key);
                add_error(c, GT_ERR_INVALID, line, msg);
            } else {
                apply(c, key, (const char *)vev.data.scalar.value, line);
            }
            yaml_event_delete(&vev);
            break;
        case YAML_SEQUENCE_START_EVENT:
            yaml_event_delete(&vev);
            parse_list(c, key, line);
            break;
        case YAML_MAPPING_START_EVENT: {
            yaml_event_delete(&vev);
            if (gt_config_find_key(key)) {
                char msg[YAML_KEY_MAX + 64];
                snprintf(msg, sizeof msg, "%s takes a value, not a nested mapping", key);
                fatal(c, line, msg);
                break;
            }
            first_time(c, key, key_line, 1); /* its settings still go in, each checked */
            char sub[YAML_KEY_MAX + 1];
            snprintf(sub, sizeof sub, "%s.", key);
            parse_mapping(c, sub, depth + 1);
            break;
        }
        default:
            yaml_event_delete(&vev);
            fatal(c, line,
                  "anchors and aliases (*name) are not supported in recipes; write the value out");
            break;
        }
        if (c->fatal) return;
    }
}

static int parse_stream(yaml_ctx *c) {
    int docs = 0;
    for (;;) {
        yaml_event_t ev;
        if (!next_event(c, &ev)) break;
        yaml_event_type_t t = ev.type;
        size_t line = ev.start_mark.line + 1;
        int empty_scalar =
            t == YAML_SCALAR_EVENT &&
            (ev.data.scalar.length == 0 || !strcmp((char *)ev.data.scalar.value, "~") ||
             !strcmp((char *)ev.data.scalar.value, "null"));
        yaml_event_delete(&ev);
        if (t == YAML_STREAM_END_EVENT) break;
        if (t == YAML_DOCUMENT_START_EVENT && ++docs > 1) {
            fatal(c, line, "more than one YAML document (---); a recipe is one mapping");
        } else if (t == YAML_MAPPING_START_EVENT) {
            parse_mapping(c, "", 1);
        } else if (t == YAML_SEQUENCE_START_EVENT || (t == YAML_SCALAR_EVENT && !empty_scalar) ||
                   t == YAML_ALIAS_EVENT) {
            fatal(c, line, "a recipe must be a mapping of sections (model:, train:, ...)");
        }
        if (c->fatal) break;
    }
    if (!c->fatal && c->settings == 0 && c->errors == 0)
        add_error(c, GT_ERR_INVALID, 1,
                  "the file sets nothing (it is empty, or holds only comments or empty "
                  "sections); give settings such as 'model:' then '  num_layers: 4', or drop "
                  "the file");
    free(c->seen);
    c->seen = NULL;
    if (c->errors == 0) return GT_OK;
    if (c->err) c->err->count = c->errors;
    if (c->unshown && c->err) {
        size_t used = strlen(c->err->msg);
        snprintf(c->err->msg + used, sizeof c->err->msg - used,
                 "\n(and %d more bad settings in %s that do not fit this message)", c->unshown,
                 c->name);
    }
    return GT_ERR_INVALID;
}

int gt_config_load_yaml_string(gt_config *cfg, const char *text, size_t len, const char *name,
                               gt_error *err) {
    yaml_ctx c = {
        .name = name ? name : "<string>", .text = text, .len = len, .cfg = cfg, .err = err};
    if (!yaml_parser_initialize(&c.parser))
        return gt_error_set(err, GT_ERR_NOMEM, "%s: could not initialise the YAML parser", c.name);
    yaml_parser_set_input_string(&c.parser, (const unsigned char *)text, len);
    int rc = parse_stream(&c);
    yaml_parser_delete(&c.parser);
    return rc;
}

int gt_config_load_yaml(gt_config *cfg, const char *path, gt_error *err) {
    return gt_config_load_yaml_read(cfg, path, NULL, err);
}

int gt_config_load_yaml_read(gt_config *cfg, const char *path, int *complete, gt_error *err) {
    if (complete) *complete = 0;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return gt_error_set(err, GT_ERR_IO, "%s: is a directory; give a YAML file", path);
    char *text = NULL;
    size_t len = 0;
    int rc = gt_read_file(path, YAML_FILE_MAX, &text, &len, err);
    if (rc != GT_OK) return gt_error_wrap(err, "%s: ", path);
    yaml_ctx c = {.name = path, .text = text, .len = len, .cfg = cfg, .err = err};
    if (!yaml_parser_initialize(&c.parser)) {
        free(text);
        return gt_error_set(err, GT_ERR_NOMEM, "%s: could not initialise the YAML parser", path);
    }
    yaml_parser_set_input_string(&c.parser, (const unsigned char *)text, len);
    rc = parse_stream(&c);
    if (complete) *complete = !c.fatal;
    yaml_parser_delete(&c.parser);
    free(text);
    return rc;
}
