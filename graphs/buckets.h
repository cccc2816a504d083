/* Shape buckets: a small LRU cache of full-iteration graphs keyed by an integer shape key
 * (e.g. the token count of a last partial batch, or an eval shape), so a run whose step shape
 * varies among a few values keeps one graph per value instead of re-capturing each time.
 * Internal to graphs/. */
#ifndef GT_GRAPHS_BUCKETS_H
#define GT_GRAPHS_BUCKETS_H

#include <stdint.h>

#include "backend/backend.h"

typedef struct gt_graph_bucket {
    int64_t key;
    gt_graph *graph;
    int nodes;
    uint64_t last_use; /* value of the cache clock when last hit or inserted */
} gt_graph_bucket;

typedef struct gt_graph_cache {
    gt_backend *b;
    gt_graph_bucket *slots; /* [cap] */
    int cap, count;
    uint64_t clock;
    int hits, misses, evictions;
} gt_graph_cache;

/* cap = graphs.max_shape_buckets (>= 1). */
int gt_graph_cache_init(gt_graph_cache *c, gt_backend *b, int cap, gt_error *err);
/* The graph for key (marked most recently used), or NULL. */
gt_graph *gt_graph_cache_get(gt_graph_cache *c, int64_t key);
/* Adds a graph the cache now owns; when full, destroys the least recently used one first. */
void gt_graph_cache_put(gt_graph_cache *c, int64_t key, gt_graph *g, int nodes);
/* Destroys every graph; the cache stays usable. */
void gt_graph_cache_clear(gt_graph_cache *c);
/* Destroys every graph and frees the table; accepts a cache never initialized (zeroed). */
void gt_graph_cache_release(gt_graph_cache *c);
int gt_graph_cache_nodes(const gt_graph_cache *c);

#endif
