/* Arenas: one device allocation per lifetime class (parameters, master weights, gradients,
 * optimizer moments, activations, scratch). A plan lists every tensor with its size; after
 * gt_arena_bind each tensor's pointer is bound to base + offset and never changes, which is
 * what lets a captured graph stay valid for the whole run (docs/design.md principle 1). */
#ifndef GT_CORE_ARENA_H
#define GT_CORE_ARENA_H

#include <stddef.h>
#include <stdio.h>

#include "core/error.h"

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
    /* who frees base (the backend that allocated it, gt_backend_alloc_arena); NULL before */
    void (*release)(void *owner, void *base);
    void *owner;
} gt_arena;

void gt_arena_init(gt_arena *a, const char *name);
/* Plans a tensor of `bytes`; *bind receives its address at gt_arena_alloc. */
int gt_arena_add(gt_arena *a, const char *name, size_t bytes, void **bind, gt_error *err);
/* Binds every planned tensor's pointer into base, one allocation of gt_arena_size bytes made
 * by the caller (backend/backend.h's gt_backend_alloc_arena), and remembers how to free it. */
void gt_arena_bind(gt_arena *a, void *base, void (*release)(void *owner, void *base), void *owner);
/* Frees the allocation and the plan; accepts an arena that was never allocated. */
void gt_arena_release(gt_arena *a);
/* Prints one line per tensor (or a summary when verbose is 0). */
void gt_arena_print(const gt_arena *a, FILE *f, int verbose);
/* Total bytes of the plan (valid before allocation). */
size_t gt_arena_size(const gt_arena *a);

#endif
