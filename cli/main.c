/* graphtrain command line: dispatches to the commands in cli/. */
#include <stdio.h>
#include <string.h>

#include "graphtrain.h"

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        printf("graphtrain %s: usage: graphtrain <command> [flags] [key=value ...]\n", GT_VERSION);
        return argc < 2 ? 2 : 0;
    }
    fprintf(stderr, "graphtrain: unknown command '%s'; run `graphtrain --help`\n", argv[1]);
    return 2;
}
