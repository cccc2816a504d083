/* Checkpoint files: a versioned header (magic, version, a fingerprint of the parameter shapes,
 * step state, RNG seed, data position, the fp8 state's sizes), then the fp32 master weights,
 * the Adam moments m and v and delayed scaling's fp8 state, with a CRC32 over everything. Written
 * to a temporary name, fsync'ed and renamed, so a crash never leaves a half checkpoint; anything
 * corrupt or truncated is refused. */
#ifndef GT_TRAIN_CHECKPOINT_H
#define GT_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "core/crc32.h"
#include "core/error.h"
#include "core/step_state.h"
#include "data/data.h"

#define GT_CKPT_MAGIC 0x54504b4354475447ull /* "GTGTCKPT" little-endian */
/* 2: the runtime.cuda settings text and the learning-rate schedule (gt_ckpt_sched)
 * 3: delayed scaling's fp8 state (gt_ckpt_fp8) after the moments; version 2 files still load,
 *    as checkpoints without fp8 state */
#define GT_CKPT_VERSION 3
#define GT_CKPT_VERSION_NO_FP8 2
#define GT_CKPT_FILE "checkpoint.bin"
#define GT_CKPT_SHAPE_MAX 1024
#define GT_CKPT_SETTINGS_MAX 256

/* The learning-rate schedule a run trained with: resolved as step_begin computes it, and the
 * keys that resolve into its step counts, so a resume can name what changed. */
typedef struct gt_ckpt_sched {
    gt_lr_schedule lr;
    int32_t train_iters;     /* train.train_iters */
    int32_t lr_decay_iters;  /* scheduler.lr_decay_iters as set (0 = train_iters) */
    int32_t lr_warmup_iters; /* scheduler.lr_warmup_iters as set */
    int32_t pad_;
    double lr_warmup_fraction; /* scheduler.lr_warmup_fraction as set (-1 = unset) */
} gt_ckpt_sched;

/* Bounds a loaded header must respect (far beyond any real run, small enough that no size
 * computed from them overflows). */
#define GT_CKPT_MAX_PARAMS (1ull << 40)
#define GT_CKPT_MAX_STEP (1ll << 40)
#define GT_CKPT_MAX_SAMPLES (1ull << 48)
#define GT_CKPT_MAX_FP8_SLOTS (1u << 24)
#define GT_CKPT_MAX_FP8_HISTORY 65536u /* model.fp8_amax_history_len's upper bound */

/* The fp8 scaling state a run carries from step to step: delayed scaling's per-tensor scales
 * (gt_fp8_meta, meta_bytes each) and amax history [n_meta][history_len]. Other recipes take
 * their scales from each step's tensors and write none (recipe names the writer's, n_meta 0). */
typedef struct gt_ckpt_fp8_info {
    uint32_t recipe;      /* gt_fp8_recipe of the run that wrote it (GT_FP8_RECIPE_NONE: bf16) */
    uint32_t n_meta;      /* scaling slots; 0 when no state was written */
    uint32_t meta_bytes;  /* bytes of one slot (sizeof(gt_fp8_meta)) */
    uint32_t history_len; /* amax history entries per slot */
} gt_ckpt_fp8_info;

typedef struct gt_ckpt_fp8 {
    gt_ckpt_fp8_info info;
    void *meta;     /* [n_meta] slots of meta_bytes */
    float *history; /* [n_meta * history_len] */
} gt_ckpt_fp8;

typedef struct gt_ckpt_meta {
    uint64_t fingerprint;          /* gt_ckpt_fingerprint of the model's shape keys */
    char shape[GT_CKPT_SHAPE_MAX]; /* the same keys as text, for error messages */
    /* the resolved settings that choose kernels without changing shapes, as text
     * ("runtime.cuda: attention=auto ..."): a record of how the state was computed */
    char settings[GT_CKPT_SETTINGS_MAX];
    uint64_t n_params;
    uint64_t seed;       /* rng.seed of the run */
    gt_data_pos data;    /* training data position after the last step */
    gt_step_state state; /* device step state after the last step */
    gt_ckpt_sched sched; /* the learning-rate schedule trained with */
} gt_ckpt_meta;

/* Fingerprint (FNV-1a) and text of the keys that decide parameter shapes. */
uint64_t gt_ckpt_fingerprint(const gt_config *cfg, size_t n_params, char *shape, size_t n);

/* The file a checkpoint path names: dir/checkpoint.bin for a directory, else the path. */
const char *gt_ckpt_file(const char *path, char *buf, size_t n);

/* Writes dir/checkpoint.bin (creating dir). master, m, v are host arrays [n_params]; no fp8
 * state. */
int gt_ckpt_write(const char *dir, const gt_ckpt_meta *meta, const float *master, const float *m,
                  const float *v, gt_error *err);
/* The same with fp8 state (fp8 may be NULL: none; its arrays are host memory). */
int gt_ckpt_write_fp8(const char *dir, const gt_ckpt_meta *meta, const float *master,
                      const float *m, const float *v, const gt_ckpt_fp8 *fp8, gt_error *err);

/* Reads and verifies a checkpoint (directory or file); master, m, v are malloc'ed
 * [n_params] arrays the caller frees. */
int gt_ckpt_read(const char *path, gt_ckpt_meta *meta, float **master, float **m, float **v,
                 gt_error *err);
/* The same with the fp8 state: fp8->meta and fp8->history malloc'ed (NULL when the file holds
 * none, info.n_meta 0: written without, or by format version 2); the caller frees them. */
int gt_ckpt_read_fp8(const char *path, gt_ckpt_meta *meta, float **master, float **m, float **v,
                     gt_ckpt_fp8 *fp8, gt_error *err);

#endif
