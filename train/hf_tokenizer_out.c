/* The tokenizer files beside a Hugging Face export: tokenizer.json (byte-level BPE in GPT-2's
 * byte-to-unicode alphabet: the vocabulary, the ranked merges, the end-of-document token as a
 * special added token, graphtrain's chunking regex as the pre-tokenizer) and
 * tokenizer_config.json, which transformers' AutoTokenizer loads as a fast tokenizer encoding
 * the ids graphtrain's tokenizer encodes. */
#include "train/hf_tokenizer_out.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "data/tokenizer_internal.h"

#define EOD_TEXT "<|endoftext|>" /* GPT-2's name, also for a learned BPE's empty eod token */

/* The token's bytes in GPT-2's alphabet, UTF-8 (malloc'ed) */
static char *mapped(const int enc[256], const unsigned char *p, size_t n) {
    char *s = malloc(2 * n + 1), *o = s;
    if (!s) return NULL;
    for (size_t i = 0; i < n; i++) {
        int cp = enc[p[i]];
        if (cp < 0x80) {
            *o++ = (char)cp;
        } else {
            *o++ = (char)(0xC0 | (cp >> 6));
            *o++ = (char)(0x80 | (cp & 0x3F));
        }
    }
    *o = '\0';
    return s;
}

static char *token_text(const gt_tokenizer *tk, const int enc[256], uint32_t id) {
    size_t n;
    const unsigned char *p = gt_tokenizer_token(tk, id, &n);
    if ((int)id == tk->eod && n == 0) return strdup(EOD_TEXT);
    return mapped(enc, p, n);
}

static cJSON *pre_tokenizer(const gt_tokenizer *tk) {
    const char *pat = gt_pretok_pattern(tk->pretok);
    cJSON *bl = cJSON_CreateObject();
    if (!bl) return NULL;
    cJSON_AddStringToObject(bl, "type", "ByteLevel");
    cJSON_AddBoolToObject(bl, "add_prefix_space", 0);
    cJSON_AddBoolToObject(bl, "trim_offsets", 1);
    int gpt2 = !strcmp(pat, GT_PRETOK_GPT2);
    cJSON_AddBoolToObject(bl, "use_regex", gpt2); /* ByteLevel's own regex is GPT-2's */
    if (gpt2) return bl;
    /* another pattern (Llama 3's, Qwen's): a Split on it first, as those tokenizer.json do */
    cJSON *seq = cJSON_CreateObject(), *list = cJSON_CreateArray(), *sp = cJSON_CreateObject();
    cJSON *re = cJSON_CreateObject();
    if (!seq || !list || !sp || !re) {
        cJSON_Delete(bl), cJSON_Delete(seq), cJSON_Delete(list), cJSON_Delete(sp), cJSON_Delete(re);
        return NULL;
    }
    cJSON_AddStringToObject(re, "Regex", pat);
    cJSON_AddStringToObject(sp, "type", "Split");
    cJSON_AddItemToObject(sp, "pattern", re);
    cJSON_AddStringToObject(sp, "behavior", "Isolated");
    cJSON_AddBoolToObject(sp, "invert", 0);
    cJSON_AddItemToArray(list, sp);
    cJSON_AddItemToArray(list, bl);
    cJSON_AddStringToObject(seq, "type", "Sequence");
    cJSON_AddItemToObject(seq, "pretokenizers", list);
    return seq;
}

cJSON *gt_hf_tokenizer_json(const gt_tokenizer *tk) {
    int dec[512], enc[256];
    gt_tok_byte_decoder(dec);
    for (int cp = 0; cp < 512; cp++)
        if (dec[cp] >= 0) enc[dec[cp]] = cp;
    cJSON *j = cJSON_CreateObject(), *model = cJSON_CreateObject(), *vocab = cJSON_CreateObject();
    cJSON *merges = cJSON_CreateArray(), *added = cJSON_CreateArray(), *dc = cJSON_CreateObject();
    int ok = j && model && vocab && merges && added && dc;
    if (ok) {
        cJSON_AddStringToObject(j, "version", "1.0");
        cJSON_AddNullToObject(j, "truncation");
        cJSON_AddNullToObject(j, "padding");
        cJSON_AddItemToObject(j, "added_tokens", added);
        cJSON_AddNullToObject(j, "normalizer");
        cJSON *pt = pre_tokenizer(tk);
        ok = pt != NULL;
        if (ok) cJSON_AddItemToObject(j, "pre_tokenizer", pt);
        cJSON_AddNullToObject(j, "post_processor");
        cJSON_AddStringToObject(dc, "type", "ByteLevel");
        cJSON_AddBoolToObject(dc, "add_prefix_space", 1);
        cJSON_AddBoolToObject(dc, "trim_offsets", 1);
        cJSON_AddBoolToObject(dc, "use_regex", 1);
        cJSON_AddItemToObject(j, "decoder", dc);
        cJSON_AddStringToObject(model, "type", "BPE");
        cJSON_AddNullToObject(model, "dropout");
        cJSON_AddNullToObject(model, "unk_token");
        cJSON_AddNullToObject(model, "continuing_subword_prefix");
        cJSON_AddNullToObject(model, "end_of_word_suffix");
        cJSON_AddBoolToObject(model, "fuse_unk", 0);
        cJSON_AddBoolToObject(model, "byte_fallback", 0);
        cJSON_AddBoolToObject(model, "ignore_merges", tk->ignore_merges);
        cJSON_AddItemToObject(model, "vocab", vocab);
        cJSON_AddItemToObject(model, "merges", merges);
        cJSON_AddItemToObject(j, "model", model);
    } else {
        cJSON_Delete(j), cJSON_Delete(model), cJSON_Delete(vocab), cJSON_Delete(merges);
        cJSON_Delete(added), cJSON_Delete(dc);
        return NULL;
    }
    for (int id = 0; ok && id < tk->n_vocab; id++) {
        char *s = token_text(tk, enc, (uint32_t)id);
        ok = s && cJSON_AddNumberToObject(vocab, s, id) != NULL;
        free(s);
    }
    for (int i = 0; ok && i < tk->n_merges; i++) {
        char *l = token_text(tk, enc, tk->m_left[i]), *r = token_text(tk, enc, tk->m_right[i]);
        cJSON *pair = cJSON_CreateArray();
        ok = l && r && pair && cJSON_AddItemToArray(pair, cJSON_CreateString(l)) &&
             cJSON_AddItemToArray(pair, cJSON_CreateString(r)) &&
             cJSON_AddItemToArray(merges, pair);
        free(l);
        free(r);
    }
    /* the end-of-document token and the other added tokens: matched whole, never merged */
    for (int i = -1; ok && i < tk->n_added; i++) {
        int id = i < 0 ? tk->eod : (int)tk->added[i];
        if (id < 0 || (i >= 0 && id == tk->eod)) continue;
        size_t n;
        const unsigned char *p = gt_tokenizer_token(tk, (uint32_t)id, &n);
        char *raw = n ? strndup((const char *)p, n) : strdup(EOD_TEXT);
        cJSON *a = cJSON_CreateObject();
        ok = raw && a && cJSON_AddNumberToObject(a, "id", id) &&
             cJSON_AddStringToObject(a, "content", raw) &&
             cJSON_AddBoolToObject(a, "single_word", 0) && cJSON_AddBoolToObject(a, "lstrip", 0) &&
             cJSON_AddBoolToObject(a, "rstrip", 0) && cJSON_AddBoolToObject(a, "normalized", 0) &&
             cJSON_AddBoolToObject(a, "special", 1) && cJSON_AddItemToArray(added, a);
        free(raw);
    }
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

cJSON *gt_hf_tokenizer_config_json(const gt_tokenizer *tk, int model_max_length) {
    cJSON *c = cJSON_CreateObject();
    if (!c) return NULL;
    int ok = cJSON_AddStringToObject(c, "tokenizer_class", "PreTrainedTokenizerFast") != NULL;
    ok &= cJSON_AddNumberToObject(c, "model_max_length", model_max_length) != NULL;
    ok &= cJSON_AddBoolToObject(c, "clean_up_tokenization_spaces", 0) != NULL;
    if (tk->eod >= 0) {
        size_t n;
        const unsigned char *p = gt_tokenizer_token(tk, (uint32_t)tk->eod, &n);
        char *eos = n ? strndup((const char *)p, n) : strdup(EOD_TEXT);
        ok &= eos && cJSON_AddStringToObject(c, "eos_token", eos) != NULL;
        free(eos);
    }
    if (!ok) {
        cJSON_Delete(c);
        return NULL;
    }
    return c;
}

int gt_hf_tokenizer_usable(const gt_tokenizer *tk) {
    return tk->can_encode;
}
