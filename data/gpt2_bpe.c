/* GPT-2's tokenizer from the user's encoder.json (token string -> id) and vocab.bpe (ranked
 * merges). Both files spell bytes in GPT-2's byte-to-unicode alphabet: printable Latin-1
 * bytes stand for themselves, the other 68 bytes map to U+0100 onwards. We undo that mapping,
 * so tokens become plain byte strings and encoding shares tokenizer.c's merge loop. */
#include "data/tokenizer_internal.h"

#include "core/read_file.h"

#include <cjson/cJSON.h>

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

static int line_of(const char *buf, const char *p) {
    int line = 1;
    for (const char *q = buf; q < p; q++)
        line += *q == '\n';
    return line;
}

/* encoder.json (a JSON object token -> id, parsed by cJSON) -> tokens in id order */
static int load_encoder(gt_tokenizer *tk, const char *path, const int dec[512], gt_error *err) {
    char *buf = NULL;
    size_t n = 0;
    int rc = gt_read_file(path, GT_GPT2_MAX_FILE, &buf, &n, err);
    if (rc) return rc;
    const char *at = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(buf, n, &at, 0);
    if (!root || !cJSON_IsObject(root)) {
        rc = gt_error_set(err, GT_ERR_INVALID, "%s:%d: %s", path,
                          at && at >= buf && at <= buf + n ? line_of(buf, at) : 1,
                          root ? "expected a JSON object ('{')" : "not valid JSON");
        cJSON_Delete(root);
        free(buf);
        return rc;
    }
    free(buf);
    int count = cJSON_GetArraySize(root), max_id = -1;
    unsigned char **tok = calloc((size_t)count + 1, sizeof *tok);
    long *len = calloc((size_t)count + 1, sizeof *len);
    if (!tok || !len) rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory reading %s", path);
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (rc) break;
        double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (v < 0 || v >= count || v != (double)(int)v) {
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "%s: token '%.40s' has id %s; ids must be whole numbers 0..%d "
                              "(one per token, no gaps); is the file complete?",
                              path, e->string, cJSON_IsNumber(e) ? "out of range" : "missing",
                              count - 1);
            break;
        }
        int id = (int)v;
        size_t sl = strlen(e->string);
        if (tok[id]) {
            rc = gt_error_set(err, GT_ERR_INVALID, "%s: token id %d appears twice", path, id);
            break;
        }
        tok[id] = malloc(sl + 1);
        if (!tok[id]) {
            rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
            break;
        }
        len[id] = gt_tok_unmap((const unsigned char *)e->string, sl, dec, tok[id]);
        if (len[id] < 0) { /* special tokens such as <|endoftext|> are plain ASCII; others fail */
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "%s: token %d ('%.40s') uses a character outside GPT-2's "
                              "byte-to-unicode alphabet; is this a GPT-2 encoder.json?",
                              path, id, e->string);
            break;
        }
        if (id > max_id) max_id = id;
    }
    for (int id = 0; !rc && id <= max_id; id++)
        rc = gt_tok_add_token(tk, tok[id], (size_t)len[id], err);
    for (int id = 0; tok && id < count; id++)
        free(tok[id]);
    free(tok);
    free(len);
    cJSON_Delete(root);
    return rc;
}

static int load_merges(gt_tokenizer *tk, const char *path, const int dec[512], gt_error *err) {
    char *buf = NULL;
    size_t n = 0;
    int rc = gt_read_file(path, GT_GPT2_MAX_FILE, &buf, &n, err);
    if (rc) return rc;
    unsigned char *joined = malloc(n + 1);
    if (!joined || gt_tok_index_tokens(tk, err)) {
        free(buf);
        free(joined);
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
        int a = gt_tok_find(tk, joined, (size_t)la);
        int b = gt_tok_find(tk, joined + la, (size_t)lb);
        int z = gt_tok_find(tk, joined, (size_t)(la + lb));
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
