/* Shape buckets: LRU cache of full-iteration graphs (see buckets.h). A linear scan is right
 * here: graphs.max_shape_buckets is a handful, and lookups happen once per step. */
#include "graphs/buckets.h"

#include <stdlib.h>
#include <string.h>

int gt_graph_cache_init(gt_graph_cache *c, gt_backend *b, int cap, gt_error *err) {
    memset(c, 0, sizeof *c);
    if (cap < 1)
        return gt_error_set(err, GT_ERR_INVALID,
                            "graphs.max_shape_buckets=%d must be >= 1 (one graph per distinct "
                            "step shape kept alive)",
                            cap);
    c->slots = calloc((size_t)cap, sizeof *c->slots);
    if (!c->slots)
        return gt_error_set(err, GT_ERR_NOMEM, "out of host memory for %d shape buckets", cap);
    c->b = b;
    c->cap = cap;
    return GT_OK;
}

gt_graph *gt_graph_cache_get(gt_graph_cache *c, int64_t key) {
    for (int i = 0; i < c->count; i++) {
        if (c->slots[i].key != key) continue;
        c->slots[i].last_use = ++c->clock;
        c->hits++;
        return c->slots[i].graph;
    }
    c->misses++;
    return NULL;
}

void gt_graph_cache_put(gt_graph_cache *c, int64_t key, gt_graph *g, int nodes) {
    int at = -1;
    for (int i = 0; i < c->count; i++)
        if (c->slots[i].key == key) at = i; /* replacing a key: its old graph goes */
    if (at < 0 && c->count < c->cap) at = c->count++;
    if (at < 0) {
        at = 0;
        for (int i = 1; i < c->count; i++)
            if (c->slots[i].last_use < c->slots[at].last_use) at = i;
        c->evictions++;
    }
    /* destroying a graph still running is safe on cuda (freed on completion) and moot on cpu */
    if (c->slots[at].graph) c->b->ops->graph_destroy(c->b, c->slots[at].graph);
    c->slots[at] = (gt_graph_bucket){key, g, nodes, ++c->clock};
}

void gt_graph_cache_clear(gt_graph_cache *c) {
    for (int i = 0; i < c->count; i++)
        if (c->slots[i].graph) c->b->ops->graph_destroy(c->b, c->slots[i].graph);
    if (c->slots) memset(c->slots, 0, (size_t)c->cap * sizeof *c->slots);
    c->count = 0;
}

void gt_graph_cache_release(gt_graph_cache *c) {
    if (!c) return;
    gt_graph_cache_clear(c);
    free(c->slots);
    c->slots = NULL;
    c->cap = 0;
}

int gt_graph_cache_nodes(const gt_graph_cache *c) {
    int n = 0;
    for (int i = 0; i < c->count; i++)
        n += c->slots[i].nodes;
    return n;
}
