/* The checkpoint folder: layout, lock, stale temporaries, retention; see ckpt_dir.h. */
#define _GNU_SOURCE /* O_CLOEXEC, realpath */
#include "train/ckpt_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/keys.h"
#include "core/atomic_file.h"
#include "train/checkpoint.h"

#define CKPT_MAX_ITERS 100000 /* iteration folders one listing handles */

const char *gt_ckpt_iter_path(const char *save, long long iter, char *buf, size_t n) {
    char name[32];
    snprintf(name, sizeof name, GT_CKPT_ITER_FMT, iter);
    snprintf(buf, n, "%s/%s", save, name);
    return buf;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* iter_NNNNNNN (digits only) -> NNNNNNN, else -1 */
static long long iter_of(const char *name) {
    if (strncmp(name, "iter_", 5) || !name[5]) return -1;
    long long v = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9' || v > LLONG_MAX / 10 - 10) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

/* The iteration the latest file of dir names; 0 with *iter = -1 when there is no such file. */
static int read_latest(const char *dir, long long *iter, gt_error *err) {
    char p[GT_PATH_MAX + 64], buf[64];
    snprintf(p, sizeof p, "%s/%s", dir, GT_CKPT_LATEST_FILE);
    *iter = -1;
    FILE *f = fopen(p, "r");
    if (!f) return GT_OK;
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[got] = '\0';
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    while (*end == '\n' || *end == ' ')
        end++;
    if (end == buf || *end || errno || v < 0)
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s does not hold an iteration number ('%.20s'); it names the newest "
                            "checkpoint folder: fix it to an existing iter_ folder's number",
                            p, buf);
    *iter = v;
    return GT_OK;
}

int gt_ckpt_resolve(const char *path, char *file, size_t n, long long *iter, gt_error *err) {
    *iter = -1;
    if (is_dir(path)) {
        int rc = read_latest(path, iter, err);
        if (rc) return rc;
        if (*iter >= 0) {
            char dir[GT_PATH_MAX + 32];
            gt_ckpt_iter_path(path, *iter, dir, sizeof dir);
            snprintf(file, n, "%s/%s", dir, GT_CKPT_FILE);
            if (!exists(file))
                return gt_error_set(err, GT_ERR_IO,
                                    "%s/%s names iteration %lld but %s does not exist; point "
                                    "checkpoint.load at an existing iter_ folder",
                                    path, GT_CKPT_LATEST_FILE, *iter, file);
            return GT_OK;
        }
    }
    gt_ckpt_file(path, file, n);
    if (!exists(file))
        return gt_error_set(err, GT_ERR_IO,
                            "checkpoint.load=%s: no checkpoint there (neither %s nor %s); check "
                            "the path, or leave checkpoint.load empty to start fresh",
                            path, GT_CKPT_LATEST_FILE, GT_CKPT_FILE);
    return GT_OK;
}

/* name ends in ".tmp.<digits>": a temporary file of core/atomic_file.c */
static int is_temp_name(const char *name) {
    const char *t = strstr(name, ".tmp.");
    if (!t) return 0;
    t += 5;
    if (!*t) return 0;
    for (; *t; t++)
        if (*t < '0' || *t > '9') return 0;
    return 1;
}

/* Calls fn(dir, entry name, ctx) for each entry of dir but . and .. */
static int each_entry(const char *dir, int (*fn)(const char *, const char *, void *), void *ctx,
                      gt_error *err) {
    DIR *dp = opendir(dir);
    if (!dp)
        return gt_error_set(err, GT_ERR_IO, "cannot read checkpoint folder %s: %s", dir,
                            strerror(errno));
    struct dirent *e;
    int rc = GT_OK;
    while (!rc && (e = readdir(dp)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) rc = fn(dir, e->d_name, ctx);
    closedir(dp);
    return rc;
}

typedef struct sweep_ctx {
    int removed;
    gt_error *err;
} sweep_ctx;

static int remove_temp(const char *dir, const char *name, void *vctx) {
    sweep_ctx *c = vctx;
    char p[GT_PATH_MAX + 300];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (is_temp_name(name)) {
        if (unlink(p) != 0)
            return gt_error_set(c->err, GT_ERR_IO, "cannot remove the stale temporary file %s: %s",
                                p, strerror(errno));
        c->removed++;
    } else if (iter_of(name) >= 0 && is_dir(p)) {
        return each_entry(p, remove_temp, c, c->err);
    }
    return GT_OK;
}

/* Removes an iteration folder and the files in it. */
static int remove_iter_dir(const char *dir, gt_error *err) {
    DIR *dp = opendir(dir);
    if (!dp) return gt_error_set(err, GT_ERR_IO, "cannot read %s: %s", dir, strerror(errno));
    struct dirent *e;
    int rc = GT_OK;
    while (!rc && (e = readdir(dp))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[GT_PATH_MAX + 300];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) != 0)
            rc = gt_error_set(err, GT_ERR_IO, "cannot remove %s: %s", p, strerror(errno));
    }
    closedir(dp);
    if (!rc && rmdir(dir) != 0)
        rc = gt_error_set(err, GT_ERR_IO, "cannot remove %s: %s", dir, strerror(errno));
    return rc;
}

typedef struct iter_list {
    long long v[CKPT_MAX_ITERS];
    int n;
} iter_list;

static int add_iter(const char *dir, const char *name, void *vctx) {
    iter_list *l = vctx;
    char p[GT_PATH_MAX + 300];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    long long it = iter_of(name);
    if (it >= 0 && is_dir(p) && l->n < CKPT_MAX_ITERS) l->v[l->n++] = it;
    return GT_OK;
}

static int cmp_ll(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

static int list_iters(const char *save, iter_list *l, gt_error *err) {
    l->n = 0;
    int rc = each_entry(save, add_iter, l, err);
    if (!rc) qsort(l->v, (size_t)l->n, sizeof l->v[0], cmp_ll);
    return rc;
}

static int take_lock(gt_ckpt_dir *d, gt_error *err) {
    char p[GT_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", d->save, GT_CKPT_LOCK_FILE);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return gt_error_set(err, GT_ERR_IO,
                            "checkpoint.save=%s cannot be written (creating %s: %s); choose a "
                            "folder this user can write",
                            d->save, p, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char buf[32] = {0};
        ssize_t got = pread(fd, buf, sizeof buf - 1, 0);
        close(fd);
        long pid = got > 0 ? strtol(buf, NULL, 10) : 0;
        if (e == EWOULDBLOCK)
            return gt_error_set(err, GT_ERR_INVALID,
                                "checkpoint.save=%s is in use by another graphtrain run (pid "
                                "%ld holds %s); wait for it to finish or stop it, or choose "
                                "another checkpoint.save",
                                d->save, pid, p);
        return gt_error_set(err, GT_ERR_IO, "cannot lock %s: %s", p, strerror(e));
    }
    char line[32];
    int len = snprintf(line, sizeof line, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)len, 0) != len) {
        int e = errno;
        close(fd);
        return gt_error_set(err, GT_ERR_IO,
                            "checkpoint.save=%s cannot be written (%s: %s); free space or "
                            "choose another folder",
                            d->save, p, strerror(e));
    }
    d->lock_fd = fd;
    return GT_OK;
}

static int same_path(const char *a, const char *b) {
    char ra[PATH_MAX], rb[PATH_MAX];
    if (realpath(a, ra) && realpath(b, rb)) return !strcmp(ra, rb);
    return !strcmp(a, b);
}

/* Removes every checkpoint of save (iteration folders, latest file, an old-layout file). */
static int remove_checkpoints(const char *save, int *removed, gt_error *err) {
    iter_list *l = malloc(sizeof *l);
    if (!l) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    int rc = list_iters(save, l, err);
    char p[GT_PATH_MAX + 64];
    for (int i = 0; !rc && i < l->n; i++)
        rc = remove_iter_dir(gt_ckpt_iter_path(save, l->v[i], p, sizeof p), err);
    *removed = rc ? 0 : l->n;
    free(l);
    const char *files[] = {GT_CKPT_LATEST_FILE, GT_CKPT_FILE};
    for (int i = 0; !rc && i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", save, files[i]);
        if (unlink(p) != 0 && errno != ENOENT)
            rc = gt_error_set(err, GT_ERR_IO, "cannot remove %s: %s", p, strerror(errno));
    }
    return rc;
}

static int prepare_save(gt_ckpt_dir *d, const gt_config *cfg, char *resume, size_t n, FILE *out,
                        gt_error *err) {
    const gt_checkpoint_config *c = &cfg->checkpoint;
    if (c->most_recent_k == 0)
        return gt_error_set(err, GT_ERR_INVALID,
                            "checkpoint.most_recent_k=0 would keep no checkpoint; set -1 (keep "
                            "all) or the number of newest checkpoints to keep");
    int rc = gt_mkdirs(d->save, err);
    if (rc) return gt_error_wrap(err, "checkpoint.save=%s: ", d->save);
    rc = take_lock(d, err);
    if (rc) return rc;
    sweep_ctx sw = {0, err};
    rc = each_entry(d->save, remove_temp, &sw, err);
    if (rc) return rc;
    if (sw.removed)
        fprintf(out,
                "checkpoint.save=%s: removed %d temporary file%s left by an interrupted "
                "writer\n",
                d->save, sw.removed, sw.removed == 1 ? "" : "s");
    long long latest;
    rc = read_latest(d->save, &latest, err);
    if (rc) return rc;
    iter_list *l = malloc(sizeof *l);
    if (!l) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    rc = list_iters(d->save, l, err);
    char old_file[GT_PATH_MAX + 32];
    snprintf(old_file, sizeof old_file, "%s/%s", d->save, GT_CKPT_FILE);
    int held = latest >= 0 || l->n > 0 || exists(old_file);
    long long newest = latest >= 0 ? latest : l->n > 0 ? l->v[l->n - 1] : -1;
    free(l);
    if (rc) return rc;
    int load_is_save = c->load[0] && same_path(c->load, d->save);
    long long it;
    if (load_is_save && !held)
        fprintf(out,
                "checkpoint.load=%s holds no checkpoint yet: starting fresh (a restart "
                "resumes from the checkpoints this run saves there)\n",
                c->load);
    else if (c->load[0] && (rc = gt_ckpt_resolve(c->load, resume, n, &it, err)))
        return rc;
    if (!held || load_is_save) return GT_OK;
    if (!c->overwrite)
        return gt_error_set(err, GT_ERR_INVALID,
                            "checkpoint.save=%s already holds checkpoints (newest iteration "
                            "%lld) and this run %s, so it would overwrite them: resume them "
                            "with checkpoint.load=%s, choose another checkpoint.save, or set "
                            "checkpoint.overwrite=true to delete them",
                            d->save, newest,
                            c->load[0] ? "resumes from another folder" : "starts fresh", d->save);
    int removed = 0;
    rc = remove_checkpoints(d->save, &removed, err);
    if (!rc)
        fprintf(out,
                "checkpoint.overwrite=true: removed the checkpoints in %s (%d iteration "
                "folder%s)\n",
                d->save, removed, removed == 1 ? "" : "s");
    return rc;
}

int gt_ckpt_dir_open(gt_ckpt_dir *d, const gt_config *cfg, char *resume, size_t n, FILE *out,
                     gt_error *err) {
    memset(d, 0, sizeof *d);
    d->lock_fd = -1;
    d->most_recent_k = cfg->checkpoint.most_recent_k;
    snprintf(d->save, sizeof d->save, "%s", cfg->checkpoint.save);
    resume[0] = '\0';
    if (!d->save[0]) {
        long long it;
        return cfg->checkpoint.load[0] ? gt_ckpt_resolve(cfg->checkpoint.load, resume, n, &it, err)
                                       : GT_OK;
    }
    int rc = prepare_save(d, cfg, resume, n, out, err);
    if (rc) gt_ckpt_dir_close(d);
    return rc;
}

void gt_ckpt_dir_close(gt_ckpt_dir *d) {
    if (!d || d->lock_fd < 0) return;
    close(d->lock_fd); /* closing the descriptor releases the flock */
    d->lock_fd = -1;
}

static int write_config(const char *path, const gt_config *cfg, gt_error *err) {
    gt_atomic_file f;
    int rc = gt_atomic_open(&f, path, err);
    if (rc) return rc;
    fprintf(f.f, "# the resolved configuration of the run that wrote this checkpoint\n");
    gt_config_print(cfg, f.f);
    if (ferror(f.f)) {
        gt_atomic_abort(&f);
        return gt_error_set(err, GT_ERR_IO, "writing %s failed (disk full?)", path);
    }
    rc = gt_atomic_commit(&f, err);
    gt_atomic_abort(&f);
    return rc;
}

static int write_line(const char *path, const char *text, gt_error *err) {
    gt_atomic_file f;
    int rc = gt_atomic_open(&f, path, err);
    if (!rc) rc = gt_atomic_write(&f, text, strlen(text), err);
    if (!rc) rc = gt_atomic_commit(&f, err);
    gt_atomic_abort(&f);
    return rc;
}

int gt_ckpt_dir_commit(gt_ckpt_dir *d, long long iter, const gt_config *cfg, gt_error *err) {
    char dir[GT_PATH_MAX + 32], p[GT_PATH_MAX + 96], line[32];
    gt_ckpt_iter_path(d->save, iter, dir, sizeof dir);
    snprintf(p, sizeof p, "%s/%s", dir, GT_CKPT_CONFIG_FILE);
    int rc = write_config(p, cfg, err);
    snprintf(p, sizeof p, "%s/%s", d->save, GT_CKPT_LATEST_FILE);
    snprintf(line, sizeof line, "%lld\n", iter);
    if (!rc) rc = write_line(p, line, err);
    if (rc || d->most_recent_k < 0) return rc;
    iter_list *l = malloc(sizeof *l);
    if (!l) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory");
    rc = list_iters(d->save, l, err);
    /* the newest k by number; the one just written always stays */
    for (int i = 0; !rc && i < l->n - d->most_recent_k; i++)
        if (l->v[i] != iter)
            rc = remove_iter_dir(gt_ckpt_iter_path(d->save, l->v[i], p, sizeof p), err);
    free(l);
    if (rc) return gt_error_wrap(err, "checkpoint.most_recent_k=%d: ", d->most_recent_k);
    return GT_OK;
}
