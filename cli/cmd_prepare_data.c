/* graphtrain prepare-data: placeholder until the command lands (owned by its module's author). */
#include <stdio.h>

#include "cli/cli.h"

int gt_cmd_prepare_data(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "graphtrain prepare-data: not available in this build yet\n");
    return 2;
}
