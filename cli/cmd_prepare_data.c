/* graphtrain prepare-data: turns text files into token shards. Learns a byte-level BPE from
 * the text itself (or uses GPT-2's with --gpt2 encoder.json vocab.bpe), encodes each input
 * file as one document followed by the end-of-document token, checks the round trip (against
 * the NFC-normalized text when a tokenizer.json normalizes), and writes the set
 * (data/shard_set.h): PREFIX_train_NNNNNN.bin, PREFIX_val_000000.bin (the last --val-fraction
 * of the tokens, held out), the vocabulary PREFIX.vocab, and last the manifest PREFIX.manifest
 * that training reads. An existing set is replaced only with --force. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "core/error.h"
#include "data/shard_set.h"
#include "data/tokenizer.h"

#define PREP_DEFAULT_VOCAB 1024
#define PREP_DEFAULT_VAL_FRACTION 0.05
#define PREP_DEFAULT_SHARD_TOKENS 100000000LL
#define PREP_EXIT_FAILED 1
#define PREP_EXIT_USAGE 2

static void usage(FILE *out) {
    fprintf(
        out,
        "usage: graphtrain prepare-data --input FILE... --output PREFIX [--vocab-size N]\n"
        "                               [--gpt2 ENCODER.json VOCAB.bpe | --tokenizer JSON]\n"
        "                               [--val-fraction F] [--shard-tokens N] [--force]\n\n"
        "Tokenizes text files into shards for dataset.source=shards dataset.data_path=PREFIX.\n"
        "  --input FILE...      text files (any bytes), one document each, in order; an\n"
        "                       end-of-document token follows each\n"
        "  --output PREFIX      writes PREFIX_train_000000.bin..., PREFIX_val_000000.bin, the\n"
        "                       vocabulary PREFIX.vocab and last the manifest PREFIX.manifest\n"
        "  --vocab-size N       byte-level BPE learned from the input with N tokens (256 bytes\n"
        "                       + merges + the end-of-document token, the last id; default\n"
        "                       %d); set model.vocab_size to the size printed\n"
        "  --gpt2 ENC BPE       use GPT-2's tokenizer from its encoder.json and vocab.bpe\n"
        "  --tokenizer JSON     use a Hugging Face tokenizer.json (byte-level BPE: GPT-2,\n"
        "                       Llama 3, Qwen); its special tokens in the text encode as such\n"
        "  --val-fraction F     share of the tokens held out for evaluation (default %.2f)\n"
        "  --shard-tokens N     tokens per training shard (default %lld)\n"
        "  --force              replace an existing set at PREFIX (its old shards are removed\n"
        "                       once the new set is complete)\n",
        PREP_DEFAULT_VOCAB, PREP_DEFAULT_VAL_FRACTION, PREP_DEFAULT_SHARD_TOKENS);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int append_file(const char *path, unsigned char **buf, size_t *n, size_t *cap,
                       gt_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return gt_error_set(err, GT_ERR_IO, "--input %s: %s", path, strerror(errno));
    for (;;) {
        if (*cap - *n < 65536) {
            size_t c = *cap ? *cap * 2 : 1 << 20;
            unsigned char *b = realloc(*buf, c);
            if (!b) {
                fclose(f);
                return gt_error_set(err, GT_ERR_NOMEM, "out of host memory reading %s", path);
            }
            *buf = b;
            *cap = c;
        }
        size_t got = fread(*buf + *n, 1, *cap - *n, f);
        *n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) return gt_error_set(err, GT_ERR_IO, "--input %s: read error", path);
    return GT_OK;
}

static int parse_long(const char *flag, const char *s, long long lo, long long hi, long long *out,
                      gt_error *err) {
    char *end;
    errno = 0;
    long long v = strtoll(s ? s : "", &end, 10);
    if (!s || !*s || *end || errno || v < lo || v > hi)
        return gt_error_set(err, GT_ERR_INVALID, "%s needs an integer in %lld..%lld (got '%s')",
                            flag, lo, hi, s ? s : "");
    *out = v;
    return GT_OK;
}

typedef struct prep_args {
    const char **inputs;
    int n_inputs;
    const char *output, *gpt2_enc, *gpt2_bpe, *hf_json;
    long long vocab, shard_tokens;
    double val_fraction;
    int force;
} prep_args;

static int parse(int argc, char **argv, prep_args *a, gt_error *err) {
    a->vocab = PREP_DEFAULT_VOCAB;
    a->shard_tokens = PREP_DEFAULT_SHARD_TOKENS;
    a->val_fraction = PREP_DEFAULT_VAL_FRACTION;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        int rc = GT_OK;
        if (!strcmp(f, "--input")) {
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2))
                a->inputs[a->n_inputs++] = argv[++i];
        } else if (!strcmp(f, "--output") && i + 1 < argc) {
            a->output = argv[++i];
        } else if (!strcmp(f, "--vocab-size")) {
            /* one id beyond the 256 bytes is the end-of-document token */
            rc = parse_long(f, i + 1 < argc ? argv[++i] : NULL, GT_BPE_MIN_VOCAB + 1,
                            GT_BPE_MAX_VOCAB, &a->vocab, err);
        } else if (!strcmp(f, "--shard-tokens")) {
            rc = parse_long(f, i + 1 < argc ? argv[++i] : NULL, 1024, 1LL << 40, &a->shard_tokens,
                            err);
        } else if (!strcmp(f, "--val-fraction") && i + 1 < argc) {
            char *end;
            a->val_fraction = strtod(argv[++i], &end);
            if (*end || a->val_fraction <= 0 || a->val_fraction >= 0.5)
                rc = gt_error_set(err, GT_ERR_INVALID,
                                  "--val-fraction needs a number in "
                                  "(0, 0.5), got '%s'",
                                  argv[i]);
        } else if (!strcmp(f, "--force")) {
            a->force = 1;
        } else if (!strcmp(f, "--gpt2") && i + 2 < argc) {
            a->gpt2_enc = argv[++i];
            a->gpt2_bpe = argv[++i];
        } else if (!strcmp(f, "--tokenizer") && i + 1 < argc) {
            a->hf_json = argv[++i];
        } else {
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "unknown or incomplete argument '%.100s'; see "
                              "`graphtrain prepare-data --help`",
                              f);
        }
        if (rc) return rc;
    }
    if (a->gpt2_enc && a->hf_json)
        return gt_error_set(err, GT_ERR_INVALID,
                            "--gpt2 and --tokenizer both name a tokenizer; give one");
    if (a->n_inputs == 0 || !a->output)
        return gt_error_set(err, GT_ERR_INVALID,
                            "needs --input FILE... and --output PREFIX; "
                            "see `graphtrain prepare-data --help`");
    return GT_OK;
}

static int write_shards(const prep_args *a, const gt_tokenizer *tk, const uint32_t *ids, size_t n,
                        gt_error *err) {
    size_t n_val = (size_t)((double)n * a->val_fraction);
    if (n_val < 2 || n - n_val < 2)
        return gt_error_set(err, GT_ERR_INVALID,
                            "the input gives only %zu tokens, too few to "
                            "split into training and validation shards; give more text",
                            n);
    size_t n_train = n - n_val;
    gt_shard_set set;
    int rc = gt_shard_set_begin(&set, a->output, gt_tokenizer_vocab_size(tk), tk, a->force, err);
    char path[GT_PATH_MAX + 32];
    for (size_t off = 0; !rc && off < n_train; off += (size_t)a->shard_tokens) {
        size_t len =
            n_train - off < (size_t)a->shard_tokens ? n_train - off : (size_t)a->shard_tokens;
        rc = gt_shard_set_add(&set, 0, ids + off, (int64_t)len, path, sizeof path, err);
        if (!rc) printf("  wrote %s (%zu tokens)\n", path, len);
    }
    if (!rc) rc = gt_shard_set_add(&set, 1, ids + n_train, (int64_t)n_val, path, sizeof path, err);
    if (!rc) printf("  wrote %s (%zu tokens, held out)\n", path, n_val);
    int removed = 0;
    if (!rc) rc = gt_shard_set_commit(&set, &removed, err);
    if (!rc) {
        printf("  wrote %s.vocab and %s%s\n", a->output, a->output, GT_MANIFEST_SUFFIX);
        if (removed)
            printf("  removed %d stale shard%s of the set it replaced\n", removed,
                   removed == 1 ? "" : "s");
    }
    gt_shard_set_end(&set);
    return rc;
}

/* Encodes each document (input file) followed by the end-of-document token, and checks that
 * each decodes to its bytes exactly, or, when the tokenizer normalizes (NFC), to the text as
 * the tokenizer normalizes it. */
static int encode_docs(const gt_tokenizer *tk, const unsigned char *text, const size_t *doc_off,
                       int n_docs, uint32_t **ids, size_t *n_ids, size_t *cap, gt_error *err) {
    uint32_t eod = (uint32_t)gt_tokenizer_eod(tk);
    int rc = GT_OK;
    for (int d = 0; !rc && d < n_docs; d++) {
        size_t first = *n_ids, len = doc_off[d + 1] - doc_off[d];
        const unsigned char *doc = text + doc_off[d], *want = doc;
        size_t want_n = len;
        unsigned char *normalized = NULL;
        if (gt_tokenizer_normalizes(tk)) {
            rc = gt_tokenizer_normalize(tk, doc, len, &normalized, &want_n, err);
            want = normalized;
        }
        if (!rc) rc = gt_tokenizer_encode(tk, doc, len, ids, n_ids, cap, err);
        unsigned char *back = NULL;
        size_t back_n = 0;
        if (!rc) rc = gt_tokenizer_decode(tk, *ids + first, *n_ids - first, &back, &back_n, err);
        if (!rc && (back_n != want_n || (want_n && memcmp(back, want, want_n))))
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "decoding the tokens did not give the %sinput back (a tokenizer "
                              "bug); nothing was written",
                              normalized ? "NFC-normalized " : "");
        free(back);
        free(normalized);
        if (!rc && *n_ids == *cap) {
            size_t c = *cap ? *cap * 2 : 1024;
            uint32_t *g = realloc(*ids, c * sizeof *g);
            if (!g) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory encoding");
            *ids = g;
            *cap = c;
        }
        if (!rc) (*ids)[(*n_ids)++] = eod;
    }
    return rc;
}

static int prepare(const prep_args *a, gt_error *err) {
    unsigned char *text = NULL;
    size_t n = 0, cap = 0;
    size_t *doc_off = calloc((size_t)a->n_inputs + 1, sizeof *doc_off);
    int rc = doc_off ? GT_OK : gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    for (int i = 0; !rc && i < a->n_inputs; i++) {
        rc = append_file(a->inputs[i], &text, &n, &cap, err);
        doc_off[i + 1] = n;
    }
    gt_tokenizer *tk = NULL;
    uint32_t *ids = NULL;
    size_t n_ids = 0, ids_cap = 0;
    if (!rc)
        printf("prepare-data: %d file%s, %zu bytes\n", a->n_inputs, a->n_inputs == 1 ? "" : "s", n);
    double t0 = now_s();
    if (!rc && a->hf_json)
        rc = gt_tokenizer_load_hf(&tk, a->hf_json, err);
    else if (!rc && a->gpt2_enc)
        rc = gt_tokenizer_load_gpt2(&tk, a->gpt2_enc, a->gpt2_bpe, err);
    else if (!rc) /* the last id goes to the end-of-document token */
        rc = gt_bpe_train(&tk, text, n, (int)a->vocab - 1, err);
    if (!rc) rc = gt_tokenizer_add_eod(tk, err);
    double t1 = now_s();
    if (!rc) {
        int v = gt_tokenizer_vocab_size(tk);
        printf("tokenizer: %s, %d tokens (%d merges, end-of-document id %d) in %.2f s%s\n",
               a->hf_json    ? a->hf_json
               : a->gpt2_enc ? "GPT-2 BPE"
                             : "byte-level BPE learned from the input",
               v, gt_tokenizer_num_merges(tk), gt_tokenizer_eod(tk), t1 - t0,
               !a->gpt2_enc && !a->hf_json && v < a->vocab
                   ? " (the input has no more repeated pairs)"
                   : "");
        rc = encode_docs(tk, text, doc_off, a->n_inputs, &ids, &n_ids, &ids_cap, err);
    }
    if (!rc)
        printf("encoded: %zu tokens (%.2f bytes/token, %d end-of-document) in %.2f s\n", n_ids,
               n_ids ? (double)n / (double)n_ids : 0.0, a->n_inputs, now_s() - t1);
    if (!rc) rc = write_shards(a, tk, ids, n_ids, err);
    if (!rc)
        printf("round trip exact%s. Train with:\n  graphtrain train "
               "dataset.source=shards dataset.data_path=%s model.vocab_size=%d\n",
               gt_tokenizer_normalizes(tk) ? " (against the NFC-normalized text)" : "", a->output,
               gt_tokenizer_vocab_size(tk));
    free(text);
    free(ids);
    free(doc_off);
    gt_tokenizer_destroy(tk);
    return rc;
}

int gt_cmd_prepare_data(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
    const char *inputs[argc > 0 ? argc : 1];
    prep_args a;
    memset(&a, 0, sizeof a);
    a.inputs = inputs;
    gt_error err = {0};
    int rc = parse(argc, argv, &a, &err);
    if (rc) {
        fprintf(stderr, "graphtrain prepare-data: %s\n", err.msg);
        return PREP_EXIT_USAGE;
    }
    rc = prepare(&a, &err);
    if (rc) {
        fprintf(stderr, "graphtrain prepare-data: %s\n", err.msg);
        return rc == GT_ERR_INVALID ? PREP_EXIT_USAGE : PREP_EXIT_FAILED;
    }
    return 0;
}
