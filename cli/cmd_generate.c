/* graphtrain generate --checkpoint DIR --prompt TEXT: samples a continuation with the KV-cache
 * decoder (train/generate.h) on the CPU or CUDA backend, with the tokenizer of the checkpoint's
 * data or a given one, and reports prefill and decode tokens/s on stderr. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "config/config.h"
#include "data/tokenizer.h"
#include "train/generate.h"
#include "train/hf_convert.h"

#define GEN_EXIT_FAILED 1
#define GEN_EXIT_USAGE 2
#define GEN_MAX_PROMPT 65536

static void usage(FILE *out) {
    fprintf(
        out,
        "usage: graphtrain generate --checkpoint DIR (--prompt TEXT | --prompt-ids 1,2,3)\n"
        "                           [--max-new-tokens N] [--temperature T] [--top-k K]\n"
        "                           [--top-p P] [--seed S] [--tokenizer FILE]\n"
        "                           [--device auto|cpu|cuda] [--no-graph]\n\n"
        "Continues the prompt with the checkpoint's model: one prefill over the prompt, then\n"
        "one decode step per token over a KV cache (on cuda: a captured CUDA graph replayed).\n"
        "  --checkpoint DIR     a checkpoint.save folder, an iter_ folder or a checkpoint.bin\n"
        "  --prompt TEXT        text, encoded with the tokenizer (default: PREFIX.vocab of the\n"
        "                       checkpoint's dataset.data_path, as prepare-data wrote it)\n"
        "  --prompt-ids LIST    token ids instead of text; the output is ids too\n"
        "  --tokenizer FILE     a vocabulary of prepare-data (.vocab) or a tokenizer.json\n"
        "  --max-new-tokens N   default 32; generation also stops at the end-of-document token\n"
        "  --temperature T      0 is greedy (default 0.8)\n"
        "  --top-k K            sample among the K most likely tokens (default 0: all)\n"
        "  --top-p P            and among the fewest whose probability reaches P (default 1)\n"
        "  --seed S             the sampling generator's seed (default 1234)\n"
        "  --device D           auto (default: a usable GPU, else the CPU), cpu or cuda\n"
        "  --no-graph           run the decode steps eagerly instead of replaying a graph\n");
}

static int usage_error(const char *msg, const char *arg) {
    fprintf(stderr, "graphtrain generate: %s%s; see `graphtrain generate --help`\n", msg,
            arg ? arg : "");
    return GEN_EXIT_USAGE;
}

static int parse_num(const char *s, double lo, double hi, double *v) {
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return end != s && !*end && !errno && *v >= lo && *v <= hi;
}

static int parse_ids(const char *s, int32_t *ids, int *n) {
    *n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > 2147483647L || *n == GEN_MAX_PROMPT) return 0;
        ids[(*n)++] = (int32_t)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return 0;
    }
    return *n > 0;
}

static int load_tokenizer(const char *path, const char *ckpt, gt_tokenizer **tk, gt_error *err) {
    char buf[1100];
    if (!path) {
        gt_config *cfg = malloc(sizeof *cfg);
        char file[1100];
        if (!cfg) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
        int rc = gt_hf_checkpoint_config(ckpt, cfg, file, sizeof file, err);
        const char *prefix = cfg->dataset.data_path;
        if (!rc && !prefix[0])
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "the checkpoint was trained without dataset.data_path, so its "
                              "tokenizer is unknown; give --tokenizer FILE or --prompt-ids");
        if (!rc) snprintf(buf, sizeof buf, "%s.vocab", prefix);
        free(cfg);
        if (rc) return rc;
        path = buf;
    }
    size_t n = strlen(path);
    if (n > 5 && !strcmp(path + n - 5, ".json")) return gt_tokenizer_load_hf(tk, path, err);
    return gt_tokenizer_load(tk, path, err);
}

/* tokens/s of the prefill and of the decode steps, on stderr (stdout is the text) */
static void report(const gt_generate_stats *st) {
    fprintf(stderr, "graphtrain generate: %s backend: prefill %d tokens in %.1f ms (%.1f tokens/s)",
            st->backend, st->prefill_tokens, st->prefill_ms,
            st->prefill_ms > 0 ? 1e3 * st->prefill_tokens / st->prefill_ms : 0.0);
    if (st->decode_steps > 0)
        fprintf(stderr, "; decode %d tokens in %.1f ms (%.1f tokens/s, %s)", st->decode_steps,
                st->decode_ms, st->decode_ms > 0 ? 1e3 * st->decode_steps / st->decode_ms : 0.0,
                st->graph ? "graph replay" : "eager");
    fprintf(stderr, "\n");
}

int gt_cmd_generate(int argc, char **argv) {
    const char *ckpt = NULL, *text = NULL, *ids_arg = NULL, *tok_path = NULL;
    gt_generate_opts o = {32, 0.8f, 0, 1.0f, 1234, -1, "auto", 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        double v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--no-graph")) {
            o.no_graph = 1;
            continue;
        }
        if (i + 1 >= argc) return usage_error("missing value after ", a);
        const char *val = argv[++i];
        if (!strcmp(a, "--checkpoint"))
            ckpt = val;
        else if (!strcmp(a, "--prompt"))
            text = val;
        else if (!strcmp(a, "--prompt-ids"))
            ids_arg = val;
        else if (!strcmp(a, "--tokenizer"))
            tok_path = val;
        else if (!strcmp(a, "--max-new-tokens") && parse_num(val, 1, 1e6, &v))
            o.max_new_tokens = (int)v;
        else if (!strcmp(a, "--temperature") && parse_num(val, 0, 100, &v))
            o.temperature = (float)v;
        else if (!strcmp(a, "--top-k") && parse_num(val, 0, 1e9, &v))
            o.top_k = (int)v;
        else if (!strcmp(a, "--top-p") && parse_num(val, 1e-6, 1, &v))
            o.top_p = (float)v;
        else if (!strcmp(a, "--seed") && parse_num(val, 0, 1.8e19, &v))
            o.seed = (uint64_t)v;
        else if (!strcmp(a, "--device") &&
                 (!strcmp(val, "auto") || !strcmp(val, "cpu") || !strcmp(val, "cuda")))
            o.device = val;
        else
            return usage_error("unknown argument or bad value: ", a);
    }
    if (!ckpt || (!text) == (!ids_arg))
        return usage_error("--checkpoint and one of --prompt or --prompt-ids are required", NULL);
    gt_error err = {0};
    gt_tokenizer *tk = NULL;
    int32_t *prompt = malloc(GEN_MAX_PROMPT * sizeof *prompt);
    gt_generate_result res = {0};
    int n_prompt = 0, rc = prompt ? GT_OK : GT_ERR_NOMEM;
    if (!rc && ids_arg && !parse_ids(ids_arg, prompt, &n_prompt)) {
        free(prompt);
        return usage_error("--prompt-ids takes comma-separated token ids, not ", ids_arg);
    }
    if (!rc && text) {
        rc = load_tokenizer(tok_path, ckpt, &tk, &err);
        uint32_t *ids = NULL;
        size_t n = 0, cap = 0;
        if (!rc)
            rc = gt_tokenizer_encode(tk, (const unsigned char *)text, strlen(text), &ids, &n, &cap,
                                     &err);
        if (!rc && (n == 0 || n > GEN_MAX_PROMPT))
            rc = gt_error_set(&err, GT_ERR_INVALID, "--prompt encodes to %zu tokens (1 to %d)", n,
                              GEN_MAX_PROMPT);
        for (size_t i = 0; !rc && i < n; i++)
            prompt[i] = (int32_t)ids[i];
        n_prompt = (int)n;
        free(ids);
        if (!rc) o.stop_id = gt_tokenizer_eod(tk);
    }
    if (!rc) rc = gt_generate(ckpt, prompt, n_prompt, &o, &res, &err);
    if (!rc) report(&res.stats);
    const int32_t *out = res.ids;
    int n_out = res.n;
    if (!rc && tk) {
        unsigned char *bytes = NULL;
        size_t nb = 0;
        uint32_t *u = malloc((size_t)(n_out ? n_out : 1) * sizeof *u);
        int keep = 0;
        for (int i = 0; u && i < n_out; i++)
            if (out[i] != o.stop_id) u[keep++] = (uint32_t)out[i];
        rc = u ? gt_tokenizer_decode(tk, u, (size_t)keep, &bytes, &nb, &err) : GT_ERR_NOMEM;
        if (!rc) printf("%s%.*s\n", text, (int)nb, (const char *)bytes);
        free(bytes);
        free(u);
    } else if (!rc) {
        for (int i = 0; i < n_out; i++)
            printf("%s%d", i ? "," : "", out[i]);
        printf("\n");
    }
    if (rc) fprintf(stderr, "graphtrain generate: %s\n", err.msg[0] ? err.msg : "out of memory");
    gt_tokenizer_destroy(tk);
    free(prompt);
    gt_generate_result_free(&res);
    return rc ? GEN_EXIT_FAILED : 0;
}
