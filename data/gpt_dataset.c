/* Megatron's GPTDataset document / sample / shuffle indices; see gpt_dataset.h. */
#include "data/gpt_dataset.h"

#include <stdlib.h>
#include <string.h>

#include "data/np_random.h"

/* gpt_dataset.py: a final epoch below this share of a full epoch's samples is shuffled apart */
#define GT_GPT_FINAL_EPOCH_THRESHOLD 0.80
#define GT_GPT_EXTRA_TOKEN 1 /* add_extra_token_to_sequence: T + 1 tokens per sample */

struct gt_gpt_dataset {
    const gt_indexed_dataset *ds;
    int T;
    int epochs;
    int64_t n_doc_index; /* epochs * documents */
    int32_t *doc_index;  /* [n_doc_index] sequence ids */
    int64_t n_samples;
    int64_t *sample_index;  /* [n_samples + 1][2]: position in doc_index, token offset */
    int64_t *shuffle_index; /* [n_samples] */
};

static int build_sample_index(gt_gpt_dataset *g, int64_t tokens_per_epoch, gt_error *err) {
    g->n_samples = ((int64_t)g->epochs * tokens_per_epoch - GT_GPT_EXTRA_TOKEN) / g->T;
    g->sample_index = malloc((size_t)(g->n_samples + 1) * 2 * sizeof *g->sample_index);
    if (!g->sample_index) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    int64_t *s = g->sample_index, di = 0, off = 0;
    s[0] = 0;
    s[1] = 0;
    for (int64_t k = 1; k <= g->n_samples; k++) {
        int64_t remaining = g->T + GT_GPT_EXTRA_TOKEN;
        while (remaining != 0) {
            int64_t doc_len = gt_indexed_sequence_length(g->ds, g->doc_index[di]) - off;
            remaining -= doc_len;
            if (remaining <= 0) {
                off += remaining + doc_len - GT_GPT_EXTRA_TOKEN;
                remaining = 0;
            } else {
                if (di == g->n_doc_index - 1)
                    return gt_error_set(err, GT_ERR_INVALID,
                                        "%s: ran out of documents building sample %lld (a bug: "
                                        "the epoch count should cover every sample)",
                                        gt_indexed_prefix(g->ds), (long long)k);
                di++;
                off = 0;
            }
        }
        s[2 * k] = di;
        s[2 * k + 1] = off;
    }
    return GT_OK;
}

int gt_gpt_dataset_build(gt_gpt_dataset **out, const gt_indexed_dataset *ds, int64_t begin,
                         int64_t end, int64_t num_samples, uint32_t seed, int T, gt_error *err) {
    *out = NULL;
    const char *name = gt_indexed_prefix(ds);
    if (T < 2 || begin < 0 || end > gt_indexed_num_sequences(ds) || begin >= end)
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s: sequences [%lld, %lld) with seq_length %d cannot form a "
                            "dataset (empty split or seq_length < 2); adjust dataset.split",
                            name, (long long)begin, (long long)end, T);
    if (end > INT32_MAX)
        return gt_error_set(err, GT_ERR_UNSUPPORTED,
                            "%s: %lld sequences; Megatron's int32 document index (and this "
                            "reader) holds at most %d",
                            name, (long long)end, INT32_MAX);
    int64_t n_docs = end - begin, tokens = 0;
    for (int64_t i = begin; i < end; i++)
        tokens += gt_indexed_sequence_length(ds, i);
    if (tokens < T + GT_GPT_EXTRA_TOKEN)
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s: the split's sequences [%lld, %lld) hold %lld tokens, fewer than "
                            "seq_length + 1 = %d; lower model.seq_length or give this split a "
                            "larger share in dataset.split",
                            name, (long long)begin, (long long)end, (long long)tokens, T + 1);
    gt_gpt_dataset *g = calloc(1, sizeof *g);
    if (!g) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    g->ds = ds;
    g->T = T;
    g->epochs = 1;
    if (num_samples >= 0) {
        int64_t want = num_samples * T + GT_GPT_EXTRA_TOKEN;
        for (int64_t have = tokens; have < want; have += tokens)
            g->epochs++;
    }
    int separate = 0;
    int64_t sans_final = 0;
    if (g->epochs > 1) {
        sans_final = ((int64_t)(g->epochs - 1) * tokens - GT_GPT_EXTRA_TOKEN) / T;
        int64_t from_final = num_samples - sans_final;
        int64_t per_epoch = (tokens - GT_GPT_EXTRA_TOKEN) / T;
        separate = from_final < (int64_t)(GT_GPT_FINAL_EPOCH_THRESHOLD * (double)per_epoch);
    }
    int rc = GT_OK;
    g->n_doc_index = (int64_t)g->epochs * n_docs;
    g->doc_index = malloc((size_t)g->n_doc_index * sizeof *g->doc_index);
    if (!g->doc_index) rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    gt_np_random rng;
    gt_np_random_seed(&rng, seed);
    if (!rc) {
        for (int64_t k = 0; k < g->n_doc_index; k++)
            g->doc_index[k] = (int32_t)(begin + k % n_docs);
        int64_t first = separate ? g->n_doc_index - n_docs : g->n_doc_index;
        gt_np_shuffle_i32(&rng, g->doc_index, first);
        if (separate) gt_np_shuffle_i32(&rng, g->doc_index + first, n_docs);
        rc = build_sample_index(g, tokens, err);
    }
    if (!rc) {
        g->shuffle_index = malloc((size_t)(g->n_samples ? g->n_samples : 1) * sizeof(int64_t));
        if (!g->shuffle_index) rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    }
    if (!rc) {
        for (int64_t i = 0; i < g->n_samples; i++)
            g->shuffle_index[i] = i;
        int64_t first = separate ? sans_final : g->n_samples;
        gt_np_shuffle_i64(&rng, g->shuffle_index, first);
        if (first < g->n_samples)
            gt_np_shuffle_i64(&rng, g->shuffle_index + first, g->n_samples - first);
    }
    if (rc) {
        gt_gpt_dataset_destroy(g);
        return rc;
    }
    *out = g;
    return GT_OK;
}

void gt_gpt_dataset_destroy(gt_gpt_dataset *g) {
    if (!g) return;
    free(g->doc_index);
    free(g->sample_index);
    free(g->shuffle_index);
    free(g);
}

int64_t gt_gpt_dataset_len(const gt_gpt_dataset *g) {
    return g->n_samples;
}

int gt_gpt_dataset_epochs(const gt_gpt_dataset *g) {
    return g->epochs;
}

int gt_gpt_dataset_sample(const gt_gpt_dataset *g, int64_t idx, int vocab, int32_t *tokens,
                          gt_error *err) {
    if (idx < 0 || idx >= g->n_samples)
        return gt_error_set(err, GT_ERR_INVALID, "%s: sample %lld of %lld does not exist",
                            gt_indexed_prefix(g->ds), (long long)idx, (long long)g->n_samples);
    int64_t j = g->shuffle_index[idx];
    int64_t b = g->sample_index[2 * j], bo = g->sample_index[2 * j + 1];
    int64_t e = g->sample_index[2 * j + 2], eo = g->sample_index[2 * j + 3];
    int64_t used = 0, want = g->T + GT_GPT_EXTRA_TOKEN;
    for (int64_t k = b; k <= e; k++) {
        int64_t seq = g->doc_index[k];
        int64_t off = k == b ? bo : 0;
        int64_t len =
            k < e ? gt_indexed_sequence_length(g->ds, seq) - off : eo + GT_GPT_EXTRA_TOKEN - off;
        if (len < 0 || used + len > want)
            return gt_error_set(err, GT_ERR_INVALID,
                                "%s: sample %lld spans more than seq_length + 1 tokens (a bug "
                                "in the sample index)",
                                gt_indexed_prefix(g->ds), (long long)idx);
        int rc = gt_indexed_read(g->ds, seq, off, len, vocab, tokens + used, err);
        if (rc) return rc;
        used += len;
    }
    if (used != want)
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s: sample %lld has %lld tokens, not seq_length + 1 = %lld (a bug "
                            "in the sample index)",
                            gt_indexed_prefix(g->ds), (long long)idx, (long long)used,
                            (long long)want);
    return GT_OK;
}
