/* YAML recipes (libyaml): nested mappings become dotted keys (model: {num_layers: 8} ->
 * model.num_layers=8), lists become a,b,c, and every value goes through gt_config_set.
 * Bad keys and values are all reported (each with file:line); a syntax error stops at once. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <yaml.h>

#include "config/keys.h"

#define YAML_MAX_DEPTH 8 /* model.x is depth 2; anything deeper is a mistake */
#define YAML_KEY_MAX 256
#define YAML_LIST_MAX 1024  /* joined list text */
#define YAML_MAX_REPORTED 8 /* bad settings reported in one message */

typedef struct yaml_ctx {
    yaml_parser_t parser;
    const char *name; /* file name for messages */
    gt_config *cfg;
    gt_error *err;
    int fatal;  /* syntax or structure error: stop */
    int errors; /* bad keys/values so far */
} yaml_ctx;

/* Appends one "name:line: msg" to the error (several bad settings go in one message). */
static void add_error(yaml_ctx *c, int code, size_t line, const char *msg) {
    c->errors++;
    if (!c->err) return;
    if (c->errors == 1) {
        gt_error_set(c->err, code, "%s:%zu: %s", c->name, line, msg);
        return;
    }
    size_t used = strlen(c->err->msg);
    if (c->errors > YAML_MAX_REPORTED) return;
    snprintf(c->err->msg + used, sizeof c->err->msg - used, "\n%s:%zu: %s", c->name, line, msg);
}

static void fatal(yaml_ctx *c, size_t line, const char *msg) {
    c->fatal = 1;
    add_error(c, GT_ERR_INVALID, line, msg);
}

/* Reads the next event; on a syntax error records it with libyaml's position. */
static int next_event(yaml_ctx *c, yaml_event_t *ev) {
    if (yaml_parser_parse(&c->parser, ev)) return 1;
    char msg[512];
    snprintf(msg, sizeof msg, "malformed YAML: %s%s%s",
             c->parser.problem ? c->parser.problem : "syntax error", c->parser.context ? " " : "",
             c->parser.context ? c->parser.context : "");
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
    if (c->errors == 0) return GT_OK;
    if (c->err) c->err->count = c->errors;
    if (c->errors > YAML_MAX_REPORTED && c->err) {
        size_t used = strlen(c->err->msg);
        snprintf(c->err->msg + used, sizeof c->err->msg - used, "\n(%d more errors)",
                 c->errors - YAML_MAX_REPORTED);
    }
    return GT_ERR_INVALID;
}

int gt_config_load_yaml_string(gt_config *cfg, const char *text, size_t len, const char *name,
                               gt_error *err) {
    yaml_ctx c = {.name = name ? name : "<string>", .cfg = cfg, .err = err};
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
    FILE *f = fopen(path, "rb");
    if (!f)
        return gt_error_set(err, GT_ERR_IO, "%s: cannot read: %s; check the path", path,
                            strerror(errno));
    yaml_ctx c = {.name = path, .cfg = cfg, .err = err};
    if (!yaml_parser_initialize(&c.parser)) {
        fclose(f);
        return gt_error_set(err, GT_ERR_NOMEM, "%s: could not initialise the YAML parser", path);
    }
    yaml_parser_set_input_file(&c.parser, f);
    int rc = parse_stream(&c);
    int read_error = ferror(f);
    if (read_error && rc == GT_OK) rc = gt_error_set(err, GT_ERR_IO, "%s: read error", path);
    if (complete) *complete = !c.fatal && !read_error;
    yaml_parser_delete(&c.parser);
    fclose(f);
    return rc;
}
