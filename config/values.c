/* Reading and writing key values as text: the one parser behind defaults, YAML recipes and
 * key=value overrides, and the one formatter behind printing, JSON and the README reference. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/bridge_keys.h"
#include "config/cuda_keys.h"
#include "config/keys.h"
#include "config/rules.h"

#define VALUE_SHOW_MAX 64 /* how much of a bad value an error message quotes */

static void *field(gt_config *cfg, const gt_key *k) {
    return (char *)cfg + k->offset;
}
static const void *cfield(const gt_config *cfg, const gt_key *k) {
    return (const char *)cfg + k->offset;
}

/* Copies s without surrounding blanks into buf (truncating at n-1). */
static void trim_copy(const char *s, size_t len, char *buf, size_t n) {
    /* s was filled by memcpy in the caller's trim_copy; the analyzer loses those bytes */
    // NOLINTNEXTLINE(clang-analyzer-core.uninitialized.ArraySubscript)
    while (len && isspace((unsigned char)*s))
        s++, len--;
    while (len && isspace((unsigned char)s[len - 1]))
        len--;
    if (len >= n) len = n - 1;
    memcpy(buf, s, len);
    buf[len] = '\0';
}

/* YAML's and Python's spellings of "nothing" */
static bool is_null_word(const char *v) {
    return !*v || !strcmp(v, "~") || !strcasecmp(v, "null") || !strcmp(v, "None") ||
           !strcmp(v, "[]");
}

/* "a | b | c" */
void gt_config_list_names(const char *const *names, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; names[i]; i++) {
        int w = snprintf(buf + used, n - used, "%s%s", i ? " | " : "", names[i]);
        if (w < 0 || (size_t)w >= n - used) break;
        used += (size_t)w;
    }
}

/* Names are exact, as in Megatron ("attn", not "ATTN"); find_name_nocase finds the spelling
 * to suggest. */
static int find_name(const char *const *names, const char *v) {
    for (int i = 0; names[i]; i++)
        if (!strcmp(names[i], v)) return i;
    return -1;
}

static int find_name_nocase(const char *const *names, const char *v) {
    for (int i = 0; names[i]; i++)
        if (!strcasecmp(names[i], v)) return i;
    return -1;
}

static int bad_value(gt_error *err, const gt_key *k, const char *v, const char *what) {
    return gt_error_set(err, GT_ERR_INVALID, "%s: '%.*s' %s", k->name, VALUE_SHOW_MAX, v, what);
}

/* "010": YAML 1.1 (PyYAML, so Bridge's files) reads it as octal 8, YAML 1.2 and Python's int()
 * as 10; graphtrain does not guess. */
static bool leading_zero(const char *v) {
    if (*v == '+' || *v == '-') v++;
    return v[0] == '0' && isdigit((unsigned char)v[1]);
}

static int set_number(gt_config *cfg, const gt_key *k, const char *v, gt_error *err) {
    char *end = NULL;
    if (k->type != GT_KEY_DOUBLE && leading_zero(v))
        return bad_value(err, k, v,
                         "has a leading zero, which YAML 1.1 reads as octal and YAML 1.2 as "
                         "decimal; write the number without it");
    errno = 0;
    char range[96];
    snprintf(range, sizeof range, "between %.17g and %.17g", k->min, k->max);
    if (k->type == GT_KEY_DOUBLE) {
        double d = strtod(v, &end);
        if (end == v || *end)
            return bad_value(err, k, v, "is not a number; write e.g. 0.5 or 1e-5");
        if (!isfinite(d) || d < k->min || d > k->max) {
            char msg[160];
            snprintf(msg, sizeof msg, "is out of range; use a value %s", range);
            return bad_value(err, k, v, msg);
        }
        *(double *)field(cfg, k) = d;
        return GT_OK;
    }
    if (k->type == GT_KEY_U64) {
        if (*v == '-') return bad_value(err, k, v, "is negative; use a whole number >= 0");
        unsigned long long u = strtoull(v, &end, 10);
        if (end == v || *end) return bad_value(err, k, v, "is not a whole number; write e.g. 1234");
        if (errno == ERANGE) return bad_value(err, k, v, "does not fit in 64 bits");
        *(uint64_t *)field(cfg, k) = (uint64_t)u;
        return GT_OK;
    }
    long long x = strtoll(v, &end, 10);
    if (end == v || *end) {
        /* 1e3 or 8.0 are common in YAML written by hand: accept exact whole numbers */
        double d = strtod(v, &end);
        if (end == v || *end || !isfinite(d) || d != floor(d) || fabs(d) > 9e15)
            return bad_value(err, k, v, "is not a whole number; write e.g. 8");
        x = (long long)d;
    }
    if (errno == ERANGE || (double)x < k->min || (double)x > k->max) {
        char msg[160];
        snprintf(msg, sizeof msg, "is out of range; use a whole number %s", range);
        return bad_value(err, k, v, msg);
    }
    *(int *)field(cfg, k) = (int)x;
    return GT_OK;
}

static int parse_bool(const char *v, bool *out) {
    static const char *const yes[] = {"true", "yes", "on", "1", NULL};
    static const char *const no[] = {"false", "no", "off", "0", NULL};
    /* YAML 1.1 spells booleans in any case (true, True, TRUE) */
    if (find_name_nocase(yes, v) >= 0) return *out = true, 0;
    if (find_name_nocase(no, v) >= 0) return *out = false, 0;
    return -1;
}

/* A set: "a,b,c", "[a, b]", "a b", a single name, or empty. Quotes around items are
 * dropped (a YAML flow list written inside an override). */
static int set_bits(gt_config *cfg, const gt_key *k, const char *v, gt_error *err) {
    uint32_t bits = 0;
    char buf[512];
    if (strlen(v) >= sizeof buf)
        return gt_error_set(err, GT_ERR_INVALID, "%s: list is too long (%zu characters)", k->name,
                            strlen(v));
    trim_copy(v, strlen(v), buf, sizeof buf);
    char *s = buf;
    size_t len = strlen(s);
    if (len >= 2 && s[0] == '[' && s[len - 1] == ']') s[len - 1] = '\0', s++;
    if (!is_null_word(s)) {
        char *save = NULL;
        for (char *tok = strtok_r(s, ", \t\n\r", &save); tok;
             tok = strtok_r(NULL, ", \t\n\r", &save)) {
            size_t tl = strlen(tok);
            if (tl >= 2 && (tok[0] == '\'' || tok[0] == '"') && tok[tl - 1] == tok[0])
                tok[tl - 1] = '\0', tok++;
            if (!*tok) continue;
            int i = find_name(k->names, tok);
            int near = i < 0 ? find_name_nocase(k->names, tok) : -1;
            if (near >= 0)
                return gt_error_set(err, GT_ERR_INVALID,
                                    "%s: '%.*s' is not a name; names are exact, as in Megatron: "
                                    "write '%s'",
                                    k->name, VALUE_SHOW_MAX, tok, k->names[near]);
            if (i >= 0 && (bits & (1u << i)))
                return gt_error_set(err, GT_ERR_INVALID, "%s: '%s' is given twice; name each once",
                                    k->name, tok);
            if (i < 0) {
                char allowed[256];
                gt_config_list_names(k->names, allowed, sizeof allowed);
                return gt_error_set(err, GT_ERR_INVALID,
                                    "%s: '%.*s' is not one of %s; write a list such as "
                                    "%s,%s or a YAML list",
                                    k->name, VALUE_SHOW_MAX, tok, allowed, k->names[0],
                                    k->names[1] ? k->names[1] : k->names[0]);
            }
            bits |= 1u << i;
        }
    }
    *(uint32_t *)field(cfg, k) = bits;
    return GT_OK;
}

static int set_one(gt_config *cfg, const gt_key *k, const char *v, gt_error *err) {
    switch (k->type) {
    case GT_KEY_INT:
    case GT_KEY_U64:
    case GT_KEY_DOUBLE:
        /* Bridge writes None for "unset" (capacity factor, recompute_num_layers, ...) */
        if (k->null_value && is_null_word(v)) return set_number(cfg, k, k->null_value, err);
        if (is_null_word(v)) return bad_value(err, k, v, "is empty; this key needs a number");
        return set_number(cfg, k, v, err);
    case GT_KEY_BOOL: {
        bool b;
        if (parse_bool(v, &b)) return bad_value(err, k, v, "is not a boolean; write true or false");
        *(bool *)field(cfg, k) = b;
        return GT_OK;
    }
    case GT_KEY_TRI: {
        bool b;
        if (is_null_word(v) || !strcasecmp(v, "unset")) {
            *(int *)field(cfg, k) = -1;
            return GT_OK;
        }
        if (parse_bool(v, &b)) return bad_value(err, k, v, "is not 0, 1 or unset");
        *(int *)field(cfg, k) = b;
        return GT_OK;
    }
    case GT_KEY_ENUM: {
        int i = find_name(k->names, v);
        if (i < 0 && is_null_word(v)) i = find_name(k->names, "none");
        int near = i < 0 ? find_name_nocase(k->names, v) : -1;
        if (near >= 0) {
            char msg[160];
            snprintf(msg, sizeof msg, "is not a name; names are exact, as in Megatron: write '%s'",
                     k->names[near]);
            return bad_value(err, k, v, msg);
        }
        if (i < 0) {
            char allowed[256], msg[320];
            gt_config_list_names(k->names, allowed, sizeof allowed);
            snprintf(msg, sizeof msg, "is not one of %s", allowed);
            return bad_value(err, k, v, msg);
        }
        *(int *)field(cfg, k) = i;
        return GT_OK;
    }
    case GT_KEY_SET:
        return set_bits(cfg, k, v, err);
    case GT_KEY_STRING: {
        if (!strcmp(v, "~") || !strcasecmp(v, "null") || !strcmp(v, "None")) v = "";
        /* a string with a list of names (runtime.gpu) takes one of them, or nothing */
        if (k->names && *v && find_name(k->names, v) < 0) {
            char allowed[256], msg[320];
            gt_config_list_names(k->names, allowed, sizeof allowed);
            snprintf(msg, sizeof msg, "is not a known GPU; use one of %s (or leave it empty)",
                     allowed);
            return bad_value(err, k, v, msg);
        }
        size_t len = strlen(v);
        if (len >= k->size)
            return gt_error_set(err, GT_ERR_INVALID, "%s: value is %zu characters; at most %zu fit",
                                k->name, len, k->size - 1);
        memcpy(field(cfg, k), v, len + 1);
        return GT_OK;
    }
    }
    return gt_error_set(err, GT_ERR_INVALID, "%s: unknown key type", k->name);
}

int gt_config_set(gt_config *cfg, const char *key, const char *value, gt_error *err) {
    if (!cfg || !key || !value)
        return gt_error_set(err, GT_ERR_INVALID, "gt_config_set: missing key or value");
    const gt_key *k = gt_config_find_key(key);
    if (!k) {
        char why[GT_ERROR_MSG_MAX / 4];
        switch (gt_bridge_key_check(key, value, why, sizeof why)) {
        case GT_BRIDGE_KEY_UNDERSTOOD:
            return GT_OK;
        case GT_BRIDGE_KEY_REFUSED:
            return gt_error_set(err, GT_ERR_INVALID, "%s", why);
        default:
            break;
        }
        const char *s = gt_config_suggest_key(key);
        if (s)
            return gt_error_set(err, GT_ERR_INVALID, "unknown key '%.128s'; did you mean '%s'?",
                                key, s);
        return gt_error_set(err, GT_ERR_INVALID,
                            "unknown key '%.128s'; `graphtrain config-reference` lists every key",
                            key);
    }
    char v[1024];
    if (strlen(value) >= sizeof v)
        return gt_error_set(err, GT_ERR_INVALID, "%s: value is too long (%zu characters)", k->name,
                            strlen(value));
    trim_copy(value, strlen(value), v, sizeof v);
    int rc = set_one(cfg, k, v, err);
    /* Bridge: cuda_graph_impl == "none" -> cuda_graph_scope = [] */
    if (rc == GT_OK && k->offset == offsetof(gt_config, model.cuda_graph_impl) &&
        cfg->model.cuda_graph_impl == GT_GRAPH_IMPL_NONE)
        cfg->model.cuda_graph_scope = 0;
    /* a value given in the config replaces an unreadable one from the environment */
    if (rc == GT_OK && k->offset == offsetof(gt_config, env.nccl_graph_register))
        cfg->env.nccl_graph_register_bad = false;
    if (rc == GT_OK && k->offset == offsetof(gt_config, env.expandable_segments))
        cfg->env.expandable_segments_bad = false;
    return rc;
}

int gt_config_override(gt_config *cfg, const char *kv, gt_error *err) {
    if (!kv) return gt_error_set(err, GT_ERR_INVALID, "empty override");
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        return gt_error_set(err, GT_ERR_INVALID,
                            "override '%.128s' is not key=value; write e.g. model.num_layers=4",
                            kv);
    char key[256];
    if ((size_t)(eq - kv) >= sizeof key)
        return gt_error_set(err, GT_ERR_INVALID, "override key is too long (%zu characters)",
                            (size_t)(eq - kv));
    trim_copy(kv, (size_t)(eq - kv), key, sizeof key);
    /* "--model.num_layers=4" and "+model.x=1" (Hydra) mean the same thing */
    char *kp = key;
    while (*kp == '-' || *kp == '+')
        kp++;
    return gt_config_set(cfg, kp, eq + 1, err);
}

void gt_config_finalize(gt_config *cfg) {
    if (cfg->model.cuda_graph_impl == GT_GRAPH_IMPL_NONE) cfg->model.cuda_graph_scope = 0;
    gt_config_apply_cuda_env(cfg); /* GT_CUDA_* fill the runtime.cuda keys left at auto */
}

void gt_config_format_value(const gt_config *cfg, const gt_key *k, char *buf, size_t n) {
    const void *f = cfield(cfg, k);
    if (!n) return;
    buf[0] = '\0';
    switch (k->type) {
    case GT_KEY_INT:
        snprintf(buf, n, "%d", *(const int *)f);
        break;
    case GT_KEY_U64:
        snprintf(buf, n, "%llu", (unsigned long long)*(const uint64_t *)f);
        break;
    case GT_KEY_DOUBLE:
        snprintf(buf, n, "%.10g", *(const double *)f);
        break;
    case GT_KEY_BOOL:
        snprintf(buf, n, "%s", *(const bool *)f ? "true" : "false");
        break;
    case GT_KEY_TRI: {
        int t = *(const int *)f;
        snprintf(buf, n, "%s", t < 0 ? "unset" : t ? "1" : "0");
        break;
    }
    case GT_KEY_ENUM: {
        int i = *(const int *)f, count = 0;
        while (k->names[count])
            count++;
        snprintf(buf, n, "%s", i >= 0 && i < count ? k->names[i] : "?");
        break;
    }
    case GT_KEY_SET: {
        uint32_t bits = *(const uint32_t *)f;
        size_t used = 0;
        for (int i = 0; k->names[i]; i++) {
            if (!(bits & (1u << i))) continue;
            int w = snprintf(buf + used, n - used, "%s%s", used ? "," : "", k->names[i]);
            if (w < 0 || (size_t)w >= n - used) break;
            used += (size_t)w;
        }
        break;
    }
    case GT_KEY_STRING:
        snprintf(buf, n, "%s", (const char *)f);
        break;
    }
}
