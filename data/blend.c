/* Megatron data_path blends and dataset.split over indexed datasets; see blend.h. */
#include "data/blend.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"

#define GT_BLEND_DESC_MAX 768

struct gt_blend_data {
    gt_blend_spec spec;
    gt_indexed_dataset *ds[GT_BLEND_MAX];
    gt_gpt_dataset *gpt[GT_BLEND_MAX];
    int blended;     /* 0: one unweighted prefix, samples straight from gpt[0] */
    int64_t size;    /* samples */
    int16_t *source; /* [size] when blended */
    int64_t *sample; /* [size] when blended */
    char desc[GT_BLEND_DESC_MAX];
};

static int is_sep(char c) {
    return c == ',' || isspace((unsigned char)c);
}

int gt_blend_is_megatron(const char *p) {
    while (*p && is_sep(*p))
        p++;
    const char *e = p;
    while (*e && !is_sep(*e))
        e++;
    const char *rest = e;
    while (*rest && is_sep(*rest))
        rest++;
    if (*rest) return 1; /* several items: only Megatron's syntax has them */
    char one[1024];
    snprintf(one, sizeof one, "%.*s", (int)(e - p), p);
    return one[0] && gt_indexed_exists(one);
}

static int parse_weight(const char *s, double *w) {
    char *end;
    *w = strtod(s, &end);
    return end != s && !*end && isfinite(*w);
}

void gt_blend_spec_free(gt_blend_spec *s) {
    for (int i = 0; i < s->n; i++)
        free(s->prefix[i]);
    s->n = 0;
}

int gt_blend_parse(const char *data_path, gt_blend_spec *s, gt_error *err) {
    memset(s, 0, sizeof *s);
    char *item[2 * GT_BLEND_MAX];
    int n = 0, rc = GT_OK;
    for (const char *p = data_path; *p;) {
        while (*p && is_sep(*p))
            p++;
        if (!*p) break;
        const char *e = p;
        while (*e && !is_sep(*e))
            e++;
        if (n == 2 * GT_BLEND_MAX) {
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "dataset.data_path: more than %d items; blend at most %d datasets",
                              2 * GT_BLEND_MAX, GT_BLEND_MAX);
            break;
        }
        item[n] = strndup(p, (size_t)(e - p));
        if (!item[n]) {
            rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
            break;
        }
        n++;
        p = e;
    }
    if (!rc && n == 0)
        rc = gt_error_set(err, GT_ERR_INVALID, "dataset.data_path is empty; name a prefix");
    /* get_blend_from_list: an even count of items whose every other one is a number is
     * "weight prefix" pairs; otherwise every item is a prefix */
    int pairs = !rc && n % 2 == 0;
    double w[GT_BLEND_MAX];
    int numeric = 0;
    for (int i = 0; pairs && i < n; i += 2)
        numeric += parse_weight(item[i], &w[i / 2]);
    if (pairs && numeric && numeric != n / 2)
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "dataset.data_path=\"%s\": some weights are numbers and some are not; "
                          "write \"W1 PREFIX1 W2 PREFIX2 ...\" or prefixes alone",
                          data_path);
    pairs = pairs && numeric;
    double sum = 0;
    for (int i = 0; pairs && !rc && i < n / 2; i++) {
        if (w[i] < 0)
            rc = gt_error_set(err, GT_ERR_INVALID, "dataset.data_path: weight %g of %s is negative",
                              w[i], item[2 * i + 1]);
        sum += w[i];
    }
    if (pairs && !rc && !(sum > 0))
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "dataset.data_path=\"%s\": the weights sum to 0; give each dataset a "
                          "positive share",
                          data_path);
    if (!rc && !pairs && n > GT_BLEND_MAX)
        rc = gt_error_set(err, GT_ERR_INVALID, "dataset.data_path: more than %d prefixes",
                          GT_BLEND_MAX);
    for (int i = 0; i < n; i++) {
        int is_prefix = !pairs || i % 2;
        if (!rc && is_prefix) {
            s->prefix[s->n] = item[i];
            if (pairs) s->weight[s->n] = w[i / 2] / sum;
            s->n++;
        } else {
            free(item[i]);
        }
    }
    s->weighted = pairs;
    if (rc) gt_blend_spec_free(s);
    return rc;
}

int gt_split_parse(const char *split, double share[GT_MSPLIT_N], gt_error *err) {
    int n = 0;
    double v[GT_MSPLIT_N] = {0}, sum = 0;
    for (const char *p = split; *p;) {
        if (*p == ',' || *p == '/' || isspace((unsigned char)*p)) {
            p++;
            continue;
        }
        const char *e = p;
        while (*e == '.' || isdigit((unsigned char)*e))
            e++;
        if (e == p || n == GT_MSPLIT_N)
            return gt_error_set(err, GT_ERR_INVALID,
                                "dataset.split=\"%s\": expected up to three non-negative "
                                "numbers for train, validation and test, e.g. 969,30,1",
                                split);
        char num[64];
        snprintf(num, sizeof num, "%.*s", (int)(e - p), p);
        char *end;
        v[n] = strtod(num, &end);
        if (*end)
            return gt_error_set(err, GT_ERR_INVALID, "dataset.split=\"%s\": '%s' is not a number",
                                split, num);
        sum += v[n++];
        p = e;
    }
    if (!(sum > 0))
        return gt_error_set(err, GT_ERR_INVALID,
                            "dataset.split=\"%s\": the shares sum to 0; e.g. 969,30,1", split);
    for (int i = 0; i < GT_MSPLIT_N; i++)
        share[i] = v[i] / sum;
    return GT_OK;
}

int gt_split_range(const double share[GT_MSPLIT_N], int which, int64_t n, int64_t *begin,
                   int64_t *end) {
    *begin = *end = 0;
    if (which < 0 || which >= GT_MSPLIT_N) return 0;
    double lo = 0;
    for (int i = 0; i < which; i++)
        lo += share[i];
    double hi = lo + share[which];
    *begin = (int64_t)nearbyint(lo * (double)n); /* round half to even under FE_TONEAREST */
    *end = (int64_t)nearbyint(hi * (double)n);
    return hi > lo;
}

void gt_blend_indices(const double *weight, int n, int64_t size, int16_t *source, int64_t *sample) {
    int64_t taken[GT_BLEND_MAX] = {0};
    for (int64_t i = 0; i < size; i++) {
        double x = i > 1 ? (double)i : 1.0;
        int best = 0;
        double best_err = weight[0] * x - (double)taken[0];
        for (int k = 1; k < n; k++) {
            double e = weight[k] * x - (double)taken[k];
            if (e > best_err) {
                best_err = e;
                best = k;
            }
        }
        source[i] = (int16_t)best;
        sample[i] = taken[best]++;
    }
}

/* build_exhaustive_blending_indices: every sample of every source, in proportion to sizes */
static void exhaustive_indices(const int64_t *sizes, int n, int16_t *source, int64_t *sample) {
    int64_t total = 0, taken[GT_BLEND_MAX] = {0};
    double w[GT_BLEND_MAX];
    for (int k = 0; k < n; k++)
        total += sizes[k];
    for (int k = 0; k < n; k++)
        w[k] = (double)sizes[k] / (double)total;
    for (int64_t i = 0; i < total; i++) {
        double x = i > 1 ? (double)i : 1.0;
        int best = -1;
        double best_err = -HUGE_VAL;
        for (int k = 0; k < n; k++) {
            if (taken[k] == sizes[k]) continue;
            double e = w[k] * x - (double)taken[k];
            if (best < 0 || e > best_err) {
                best_err = e;
                best = k;
            }
        }
        if (best < 0) break; /* cannot happen: i < total means a source is unspent */
        source[i] = (int16_t)best;
        sample[i] = taken[best]++;
    }
}

static const char *k_split_name[GT_MSPLIT_N] = {"training", "validation", "test"};

static int open_sources(gt_blend_data *b, const gt_blend_params *p, gt_error *err) {
    double share[GT_MSPLIT_N];
    int rc = gt_split_parse(p->split, share, err);
    for (int k = 0; !rc && k < b->spec.n; k++) {
        rc = gt_indexed_open(&b->ds[k], b->spec.prefix[k], err);
        if (rc) break;
        int64_t beg, end, n = gt_indexed_num_sequences(b->ds[k]);
        if (!gt_split_range(share, p->which, n, &beg, &end) || beg >= end) {
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "%s: dataset.split=\"%s\" leaves the %s split no sequences of "
                              "its %lld; give that split a share (or more data), or turn off "
                              "what reads it (train.eval_interval=0 for validation)",
                              b->spec.prefix[k], p->split, k_split_name[p->which], (long long)n);
            break;
        }
        int64_t want = -1; /* one epoch (Megatron's None) */
        if (b->spec.weighted)
            want = (int64_t)ceil(ceil((double)p->num_samples * b->spec.weight[k]) *
                                 (1 + GT_BLEND_SURPLUS));
        else if (b->spec.n == 1)
            want = p->num_samples;
        rc =
            gt_gpt_dataset_build(&b->gpt[k], b->ds[k], beg, end, want, p->seed, p->seq_length, err);
    }
    return rc;
}

int gt_blend_data_open(gt_blend_data **out, const gt_blend_params *p, gt_error *err) {
    *out = NULL;
    gt_blend_data *b = calloc(1, sizeof *b);
    if (!b) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    int rc = gt_blend_parse(p->data_path, &b->spec, err);
    if (!rc) rc = open_sources(b, p, err);
    if (!rc) {
        b->blended = b->spec.n > 1 || b->spec.weighted;
        int64_t sizes[GT_BLEND_MAX] = {0};
        b->size = 0;
        for (int k = 0; k < b->spec.n; k++) {
            sizes[k] = gt_gpt_dataset_len(b->gpt[k]);
            b->size += sizes[k];
        }
        if (b->spec.weighted) b->size = p->num_samples;
        if (!b->blended) b->size = sizes[0];
        if (b->size <= 0)
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "dataset.data_path: the %s split has no samples to draw",
                              k_split_name[p->which]);
        if (!rc && b->blended) {
            b->source = malloc((size_t)b->size * sizeof *b->source);
            b->sample = malloc((size_t)b->size * sizeof *b->sample);
            if (!b->source || !b->sample)
                rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory (blend index)");
            else if (b->spec.weighted)
                gt_blend_indices(b->spec.weight, b->spec.n, b->size, b->source, b->sample);
            else
                exhaustive_indices(sizes, b->spec.n, b->source, b->sample);
        }
    }
    if (!rc) {
        int o = snprintf(b->desc, sizeof b->desc,
                         "Megatron indexed data (%s): ", k_split_name[p->which]);
        for (int k = 0; k < b->spec.n && o < (int)sizeof b->desc; k++)
            o += snprintf(b->desc + o, sizeof b->desc - (size_t)o, "%s%s", k ? ", " : "",
                          b->spec.prefix[k]);
        if (o < (int)sizeof b->desc)
            snprintf(b->desc + o, sizeof b->desc - (size_t)o,
                     "; %lld sequences of %d (GPTDataset order, seed %u)", (long long)b->size,
                     p->seq_length, p->seed);
    }
    if (rc) {
        gt_blend_data_close(b);
        return rc;
    }
    *out = b;
    return GT_OK;
}

void gt_blend_data_close(gt_blend_data *b) {
    if (!b) return;
    for (int k = 0; k < b->spec.n; k++) {
        gt_gpt_dataset_destroy(b->gpt[k]);
        gt_indexed_close(b->ds[k]);
    }
    gt_blend_spec_free(&b->spec);
    free(b->source);
    free(b->sample);
    free(b);
}

int64_t gt_blend_data_len(const gt_blend_data *b) {
    return b->size;
}

int gt_blend_data_sample(const gt_blend_data *b, int64_t idx, int vocab, int32_t *tokens,
                         gt_error *err) {
    if (idx < 0 || idx >= b->size)
        return gt_error_set(err, GT_ERR_INVALID, "blended sample %lld of %lld does not exist",
                            (long long)idx, (long long)b->size);
    if (!b->blended) return gt_gpt_dataset_sample(b->gpt[0], idx, vocab, tokens, err);
    return gt_gpt_dataset_sample(b->gpt[b->source[idx]], b->sample[idx], vocab, tokens, err);
}

const char *gt_blend_data_describe(const gt_blend_data *b) {
    return b->desc;
}
