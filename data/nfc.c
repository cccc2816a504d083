/* NFC through utf8proc, keeping invalid UTF-8 bytes; see nfc.h. */
#include "data/nfc.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* A valid run is normalized in pieces of about this many bytes, cut before an ASCII byte:
 * ASCII characters are starters that never compose with what precedes them, so NFC of the
 * pieces joined is NFC of the whole, and utf8proc's working buffer (4 bytes a code point)
 * stays small however long a document is. */
#define GT_NFC_PIECE_BYTES (64u << 10)

static int reserve(unsigned char **out, size_t *cap, size_t need, gt_error *err) {
    if (need <= *cap) return GT_OK;
    size_t c = *cap ? *cap : 4096;
    while (c < need)
        c *= 2;
    unsigned char *p = realloc(*out, c);
    if (!p) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory (NFC normalization)");
    *out = p;
    *cap = c;
    return GT_OK;
}

static int append(const unsigned char *s, size_t n, unsigned char **out, size_t *out_n, size_t *cap,
                  gt_error *err) {
    int rc = reserve(out, cap, *out_n + n, err);
    if (rc) return rc;
    if (n) memcpy(*out + *out_n, s, n);
    *out_n += n;
    return GT_OK;
}

/* NFC of a run of valid UTF-8 (not NUL-terminated: NUL is a character like any other). */
static int append_nfc_run(const unsigned char *s, size_t n, int ascii, unsigned char **out,
                          size_t *out_n, size_t *cap, gt_error *err) {
    if (ascii || !n) return append(s, n, out, out_n, cap, err); /* ASCII is its own NFC */
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t got = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &nfc,
                                        UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (got < 0) {
        free(nfc);
        return gt_error_set(err, got == UTF8PROC_ERROR_NOMEM ? GT_ERR_NOMEM : GT_ERR_INVALID,
                            "NFC normalization failed: %s", utf8proc_errmsg(got));
    }
    int rc = append(nfc, (size_t)got, out, out_n, cap, err);
    free(nfc);
    return rc;
}

int gt_nfc_append(const unsigned char *text, size_t n, unsigned char **out, size_t *out_n,
                  size_t *cap, gt_error *err) {
    size_t run = 0; /* start of the current valid run */
    int ascii = 1;  /* the run is all ASCII so far */
    for (size_t i = 0; i < n;) {
        if (text[i] < 0x80) {
            if (i - run >= GT_NFC_PIECE_BYTES) { /* a safe cut: see GT_NFC_PIECE_BYTES */
                int rc = append_nfc_run(text + run, i - run, ascii, out, out_n, cap, err);
                if (rc) return rc;
                run = i;
                ascii = 1;
            }
            i++;
            continue;
        }
        utf8proc_int32_t cp;
        utf8proc_ssize_t len = utf8proc_iterate(text + i, (utf8proc_ssize_t)(n - i), &cp);
        if (len > 0) {
            ascii = 0;
            i += (size_t)len;
            continue;
        }
        int rc = append_nfc_run(text + run, i - run, ascii, out, out_n, cap, err);
        if (!rc) rc = append(text + i, 1, out, out_n, cap, err); /* the invalid byte itself */
        if (rc) return rc;
        i++;
        run = i;
        ascii = 1;
    }
    return append_nfc_run(text + run, n - run, ascii, out, out_n, cap, err);
}
