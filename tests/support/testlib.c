/* Test helpers; see testlib.h. */
#include "testlib.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

const char *gt_test_source_path(const char *rel, char *buf, size_t n) {
    const char *root = getenv("GT_SOURCE_DIR");
    snprintf(buf, n, "%s/%s", root ? root : ".", rel);
    return buf;
}

void gt_test_tmpdir(char *buf, size_t n) {
    snprintf(buf, n, "/tmp/gt_test_XXXXXX");
    if (!mkdtemp(buf)) {
        fprintf(stderr, "mkdtemp failed\n");
        buf[0] = '\0';
    }
}

void gt_test_write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) fail_msg("cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

int gt_test_run(const char *args, char *out, size_t n) {
    const char *bin = getenv("GT_BINARY");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", bin ? bin : "./graphtrain", args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t used = 0;
    if (n) out[0] = '\0';
    while (n && used + 1 < n) {
        size_t got = fread(out + used, 1, n - 1 - used, p);
        if (got == 0) break;
        used += got;
    }
    if (n) out[used] = '\0';
    char sink[4096];
    while (fread(sink, 1, sizeof sink, p) > 0) {
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void gt_test_remove_flat_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}
