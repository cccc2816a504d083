/* graphtrain export --checkpoint DIR --to hf OUT: a checkpoint as a Hugging Face folder that
 * transformers loads (config.json, generation_config.json, safetensors; train/hf_convert.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "train/hf_convert.h"

#define EXPORT_EXIT_FAILED 1
#define EXPORT_EXIT_USAGE 2

static void usage(FILE *out) {
    fprintf(out,
            "usage: graphtrain export --checkpoint DIR --to hf OUT [--dtype fp32|bf16]\n"
            "                         [--max-shard-size SIZE]\n\n"
            "Writes the checkpoint's weights as a Hugging Face folder: LlamaForCausalLM for dense\n"
            "models, MixtralForCausalLM for models with MoE on every layer; with\n"
            "model.qk_layernorm, Qwen3ForCausalLM and Qwen3MoeForCausalLM.\n"
            "  --checkpoint DIR     a checkpoint.save folder (its latest iteration), an iter_\n"
            "                       folder or a checkpoint.bin\n"
            "  --to hf OUT          the folder to write (created; same-named files replaced)\n"
            "  --dtype D            fp32 (default: the master weights exactly) or bf16\n"
            "  --max-shard-size S   bytes per safetensors file, with K, M or G (powers of 1024);\n"
            "                       past it the weights are sharded with\n"
            "                       model.safetensors.index.json (default 5G)\n");
}

/* "5G", "300M", "4096" -> bytes; 0 when malformed */
static unsigned long long parse_size(const char *s) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno || s[0] == '-') return 0;
    unsigned long long mul = 1;
    if (*end == 'K' || *end == 'k')
        mul = 1ull << 10;
    else if (*end == 'M' || *end == 'm')
        mul = 1ull << 20;
    else if (*end == 'G' || *end == 'g')
        mul = 1ull << 30;
    else if (*end)
        return 0;
    if (*end && end[1] && strcmp(end + 1, "B") && strcmp(end + 1, "iB")) return 0;
    return v * mul;
}

static int usage_error(const char *msg, const char *arg) {
    fprintf(stderr, "graphtrain export: %s%s; see `graphtrain export --help`\n", msg,
            arg ? arg : "");
    return EXPORT_EXIT_USAGE;
}

int gt_cmd_export(int argc, char **argv) {
    const char *ckpt = NULL, *out = NULL;
    gt_hf_export_opts o = {GT_ST_F32, GT_HF_DEFAULT_SHARD_BYTES};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) return usage_error("missing value after ", a);
        if (!strcmp(a, "--checkpoint")) {
            ckpt = argv[++i];
        } else if (!strcmp(a, "--to")) {
            if (strcmp(argv[++i], "hf")) return usage_error("--to takes hf, not ", argv[i]);
            if (i + 1 >= argc) return usage_error("--to hf needs the output folder", NULL);
            out = argv[++i];
        } else if (!strcmp(a, "--dtype")) {
            const char *d = argv[++i];
            if (!strcmp(d, "fp32") || !strcmp(d, "float32"))
                o.dtype = GT_ST_F32;
            else if (!strcmp(d, "bf16") || !strcmp(d, "bfloat16"))
                o.dtype = GT_ST_BF16;
            else
                return usage_error("--dtype takes fp32 or bf16, not ", d);
        } else if (!strcmp(a, "--max-shard-size")) {
            o.max_shard_bytes = parse_size(argv[++i]);
            if (!o.max_shard_bytes)
                return usage_error("--max-shard-size takes a size like 5G, 300M or 4096, not ",
                                   argv[i]);
        } else {
            return usage_error("unknown argument ", a);
        }
    }
    if (!ckpt || !out) return usage_error("--checkpoint DIR and --to hf OUT are required", NULL);
    gt_error err = {0};
    if (gt_hf_export(ckpt, out, &o, stdout, &err)) {
        fprintf(stderr, "graphtrain export: %s\n", err.msg);
        return EXPORT_EXIT_FAILED;
    }
    return 0;
}
