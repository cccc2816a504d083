/* Arena planning and allocation; see arena.h. */
#include "core/arena.h"

#include <stdlib.h>
#include <string.h>

static size_t align_up(size_t x) {
    return (x + GT_ARENA_ALIGN - 1) / GT_ARENA_ALIGN * GT_ARENA_ALIGN;
}

void gt_arena_init(gt_arena *a, const char *name) {
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%s", name);
}

int gt_arena_add(gt_arena *a, const char *name, size_t bytes, void **bind, gt_error *err) {
    if (a->base)
        return gt_error_set(err, GT_ERR_INVALID, "arena '%s': tensor '%s' planned after allocation",
                            a->name, name);
    if (a->count == a->cap) {
        int cap = a->cap ? a->cap * 2 : 64;
        gt_arena_entry *e = realloc(a->entries, (size_t)cap * sizeof *e);
        if (!e) return gt_error_set(err, GT_ERR_NOMEM, "out of host memory planning arenas");
        a->entries = e;
        a->cap = cap;
    }
    gt_arena_entry *e = &a->entries[a->count++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->bytes = bytes;
    e->offset = a->bytes;
    e->bind = bind;
    a->bytes += align_up(bytes);
    return GT_OK;
}

void gt_arena_bind(gt_arena *a, void *base, void (*release)(void *owner, void *base), void *owner) {
    a->base = base;
    a->release = release;
    a->owner = owner;
    for (int i = 0; i < a->count; i++)
        if (a->entries[i].bind) *a->entries[i].bind = (char *)a->base + a->entries[i].offset;
}

void gt_arena_release(gt_arena *a) {
    if (!a) return;
    if (a->base && a->release) a->release(a->owner, a->base);
    free(a->entries);
    char name[GT_ARENA_NAME_MAX];
    memcpy(name, a->name, sizeof name);
    gt_arena_init(a, name);
}

size_t gt_arena_size(const gt_arena *a) {
    return a->bytes;
}

void gt_arena_print(const gt_arena *a, FILE *f, int verbose) {
    fprintf(f, "  %-14s %10.2f MiB  (%d tensors)\n", a->name, (double)a->bytes / (1024.0 * 1024.0),
            a->count);
    if (!verbose) return;
    for (int i = 0; i < a->count; i++)
        fprintf(f, "    %-40s %12zu bytes @ %zu\n", a->entries[i].name, a->entries[i].bytes,
                a->entries[i].offset);
}
