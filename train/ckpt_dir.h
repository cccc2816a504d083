/* The checkpoint folder (checkpoint.save), in Megatron's layout: one folder per iteration
 * (iter_0000100/ with checkpoint.bin and the resolved configuration run_config.txt) and
 * latest_checkpointed_iteration.txt naming the newest complete one. Before step 1 the folder
 * is created, locked against a second writer (flock on graphtrain.lock, which names the
 * holder's pid), cleared of temporary files that killed writers left, and checked for another
 * run's checkpoints; after each save the latest file is updated and all but the newest
 * checkpoint.most_recent_k iterations removed. */
#ifndef GT_TRAIN_CKPT_DIR_H
#define GT_TRAIN_CKPT_DIR_H

#include <stddef.h>
#include <stdio.h>

#include "config/config.h"
#include "core/error.h"

#define GT_CKPT_LATEST_FILE "latest_checkpointed_iteration.txt"
#define GT_CKPT_LOCK_FILE "graphtrain.lock"
#define GT_CKPT_CONFIG_FILE "run_config.txt"
#define GT_CKPT_ITER_FMT "iter_%07lld"

typedef struct gt_ckpt_dir {
    char save[GT_PATH_MAX]; /* checkpoint.save; empty = not saving */
    int lock_fd;            /* held for the run; -1 when not saving */
    int most_recent_k;      /* -1 = keep every iteration */
} gt_ckpt_dir;

/* Prepares checkpoint.save (see above) and decides what the run starts from: *resume gets the
 * checkpoint file to load, or "" for a fresh start. checkpoint.load equal to checkpoint.save
 * resumes its latest iteration when there is one and starts fresh otherwise (Megatron's
 * usual way to make a job restartable). A fresh start (or a resume from elsewhere) into a
 * folder holding checkpoints is refused unless checkpoint.overwrite=true, which removes them.
 * Notes go to out. */
int gt_ckpt_dir_open(gt_ckpt_dir *d, const gt_config *cfg, char *resume, size_t n, FILE *out,
                     gt_error *err);
/* Releases the lock; accepts a never-opened (zeroed with lock_fd -1) or NULL dir. */
void gt_ckpt_dir_close(gt_ckpt_dir *d);

/* save/iter_NNNNNNN */
const char *gt_ckpt_iter_path(const char *save, long long iter, char *buf, size_t n);
/* After iter's checkpoint.bin is complete: writes its run_config.txt, points the latest file
 * at it, then applies checkpoint.most_recent_k. */
int gt_ckpt_dir_commit(gt_ckpt_dir *d, long long iter, const gt_config *cfg, gt_error *err);

/* The checkpoint file a path names: a folder with a latest file -> its iteration's
 * checkpoint.bin; a folder -> folder/checkpoint.bin; else the path itself. *iter gets the
 * iteration when the latest file named it, else -1. GT_ERR_IO when the file does not exist. */
int gt_ckpt_resolve(const char *path, char *file, size_t n, long long *iter, gt_error *err);

#endif
