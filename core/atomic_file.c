/* Atomic file writing (temp + fsync + rename) and mkdir -p; see atomic_file.h. */
#include "core/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int gt_atomic_open(gt_atomic_file *a, const char *path, gt_error *err) {
    memset(a, 0, sizeof *a);
    if (strlen(path) >= sizeof a->path)
        return gt_error_set(err, GT_ERR_INVALID, "path too long: %s", path);
    snprintf(a->path, sizeof a->path, "%s", path);
    snprintf(a->tmp, sizeof a->tmp, "%s.tmp.%ld", path, (long)getpid());
    a->f = fopen(a->tmp, "wb");
    if (!a->f)
        return gt_error_set(err, GT_ERR_IO,
                            "cannot create %s: %s; check that the directory "
                            "exists and is writable",
                            a->tmp, strerror(errno));
    return GT_OK;
}

int gt_atomic_write(gt_atomic_file *a, const void *data, size_t bytes, gt_error *err) {
    if (!a->f) return gt_error_set(err, GT_ERR_IO, "writing %s: file is not open", a->path);
    if (bytes && fwrite(data, 1, bytes, a->f) != bytes) {
        int e = errno;
        gt_atomic_abort(a);
        return gt_error_set(err, GT_ERR_IO, "writing %s: %s (disk full?)", a->path, strerror(e));
    }
    return GT_OK;
}

static void fsync_parent(const char *path) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        (void)fsync(fd); /* best effort: some filesystems refuse fsync on directories */
        close(fd);
    }
}

int gt_atomic_commit(gt_atomic_file *a, gt_error *err) {
    if (!a->f) return gt_error_set(err, GT_ERR_IO, "writing %s: file is not open", a->path);
    int bad = fflush(a->f) != 0 || fsync(fileno(a->f)) != 0;
    int e = errno;
    if (fclose(a->f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    a->f = NULL;
    if (bad) {
        unlink(a->tmp);
        return gt_error_set(err, GT_ERR_IO, "writing %s: %s (disk full?)", a->path, strerror(e));
    }
    if (rename(a->tmp, a->path) != 0) {
        e = errno;
        unlink(a->tmp);
        return gt_error_set(err, GT_ERR_IO, "renaming %s to %s: %s", a->tmp, a->path, strerror(e));
    }
    fsync_parent(a->path);
    return GT_OK;
}

void gt_atomic_abort(gt_atomic_file *a) {
    if (a->f) {
        fclose(a->f);
        a->f = NULL;
        unlink(a->tmp);
    }
}

int gt_mkdirs(const char *dir, gt_error *err) {
    char buf[1024];
    if (strlen(dir) >= sizeof buf)
        return gt_error_set(err, GT_ERR_INVALID, "directory path too long: %s", dir);
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return gt_error_set(err, GT_ERR_IO, "cannot create directory %s: %s", buf,
                                    strerror(errno));
            *p = c;
            if (c == '\0') break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return gt_error_set(err, GT_ERR_IO, "%s exists but is not a directory", dir);
    return GT_OK;
}
