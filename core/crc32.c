/* CRC32 through zlib; see crc32.h. */
#include "core/crc32.h"

#include <zlib.h>

/* zlib takes uInt lengths: feed large buffers in pieces that fit */
#define GT_CRC_PIECE ((size_t)1 << 30)

uint32_t gt_crc32(uint32_t crc, const void *data, size_t n) {
    const unsigned char *p = data;
    uLong c = crc;
    while (n > 0) {
        size_t k = n < GT_CRC_PIECE ? n : GT_CRC_PIECE;
        c = crc32(c, p, (uInt)k);
        p += k;
        n -= k;
    }
    return (uint32_t)c;
}
