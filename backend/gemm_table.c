/* GEMM algorithm tables: text in, text out (gemm_table.h). */
#include "backend/gemm_table.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/read_file.h"

#define LINE_MAX_CHARS 1024
#define FILE_MAX_BYTES ((size_t)16 << 20)

/* Problems of one file, gathered so every bad line is reported at once. */
typedef struct problems {
    char msg[GT_ERROR_MSG_MAX];
    size_t len;
    int count;
} problems;

static void problem(problems *p, const char *name, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void problem(problems *p, const char *name, int line, const char *fmt, ...) {
    p->count++;
    if (p->len + 8 >= sizeof p->msg) return;
    int n = line > 0 ? snprintf(p->msg + p->len, sizeof p->msg - p->len,
                                "%s%s:%d: ", p->len ? "; " : "", name, line)
                     : snprintf(p->msg + p->len, sizeof p->msg - p->len,
                                "%s%s: ", p->len ? "; " : "", name);
    if (n > 0) p->len = p->len + (size_t)n < sizeof p->msg ? p->len + (size_t)n : sizeof p->msg - 1;
    va_list ap;
    va_start(ap, fmt);
    n = vsnprintf(p->msg + p->len, sizeof p->msg - p->len, fmt, ap);
    va_end(ap);
    if (n > 0) p->len = p->len + (size_t)n < sizeof p->msg ? p->len + (size_t)n : sizeof p->msg - 1;
}

static int same_key(const gt_gemm_shape_key *a, const gt_gemm_shape_key *b) {
    return strcmp(a->kind, b->kind) == 0 && a->M == b->M && a->N == b->N && a->K == b->K &&
           a->count == b->count && a->sa == b->sa && a->sb == b->sb && a->sc == b->sc;
}

const gt_gemm_entry *gt_gemm_table_find(const gt_gemm_table *t, const gt_gemm_shape_key *k) {
    for (int i = 0; t && i < t->n; i++)
        if (same_key(&t->e[i].key, k)) return &t->e[i];
    return NULL;
}

int gt_gemm_table_put(gt_gemm_table *t, const gt_gemm_entry *e, gt_error *err) {
    for (int i = 0; i < t->n; i++)
        if (same_key(&t->e[i].key, &e->key)) {
            t->e[i] = *e;
            return GT_OK;
        }
    if (t->n == GT_GEMM_TABLE_MAX)
        return gt_error_set(err, GT_ERR_INVALID,
                            "a GEMM table holds at most %d entries; split the workloads into "
                            "tables of their own",
                            GT_GEMM_TABLE_MAX);
    gt_gemm_entry *ne = realloc(t->e, (size_t)(t->n + 1) * sizeof *ne);
    if (!ne) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory for a GEMM table");
    t->e = ne;
    t->e[t->n++] = *e;
    return GT_OK;
}

void gt_gemm_table_free(gt_gemm_table *t) {
    if (!t) return;
    free(t->e);
    memset(t, 0, sizeof *t);
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* Whole-token integer in [lo, hi]. */
static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!*s) return 0;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static int parse_algo(const char *s, uint64_t *words) {
    if (strlen(s) != 16 * GT_GEMM_ALGO_WORDS) return 0;
    for (int w = 0; w < GT_GEMM_ALGO_WORDS; w++) {
        uint64_t v = 0;
        for (int i = 0; i < 16; i++) {
            char c = s[w * 16 + i];
            int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
            if (d < 0) return 0;
            v = v << 4 | (uint64_t)d;
        }
        words[w] = v;
    }
    return 1;
}

/* "gemm KIND M=.. N=.. K=.. batch=.. sa=.. sb=.. sc=.. algo=HEX": fields after the kind in
 * any order, each exactly once. */
static void parse_gemm(char *rest, const char *name, int line, gt_gemm_entry *e, int *ok,
                       problems *p) {
    static const char *const fields[] = {"M", "N", "K", "batch", "sa", "sb", "sc", "algo"};
    enum { NF = 8 };
    int seen[NF] = {0};
    memset(e, 0, sizeof *e);
    *ok = 0;
    char *save = NULL;
    char *kind = strtok_r(rest, " \t", &save);
    if (!kind) {
        problem(p, name, line, "gemm line without a kind (matmul_fwd, matmul_bwd_data, ...)");
        return;
    }
    if (strlen(kind) >= GT_GEMM_KIND_MAX) {
        problem(p, name, line, "GEMM kind '%.40s...' is longer than %d characters", kind,
                GT_GEMM_KIND_MAX - 1);
        return;
    }
    snprintf(e->key.kind, sizeof e->key.kind, "%s", kind);
    /* where fields 0-3 and 4-6 go (7, algo, is parsed into e->algo directly) */
    int *const ints[] = {&e->key.M, &e->key.N, &e->key.K, &e->key.count};
    int64_t *const wides[] = {&e->key.sa, &e->key.sb, &e->key.sc};
    int bad = 0;
    for (char *tok = strtok_r(NULL, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        char *eq = strchr(tok, '=');
        int f = -1;
        if (eq) {
            *eq = '\0';
            for (int i = 0; i < NF; i++)
                if (strcmp(tok, fields[i]) == 0) f = i;
        }
        if (f < 0) {
            problem(p, name, line,
                    "unknown field '%s' (fields: M N K batch sa sb sc algo, each "
                    "written name=value)",
                    tok);
            bad = 1;
            continue;
        }
        if (seen[f]++) {
            problem(p, name, line, "field %s given twice", fields[f]);
            bad = 1;
            continue;
        }
        const char *v = eq + 1;
        int64_t x = 0;
        int good;
        if (f == 7)
            good = parse_algo(v, e->algo);
        else
            good = parse_i64(v, f < 4 ? 1 : 0, f < 4 ? INT32_MAX : INT64_MAX, &x);
        if (!good) {
            if (f == 7)
                problem(p, name, line,
                        "algo is not %d hexadecimal digits (cuBLASLt's eight 64-bit words); "
                        "write the table again with graphtrain tune-gemm",
                        16 * GT_GEMM_ALGO_WORDS);
            else
                problem(p, name, line, "%s='%s' is not a whole number in range (%s)", fields[f], v,
                        f < 4 ? "1 to 2147483647" : ">= 0");
            bad = 1;
            continue;
        }
        if (f < 4)
            *ints[f] = (int)x;
        else if (f < 7)
            *wides[f - 4] = x;
    }
    for (int i = 0; i < NF; i++)
        if (!seen[i]) {
            problem(p, name, line, "gemm line without %s=", fields[i]);
            bad = 1;
        }
    *ok = !bad;
}

int gt_gemm_table_parse(gt_gemm_table *t, const char *text, const char *name, gt_error *err) {
    memset(t, 0, sizeof *t);
    problems p = {{0}, 0, 0};
    int have_device = 0, have_lt = 0, line = 0;
    const char *s = text;
    while (*s) {
        line++;
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        char buf[LINE_MAX_CHARS];
        if (len >= sizeof buf) {
            problem(&p, name, line, "line longer than %d characters", LINE_MAX_CHARS - 1);
            s += len + (nl ? 1 : 0);
            continue;
        }
        memcpy(buf, s, len);
        buf[len] = '\0';
        s += len + (nl ? 1 : 0);
        char *hash = strchr(buf, '#');
        if (hash) *hash = '\0';
        char *l = trim(buf);
        if (!*l) continue;
        char *sp = l + strcspn(l, " \t");
        char *rest = *sp ? trim(sp + 1) : sp;
        *sp = '\0';
        if (strcmp(l, "device") == 0) {
            if (!*rest || strlen(rest) >= GT_GEMM_DEVICE_MAX)
                problem(&p, name, line, "device needs a name of 1 to %d characters",
                        GT_GEMM_DEVICE_MAX - 1);
            else if (have_device++)
                problem(&p, name, line, "a second device line (a table is for one device)");
            else
                snprintf(t->device, sizeof t->device, "%s", rest);
        } else if (strcmp(l, "cublaslt") == 0) {
            int64_t v = 0;
            if (!parse_i64(rest, 1, INT32_MAX, &v))
                problem(&p, name, line, "cublaslt '%s' is not a version number such as 130100",
                        rest);
            else if (have_lt++)
                problem(&p, name, line, "a second cublaslt line (a table is for one version)");
            else
                t->cublaslt = (long)v;
        } else if (strcmp(l, "gemm") == 0) {
            gt_gemm_entry e;
            int ok = 0;
            parse_gemm(rest, name, line, &e, &ok, &p);
            if (!ok) continue;
            if (gt_gemm_table_find(t, &e.key)) {
                problem(&p, name, line, "a second entry for %s M=%d N=%d K=%d batch=%d; keep one",
                        e.key.kind, e.key.M, e.key.N, e.key.K, e.key.count);
                continue;
            }
            gt_error e2 = {0};
            if (gt_gemm_table_put(t, &e, &e2) != GT_OK) {
                gt_gemm_table_free(t);
                *err = e2;
                return gt_error_wrap(err, "%s:%d: ", name, line);
            }
        } else {
            problem(&p, name, line,
                    "unknown item '%s' (a table has device, cublaslt and gemm "
                    "lines)",
                    l);
        }
    }
    if (!have_device) problem(&p, name, 0, "no device line (the GPU the table was tuned on)");
    if (!have_lt) problem(&p, name, 0, "no cublaslt line (the library version it was tuned with)");
    if (p.count) {
        gt_gemm_table_free(t);
        gt_error_set(err, GT_ERR_INVALID,
                     "%s; make the table again with graphtrain tune-gemm, or set "
                     "runtime.gemm_table= to use cuBLASLt's heuristic",
                     p.msg);
        err->count = p.count;
        return GT_ERR_INVALID;
    }
    return GT_OK;
}

int gt_gemm_table_load(gt_gemm_table *t, const char *path, gt_error *err) {
    memset(t, 0, sizeof *t);
    char *text = NULL;
    size_t size = 0;
    int rc = gt_read_file(path, FILE_MAX_BYTES, &text, &size, err);
    if (rc) {
        char why[GT_ERROR_MSG_MAX];
        snprintf(why, sizeof why, "%s", err->msg);
        return gt_error_set(err, rc,
                            "runtime.gemm_table: %s; give the path of a table written by "
                            "graphtrain tune-gemm, or set runtime.gemm_table= to use cuBLASLt's "
                            "heuristic",
                            why);
    }
    if (memchr(text, '\0', size)) {
        free(text);
        return gt_error_set(err, GT_ERR_INVALID,
                            "runtime.gemm_table: '%s' holds NUL bytes: it is not a GEMM table "
                            "(text written by graphtrain tune-gemm)",
                            path);
    }
    rc = gt_gemm_table_parse(t, text, path, err);
    free(text);
    if (rc) gt_error_wrap(err, "runtime.gemm_table: ");
    return rc;
}

int gt_gemm_table_write(const gt_gemm_table *t, const char *comment, FILE *f) {
    if (comment) {
        const char *s = comment;
        while (*s) {
            const char *nl = strchr(s, '\n');
            int len = nl ? (int)(nl - s) : (int)strlen(s);
            fprintf(f, "# %.*s\n", len, s);
            s += len + (nl ? 1 : 0);
        }
    }
    fprintf(f, "device %s\ncublaslt %ld\n", t->device, t->cublaslt);
    for (int i = 0; i < t->n; i++) {
        const gt_gemm_entry *e = &t->e[i];
        fprintf(
            f, "gemm %s M=%d N=%d K=%d batch=%d sa=%" PRId64 " sb=%" PRId64 " sc=%" PRId64 " algo=",
            e->key.kind, e->key.M, e->key.N, e->key.K, e->key.count, e->key.sa, e->key.sb,
            e->key.sc);
        for (int w = 0; w < GT_GEMM_ALGO_WORDS; w++)
            fprintf(f, "%016" PRIx64, e->algo[w]);
        fputc('\n', f);
    }
    fflush(f);
    return ferror(f) ? -1 : 0;
}
