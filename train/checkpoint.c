/* Checkpoint writing and verified reading; see checkpoint.h. */
#include "train/checkpoint.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/atomic_file.h"
#include "train/ckpt_dir.h"

/* On-disk header (host byte order, little-endian on every machine we build for). */
typedef struct ckpt_header {
    uint64_t magic;
    uint32_t version;
    uint32_t header_bytes;  /* the version's header: sizeof(ckpt_header), or V2_HEADER_BYTES */
    uint64_t payload_bytes; /* 3 * n_params * 4 + the fp8 state's bytes */
    uint32_t crc;           /* CRC32 of the header (with crc = 0) and the payload */
    uint32_t step_state_bytes;
    gt_ckpt_meta meta;
    gt_ckpt_fp8_info fp8; /* version 3 on; a version 2 header ends before it */
} ckpt_header;

/* A version 2 header is this one without its fp8 fields, byte for byte. */
#define V2_HEADER_BYTES offsetof(ckpt_header, fp8)
_Static_assert(offsetof(ckpt_header, fp8) % 8 == 0 &&
                   sizeof(ckpt_header) == offsetof(ckpt_header, fp8) + sizeof(gt_ckpt_fp8_info),
               "the version 3 header appends its fp8 fields to the version 2 one");

#define GT_CKPT_MAX_FP8_SLOT_BYTES 64u

static uint64_t fp8_meta_bytes(const gt_ckpt_fp8_info *f) {
    return (uint64_t)f->n_meta * f->meta_bytes;
}

static uint64_t fp8_history_bytes(const gt_ckpt_fp8_info *f) {
    return (uint64_t)f->n_meta * f->history_len * sizeof(float);
}

uint64_t gt_ckpt_fingerprint(const gt_config *cfg, size_t n_params, char *shape, size_t n) {
    const gt_model_config *m = &cfg->model;
    char buf[GT_CKPT_SHAPE_MAX];
    snprintf(buf, sizeof buf,
             "layers=%d hidden=%d heads=%d kv=%d ffn=%d vocab=%d experts=%d moe_ffn=%d "
             "moe_freq=%d bias=%d qkv_bias=%d pattern='%s' params=%zu",
             m->num_layers, m->hidden_size, m->num_attention_heads, m->num_query_groups,
             m->ffn_hidden_size, m->vocab_size, m->num_moe_experts, m->moe_ffn_hidden_size,
             m->moe_layer_freq, (int)m->add_bias_linear, (int)m->add_qkv_bias, m->layer_pattern,
             n_params);
    if (m->kv_channels > 0) { /* only when set, so older checkpoints keep their fingerprint */
        size_t len = strlen(buf);
        snprintf(buf + len, sizeof buf - len, " kv_channels=%d", m->kv_channels);
    }
    if (shape) snprintf(shape, n, "%s", buf);
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = buf; *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    return h;
}

const char *gt_ckpt_file(const char *path, char *buf, size_t n) {
    struct stat st;
    size_t len = strlen(path);
    int is_dir = (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) || (len && path[len - 1] == '/');
    if (is_dir)
        snprintf(buf, n, "%s%s%s", path, path[len - 1] == '/' ? "" : "/", GT_CKPT_FILE);
    else
        snprintf(buf, n, "%s", path);
    return buf;
}

int gt_ckpt_write(const char *dir, const gt_ckpt_meta *meta, const float *master, const float *m,
                  const float *v, gt_error *err) {
    return gt_ckpt_write_fp8(dir, meta, master, m, v, NULL, err);
}

int gt_ckpt_write_fp8(const char *dir, const gt_ckpt_meta *meta, const float *master,
                      const float *m, const float *v, const gt_ckpt_fp8 *fp8, gt_error *err) {
    if (fp8 && fp8->info.n_meta && (!fp8->meta || (fp8->info.history_len && !fp8->history)))
        return gt_error_set(err, GT_ERR_INVALID,
                            "checkpoint.save=%s: the fp8 state declares %u slots but has no "
                            "data",
                            dir, fp8->info.n_meta);
    int rc = gt_mkdirs(dir, err);
    if (rc) return gt_error_wrap(err, "checkpoint.save=%s: ", dir);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, GT_CKPT_FILE);
    ckpt_header h;
    memset(&h, 0, sizeof h);
    h.magic = GT_CKPT_MAGIC;
    h.version = GT_CKPT_VERSION;
    h.header_bytes = sizeof h;
    h.step_state_bytes = sizeof(gt_step_state);
    h.meta = *meta;
    if (fp8) h.fp8 = fp8->info;
    size_t bytes = meta->n_params * sizeof(float);
    size_t mb = (size_t)fp8_meta_bytes(&h.fp8), hb = (size_t)fp8_history_bytes(&h.fp8);
    h.payload_bytes = 3 * bytes + mb + hb;
    uint32_t crc = gt_crc32(0, &h, sizeof h);
    crc = gt_crc32(crc, master, bytes);
    crc = gt_crc32(crc, m, bytes);
    crc = gt_crc32(crc, v, bytes);
    if (mb) crc = gt_crc32(crc, fp8->meta, mb);
    if (hb) crc = gt_crc32(crc, fp8->history, hb);
    h.crc = crc;
    gt_atomic_file f;
    rc = gt_atomic_open(&f, path, err);
    if (!rc) rc = gt_atomic_write(&f, &h, sizeof h, err);
    if (!rc) rc = gt_atomic_write(&f, master, bytes, err);
    if (!rc) rc = gt_atomic_write(&f, m, bytes, err);
    if (!rc) rc = gt_atomic_write(&f, v, bytes, err);
    if (!rc && mb) rc = gt_atomic_write(&f, fp8->meta, mb, err);
    if (!rc && hb) rc = gt_atomic_write(&f, fp8->history, hb, err);
    if (!rc) rc = gt_atomic_commit(&f, err);
    gt_atomic_abort(&f);
    return rc;
}

static int read_exact(FILE *f, void *dst, size_t n) {
    return fread(dst, 1, n, f) == n;
}

/* Every field a crafted file could set is checked before it is used: the checksum only
 * proves the file is what its writer wrote, not that the writer was graphtrain. */
static int check_header(const ckpt_header *h, const char *path, uint64_t file_bytes,
                        gt_error *err) {
    const char *redo = "it cannot be used; resume from another checkpoint or start fresh "
                       "(checkpoint.load=)";
    if (h->magic != GT_CKPT_MAGIC)
        return gt_error_set(err, GT_ERR_INVALID,
                            "%s is not a graphtrain checkpoint (bad magic number)", path);
    uint32_t want = h->version == GT_CKPT_VERSION_NO_FP8 ? (uint32_t)V2_HEADER_BYTES : sizeof *h;
    if ((h->version != GT_CKPT_VERSION && h->version != GT_CKPT_VERSION_NO_FP8) ||
        h->header_bytes != want || h->step_state_bytes != sizeof(gt_step_state))
        return gt_error_set(err, GT_ERR_INVALID,
                            "checkpoint %s has format version %u; this graphtrain reads versions "
                            "%d and %d",
                            path, h->version, GT_CKPT_VERSION_NO_FP8, GT_CKPT_VERSION);
    const gt_ckpt_meta *m = &h->meta;
    const gt_ckpt_fp8_info *f = &h->fp8;
    if (f->n_meta > GT_CKPT_MAX_FP8_SLOTS || f->history_len > GT_CKPT_MAX_FP8_HISTORY ||
        (f->n_meta && (f->meta_bytes == 0 || f->meta_bytes > GT_CKPT_MAX_FP8_SLOT_BYTES)) ||
        f->recipe > GT_FP8_RECIPE_MXFP8)
        return gt_error_set(err, GT_ERR_INVALID,
                            "checkpoint %s is corrupt: its fp8 state declares %u slots of %u "
                            "bytes with %u history entries (recipe %u); %s",
                            path, f->n_meta, f->meta_bytes, f->history_len, f->recipe, redo);
    /* n_params * 12 must neither wrap nor exceed what the file holds */
    if (m->n_params == 0 || m->n_params > GT_CKPT_MAX_PARAMS ||
        h->payload_bytes !=
            3 * m->n_params * sizeof(float) + fp8_meta_bytes(f) + fp8_history_bytes(f) ||
        file_bytes != h->header_bytes + h->payload_bytes)
        return gt_error_set(err, GT_ERR_INVALID,
                            "checkpoint %s is corrupt or truncated: its header declares %llu "
                            "parameters (%llu payload bytes) but the file has %llu bytes; %s",
                            path, (unsigned long long)m->n_params,
                            (unsigned long long)h->payload_bytes, (unsigned long long)file_bytes,
                            redo);
    if (memchr(m->shape, '\0', sizeof m->shape) == NULL)
        return gt_error_set(err, GT_ERR_INVALID,
                            "checkpoint %s is corrupt: its model description is not a "
                            "terminated string; %s",
                            path, redo);
    const gt_step_state *st = &m->state;
    const char *bad = NULL;
    if (st->step < 0 || st->step > GT_CKPT_MAX_STEP)
        bad = "the step counter";
    else if (st->nan_step < -1 || (int64_t)st->nan_step > st->step)
        bad = "the first NaN step";
    else if (st->micro < 0 || st->skipped > 1)
        bad = "the micro-batch index or skip flag";
    else if ((st->nan_flags | st->nan_first) & ~(uint32_t)(GT_NAN_LOSS | GT_NAN_GRAD | GT_NAN_FP8))
        bad = "the NaN flags";
    else if (m->data.cursor > GT_CKPT_MAX_SAMPLES || m->data.epoch > GT_CKPT_MAX_SAMPLES)
        bad = "the data position";
    if (bad)
        return gt_error_set(err, GT_ERR_INVALID,
                            "checkpoint %s is corrupt: %s is out of range (step %lld, data "
                            "epoch %llu cursor %llu); %s",
                            path, bad, (long long)st->step, (unsigned long long)m->data.epoch,
                            (unsigned long long)m->data.cursor, redo);
    return GT_OK;
}

int gt_ckpt_read(const char *path, gt_ckpt_meta *meta, float **master, float **m, float **v,
                 gt_error *err) {
    gt_ckpt_fp8 fp8;
    int rc = gt_ckpt_read_fp8(path, meta, master, m, v, &fp8, err);
    free(fp8.meta);
    free(fp8.history);
    return rc;
}

/* The header of either version: version 2's bytes, then version 3's fp8 fields. */
static int read_header(FILE *f, ckpt_header *h) {
    memset(h, 0, sizeof *h);
    if (!read_exact(f, h, V2_HEADER_BYTES)) return 0;
    if (h->magic != GT_CKPT_MAGIC || h->version == GT_CKPT_VERSION_NO_FP8) return 1;
    return read_exact(f, (char *)h + V2_HEADER_BYTES, sizeof *h - V2_HEADER_BYTES);
}

static void free_all(float **master, float **m, float **v, gt_ckpt_fp8 *fp8) {
    free(*master);
    free(*m);
    free(*v);
    free(fp8->meta);
    free(fp8->history);
    *master = *m = *v = NULL;
    memset(fp8, 0, sizeof *fp8);
}

int gt_ckpt_read_fp8(const char *path_in, gt_ckpt_meta *meta, float **master, float **m, float **v,
                     gt_ckpt_fp8 *fp8, gt_error *err) {
    *master = *m = *v = NULL;
    memset(fp8, 0, sizeof *fp8);
    char path[1024];
    long long iter;
    gt_error why = {0};
    /* a missing file is reported by fopen below, naming it; a bad latest file here */
    if (gt_ckpt_resolve(path_in, path, sizeof path, &iter, &why) == GT_ERR_INVALID) {
        if (err) *err = why;
        return GT_ERR_INVALID;
    }
    FILE *f = fopen(path, "rb");
    if (!f)
        return gt_error_set(err, GT_ERR_IO,
                            "cannot open checkpoint %s: %s; check "
                            "checkpoint.load",
                            path, strerror(errno));
    ckpt_header h;
    int rc = GT_OK;
    const char *redo = "it cannot be used; resume from another checkpoint or start fresh "
                       "(checkpoint.load=)";
    struct stat st;
    uint64_t file_bytes = fstat(fileno(f), &st) == 0 ? (uint64_t)st.st_size : 0;
    if (!read_header(f, &h))
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "checkpoint %s is truncated (shorter than its "
                          "header); %s",
                          path, redo);
    else
        rc = check_header(&h, path, file_bytes, err);
    size_t bytes = rc ? 0 : (size_t)h.meta.n_params * sizeof(float);
    size_t mb = rc ? 0 : (size_t)fp8_meta_bytes(&h.fp8);
    size_t hb = rc ? 0 : (size_t)fp8_history_bytes(&h.fp8);
    if (!rc) {
        *master = malloc(bytes);
        *m = malloc(bytes);
        *v = malloc(bytes);
        fp8->meta = mb ? malloc(mb) : NULL;
        fp8->history = hb ? malloc(hb) : NULL;
        if (!*master || !*m || !*v || (mb && !fp8->meta) || (hb && !fp8->history))
            rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory reading checkpoint %s", path);
    }
    if (!rc &&
        (!read_exact(f, *master, bytes) || !read_exact(f, *m, bytes) || !read_exact(f, *v, bytes) ||
         (mb && !read_exact(f, fp8->meta, mb)) || (hb && !read_exact(f, fp8->history, hb))))
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "checkpoint %s is truncated (expected %llu "
                          "bytes of weights, optimizer and fp8 state); %s",
                          path, (unsigned long long)h.payload_bytes, redo);
    if (!rc && fgetc(f) != EOF)
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "checkpoint %s has trailing bytes after its "
                          "payload (corrupt); %s",
                          path, redo);
    if (!rc) {
        uint32_t want = h.crc;
        h.crc = 0;
        uint32_t crc = gt_crc32(0, &h, h.header_bytes);
        crc = gt_crc32(crc, *master, bytes);
        crc = gt_crc32(crc, *m, bytes);
        crc = gt_crc32(crc, *v, bytes);
        if (mb) crc = gt_crc32(crc, fp8->meta, mb);
        if (hb) crc = gt_crc32(crc, fp8->history, hb);
        if (crc != want)
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "checkpoint %s is corrupt (CRC32 0x%08x, "
                              "expected 0x%08x); %s",
                              path, crc, want, redo);
    }
    fclose(f);
    if (rc) {
        free_all(master, m, v, fp8);
        return rc;
    }
    *meta = h.meta;
    fp8->info = h.fp8;
    return GT_OK;
}
