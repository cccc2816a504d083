/* Hugging Face folders from and to graphtrain checkpoints: `graphtrain export --to hf` writes
 * config.json, generation_config.json and safetensors (sharded with
 * model.safetensors.index.json past a size) from a checkpoint's fp32 master weights;
 * `graphtrain import --from hf` makes an initial checkpoint (step 0, zero Adam moments) that
 * `train checkpoint.load=` starts from. Names and layouts: model/hf_names.h. */
#ifndef GT_TRAIN_HF_CONVERT_H
#define GT_TRAIN_HF_CONVERT_H

#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "core/error.h"
#include "core/safetensors.h"

#define GT_HF_DEFAULT_SHARD_BYTES (5ull << 30) /* save_pretrained's 5 GB */

typedef struct gt_hf_export_opts {
    gt_st_dtype dtype;        /* GT_ST_F32 (exact) or GT_ST_BF16 */
    uint64_t max_shard_bytes; /* one file up to this many bytes of tensor data */
} gt_hf_export_opts;

/* The configuration a checkpoint was trained with: the model, train and rng keys and
 * dataset.data_path of its iteration's run_config.txt applied over the defaults. */
int gt_hf_checkpoint_config(const char *ckpt, gt_config *cfg, char *file, size_t n, gt_error *err);

/* Exports checkpoint ckpt (a checkpoint.save folder, an iteration folder or a file) into the
 * folder out (created; files of the same names are replaced). Notes go to log. */
int gt_hf_export(const char *ckpt, const char *out, const gt_hf_export_opts *o, FILE *log,
                 gt_error *err);

/* Imports the HF folder dir into the checkpoint folder out (iter_0000000 and the latest file;
 * refused when out already holds checkpoints) and writes out/model.yaml, the model keys to
 * train it with (--config). Notes go to log. */
int gt_hf_import(const char *dir, const char *out, FILE *log, gt_error *err);

#endif
