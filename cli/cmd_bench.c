/* graphtrain bench: placeholder until the command lands (owned by its module's author). */
#include <stdio.h>

#include "cli/cli.h"

int gt_cmd_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "graphtrain bench: not available in this build yet\n");
    return 2;
}
