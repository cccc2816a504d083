/* Arenas: one device allocation per lifetime class (parameters, master weights, gradients,
 * optimizer moments, activations, scratch). A plan lists every tensor with its size; after
 * gt_arena_alloc each tensor's pointer is bound to base + offset and never changes, which is
 * what lets a captured graph stay valid for the whole run (DESIGN.md principle 1). */
#ifndef GT_CORE_ARENA_H
#define GT_CORE_ARENA_H

#include <stddef.h>
#include <stdio.h>

#include "backend/backend.h"

#define GT_ARENA_ALIGN 256 /* bytes; enough for every vectorized load and cuBLASLt */
#define GT_ARENA_NAME_MAX 48

typedef struct gt_arena_entry {
    char name[GT_ARENA_NAME_MAX];
    size_t bytes;
    size_t offset;
    void **bind; /* where the tensor's pointer is written after allocation */
} gt_arena_entry;

typedef struct gt_arena {
    char name[GT_ARENA_NAME_MAX]; /* lifetime class, e.g. "params" */
    void *base;
    size_t bytes;
    int count, cap;
    gt_arena_entry *entries;
    gt_backend *owner; /* backend that allocated base, NULL before gt_arena_alloc */
} gt_arena;

void gt_arena_init(gt_arena *a, const char *name);
/* Plans a tensor of `bytes`; *bind receives its address at gt_arena_alloc. */
int gt_arena_add(gt_arena *a, const char *name, size_t bytes, void **bind, gt_error *err);
/* One allocation for every planned tensor; binds the pointers. */
int gt_arena_alloc(gt_arena *a, gt_backend *b, gt_error *err);
/* Frees the allocation and the plan; accepts an arena that was never allocated. */
void gt_arena_release(gt_arena *a);
/* Prints one line per tensor (or a summary when verbose is 0). */
void gt_arena_print(const gt_arena *a, FILE *f, int verbose);
/* Total bytes of the plan (valid before allocation). */
size_t gt_arena_size(const gt_arena *a);

#endif
