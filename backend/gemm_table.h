/* GEMM algorithm tables (runtime.gemm_table): which cuBLASLt algorithm each planned GEMM shape
 * runs, measured by `graphtrain tune-gemm` on one machine and saved as text, so that every
 * later process on that machine picks the same algorithms (and sums in the same order)
 * without timing anything. A table holds the device and cuBLASLt version it was made with; the
 * CUDA backend applies it only where both match (backend/cuda/cuda_matmul.c).
 *
 * The file, one item a line ('#' starts a comment):
 *   device NVIDIA H200 (132 SMs)
 *   cublaslt 130100
 *   gemm matmul_fwd M=8192 N=2304 K=768 batch=1 sa=0 sb=0 sc=0 algo=<16 hex words of 16 digits>
 * algo is cublasLtMatmulAlgo_t's eight 64-bit words, which cuBLASLt documents as
 * serializable for use with the same library version. This file knows nothing of CUDA. */
#ifndef GT_BACKEND_GEMM_TABLE_H
#define GT_BACKEND_GEMM_TABLE_H

#include <stdint.h>
#include <stdio.h>

#include "core/error.h"

#define GT_GEMM_ALGO_WORDS 8
#define GT_GEMM_KIND_MAX 32
#define GT_GEMM_DEVICE_MAX 128
#define GT_GEMM_TABLE_MAX 4096 /* entries one file may hold */
#define GT_GEMM_CANDIDATES 8   /* algorithms a backend offers one shape for tuning, at most */

typedef struct gt_gemm_shape_key {
    char kind[GT_GEMM_KIND_MAX]; /* the backend's op name: matmul_fwd, matmul_bwd_weight, ... */
    int M, N, K, count;          /* count: GEMMs in one batched call (1: not batched) */
    int64_t sa, sb, sc;          /* elements between the batch's operands (0 when count is 1) */
} gt_gemm_shape_key;

typedef struct gt_gemm_entry {
    gt_gemm_shape_key key;
    uint64_t algo[GT_GEMM_ALGO_WORDS];
} gt_gemm_entry;

typedef struct gt_gemm_table {
    char device[GT_GEMM_DEVICE_MAX]; /* as the backend names it, e.g. "NVIDIA H200 (132 SMs)" */
    long cublaslt;                   /* cublasLtGetVersion() of the tuning run */
    int n;
    gt_gemm_entry *e;
} gt_gemm_table;

/* Reads a table. Every bad line is reported at once (path:line and what is wrong); a file
 * without a device or cublaslt line, or with two entries for one shape, is refused too. */
int gt_gemm_table_load(gt_gemm_table *t, const char *path, gt_error *err);
/* Parses text already in memory; name labels the messages. */
int gt_gemm_table_parse(gt_gemm_table *t, const char *text, const char *name, gt_error *err);
/* Writes the table in the format above, after `comment` (one or more lines, each written
 * with a leading "# "; NULL for none). Returns 0, or -1 when f reports a write error. */
int gt_gemm_table_write(const gt_gemm_table *t, const char *comment, FILE *f);
/* Adds an entry (replacing the one of the same shape). GT_ERR_NOMEM or GT_ERR_INVALID (full). */
int gt_gemm_table_put(gt_gemm_table *t, const gt_gemm_entry *e, gt_error *err);
/* The entry of that shape, or NULL. */
const gt_gemm_entry *gt_gemm_table_find(const gt_gemm_table *t, const gt_gemm_shape_key *k);
void gt_gemm_table_free(gt_gemm_table *t);

#endif
