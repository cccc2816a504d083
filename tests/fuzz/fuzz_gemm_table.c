/* libFuzzer target: GEMM algorithm tables (runtime.gemm_table, backend/gemm_table.h). Any text
 * is parsed; a table that parses is written back and parsed again, and must come back the same
 * (else the fuzzer stops with a finding). Seed corpus: tests/fuzz/corpus/gemm_table. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/gemm_table.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    gt_gemm_table t;
    gt_error err = {0};
    if (gt_gemm_table_parse(&t, text, "fuzz", &err) == GT_OK) {
        char *out = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&out, &len);
        if (f) {
            gt_gemm_table_write(&t, "round trip", f);
            fclose(f);
            gt_gemm_table u;
            gt_error e2 = {0};
            if (gt_gemm_table_parse(&u, out, "written", &e2) != GT_OK || u.n != t.n ||
                strcmp(u.device, t.device) != 0 || u.cublaslt != t.cublaslt)
                abort();
            for (int i = 0; i < t.n; i++)
                if (memcmp(&u.e[i], &t.e[i], sizeof t.e[i]) != 0) abort();
            gt_gemm_table_free(&u);
        }
        free(out);
        gt_gemm_table_free(&t);
    }
    free(text);
    return 0;
}
