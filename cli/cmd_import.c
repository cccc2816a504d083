/* graphtrain import --from hf DIR --out CKPT: a Hugging Face folder as an initial checkpoint
 * for `graphtrain train checkpoint.load=CKPT` (train/hf_convert.h). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "train/hf_convert.h"

#define IMPORT_EXIT_FAILED 1
#define IMPORT_EXIT_USAGE 2

static void usage(FILE *out) {
    fprintf(out,
            "usage: graphtrain import --from hf DIR --out CKPT\n\n"
            "Makes an initial checkpoint (step 0, zero optimizer moments) from a Hugging Face\n"
            "folder: config.json and safetensors weights (F32, BF16 or F16; one\n"
            "model.safetensors or shards named by model.safetensors.index.json).\n"
            "LlamaForCausalLM, MixtralForCausalLM, Qwen3ForCausalLM and Qwen3MoeForCausalLM\n"
            "import; an architecture or option graphtrain cannot compute is refused by name.\n"
            "CKPT/model.yaml holds the model keys:\n"
            "  graphtrain train --recipe R --config CKPT/model.yaml checkpoint.load=CKPT\n");
}

static int usage_error(const char *msg, const char *arg) {
    fprintf(stderr, "graphtrain import: %s%s; see `graphtrain import --help`\n", msg,
            arg ? arg : "");
    return IMPORT_EXIT_USAGE;
}

int gt_cmd_import(int argc, char **argv) {
    const char *dir = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) return usage_error("missing value after ", a);
        if (!strcmp(a, "--from")) {
            if (strcmp(argv[++i], "hf")) return usage_error("--from takes hf, not ", argv[i]);
            if (i + 1 >= argc) return usage_error("--from hf needs the folder", NULL);
            dir = argv[++i];
        } else if (!strcmp(a, "--out")) {
            out = argv[++i];
        } else {
            return usage_error("unknown argument ", a);
        }
    }
    if (!dir || !out) return usage_error("--from hf DIR and --out CKPT are required", NULL);
    gt_error err = {0};
    if (gt_hf_import(dir, out, stdout, &err)) {
        fprintf(stderr, "graphtrain import: %s\n", err.msg);
        return IMPORT_EXIT_FAILED;
    }
    return 0;
}
