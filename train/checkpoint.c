/* Checkpoint writing and verified reading; see checkpoint.h. */
#include "train/checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/atomic_file.h"

/* On-disk header (host byte order, little-endian on every machine we build for). */
typedef struct ckpt_header {
    uint64_t magic;
    uint32_t version;
    uint32_t header_bytes;  /* sizeof(ckpt_header) */
    uint64_t payload_bytes; /* 3 * n_params * 4 */
    uint32_t crc;           /* CRC32 of the header (with crc = 0) and the payload */
    uint32_t step_state_bytes;
    gt_ckpt_meta meta;
} ckpt_header;

uint32_t gt_crc32(uint32_t crc, const void *data, size_t n) {
    uint32_t table[256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++)
        crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
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
    size_t bytes = meta->n_params * sizeof(float);
    h.payload_bytes = 3 * bytes;
    uint32_t crc = gt_crc32(0, &h, sizeof h);
    crc = gt_crc32(crc, master, bytes);
    crc = gt_crc32(crc, m, bytes);
    crc = gt_crc32(crc, v, bytes);
    h.crc = crc;
    gt_atomic_file f;
    rc = gt_atomic_open(&f, path, err);
    if (!rc) rc = gt_atomic_write(&f, &h, sizeof h, err);
    if (!rc) rc = gt_atomic_write(&f, master, bytes, err);
    if (!rc) rc = gt_atomic_write(&f, m, bytes, err);
    if (!rc) rc = gt_atomic_write(&f, v, bytes, err);
    if (!rc) rc = gt_atomic_commit(&f, err);
    gt_atomic_abort(&f);
    return rc;
}

static int read_exact(FILE *f, void *dst, size_t n) {
    return fread(dst, 1, n, f) == n;
}

int gt_ckpt_read(const char *path_in, gt_ckpt_meta *meta, float **master, float **m, float **v,
                 gt_error *err) {
    *master = *m = *v = NULL;
    char path[1024];
    gt_ckpt_file(path_in, path, sizeof path);
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
    if (!read_exact(f, &h, sizeof h)) {
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "checkpoint %s is truncated (shorter than its "
                          "header); %s",
                          path, redo);
    } else if (h.magic != GT_CKPT_MAGIC) {
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "%s is not a graphtrain checkpoint (bad magic "
                          "number)",
                          path);
    } else if (h.version != GT_CKPT_VERSION || h.header_bytes != sizeof h ||
               h.step_state_bytes != sizeof(gt_step_state)) {
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "checkpoint %s has format version %u; this "
                          "graphtrain reads version %d",
                          path, h.version, GT_CKPT_VERSION);
    } else if (h.meta.n_params == 0 || h.payload_bytes != 3 * h.meta.n_params * sizeof(float)) {
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "checkpoint %s is corrupt (inconsistent sizes "
                          "in its header); %s",
                          path, redo);
    }
    size_t bytes = rc ? 0 : h.meta.n_params * sizeof(float);
    if (!rc) {
        *master = malloc(bytes);
        *m = malloc(bytes);
        *v = malloc(bytes);
        if (!*master || !*m || !*v)
            rc = gt_error_set(err, GT_ERR_NOMEM, "out of host memory reading checkpoint %s", path);
    }
    if (!rc &&
        (!read_exact(f, *master, bytes) || !read_exact(f, *m, bytes) || !read_exact(f, *v, bytes)))
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "checkpoint %s is truncated (expected %llu "
                          "bytes of weights and optimizer state); %s",
                          path, (unsigned long long)h.payload_bytes, redo);
    if (!rc && fgetc(f) != EOF)
        rc = gt_error_set(err, GT_ERR_INVALID,
                          "checkpoint %s has trailing bytes after its "
                          "payload (corrupt); %s",
                          path, redo);
    if (!rc) {
        uint32_t want = h.crc;
        h.crc = 0;
        uint32_t crc = gt_crc32(0, &h, sizeof h);
        crc = gt_crc32(crc, *master, bytes);
        crc = gt_crc32(crc, *m, bytes);
        crc = gt_crc32(crc, *v, bytes);
        if (crc != want)
            rc = gt_error_set(err, GT_ERR_INVALID,
                              "checkpoint %s is corrupt (CRC32 0x%08x, "
                              "expected 0x%08x); %s",
                              path, crc, want, redo);
    }
    fclose(f);
    if (rc) {
        free(*master);
        free(*m);
        free(*v);
        *master = *m = *v = NULL;
        return rc;
    }
    *meta = h.meta;
    return GT_OK;
}
