/* graphtrain command line: dispatches `graphtrain <command> [flags] [key=value ...]` to the
 * commands in cli/ (each receives argv starting at its own name, getopt style). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "graphtrain.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary; /* one line for `graphtrain --help` */
} command;

static int cmd_config_reference(int argc, char **argv) {
    (void)argv;
    if (argc > 1) {
        printf("usage: graphtrain config-reference\n"
               "Prints the configuration reference (Markdown table of every key: type, default,\n"
               "allowed values, description), generated from the key table.\n");
        return !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ? 0 : 2;
    }
    char *args[] = {"validate", "--reference", NULL};
    return gt_cmd_validate(2, args);
}

static const command k_commands[] = {
    {"train", gt_cmd_train, "train a model from a recipe, eagerly or with CUDA graphs"},
    {"bench", gt_cmd_bench, "time eager vs graphed steps (Bridge harness flags accepted)"},
    {"validate", gt_cmd_validate, "check a configuration against every rule, all at once"},
    {"recipes", gt_cmd_recipes, "list the recipes with a one-line description each"},
    {"prepare-data", gt_cmd_prepare_data, "turn text files into token shards"},
    {"tune-gemm", gt_cmd_tune_gemm, "pick cuBLASLt's GEMM algorithms by step time (a table)"},
    {"export", gt_cmd_export, "write a checkpoint as a Hugging Face folder (safetensors)"},
    {"import", gt_cmd_import, "make an initial checkpoint from a Hugging Face folder"},
    {"generate", gt_cmd_generate, "sample a continuation from a checkpoint (CPU)"},
    {"logits", gt_cmd_logits, "a checkpoint's logits for token ids, as JSON (CPU or CUDA)"},
    {"config-reference", cmd_config_reference, "print the configuration reference (Markdown)"},
};
#define N_COMMANDS (sizeof k_commands / sizeof k_commands[0])

static void usage(FILE *out) {
    fprintf(out,
            "graphtrain %s: transformer pretraining in C/CUDA with CUDA graphs\n\n"
            "usage: graphtrain <command> [flags] [key=value ...]\n"
            "       graphtrain <command> --help\n\ncommands:\n",
            GT_VERSION);
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-17s %s\n", k_commands[i].name, k_commands[i].summary);
    fprintf(out,
            "\nconfiguration (train, bench, validate), applied in this order:\n"
            "  --recipe NAME|PATH   a YAML recipe (`graphtrain recipes` lists them)\n"
            "  --config FILE        your own YAML file (Bridge's nesting: model:, train:, ...)\n"
            "  Bridge harness flags -m/--model_family_name, -mr/--model_recipe_name, --task,\n"
            "                       -g/--gpu, -c/--compute_dtype, -ng/--num_gpus,\n"
            "                       --cuda_graph_impl, --cuda_graph_scope a,b,c\n"
            "  key=value            any key, e.g. model.cuda_graph_impl=local (wins over all)\n"
            "\nexamples:\n"
            "  graphtrain validate --recipe llama3_8b model.cuda_graph_scope=attn,mlp\n"
            "  graphtrain train --recipe demo\n"
            "  graphtrain config-reference\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("graphtrain %s\n", GT_VERSION);
        return 0;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], k_commands[i].name)) return k_commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "graphtrain: unknown command '%s'; run `graphtrain --help`\n", argv[1]);
    return 2;
}
