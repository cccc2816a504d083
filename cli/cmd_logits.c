/* graphtrain logits --checkpoint DIR --tokens 1,2,3 [--device cpu|cuda|auto] [--out FILE]:
 * the logits of a checkpoint's model for a token sequence, as JSON (tokens, vocab_size,
 * logits [T][V], loss: the mean next-token cross entropy), for checks against other
 * implementations such as transformers (bench/hf_parity.py). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"
#include "core/atomic_file.h"
#include "train/logits.h"

#define LG_EXIT_FAILED 1
#define LG_EXIT_USAGE 2
#define LG_MAX_TOKENS 65536

static void usage(FILE *out) {
    fprintf(out,
            "usage: graphtrain logits --checkpoint DIR --tokens 1,2,3 [--device cpu|cuda|auto]\n"
            "                         [--out FILE]\n\n"
            "Runs the checkpoint's model forward (no dropout) over the token ids and writes\n"
            "{\"tokens\", \"vocab_size\", \"logits\": [T][V], \"loss\"} as JSON, loss being the\n"
            "mean next-token cross entropy of the sequence; prints the loss.\n"
            "  --checkpoint DIR   a checkpoint.save folder, an iter_ folder or a checkpoint.bin\n"
            "  --tokens LIST      comma-separated token ids\n"
            "  --device D         cpu (the fp32 reference), cuda (bf16) or auto (default cpu)\n"
            "  --out FILE         where the JSON goes (default: standard output)\n");
}

static int usage_error(const char *msg, const char *arg) {
    fprintf(stderr, "graphtrain logits: %s%s; see `graphtrain logits --help`\n", msg,
            arg ? arg : "");
    return LG_EXIT_USAGE;
}

static int parse_ids(const char *s, int32_t *ids, int *n) {
    *n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > 2147483647L || *n == LG_MAX_TOKENS) return 0;
        ids[(*n)++] = (int32_t)v;
        if (*end && *end != ',') return 0;
        s = *end == ',' ? end + 1 : end;
    }
    return *n > 0;
}

static int write_file(const char *path, const char *text, gt_error *err) {
    gt_atomic_file a;
    int rc = gt_atomic_open(&a, path, err);
    if (!rc) rc = gt_atomic_write(&a, text, strlen(text), err);
    if (!rc) rc = gt_atomic_commit(&a, err);
    gt_atomic_abort(&a);
    return rc;
}

static cJSON *to_json(const int32_t *tok, int T, const float *lg, int V, double loss) {
    cJSON *j = cJSON_CreateObject(), *rows = cJSON_CreateArray();
    if (!j || !rows) {
        cJSON_Delete(j);
        cJSON_Delete(rows);
        return NULL;
    }
    int ok = cJSON_AddItemToObject(j, "tokens", cJSON_CreateIntArray(tok, T));
    ok &= cJSON_AddNumberToObject(j, "vocab_size", V) != NULL;
    ok &= cJSON_AddNumberToObject(j, "loss", loss) != NULL;
    ok &= cJSON_AddItemToObject(j, "logits", rows);
    for (int t = 0; ok && t < T; t++)
        ok &= cJSON_AddItemToArray(rows, cJSON_CreateFloatArray(lg + (size_t)t * V, V));
    if (!ok) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

int gt_cmd_logits(int argc, char **argv) {
    const char *ckpt = NULL, *ids = NULL, *out = NULL;
    gt_device_kind device = GT_DEVICE_CPU;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) return usage_error("missing value after ", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--checkpoint"))
            ckpt = v;
        else if (!strcmp(a, "--tokens"))
            ids = v;
        else if (!strcmp(a, "--out"))
            out = v;
        else if (!strcmp(a, "--device")) {
            if (!strcmp(v, "cpu"))
                device = GT_DEVICE_CPU;
            else if (!strcmp(v, "cuda"))
                device = GT_DEVICE_CUDA;
            else if (!strcmp(v, "auto"))
                device = GT_DEVICE_AUTO;
            else
                return usage_error("--device takes cpu, cuda or auto, not ", v);
        } else
            return usage_error("unknown argument ", a);
    }
    if (!ckpt) return usage_error("--checkpoint DIR is required", NULL);
    if (!ids) return usage_error("--tokens LIST is required", NULL);
    int32_t *tok = malloc(LG_MAX_TOKENS * sizeof *tok);
    int T = 0;
    if (!tok) return LG_EXIT_FAILED;
    if (!parse_ids(ids, tok, &T)) {
        free(tok);
        return usage_error("--tokens wants comma-separated ids >= 0, got ", ids);
    }
    gt_error err = {0};
    float *lg = NULL;
    int V = 0;
    double loss = 0;
    int rc = gt_checkpoint_logits(ckpt, device, tok, T, &lg, &V, &loss, &err);
    cJSON *j = rc ? NULL : to_json(tok, T, lg, V, loss);
    char *text = j ? cJSON_PrintUnformatted(j) : NULL;
    if (!rc && !text) rc = gt_error_set(&err, GT_ERR_NOMEM, "out of host memory writing JSON");
    if (!rc && out)
        rc = write_file(out, text, &err);
    else if (!rc)
        printf("%s\n", text);
    if (!rc) fprintf(out ? stdout : stderr, "loss %.9g over %d tokens\n", loss, T);
    if (rc) fprintf(stderr, "graphtrain logits: %s\n", err.msg);
    cJSON_free(text);
    cJSON_Delete(j);
    free(lg);
    free(tok);
    return rc ? LG_EXIT_FAILED : 0;
}
