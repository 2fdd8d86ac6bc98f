/*
 * Prefix-cache LRU stack distances in one pass (Mattson), for hit-rate curves at every capacity.
 *
 * Input is a trace of requests, each a run of block ids (dense ints 0..n_ids-1) ordered root
 * first. For every block the kernel reports the block's LRU stack position *before* its request
 * (1 = most recent; 0 = never seen), then takes the running maximum along the request so that a
 * block counts as a hit at capacity c only when every block before it does too (longest cached
 * prefix). After the queries the request's blocks are touched deepest first, which keeps
 * ancestors more recent than descendants: plain LRU then never evicts a parent before its child.
 *
 * The stack is a Fenwick tree over access times holding 1 at each block's latest access time;
 * the stack position of a block last touched at time t is the number of ones at times >= t.
 * Times are compacted (renumbered densely, keeping order) whenever they run out, so the tree
 * stays about 2 x the number of distinct blocks however long the trace is: that keeps the
 * working set in cache for the traces that matter (many accesses, far fewer distinct blocks).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Open-addressing map from 64-bit block ids to dense ids 0..n-1, grown as ids arrive. */
typedef struct {
    uint64_t *keys;
    int64_t *vals; /* dense id + 1; 0 = empty slot */
    int64_t mask, n;
} idmap;

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int idmap_init(idmap *m, int64_t slots) {
    m->mask = slots - 1;
    m->n = 0;
    m->keys = malloc((size_t)slots * sizeof(uint64_t));
    m->vals = calloc((size_t)slots, sizeof(int64_t));
    return m->keys && m->vals;
}

static int idmap_grow(idmap *m) {
    idmap bigger;
    if (!idmap_init(&bigger, 2 * (m->mask + 1))) {
        free(bigger.keys); free(bigger.vals);
        return 0;
    }
    for (int64_t i = 0; i <= m->mask; i++) {
        if (!m->vals[i]) continue;
        int64_t h = (int64_t)(mix64(m->keys[i]) & (uint64_t)bigger.mask);
        while (bigger.vals[h]) h = (h + 1) & bigger.mask;
        bigger.keys[h] = m->keys[i];
        bigger.vals[h] = m->vals[i];
    }
    bigger.n = m->n;
    free(m->keys); free(m->vals);
    *m = bigger;
    return 1;
}

/* The dense id of `key`, assigning the next one to a new key; -1 when memory runs out. */
static int64_t idmap_get(idmap *m, uint64_t key) {
    int64_t h = (int64_t)(mix64(key) & (uint64_t)m->mask);
    while (m->vals[h]) {
        if (m->keys[h] == key) return m->vals[h] - 1;
        h = (h + 1) & m->mask;
    }
    if (2 * (m->n + 1) > m->mask + 1) {
        if (!idmap_grow(m)) return -1;
        return idmap_get(m, key);
    }
    m->keys[h] = key;
    m->vals[h] = ++m->n;
    return m->n - 1;
}

/*
 * Replace 64-bit ids by dense ids in first-seen order (dense[n_access]); returns how many
 * distinct ids there are, or -1 when memory runs out.
 */
int64_t xpt_dense_ids(const uint64_t *ids, int64_t n_access, int32_t *dense) {
    idmap m;
    if (!idmap_init(&m, 1 << 16)) { free(m.keys); free(m.vals); return -1; }
    for (int64_t i = 0; i < n_access; i++) {
        int64_t d = idmap_get(&m, ids[i]);
        if (d < 0 || d > INT32_MAX) { free(m.keys); free(m.vals); return -1; }
        dense[i] = (int32_t)d;
    }
    free(m.keys); free(m.vals);
    return m.n;
}

typedef struct {
    int64_t *tree; /* Fenwick tree, 1-based, size cap + 1 */
    int64_t cap;
} fenwick;

static void fw_add(fenwick *f, int64_t i, int64_t v) {
    for (; i <= f->cap; i += i & -i) f->tree[i] += v;
}

static int64_t fw_prefix(const fenwick *f, int64_t i) {
    int64_t s = 0;
    for (; i > 0; i -= i & -i) s += f->tree[i];
    return s;
}

/* Build the tree in O(cap) from a 0/1 occupancy already written into tree[1..cap]. */
static void fw_build(fenwick *f) {
    for (int64_t i = 1; i <= f->cap; i++) {
        int64_t j = i + (i & -i);
        if (j <= f->cap) f->tree[j] += f->tree[i];
    }
}

/* Renumber the live times densely from 1 (order kept), rebuild the tree, return the last time.
 * by_time maps a time to id + 1 (0 = free). */
static int64_t compact(fenwick *f, int64_t *last, int64_t *by_time, int64_t now,
                       const int32_t *weights) {
    int64_t t2 = 0;
    for (int64_t t = 1; t <= now; t++) {
        int64_t id1 = by_time[t];
        if (id1 == 0) continue;
        t2++;
        by_time[t2] = id1;
        last[id1 - 1] = t2;
    }
    memset(by_time + t2 + 1, 0, (size_t)(now - t2) * sizeof(int64_t));
    memset(f->tree, 0, (size_t)(f->cap + 1) * sizeof(int64_t));
    for (int64_t t = 1; t <= t2; t++) f->tree[t] = weights ? weights[by_time[t] - 1] : 1;
    fw_build(f);
    return t2;
}

/*
 * ids[n_access]: dense block ids. offsets[n_req+1]: request r owns ids[offsets[r]:offsets[r+1]].
 * weights[n_ids] (optional, NULL = all 1): how many blocks of the full trace each block stands
 * for, so that a sampled trace reports estimated positions (SHARDS with an exact hot set);
 * blocks of weight 0 are left out of the sample (position 0, never touched). Chain checks
 * are meaningless on a sample and are only counted without weights.
 * dist[n_access]: output positions as described above. Returns the number of chain violations
 * (a block seen after two different parents; its prefix hits stay exact, but prefix-LRU and
 * plain LRU may then differ), or -1 when memory runs out.
 */
int64_t xpt_stack_distances(const int32_t *ids, int64_t n_access, const int64_t *offsets,
                            int64_t n_req, int64_t n_ids, const int32_t *weights,
                            int64_t *dist) {
    int64_t cap = 2 * n_ids + 1024;
    fenwick f = {calloc((size_t)cap + 1, sizeof(int64_t)), cap};
    int64_t *last = calloc((size_t)n_ids, sizeof(int64_t));
    int64_t *parent = malloc((size_t)n_ids * sizeof(int64_t));
    int64_t *by_time = calloc((size_t)cap + 1, sizeof(int64_t));
    if (!f.tree || !last || !parent || !by_time) {
        free(f.tree); free(last); free(parent); free(by_time);
        return -1;
    }
    for (int64_t i = 0; i < n_ids; i++) parent[i] = -2; /* -2 unseen, -1 root */
    int64_t now = 0, live = 0, violations = 0; /* live: total weight in the tree */
    for (int64_t r = 0; r < n_req; r++) {
        int64_t s = offsets[r], e = offsets[r + 1];
        int64_t run = 0; /* running max; INT64_MAX once a cold block breaks the prefix */
        for (int64_t j = s; j < e; j++) {
            int64_t id = ids[j];
            if (weights && weights[id] == 0) { dist[j] = 0; continue; } /* not sampled */
            int64_t p = j == s ? -1 : ids[j - 1];
            if (weights) {
            } else if (parent[id] == -2) {
                parent[id] = p;
            } else if (parent[id] != p) {
                violations++;
            }
            int64_t t = last[id];
            /* the block itself counts once, whatever it stands for */
            int64_t self = weights ? weights[id] - 1 : 0;
            int64_t d = t ? live - fw_prefix(&f, t - 1) - self : INT64_MAX;
            if (d > run) run = d;
            dist[j] = run == INT64_MAX ? 0 : run;
        }
        for (int64_t j = e - 1; j >= s; j--) {
            int64_t id = ids[j];
            int64_t w = weights ? weights[id] : 1;
            if (w == 0) continue;
            int64_t t = last[id];
            if (t) { fw_add(&f, t, -w); by_time[t] = 0; } else live += w;
            if (now == cap) now = compact(&f, last, by_time, now, weights);
            now++;
            fw_add(&f, now, w);
            by_time[now] = id + 1;
            last[id] = now;
        }
    }
    free(f.tree); free(last); free(parent); free(by_time);
    return violations;
}
