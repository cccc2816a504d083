/* Hugging Face tokenizer.json for byte-level BPE (GPT-2, Llama 3, Qwen), parsed with cJSON:
 * model.vocab / model.merges in GPT-2's byte-to-unicode alphabet, added_tokens, the
 * normalizer (none, or NFC as Qwen2/Qwen3 have it, alone or in a Sequence), and the
 * pre-tokenizer, which must be ByteLevel (GPT-2's regex) or a Sequence of one Split regex
 * (behavior Isolated) and a ByteLevel without its own regex. Anything that would make the
 * encoding differ from Hugging Face's (other normalizers, byte fallback, dropout, word
 * prefixes or suffixes, added-token stripping) is refused naming the setting. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/read_file.h"
#include "data/nfc.h"
#include "data/tokenizer_internal.h"

#define GT_HF_MAX_FILE (512u << 20)

static int refuse(gt_error *err, const char *path, const char *what) {
    return gt_error_set(err, GT_ERR_UNSUPPORTED,
                        "%s: %s; graphtrain reads byte-level BPE tokenizers (GPT-2, Llama 3, "
                        "Qwen) and would encode differently from Hugging Face",
                        path, what);
}

static int is_null_or_false(const cJSON *j) {
    return !j || cJSON_IsNull(j) || cJSON_IsFalse(j);
}

static int empty_string_or_null(const cJSON *j) {
    return !j || cJSON_IsNull(j) || (cJSON_IsString(j) && !j->valuestring[0]);
}

#define GT_HF_NORMALIZERS_SUPPORTED "supported: none, NFC, or a Sequence of NFC"

static int refuse_normalizer(gt_error *err, const char *path, const cJSON *normalizer) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(normalizer, "type");
    char what[160];
    snprintf(what, sizeof what,
             "normalizer %.60s is not supported (" GT_HF_NORMALIZERS_SUPPORTED ")",
             cJSON_IsString(type) ? type->valuestring : "without a type");
    return refuse(err, path, what);
}

/* *nfc = 1 for NFC or a Sequence whose members are all NFC or such Sequences (NFC twice is
 * NFC once), 0 for no normalizer (null, absent or an empty Sequence); any other normalizer is
 * refused by type. */
static int read_normalizer(const cJSON *norm, const char *path, int *nfc, gt_error *err) {
    *nfc = 0;
    if (!norm || cJSON_IsNull(norm)) return GT_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(norm, "type");
    if (!cJSON_IsString(type)) return refuse_normalizer(err, path, norm);
    if (!strcmp(type->valuestring, "NFC")) {
        *nfc = 1;
        return GT_OK;
    }
    if (strcmp(type->valuestring, "Sequence")) return refuse_normalizer(err, path, norm);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(norm, "normalizers");
    if (!cJSON_IsArray(list))
        return refuse(err, path, "the normalizer Sequence has no normalizers list");
    const cJSON *member;
    cJSON_ArrayForEach(member, list) {
        if (cJSON_IsNull(member)) return refuse_normalizer(err, path, member);
        int member_nfc = 0;
        int rc = read_normalizer(member, path, &member_nfc, err);
        if (rc) return rc;
        *nfc |= member_nfc;
    }
    return GT_OK;
}

/* The regex of the pre-tokenizer into *pattern (NULL: GPT-2's). */
static int read_pre_tokenizer(const cJSON *pt, const char *path, const char **pattern,
                              gt_error *err) {
    *pattern = NULL;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(pt, "type");
    if (!cJSON_IsString(type)) return refuse(err, path, "pre_tokenizer has no type");
    const cJSON *byte_level = pt;
    if (!strcmp(type->valuestring, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
        const cJSON *split = cJSON_GetArrayItem(list, 0);
        byte_level = cJSON_GetArrayItem(list, 1);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(split, "type");
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(split, "pattern"), "Regex");
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(split, "behavior");
        if (cJSON_GetArraySize(list) != 2 || !cJSON_IsString(st) ||
            strcmp(st->valuestring, "Split"))
            return refuse(err, path, "pre_tokenizer Sequence is not [Split, ByteLevel]");
        if (!cJSON_IsString(re))
            return refuse(err, path, "the Split pre-tokenizer's pattern is not a Regex");
        if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") ||
            !is_null_or_false(cJSON_GetObjectItemCaseSensitive(split, "invert")))
            return refuse(err, path,
                          "the Split pre-tokenizer is not behavior Isolated, invert "
                          "false");
        *pattern = re->valuestring;
    }
    const cJSON *bt = cJSON_GetObjectItemCaseSensitive(byte_level, "type");
    if (!cJSON_IsString(bt) || strcmp(bt->valuestring, "ByteLevel"))
        return refuse(err, path, "the pre_tokenizer is not ByteLevel (byte-level BPE)");
    if (!is_null_or_false(cJSON_GetObjectItemCaseSensitive(byte_level, "add_prefix_space")))
        return refuse(err, path, "ByteLevel add_prefix_space=true is not supported");
    const cJSON *use_regex = cJSON_GetObjectItemCaseSensitive(byte_level, "use_regex");
    int regex = !use_regex || cJSON_IsTrue(use_regex);
    if (*pattern && regex)
        return refuse(err, path,
                      "a Split regex followed by ByteLevel use_regex=true (two "
                      "regex splits) is not supported");
    if (!*pattern && !regex)
        return refuse(err, path, "ByteLevel use_regex=false without a Split: no pattern");
    return GT_OK;
}

static int check_model(const cJSON *model, const char *path, gt_error *err) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE")))
        return refuse(err, path, "model.type is not BPE");
    if (!is_null_or_false(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")))
        return refuse(err, path, "model.byte_fallback=true (SentencePiece-style) is not supported");
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (dropout && !cJSON_IsNull(dropout) &&
        !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        return refuse(err, path, "model.dropout (BPE dropout) is not supported");
    if (!empty_string_or_null(
            cJSON_GetObjectItemCaseSensitive(model, "continuing_subword_prefix")) ||
        !empty_string_or_null(cJSON_GetObjectItemCaseSensitive(model, "end_of_word_suffix")))
        return refuse(err, path,
                      "model.continuing_subword_prefix / end_of_word_suffix are not "
                      "supported");
    return GT_OK;
}

typedef struct hf_tok {
    unsigned char *bytes; /* malloc'ed */
    size_t len;
    int set;
    int normalized; /* an added token matched in the normalized text */
} hf_tok;

/* Hugging Face matches a normalized=true added token in the normalized text by its normalized
 * content; graphtrain matches its content as written, which is the same when the content is
 * already in NFC (as every such token of Qwen's is), so any other is refused by name. */
static int check_added_normalization(const cJSON *content, int id, const char *path, int nfc,
                                     gt_error *err) {
    if (!nfc) return GT_OK;
    const unsigned char *c = (const unsigned char *)content->valuestring;
    size_t n = strlen(content->valuestring);
    unsigned char *norm = NULL;
    size_t norm_n = 0, cap = 0;
    int rc = gt_nfc_append(c, n, &norm, &norm_n, &cap, err);
    if (!rc && (norm_n != n || memcmp(norm, c, n))) {
        char what[200];
        snprintf(what, sizeof what,
                 "added token %d (%.40s) has normalized=true but its content is not in NFC; "
                 "write it in NFC or set normalized=false",
                 id, content->valuestring);
        rc = refuse(err, path, what);
    }
    free(norm);
    return rc;
}

/* vocab and added tokens into slots by id; ids must run 0..max without gaps */
static int collect_tokens(const cJSON *vocab, const cJSON *added, const char *path, int nfc,
                          hf_tok **out, int *n_out, gt_error *err) {
    int dec[512], max_id = -1;
    gt_tok_byte_decoder(dec);
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= GT_BPE_MAX_VOCAB)
            return gt_error_set(err, GT_ERR_INVALID,
                                "%s: model.vocab entry '%.40s' has no valid id", path, e->string);
        if (e->valueint > max_id) max_id = e->valueint;
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= GT_BPE_MAX_VOCAB)
            return gt_error_set(err, GT_ERR_INVALID, "%s: an added token has no valid id", path);
        if (id->valueint > max_id) max_id = id->valueint;
    }
    if (max_id < 0) return gt_error_set(err, GT_ERR_INVALID, "%s: model.vocab is empty", path);
    hf_tok *t = calloc((size_t)max_id + 1, sizeof *t);
    if (!t) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    *out = t;
    *n_out = max_id + 1;
    cJSON_ArrayForEach(e, vocab) {
        size_t n = strlen(e->string);
        hf_tok *s = &t[e->valueint];
        if (s->set)
            return gt_error_set(err, GT_ERR_INVALID, "%s: token id %d appears twice in model.vocab",
                                path, e->valueint);
        s->bytes = malloc(n + 1);
        if (!s->bytes) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
        long bl = gt_tok_unmap((const unsigned char *)e->string, n, dec, s->bytes);
        if (bl < 0) { /* maybe an added token spelled as text; checked below */
            memcpy(s->bytes, e->string, n);
            bl = -(long)n - 1;
        }
        s->len = bl < 0 ? (size_t)(-bl - 1) : (size_t)bl;
        s->set = bl < 0 ? 2 : 1; /* 2: not in the byte alphabet */
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        int id = cJSON_GetObjectItemCaseSensitive(e, "id")->valueint;
        if (!cJSON_IsString(content) || !content->valuestring[0])
            return gt_error_set(err, GT_ERR_INVALID, "%s: added token %d has no content", path, id);
        static const char *const flags[] = {"single_word", "lstrip", "rstrip"};
        for (int f = 0; f < 3; f++)
            if (!is_null_or_false(cJSON_GetObjectItemCaseSensitive(e, flags[f]))) {
                char what[160];
                snprintf(what, sizeof what, "added token %d (%.40s) sets %s=true", id,
                         content->valuestring, flags[f]);
                return refuse(err, path, what);
            }
        const cJSON *normalized = cJSON_GetObjectItemCaseSensitive(e, "normalized");
        if (!cJSON_IsBool(normalized))
            return gt_error_set(err, GT_ERR_INVALID,
                                "%s: added token %d (%.40s) has no \"normalized\": true/false "
                                "(Hugging Face's tokenizers refuses such a file too)",
                                path, id, content->valuestring);
        int rc = cJSON_IsTrue(normalized) ? check_added_normalization(content, id, path, nfc, err)
                                          : GT_OK;
        if (rc) return rc;
        size_t n = strlen(content->valuestring);
        hf_tok *s = &t[id];
        if (s->set && (s->len != n || memcmp(s->bytes, content->valuestring, n)))
            return gt_error_set(err, GT_ERR_INVALID,
                                "%s: added token %d (%.40s) differs from model.vocab's token of "
                                "that id",
                                path, id, content->valuestring);
        free(s->bytes);
        s->bytes = malloc(n + 1);
        if (!s->bytes) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
        memcpy(s->bytes, content->valuestring, n);
        s->len = n;
        s->set = 3; /* added */
        s->normalized = cJSON_IsTrue(normalized);
    }
    for (int id = 0; id <= max_id; id++) {
        if (!t[id].set)
            return gt_error_set(err, GT_ERR_INVALID,
                                "%s: no token has id %d (ids must run 0..%d without gaps)", path,
                                id, max_id);
        if (t[id].set == 2)
            return gt_error_set(err, GT_ERR_INVALID,
                                "%s: model.vocab token %d ('%.40s') uses characters outside "
                                "the byte-level alphabet and is no added token; is this a "
                                "byte-level BPE tokenizer?",
                                path, id, (const char *)t[id].bytes);
    }
    return GT_OK;
}

/* "a b" (older files) or ["a", "b"] (tokenizers >= 0.20) into token ids */
static int read_merges(gt_tokenizer *tk, const cJSON *merges, const char *path, gt_error *err) {
    int dec[512];
    gt_tok_byte_decoder(dec);
    const cJSON *m;
    int line = 0;
    size_t cap = 0;
    unsigned char *buf = NULL;
    int rc = GT_OK;
    cJSON_ArrayForEach(m, merges) {
        const char *a = NULL, *b = NULL;
        char *pair = NULL;
        if (cJSON_IsString(m)) {
            pair = strdup(m->valuestring);
            char *sp = pair ? strchr(pair, ' ') : NULL;
            if (sp) {
                *sp = '\0';
                a = pair;
                b = sp + 1;
            }
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
            a = cJSON_GetArrayItem(m, 0)->valuestring;
            b = cJSON_GetArrayItem(m, 1)->valuestring;
        }
        size_t la = a ? strlen(a) : 0, lb = b ? strlen(b) : 0;
        if (la + lb + 1 > cap) {
            cap = (la + lb + 1) * 2;
            unsigned char *nb = realloc(buf, cap);
            if (!nb) {
                free(pair);
                rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
                break;
            }
            buf = nb;
        }
        long ba = a ? gt_tok_unmap((const unsigned char *)a, la, dec, buf) : -1;
        long bb = ba >= 0 ? gt_tok_unmap((const unsigned char *)b, lb, dec, buf + ba) : -1;
        int l = ba >= 0 && bb >= 0 ? gt_tok_find(tk, buf, (size_t)ba) : -1;
        int r = l >= 0 ? gt_tok_find(tk, buf + ba, (size_t)bb) : -1;
        int z = r >= 0 ? gt_tok_find(tk, buf, (size_t)(ba + bb)) : -1;
        free(pair);
        if (z < 0) {
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "%s: merge %d is not two byte-level tokens whose join is in "
                              "model.vocab",
                              path, line);
            break;
        }
        rc = gt_tok_add_merge(tk, (uint32_t)l, (uint32_t)r, (uint32_t)z, err);
        if (rc) break;
        line++;
    }
    free(buf);
    return rc;
}

/* Added tokens longest first (stable), so the longest one starting at a position wins, as
 * Hugging Face's leftmost-longest matcher picks. */
static void sort_added(gt_tokenizer *tk) {
    for (int i = 1; i < tk->n_added; i++) {
        uint32_t id = tk->added[i];
        unsigned char normalized = tk->added_normalized[i];
        size_t len;
        (void)gt_tokenizer_token(tk, id, &len);
        int j = i - 1;
        for (; j >= 0; j--) {
            size_t lj;
            (void)gt_tokenizer_token(tk, tk->added[j], &lj);
            if (lj >= len) break;
            tk->added[j + 1] = tk->added[j];
            tk->added_normalized[j + 1] = tk->added_normalized[j];
        }
        tk->added[j + 1] = id;
        tk->added_normalized[j + 1] = normalized;
    }
}

static int build(gt_tokenizer *tk, const cJSON *root, const char *path, gt_error *err) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges))
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s: no model.vocab object and model.merges list; is it a "
                            "Hugging Face tokenizer.json?",
                            path);
    int rc = read_normalizer(norm, path, &tk->nfc, err);
    if (!rc) rc = check_model(model, path, err);
    const char *pattern = NULL;
    if (!rc)
        rc = read_pre_tokenizer(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), path,
                                &pattern, err);
    if (!rc && pattern) rc = gt_tok_set_pattern(tk, pattern, err);
    hf_tok *t = NULL;
    int n = 0;
    if (!rc) rc = collect_tokens(vocab, added, path, tk->nfc, &t, &n, err);
    for (int id = 0; !rc && id < n; id++)
        rc = gt_tok_add_token(tk, t[id].bytes, t[id].len, err);
    if (!rc) rc = gt_tok_index_bytes(tk, path, err);
    if (!rc) rc = gt_tok_index_tokens(tk, err);
    if (!rc) rc = read_merges(tk, merges, path, err);
    if (!rc && cJSON_GetArraySize(added) > 0) {
        size_t n_added = (size_t)cJSON_GetArraySize(added);
        tk->added = malloc(n_added * sizeof *tk->added);
        tk->added_normalized = malloc(n_added);
        if (!tk->added || !tk->added_normalized)
            rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
        const cJSON *e;
        cJSON_ArrayForEach(e, added) {
            if (rc) break;
            uint32_t id = (uint32_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valueint;
            tk->added_normalized[tk->n_added] = (unsigned char)t[id].normalized;
            tk->added[tk->n_added++] = id;
            tk->added_first[t[id].bytes[0]] |=
                t[id].normalized ? GT_ADDED_NORMALIZED : GT_ADDED_RAW;
        }
        if (!rc) sort_added(tk);
    }
    const cJSON *ignore = cJSON_GetObjectItemCaseSensitive(model, "ignore_merges");
    tk->ignore_merges = cJSON_IsTrue(ignore);
    for (int id = 0; id < n; id++)
        free(t[id].bytes);
    free(t);
    return rc;
}

int gt_tokenizer_load_hf(gt_tokenizer **out, const char *path, gt_error *err) {
    *out = NULL;
    char *text = NULL;
    size_t n = 0;
    int rc = gt_read_file(path, GT_HF_MAX_FILE, &text, &n, err);
    if (rc) return rc;
    const char *at = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, n, &at, 0);
    if (!root) {
        long off = at && at >= text && at <= text + n ? (long)(at - text) : -1;
        free(text);
        return gt_error_set(err, GT_ERR_INVALID, "%s: not valid JSON (near byte %ld)", path, off);
    }
    free(text);
    gt_tokenizer *tk = NULL;
    rc = gt_tok_alloc(&tk, GT_TOK_HF, err);
    if (!rc) rc = build(tk, root, path, err);
    cJSON_Delete(root);
    if (rc) {
        gt_tokenizer_destroy(tk);
        return rc;
    }
    *out = tk;
    return GT_OK;
}
