/* GPT-2's tokenizer from the user's encoder.json (token string -> id) and vocab.bpe (ranked
 * merges). Both files spell bytes in GPT-2's byte-to-unicode alphabet: printable Latin-1
 * bytes stand for themselves, the other 68 bytes map to U+0100 onwards. We undo that mapping,
 * so tokens become plain byte strings and encoding shares tokenizer.c's merge loop. */
#include "data/tokenizer_internal.h"

#include "core/read_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GT_GPT2_MAX_FILE (256u << 20)

/* unicode code point -> byte (or -1), for code points < 512 */
void gt_tok_byte_decoder(int dec[512]) {
    for (int i = 0; i < 512; i++)
        dec[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        if (printable)
            dec[b] = b;
        else
            dec[256 + n++] = b;
    }
}

/* Decodes UTF-8 text in the byte-to-unicode alphabet into bytes; returns the byte count or
 * -1 when a character is outside the alphabet. */
long gt_tok_unmap(const unsigned char *s, size_t n, const int dec[512], unsigned char *out) {
    long o = 0;
    for (size_t i = 0; i < n;) {
        unsigned cp, c = s[i];
        size_t len;
        if (c < 0x80) {
            cp = c;
            len = 1;
        } else if ((c >> 5) == 6 && i + 1 < n) {
            cp = (c & 31u) << 6 | (s[i + 1] & 63u);
            len = 2;
        } else
            return -1;
        if (cp >= 512 || dec[cp] < 0) return -1;
        out[o++] = (unsigned char)dec[cp];
        i += len;
    }
    return o;
}

static void put_utf8(unsigned cp, unsigned char *out, size_t *o) {
    if (cp < 0x80)
        out[(*o)++] = (unsigned char)cp;
    else if (cp < 0x800) {
        out[(*o)++] = (unsigned char)(0xC0 | cp >> 6);
        out[(*o)++] = (unsigned char)(0x80 | (cp & 63));
    } else if (cp < 0x10000) {
        out[(*o)++] = (unsigned char)(0xE0 | cp >> 12);
        out[(*o)++] = (unsigned char)(0x80 | ((cp >> 6) & 63));
        out[(*o)++] = (unsigned char)(0x80 | (cp & 63));
    } else {
        out[(*o)++] = (unsigned char)(0xF0 | cp >> 18);
        out[(*o)++] = (unsigned char)(0x80 | ((cp >> 12) & 63));
        out[(*o)++] = (unsigned char)(0x80 | ((cp >> 6) & 63));
        out[(*o)++] = (unsigned char)(0x80 | (cp & 63));
    }
}

/* Parses a JSON string at *p (after the opening quote) into UTF-8 out; advances *p past the
 * closing quote. Returns the length or -1. */
static long json_string(const char **p, const char *end, unsigned char *out) {
    const char *s = *p;
    size_t o = 0;
    while (s < end && *s != '"') {
        if (*s != '\\') {
            out[o++] = (unsigned char)*s++;
            continue;
        }
        if (++s >= end) return -1;
        char e = *s++;
        switch (e) {
        case '"':
        case '\\':
        case '/':
            out[o++] = (unsigned char)e;
            break;
        case 'b':
            out[o++] = '\b';
            break;
        case 'f':
            out[o++] = '\f';
            break;
        case 'n':
            out[o++] = '\n';
            break;
        case 'r':
            out[o++] = '\r';
            break;
        case 't':
            out[o++] = '\t';
            break;
        case 'u': {
            unsigned cp = 0;
            for (int k = 0; k < 4; k++, s++) {
                if (s >= end) return -1;
                char h = *s;
                int v = h >= '0' && h <= '9'   ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                               : -1;
                if (v < 0) return -1;
                cp = cp << 4 | (unsigned)v;
            }
            if (cp >= 0xD800 && cp < 0xDC00 && s + 6 <= end && s[0] == '\\' && s[1] == 'u') {
                unsigned lo = (unsigned)strtoul((char[5]){s[2], s[3], s[4], s[5], 0}, NULL, 16);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    s += 6;
                }
            }
            put_utf8(cp, out, &o);
            break;
        }
        default:
            return -1;
        }
    }
    if (s >= end) return -1;
    *p = s + 1;
    return (long)o;
}

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

static int line_of(const char *buf, const char *p) {
    int line = 1;
    for (const char *q = buf; q < p; q++)
        line += *q == '\n';
    return line;
}

/* encoder.json -> tokens in id order */
static int load_encoder(gt_tokenizer *tk, const char *path, const int dec[512], gt_error *err) {
    char *buf = NULL;
    size_t n = 0;
    int rc = gt_read_file(path, GT_GPT2_MAX_FILE, &buf, &n, err);
    if (rc) return rc;
    const char *p = buf, *end = buf + n;
    unsigned char *str = malloc(n * 4 + 4), *bytes = malloc(n + 1);
    long *id_off = NULL, *id_len = NULL;
    unsigned char *pool = malloc(n + 1);
    size_t pool_n = 0;
    long max_id = -1, count = 0, cap = 0;
    if (!str || !bytes || !pool) {
        rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory reading %s", path);
        goto done;
    }
    p = skip_ws(p, end);
    if (p >= end || *p++ != '{') {
        rc = gt_error_set(err, GT_ERR_INVALID, "%s:%d: expected a JSON object ('{')", path,
                          line_of(buf, p));
        goto done;
    }
    for (;;) {
        p = skip_ws(p, end);
        if (p < end && *p == '}') break;
        if (p >= end || *p++ != '"') {
            rc = gt_error_set(err, GT_ERR_INVALID, "%s:%d: expected a token string", path,
                              line_of(buf, p));
            goto done;
        }
        long sl = json_string(&p, end, str);
        if (sl < 0) {
            rc = gt_error_set(err, GT_ERR_INVALID, "%s:%d: bad JSON string", path, line_of(buf, p));
            goto done;
        }
        p = skip_ws(p, end);
        if (p >= end || *p++ != ':') {
            rc = gt_error_set(err, GT_ERR_INVALID, "%s:%d: expected ':'", path, line_of(buf, p));
            goto done;
        }
        p = skip_ws(p, end);
        char *num_end;
        errno = 0;
        long id = strtol(p, &num_end, 10);
        if (num_end == p || errno || id < 0 || id >= GT_BPE_MAX_VOCAB) {
            rc = gt_error_set(err, GT_ERR_INVALID, "%s:%d: expected a token id (0..%d)", path,
                              line_of(buf, p), GT_BPE_MAX_VOCAB - 1);
            goto done;
        }
        p = num_end;
        long bl = gt_tok_unmap(str, (size_t)sl, dec, bytes);
        if (bl < 0) { /* special tokens such as <|endoftext|> are plain ASCII; others fail */
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "%s:%d: token %ld ('%.*s') uses a character outside GPT-2's "
                              "byte-to-unicode alphabet; is this a GPT-2 encoder.json?",
                              path, line_of(buf, p), id, (int)(sl > 40 ? 40 : sl), str);
            goto done;
        }
        if (id >= cap) {
            long nc = cap ? cap : 1024;
            while (nc <= id)
                nc *= 2;
            long *a = realloc(id_off, (size_t)nc * sizeof *a);
            if (a) id_off = a;
            long *b = realloc(id_len, (size_t)nc * sizeof *b);
            if (b) id_len = b;
            if (!a || !b) {
                rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
                goto done;
            }
            for (long k = cap; k < nc; k++)
                id_len[k] = -1;
            cap = nc;
        }
        if (id_len[id] >= 0) {
            rc = gt_error_set(err, GT_ERR_INVALID, "%s:%d: token id %ld appears twice", path,
                              line_of(buf, p), id);
            goto done;
        }
        memcpy(pool + pool_n, bytes, (size_t)bl);
        id_off[id] = (long)pool_n;
        id_len[id] = bl;
        pool_n += (size_t)bl;
        if (id > max_id) max_id = id;
        count++;
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p++;
            continue;
        }
        if (p < end && *p == '}') break;
        rc = gt_error_set(err, GT_ERR_INVALID, "%s:%d: expected ',' or '}'", path, line_of(buf, p));
        goto done;
    }
    if (count != max_id + 1) {
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "%s: ids are not 0..%ld without gaps (%ld tokens); is the file "
                          "complete?",
                          path, max_id, count);
        goto done;
    }
    for (long id = 0; !rc && id <= max_id; id++)
        rc = gt_tok_add_token(tk, pool + id_off[id], (size_t)id_len[id], err);
done:
    free(buf);
    free(str);
    free(bytes);
    free(pool);
    free(id_off);
    free(id_len);
    return rc;
}

/* byte string -> id lookup used while reading the merges */
typedef struct bytes_map {
    int32_t *slot; /* id + 1 */
    size_t cap;
} bytes_map;

static uint64_t fnv(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static int bytes_map_build(bytes_map *m, const gt_tokenizer *tk) {
    m->cap = 1024;
    while (m->cap < (size_t)tk->n_vocab * 2)
        m->cap *= 2;
    m->slot = calloc(m->cap, sizeof *m->slot);
    if (!m->slot) return -1;
    for (int id = 0; id < tk->n_vocab; id++) {
        size_t len;
        const unsigned char *b = gt_tokenizer_token(tk, (uint32_t)id, &len);
        size_t j = fnv(b, len) & (m->cap - 1);
        while (m->slot[j])
            j = (j + 1) & (m->cap - 1);
        m->slot[j] = id + 1;
    }
    return 0;
}

static int bytes_map_find(const bytes_map *m, const gt_tokenizer *tk, const unsigned char *b,
                          size_t len) {
    size_t j = fnv(b, len) & (m->cap - 1);
    while (m->slot[j]) {
        size_t l;
        const unsigned char *t = gt_tokenizer_token(tk, (uint32_t)(m->slot[j] - 1), &l);
        if (l == len && !memcmp(t, b, len)) return m->slot[j] - 1;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

static int load_merges(gt_tokenizer *tk, const char *path, const int dec[512], gt_error *err) {
    char *buf = NULL;
    size_t n = 0;
    int rc = gt_read_file(path, GT_GPT2_MAX_FILE, &buf, &n, err);
    if (rc) return rc;
    bytes_map map = {0};
    unsigned char *joined = malloc(n + 1);
    if (!joined || bytes_map_build(&map, tk)) {
        free(buf);
        free(joined);
        free(map.slot);
        return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    }
    int line = 0;
    for (char *p = buf; !rc && p < buf + n;) {
        char *nl = memchr(p, '\n', (size_t)(buf + n - p));
        char *eol = nl ? nl : buf + n;
        line++;
        size_t len = (size_t)(eol - p);
        if (len && p[len - 1] == '\r') len--;
        if (len == 0 || (line == 1 && !strncmp(p, "#version", 8))) {
            p = eol + 1;
            continue;
        }
        char *sp = memchr(p, ' ', len);
        if (!sp || sp == p || sp == p + len - 1 ||
            memchr(sp + 1, ' ', len - (size_t)(sp + 1 - p))) {
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "%s:%d: expected two tokens separated by one "
                              "space, got '%.*s'",
                              path, line, (int)(len > 60 ? 60 : len), p);
            break;
        }
        long la = gt_tok_unmap((unsigned char *)p, (size_t)(sp - p), dec, joined);
        long lb = la < 0 ? -1
                         : gt_tok_unmap((unsigned char *)sp + 1, len - (size_t)(sp + 1 - p), dec,
                                        joined + la);
        if (la < 0 || lb < 0) {
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "%s:%d: character outside GPT-2's "
                              "byte-to-unicode alphabet",
                              path, line);
            break;
        }
        int a = bytes_map_find(&map, tk, joined, (size_t)la);
        int b = bytes_map_find(&map, tk, joined + la, (size_t)lb);
        int z = bytes_map_find(&map, tk, joined, (size_t)(la + lb));
        if (a < 0 || b < 0 || z < 0) {
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "%s:%d: merge '%.*s' needs tokens that encoder.json does not have "
                              "(%s); the two files must come from the same tokenizer",
                              path, line, (int)(len > 60 ? 60 : len), p,
                              a < 0   ? "left part"
                              : b < 0 ? "right part"
                                      : "merged result");
            break;
        }
        rc = gt_tok_add_merge(tk, (uint32_t)a, (uint32_t)b, (uint32_t)z, err);
        p = eol + 1;
    }
    free(buf);
    free(joined);
    free(map.slot);
    return rc;
}

int gt_tokenizer_load_gpt2(gt_tokenizer **out, const char *encoder_json, const char *vocab_bpe,
                           gt_error *err) {
    *out = NULL;
    int dec[512];
    gt_tok_byte_decoder(dec);
    gt_tokenizer *tk = NULL;
    int rc = gt_tok_alloc(&tk, GT_TOK_GPT2, err);
    if (!rc) rc = load_encoder(tk, encoder_json, dec, err);
    if (!rc) rc = gt_tok_index_bytes(tk, encoder_json, err);
    if (!rc) rc = load_merges(tk, vocab_bpe, dec, err);
    if (rc) {
        gt_tokenizer_destroy(tk);
        return rc;
    }
    *out = tk;
    return GT_OK;
}
