/* graphtrain recipes: lists recipes/<name>.yaml with the one-line description each file starts
 * with ("# ..."), or, given a name, prints where that recipe lives and its contents. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"

#define RECIPES_MAX 128
#define RECIPE_NAME_MAX 96
#define RECIPE_DESC_MAX 160

typedef struct recipe_entry {
    char name[RECIPE_NAME_MAX];
    char desc[RECIPE_DESC_MAX];
} recipe_entry;

static int by_name(const void *a, const void *b) {
    return strcmp(((const recipe_entry *)a)->name, ((const recipe_entry *)b)->name);
}

/* The first "# text" line of the file, without the '#'. */
static void read_description(const char *path, char *desc, size_t n) {
    snprintf(desc, n, "(no description: start the file with a '# ...' line)");
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (line[0] != '#') continue;
        char *s = line + 1;
        while (*s == ' ')
            s++;
        s[strcspn(s, "\r\n")] = '\0';
        snprintf(desc, n, "%s", s);
        break;
    }
    fclose(f);
}

static int show(const char *name) {
    char path[GT_PATH_MAX + 256];
    gt_error err = {0};
    if (gt_cli_find_recipe(name, path, sizeof path, &err) != GT_OK) {
        fprintf(stderr, "graphtrain recipes: %s\n", err.msg);
        return 2;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "graphtrain recipes: cannot read %s\n", path);
        return 2;
    }
    printf("# %s\n", path);
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, got, stdout);
    fclose(f);
    return 0;
}

int gt_cmd_recipes(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: graphtrain recipes [NAME]\n\n"
               "Lists the recipes (YAML files in $GT_RECIPE_DIR, ./recipes or next to the\n"
               "executable's ../recipes) with a one-line description each; with NAME, prints\n"
               "that recipe. Use one with `--recipe NAME` in train, bench and validate.\n");
        return 0;
    }
    if (argc > 2) {
        fprintf(stderr, "graphtrain recipes: give at most one recipe name\n");
        return 2;
    }
    if (argc == 2) return show(argv[1]);
    char dir[GT_PATH_MAX + 64];
    gt_error err = {0};
    if (gt_cli_recipe_dir(dir, sizeof dir, &err) != GT_OK) {
        fprintf(stderr, "graphtrain recipes: %s\n", err.msg);
        return 2;
    }
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "graphtrain recipes: cannot open %s\n", dir);
        return 2;
    }
    recipe_entry *entries = calloc(RECIPES_MAX, sizeof *entries);
    if (!entries) {
        closedir(d);
        fprintf(stderr, "graphtrain recipes: out of memory\n");
        return 2;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < RECIPES_MAX) {
        size_t len = strlen(e->d_name);
        if (len <= 5 || len - 5 >= RECIPE_NAME_MAX || strcmp(e->d_name + len - 5, ".yaml"))
            continue;
        snprintf(entries[n].name, RECIPE_NAME_MAX, "%.*s", (int)(len - 5), e->d_name);
        char path[GT_PATH_MAX + 64 + 260];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        read_description(path, entries[n].desc, RECIPE_DESC_MAX);
        n++;
    }
    closedir(d);
    qsort(entries, (size_t)n, sizeof entries[0], by_name);
    printf("recipes in %s:\n", dir);
    for (int i = 0; i < n; i++)
        printf("  %-22s %s\n", entries[i].name, entries[i].desc);
    free(entries);
    return 0;
}
