/* TensorBoard event files: a protobuf encoder for the few Event fields used, TFRecord framing
 * and the file's name; see tb_events.h. */
#include "train/tb_events.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/atomic_file.h"
#include "core/error.h"

#define TB_PATH_MAX 1200
#define TB_EVENT_MAX 4096       /* one Event's bytes: a handful of short tags and floats */
#define TB_NAME_TRIES 100       /* ".1" .. ".99" after a taken name */
#define CRC32C_POLY 0x82F63B78u /* Castagnoli, reflected */
#define TB_CRC_MASK_DELTA 0xa282ead8u

/* protobuf wire types and the field numbers of tensorflow/core/util/event.proto and
 * summary.proto */
enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };
enum { EVENT_WALL_TIME = 1, EVENT_STEP = 2, EVENT_FILE_VERSION = 3, EVENT_SUMMARY = 5 };
enum { EVENT_SESSION_LOG = 7, SESSION_LOG_STATUS = 1, SESSION_LOG_START = 1 };
enum { SUMMARY_VALUE = 1, VALUE_TAG = 1, VALUE_SIMPLE_VALUE = 2 };

struct gt_tb_writer {
    FILE *f;
    char path[TB_PATH_MAX];
};

typedef struct pb_buf {
    unsigned char b[TB_EVENT_MAX];
    size_t n;
    int overflow;
} pb_buf;

static void pb_bytes(pb_buf *p, const void *data, size_t n) {
    if (p->overflow || n > sizeof p->b - p->n) {
        p->overflow = 1;
        return;
    }
    memcpy(p->b + p->n, data, n);
    p->n += n;
}

static void pb_varint(pb_buf *p, uint64_t v) {
    unsigned char tmp[10];
    size_t n = 0;
    do {
        tmp[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v) tmp[n] |= 0x80;
        n++;
    } while (v);
    pb_bytes(p, tmp, n);
}

static void pb_key(pb_buf *p, int field, int wire) {
    pb_varint(p, ((uint64_t)field << 3) | (uint64_t)wire);
}

static void pb_le(pb_buf *p, uint64_t v, int bytes) {
    unsigned char tmp[8];
    for (int i = 0; i < bytes; i++)
        tmp[i] = (unsigned char)(v >> (8 * i));
    pb_bytes(p, tmp, (size_t)bytes);
}

static void pb_double(pb_buf *p, int field, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    pb_key(p, field, WIRE_I64);
    pb_le(p, bits, 8);
}

static void pb_float(pb_buf *p, int field, float v) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    pb_key(p, field, WIRE_I32);
    pb_le(p, bits, 4);
}

static void pb_len(pb_buf *p, int field, const void *data, size_t n) {
    pb_key(p, field, WIRE_LEN);
    pb_varint(p, n);
    pb_bytes(p, data, n);
}

/* wall_time and step, the head of every Event */
static void event_head(pb_buf *p, double wall_time, long long step) {
    pb_double(p, EVENT_WALL_TIME, wall_time);
    pb_key(p, EVENT_STEP, WIRE_VARINT);
    pb_varint(p, (uint64_t)step); /* int64: negative values are 10-byte varints */
}

uint32_t gt_crc32c(const void *data, size_t n) {
    const unsigned char *p = data;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1u)));
    }
    return c ^ 0xffffffffu;
}

uint32_t gt_tb_masked_crc(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + TB_CRC_MASK_DELTA;
}

/* One TFRecord: uint64 length, masked CRC of those 8 bytes, the data, masked CRC of the data
 * (all little-endian), flushed so a crash loses at most the record being written. */
static int write_record(gt_tb_writer *w, const pb_buf *p, gt_error *err) {
    if (p->overflow)
        return gt_error_set(err, GT_ERR_INVALID,
                            "logger.tensorboard_dir: an event is larger than %d bytes; this is a "
                            "bug in graphtrain, please report it",
                            TB_EVENT_MAX);
    unsigned char head[12], tail[4];
    for (int i = 0; i < 8; i++)
        head[i] = (unsigned char)((uint64_t)p->n >> (8 * i));
    uint32_t hc = gt_tb_masked_crc(gt_crc32c(head, 8)),
             dc = gt_tb_masked_crc(gt_crc32c(p->b, p->n));
    for (int i = 0; i < 4; i++) {
        head[8 + i] = (unsigned char)(hc >> (8 * i));
        tail[i] = (unsigned char)(dc >> (8 * i));
    }
    errno = 0;
    if (fwrite(head, 1, sizeof head, w->f) != sizeof head || fwrite(p->b, 1, p->n, w->f) != p->n ||
        fwrite(tail, 1, sizeof tail, w->f) != sizeof tail || fflush(w->f) != 0)
        return gt_error_set(err, GT_ERR_IO,
                            "logger.tensorboard_dir: writing %s failed: %s; free disk space or "
                            "set logger.tensorboard_dir elsewhere",
                            w->path, errno ? strerror(errno) : "I/O error");
    return GT_OK;
}

/* events.out.tfevents.<time>.<host>[.<n>], created exclusively so two runs never share one */
static FILE *create_file(const char *dir, double wall_time, char *path, size_t n) {
    char host[256] = "localhost";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    for (int i = 0; i < TB_NAME_TRIES; i++) {
        if (i == 0)
            snprintf(path, n, "%s/events.out.tfevents.%lld.%s", dir, (long long)wall_time, host);
        else
            snprintf(path, n, "%s/events.out.tfevents.%lld.%s.%d", dir, (long long)wall_time, host,
                     i);
        FILE *f = fopen(path, "wbx");
        if (f || errno != EEXIST) return f;
    }
    errno = EEXIST;
    return NULL;
}

int gt_tb_open(gt_tb_writer **out, const char *dir, double wall_time, gt_error *err) {
    *out = NULL;
    int rc = gt_mkdirs(dir, err);
    if (rc) return gt_error_wrap(err, "logger.tensorboard_dir=%s: ", dir);
    gt_tb_writer *w = calloc(1, sizeof *w);
    if (!w) return gt_error_set(err, GT_ERR_NOMEM, "logger.tensorboard_dir: out of host memory");
    w->f = create_file(dir, wall_time, w->path, sizeof w->path);
    if (!w->f) {
        rc = gt_error_set(err, GT_ERR_IO,
                          "logger.tensorboard_dir=%s: cannot create an event file: %s; check "
                          "that the folder is writable",
                          dir, strerror(errno));
        free(w);
        return rc;
    }
    pb_buf p = {.n = 0};
    event_head(&p, wall_time, 0);
    static const char version[] = "brain.Event:2";
    pb_len(&p, EVENT_FILE_VERSION, version, sizeof version - 1);
    rc = write_record(w, &p, err);
    if (rc) {
        gt_tb_close(w, NULL);
        return rc;
    }
    *out = w;
    return GT_OK;
}

int gt_tb_session_start(gt_tb_writer *w, long long step, double wall_time, gt_error *err) {
    pb_buf p = {.n = 0}, log = {.n = 0};
    pb_key(&log, SESSION_LOG_STATUS, WIRE_VARINT);
    pb_varint(&log, SESSION_LOG_START);
    event_head(&p, wall_time, step);
    pb_len(&p, EVENT_SESSION_LOG, log.b, log.n);
    return write_record(w, &p, err);
}

int gt_tb_scalars(gt_tb_writer *w, long long step, double wall_time, const char *const *tags,
                  const float *values, int n, gt_error *err) {
    pb_buf sum = {.n = 0};
    for (int i = 0; i < n; i++) {
        pb_buf v = {.n = 0};
        pb_len(&v, VALUE_TAG, tags[i], strlen(tags[i]));
        pb_float(&v, VALUE_SIMPLE_VALUE, values[i]);
        if (v.overflow) sum.overflow = 1;
        pb_len(&sum, SUMMARY_VALUE, v.b, v.n);
    }
    pb_buf p = {.n = 0};
    event_head(&p, wall_time, step);
    if (sum.overflow) p.overflow = 1;
    pb_len(&p, EVENT_SUMMARY, sum.b, sum.n);
    return write_record(w, &p, err);
}

int gt_tb_close(gt_tb_writer *w, gt_error *err) {
    if (!w) return GT_OK;
    int rc = GT_OK;
    errno = 0;
    if (fclose(w->f) != 0)
        rc = gt_error_set(err, GT_ERR_IO,
                          "logger.tensorboard_dir: closing %s failed: %s; free disk space or set "
                          "logger.tensorboard_dir elsewhere",
                          w->path, errno ? strerror(errno) : "I/O error");
    free(w);
    return rc;
}

const char *gt_tb_path(const gt_tb_writer *w) {
    return w->path;
}
