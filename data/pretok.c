/* Regex pre-tokenization with PCRE2; see pretok.h. */
#include "data/pretok.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

struct gt_pretok {
    pcre2_code *re;
    pcre2_match_data *md;
    char *pattern;
    /* the next match at or after the last position asked for: [m_beg, m_end) of text */
    const unsigned char *m_text;
    size_t m_n, m_from, m_beg, m_end; /* m_from: where that search started */
    int m_valid, m_none;              /* m_none: no match at or after m_from */
};

int gt_pretok_create(gt_pretok **out, const char *pattern, gt_error *err) {
    *out = NULL;
    gt_pretok *p = calloc(1, sizeof *p);
    if (!p || !(p->pattern = strdup(pattern))) {
        free(p);
        return gt_error_set(err, GT_ERR_NOMEM, "out of host memory (pre-tokenizer)");
    }
    int code;
    PCRE2_SIZE at;
    /* UCP: \s, \d and \w follow Unicode properties, as in the Rust/Oniguruma regexes that
     * Hugging Face and tiktoken run; MATCH_INVALID_UTF: raw bytes never crash the matcher */
    p->re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &at, NULL);
    if (!p->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        gt_pretok_destroy(p);
        return gt_error_set(err, GT_ERR_INVALID,
                            "pre-tokenizer pattern does not compile at offset %zu: %s; the "
                            "pattern was \"%.200s\"",
                            (size_t)at, (const char *)msg, pattern);
    }
    (void)pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE); /* the interpreter when JIT is absent */
    p->md = pcre2_match_data_create_from_pattern(p->re, NULL);
    if (!p->md) {
        gt_pretok_destroy(p);
        return gt_error_set(err, GT_ERR_NOMEM, "out of host memory (pre-tokenizer)");
    }
    *out = p;
    return GT_OK;
}

void gt_pretok_destroy(gt_pretok *p) {
    if (!p) return;
    pcre2_match_data_free(p->md);
    pcre2_code_free(p->re);
    free(p->pattern);
    free(p);
}

const char *gt_pretok_pattern(const gt_pretok *p) {
    return p->pattern;
}

/* Finds the first non-empty match at or after `from`. */
static void find_match(gt_pretok *p, const unsigned char *t, size_t n, size_t from) {
    p->m_text = t;
    p->m_n = n;
    p->m_from = from;
    p->m_valid = 1;
    p->m_none = 1;
    for (size_t start = from; start < n;) {
        int rc = pcre2_match(p->re, (PCRE2_SPTR)t, n, start, 0, p->md, NULL);
        if (rc < 0) return; /* no match (or a matcher limit): the rest is one gap */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(p->md);
        if (ov[1] > ov[0]) {
            p->m_beg = ov[0];
            p->m_end = ov[1];
            p->m_none = 0;
            return;
        }
        start = ov[0] + 1; /* an empty match: look past it */
    }
}

size_t gt_pretok_next(gt_pretok *p, const unsigned char *t, size_t n, size_t i, size_t max_len) {
    int fresh = i > 0 && p->m_valid && p->m_text == t && p->m_n == n && p->m_from <= i &&
                (p->m_none || i < p->m_end);
    if (!fresh) find_match(p, t, n, i);
    size_t end;
    if (p->m_none)
        end = n; /* no match left: the gap runs to the end */
    else if (i < p->m_beg)
        end = p->m_beg; /* a gap before the next match */
    else
        end = p->m_end; /* inside the match (a previous call may have cut it) */
    size_t len = end - i;
    if (len == 0) len = 1;
    return len > max_len ? max_len : len;
}
