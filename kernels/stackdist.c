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
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* mremap */
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

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

/* ------------------------------------------------------------------------------------------ *
 * The hash tables of the streaming passes: 64-bit keys, linear probing over any number of
 * slots (the home slot is the mixed key scaled into [0, slots), multiply-shift), so a table
 * grows by 1.5x at load 3/4. Doubling instead made the exact mode's peak: near the end of a
 * 10M-access trace the old table (50 MB) and the new one (100 MB) were alive together.
 * ------------------------------------------------------------------------------------------ */

/*
 * The big arrays of the streaming passes come straight from the kernel (mmap, mremap to grow,
 * munmap), zero-filled: freed memory goes back at once. Through malloc, glibc raises its mmap
 * threshold after the first big free (up to 32 MB) and keeps later arrays of up to that size in
 * its heap, whose freed parts stayed resident: 40 MB more peak RSS on the 10M-access trace.
 * Sizes are in bytes; a NULL array has size 0.
 */
static void *big_new(size_t bytes) {
#if defined(__linux__)
    void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    return p == MAP_FAILED ? NULL : p;
#else
    return calloc(1, bytes ? bytes : 1);
#endif
}

static void big_free(void *p, size_t bytes) {
    if (!p) return;
#if defined(__linux__)
    munmap(p, bytes ? bytes : 1);
#else
    (void)bytes;
    free(p);
#endif
}

/* Resize, keeping the contents; the new tail reads 0. NULL when memory runs out (p is kept). */
static void *big_resize(void *p, size_t old, size_t bytes) {
    if (!p) return big_new(bytes);
#if defined(__linux__)
    void *q = mremap(p, old ? old : 1, bytes ? bytes : 1, MREMAP_MAYMOVE);
    return q == MAP_FAILED ? NULL : q;
#else
    void *q = realloc(p, bytes ? bytes : 1);
    if (q && bytes > old) memset((char *)q + old, 0, bytes - old);
    return q;
#endif
}

typedef struct {
    uint64_t *keys;
    int32_t *vals; /* 0 = empty slot; otherwise the user's value (a dense id + 1, a count) */
    int64_t slots, n;
} map64;

static inline int64_t map_home(uint64_t key, int64_t slots) {
    return (int64_t)(((unsigned __int128)mix64(key) * (uint64_t)slots) >> 64);
}

static int map_init(map64 *m, int64_t slots) {
    m->slots = slots;
    m->n = 0;
    m->keys = big_new((size_t)slots * sizeof(uint64_t));
    m->vals = big_new((size_t)slots * sizeof(int32_t));
    if (m->keys && m->vals) return 1;
    big_free(m->keys, (size_t)slots * sizeof(uint64_t));
    big_free(m->vals, (size_t)slots * sizeof(int32_t));
    m->keys = NULL; m->vals = NULL;
    return 0;
}

static void map_free(map64 *m) {
    big_free(m->keys, (size_t)m->slots * sizeof(uint64_t));
    big_free(m->vals, (size_t)m->slots * sizeof(int32_t));
    m->keys = NULL; m->vals = NULL;
}

/* The slot holding key, or the empty slot where it goes. */
static inline int64_t map_slot(const map64 *m, uint64_t key) {
    int64_t h = map_home(key, m->slots);
    while (m->vals[h] && m->keys[h] != key) {
        if (++h == m->slots) h = 0;
    }
    return h;
}

/* Prefetch the home slots of n keys (written out with locals: GCC 12 dropped the prefetches
 * of an inlined helper taking the map by pointer). */
static int map_grow(map64 *m) {
    map64 bigger;
    if (!map_init(&bigger, m->slots + m->slots / 2)) return 0;
    for (int64_t i = 0; i < m->slots; i++) {
        if (!m->vals[i]) continue;
        int64_t h = map_slot(&bigger, m->keys[i]);
        bigger.keys[h] = m->keys[i];
        bigger.vals[h] = m->vals[i];
    }
    bigger.n = m->n;
    map_free(m);
    *m = bigger;
    return 1;
}

/* Room for one more key (the caller then looks its slot up again); 0 when memory runs out. */
static inline int map_room(map64 *m) {
    return 4 * (m->n + 1) <= 3 * m->slots || map_grow(m);
}

/* ------------------------------------------------------------------------------------------ *
 * Streaming: the same pass fed request by request from a trace reader, so a trace is never
 * held whole. Memory is O(distinct blocks): an id map, per-id last time and parent, a Fenwick
 * tree over 1.5 to 1.9 x the distinct blocks, and the position histogram (hit tokens per
 * position) that the curve is the cumulative sum of. Positions, histogram and chain checks are
 * those of xpt_stack_distances (the time numbering differs, which positions do not depend on).
 *
 * Sampled (xpt_sd_new_sampled): the SHARDS estimator with an exact hot set of hitrate.
 * sampled_curve, as xpt_stack_distances with its weights computes it. The hot blocks (found
 * by a counting pass, xpt_cnt_*) are put in the map first with weight 1; a block that is not
 * hot is kept when mix64(id + salt) < thr, with weight `scale`, and every other block is left
 * out (position 0, the running maximum untouched). Memory: the hot and the sampled blocks.
 * ------------------------------------------------------------------------------------------ */

typedef struct {
    map64 map;       /* id -> dense id + 1 */
    int32_t *last;   /* per dense id: latest time, 0 = never */
    int32_t *parent; /* per dense id: -2 unseen, -1 root, else the parent's dense id (exact) */
    int32_t *wt;     /* per dense id: weight (sampled mode; NULL = every block weighs 1) */
    int64_t ids_cap;
    int32_t *tree; /* Fenwick tree over times (1-based, cap + 1): int32 halves its cache
                    * footprint; the total weight is kept below 2^31 (feed refuses beyond) */
    int64_t cap;
    int32_t *by_time; /* time -> dense id + 1, 0 = free */
    int64_t now, live, wsum; /* live: weight in the tree; wsum: weight of every mapped id */
    int64_t *hist; /* hist[p]: hit tokens (times weight) of accesses at position p */
    int64_t hist_cap, max_pos, violations, accesses, kept;
    uint64_t salt, thr, idsum; /* sampling; idsum: the ids fed, summed (a check of passes) */
    int64_t scale; /* 0: exact; else sampled, and wt is set */
    int32_t *scratch;
    int64_t scratch_cap;
} xpt_sd;

/* Frees all but the histogram (the curve is read from it after the pass). */
void xpt_sd_drop_index(xpt_sd *s) {
    size_t ids = (size_t)s->ids_cap * sizeof(int32_t), times = (size_t)(s->cap + 1) * 4;
    map_free(&s->map);
    big_free(s->last, ids); big_free(s->parent, ids); big_free(s->wt, ids);
    big_free(s->tree, times); big_free(s->by_time, times);
    free(s->scratch);
    s->last = s->parent = s->wt = s->tree = s->by_time = s->scratch = NULL;
    s->ids_cap = s->cap = s->scratch_cap = 0;
}

void xpt_sd_free(xpt_sd *s) {
    if (!s) return;
    xpt_sd_drop_index(s);
    big_free(s->hist, (size_t)s->hist_cap * sizeof(int64_t));
    free(s);
}

/* Grow an array of `old` elements of `size` bytes to `want`, zero-filling (or 0xff filling)
 * the new tail; 0 when memory runs out (the old array is kept). */
static int grow(void **p, int64_t old, int64_t want, size_t size, int fill) {
    void *q = big_resize(*p, (size_t)old * size, (size_t)want * size);
    if (!q) return 0;
    if (fill) memset((char *)q + (size_t)old * size, fill, (size_t)(want - old) * size);
    *p = q;
    return 1;
}

/* Room for `want` dense ids in last, parent (and wt). */
static int sd_ids_grow(xpt_sd *s, int64_t want) {
    if (!grow((void **)&s->last, s->ids_cap, want, sizeof(int32_t), 0)) return 0;
    if (!grow((void **)&s->parent, s->ids_cap, want, sizeof(int32_t), 0xff)) return 0;
    if (s->scale && !grow((void **)&s->wt, s->ids_cap, want, sizeof(int32_t), 0)) return 0;
    s->ids_cap = want; /* parent -1 (0xff bytes) reads as "seen, root": set on insert */
    return 1;
}

static xpt_sd *sd_new(int64_t scale) {
    xpt_sd *s = calloc(1, sizeof(xpt_sd));
    if (!s) return NULL;
    s->scale = scale; /* 0: exact */
    s->cap = 1024;
    s->tree = big_new((size_t)(s->cap + 1) * sizeof(int32_t));
    s->by_time = big_new((size_t)(s->cap + 1) * sizeof(int32_t));
    if (!map_init(&s->map, 1 << 16) || !s->tree || !s->by_time || !sd_ids_grow(s, 1 << 16)) {
        xpt_sd_free(s);
        return NULL;
    }
    return s;
}

xpt_sd *xpt_sd_new(void) { return sd_new(0); }

/* Map `key` (not yet mapped, its empty slot h) to the next dense id, of weight w. */
static int64_t sd_insert(xpt_sd *s, uint64_t key, int64_t h, int32_t w) {
    if (s->map.n >= INT32_MAX / 2 || s->wsum + w > INT32_MAX) return -1;
    if (s->map.n == s->ids_cap && !sd_ids_grow(s, s->ids_cap + s->ids_cap / 2)) return -1;
    int64_t d = s->map.n++;
    s->map.keys[h] = key;
    s->map.vals[h] = (int32_t)(d + 1);
    s->last[d] = 0;
    s->parent[d] = -2;
    if (s->wt) s->wt[d] = w;
    s->wsum += w;
    return d;
}

/* The dense id of `key` (exact mode: a new key gets the next one); -1 when memory runs out. */
static int64_t sd_id(xpt_sd *s, uint64_t key) {
    int64_t h = map_slot(&s->map, key);
    if (s->map.vals[h]) return s->map.vals[h] - 1;
    if (4 * (s->map.n + 1) > 3 * s->map.slots) {
        if (!map_grow(&s->map)) return -1;
        h = map_slot(&s->map, key);
    }
    return sd_insert(s, key, h, 1);
}

/* Sampled mode: the dense id of a hot or sampled key, -2 for a key left out, -1 when memory
 * runs out. */
static int64_t sd_sampled_id(xpt_sd *s, uint64_t key) {
    int64_t h = map_slot(&s->map, key);
    if (s->map.vals[h]) return s->map.vals[h] - 1;
    if (mix64(key + s->salt) >= s->thr) return -2;
    if (4 * (s->map.n + 1) > 3 * s->map.slots) {
        if (!map_grow(&s->map)) return -1;
        h = map_slot(&s->map, key);
    }
    return sd_insert(s, key, h, (int32_t)s->scale);
}

/* A sampled pass: hot[n_hot] weigh 1, other blocks with mix64(id + salt) < thr weigh scale. */
xpt_sd *xpt_sd_new_sampled(int64_t scale, uint64_t salt, uint64_t thr, const uint64_t *hot,
                           int64_t n_hot) {
    if (scale < 1 || scale > INT32_MAX) return NULL;
    xpt_sd *s = sd_new(scale);
    if (!s) return NULL;
    s->salt = salt;
    s->thr = thr;
    for (int64_t i = 0; i < n_hot; i++) {
        if (!map_room(&s->map)) { xpt_sd_free(s); return NULL; }
        int64_t h = map_slot(&s->map, hot[i]);
        if (s->map.vals[h]) continue;
        if (sd_insert(s, hot[i], h, 1) < 0) { xpt_sd_free(s); return NULL; }
    }
    return s;
}

/* Renumber live times densely from 1 into a tree of `cap` (>= live count + 1). */
static int sd_compact(xpt_sd *s, int64_t cap) {
    if (cap != s->cap) {
        if (!grow((void **)&s->tree, s->cap + 1, cap + 1, sizeof(int32_t), 0)) return 0;
        if (!grow((void **)&s->by_time, s->cap + 1, cap + 1, sizeof(int32_t), 0)) return 0;
    }
    int64_t t2 = 0;
    for (int64_t t = 1; t <= s->now; t++) {
        int32_t id1 = s->by_time[t];
        if (id1 == 0) continue;
        t2++;
        s->by_time[t2] = id1;
        s->last[id1 - 1] = (int32_t)t2;
    }
    memset(s->by_time + t2 + 1, 0, (size_t)(cap - t2) * sizeof(int32_t));
    s->cap = cap;
    memset(s->tree, 0, (size_t)(cap + 1) * sizeof(int32_t));
    for (int64_t t = 1; t <= t2; t++) s->tree[t] = s->wt ? s->wt[s->by_time[t] - 1] : 1;
    for (int64_t i = 1; i <= cap; i++) { /* build in O(cap) */
        int64_t j = i + (i & -i);
        if (j <= cap) s->tree[j] += s->tree[i];
    }
    s->now = t2;
    return 1;
}

static int64_t sd_prefix(const xpt_sd *s, int64_t i) {
    int64_t sum = 0;
    for (; i > 0; i -= i & -i) sum += s->tree[i];
    return sum;
}

/*
 * Feed n_req requests: counts[r] blocks each, their 64-bit ids back to back in ids (root
 * first), every block carrying `block` tokens but the last, which carries last_tokens[r].
 * Returns 0, or -1 when memory runs out (the state is then unusable).
 */
static inline __attribute__((always_inline)) int64_t
sd_feed(xpt_sd *s, const uint64_t *ids, const int64_t *counts, int64_t n_req,
        const int64_t *last_tokens, int64_t block, const int sampled) {
    uint64_t idsum = 0;
    int64_t kept = 0;
    for (int64_t r = 0; r < n_req; r++) {
        int64_t k = counts[r];
        if (k <= 0) continue;
        if (k > s->scratch_cap) {
            int32_t *sc = realloc(s->scratch, (size_t)k * sizeof(int32_t));
            if (!sc) return -1;
            s->scratch = sc;
            s->scratch_cap = k;
        }
        int32_t *dense = s->scratch; /* -2: a block left out of the sample */
        /* Look the request's ids up after prefetching their slots: the map is far bigger than
         * the caches, so overlapping the misses is most of the speed here. */
        const int big = s->map.slots > (1 << 18); /* else it stays in cache: no prefetch */
        if (big) { /* inline: in a helper of its own, GCC 12 drops the prefetches (pure) */
            const uint64_t *keys = s->map.keys;
            const int32_t *vals = s->map.vals;
            const uint64_t slots = (uint64_t)s->map.slots;
            for (int64_t j = 0; j < k; j++) {
                int64_t h = (int64_t)(((unsigned __int128)mix64(ids[j]) * slots) >> 64);
                __builtin_prefetch(keys + h);
                __builtin_prefetch(vals + h);
            }
        }
        for (int64_t j = 0; j < k; j++) {
            int64_t d = sampled ? sd_sampled_id(s, ids[j]) : sd_id(s, ids[j]);
            if (d == -1) return -1;
            dense[j] = (int32_t)d;
            idsum += ids[j];
            if (d >= 0 && big) __builtin_prefetch(s->last + d);
        }
        ids += k;
        int64_t need = s->map.n + s->map.n / 2 + 1024;
        if (need > s->cap) {
            if (need > INT32_MAX) return -1;
            if (!sd_compact(s, need + need / 4)) return -1;
        }
        /* The tree nodes that the queries and the moves below will touch, fetched together. */
        for (int64_t j = 0; j < k && s->cap > (1 << 18); j++) {
            if (dense[j] < 0) continue;
            int64_t t = s->last[dense[j]];
            if (!t) continue;
            for (int64_t i = t - 1; i > 0; i -= i & -i) __builtin_prefetch(s->tree + i);
            for (int64_t i = t; i <= s->cap; i += i & -i) __builtin_prefetch(s->tree + i, 1);
        }
        int64_t run = 0; /* running max; INT64_MAX once a cold block breaks the prefix */
        for (int64_t j = 0; j < k; j++) {
            int32_t id = dense[j];
            if (id < 0) continue; /* not sampled: position 0, the prefix goes on */
            kept++;
            int64_t w = sampled ? s->wt[id] : 1;
            if (!sampled) {
                int32_t p = j == 0 ? -1 : dense[j - 1];
                if (s->parent[id] == -2) s->parent[id] = p;
                else if (s->parent[id] != p) s->violations++;
            }
            if (run == INT64_MAX) continue; /* the prefix already broke: position 0 */
            int64_t t = s->last[id];
            /* the block itself counts once, whatever it stands for */
            int64_t d = t ? s->live - sd_prefix(s, t - 1) - (w - 1) : INT64_MAX;
            if (d > run) run = d;
            if (run == INT64_MAX) continue;
            if (run >= s->hist_cap) {
                int64_t more = s->hist_cap + s->hist_cap / 2;
                int64_t want = run + 1 > more ? run + 1 : more;
                if (want < 1024) want = 1024;
                if (!grow((void **)&s->hist, s->hist_cap, want, sizeof(int64_t), 0)) return -1;
                s->hist_cap = want;
            }
            s->hist[run] += (j == k - 1 ? last_tokens[r] : block) * w;
            if (run > s->max_pos) s->max_pos = run;
        }
        for (int64_t j = k - 1; j >= 0; j--) {
            int32_t id = dense[j];
            if (id < 0) continue;
            int64_t t = s->last[id], cap = s->cap;
            int32_t *tree = s->tree; /* locals: the stores below cannot alias them */
            const int32_t w32 = sampled ? s->wt[id] : 1;
            if (t) {
                for (int64_t i = t; i <= cap; i += i & -i) tree[i] -= w32;
                s->by_time[t] = 0;
            } else {
                s->live += w32;
            }
            if (s->now == cap) {
                if (!sd_compact(s, cap)) return -1;
                tree = s->tree;
            }
            int64_t now = ++s->now;
            for (int64_t i = now; i <= cap; i += i & -i) tree[i] += w32;
            s->by_time[now] = id + 1;
            s->last[id] = (int32_t)now;
        }
        s->accesses += k;
    }
    s->idsum += idsum;
    s->kept += kept;
    return 0;
}

int64_t xpt_sd_feed(xpt_sd *s, const uint64_t *ids, const int64_t *counts, int64_t n_req,
                    const int64_t *last_tokens, int64_t block) {
    /* two copies of the loop, the exact one free of the sampling branches */
    if (s->wt) return sd_feed(s, ids, counts, n_req, last_tokens, block, 1);
    return sd_feed(s, ids, counts, n_req, last_tokens, block, 0);
}

/* info[0..5] = distinct blocks mapped, largest position with hits, chain violations,
 * accesses, accesses kept (sampled mode: of hot or sampled blocks), the ids summed. */
void xpt_sd_info(const xpt_sd *s, int64_t *info) {
    info[0] = s->map.n; info[1] = s->max_pos; info[2] = s->violations; info[3] = s->accesses;
    info[4] = s->kept; info[5] = (int64_t)s->idsum;
}

/* The curve: out[0] = 0, out[i] = out[i - 1] + hist[i] in doubles, for i < n (the running
 * sum numpy's cumsum does over the histogram as float64, so the same values). */
void xpt_sd_cumulative(const xpt_sd *s, double *out, int64_t n) {
    double acc = 0.0;
    if (n > 0) out[0] = 0.0;
    for (int64_t i = 1; i < n; i++) {
        acc += (double)(i < s->hist_cap ? s->hist[i] : 0);
        out[i] = acc;
    }
}

/* ------------------------------------------------------------------------------------------ *
 * The counting pass of the sampled mode: accesses per distinct block id (12 bytes a slot), for
 * the hot set of sampled_curve: the blocks accessed at least as often as the (distinct / scale)
 * -th most accessed one, and at least twice.
 * ------------------------------------------------------------------------------------------ */

typedef struct __attribute__((packed)) {
    uint64_t key;
    uint32_t count; /* 0 = empty slot */
} cnt_slot;         /* 12 bytes, key and count on one cache line (mostly): one miss a lookup */

typedef struct {
    cnt_slot *slot;
    int64_t slots, n, accesses;
    uint64_t idsum;
} xpt_cnt;

void xpt_cnt_free(xpt_cnt *c) {
    if (!c) return;
    big_free(c->slot, (size_t)c->slots * sizeof(cnt_slot));
    free(c);
}

xpt_cnt *xpt_cnt_new(void) {
    xpt_cnt *c = calloc(1, sizeof(xpt_cnt));
    if (!c) return NULL;
    c->slots = 1 << 16;
    c->slot = big_new((size_t)c->slots * sizeof(cnt_slot));
    if (!c->slot) { free(c); return NULL; }
    return c;
}

static inline int64_t cnt_find(const cnt_slot *slot, int64_t slots, uint64_t key) {
    int64_t h = map_home(key, slots);
    while (slot[h].count && slot[h].key != key) {
        if (++h == slots) h = 0;
    }
    return h;
}

static int cnt_grow(xpt_cnt *c) {
    int64_t slots = c->slots + c->slots / 2;
    cnt_slot *bigger = big_new((size_t)slots * sizeof(cnt_slot));
    if (!bigger) return 0;
    for (int64_t i = 0; i < c->slots; i++) {
        if (c->slot[i].count) bigger[cnt_find(bigger, slots, c->slot[i].key)] = c->slot[i];
    }
    big_free(c->slot, (size_t)c->slots * sizeof(cnt_slot));
    c->slot = bigger;
    c->slots = slots;
    return 1;
}

/* Count n ids; 0, or -1 when memory runs out or a count passes 2^32 - 1. */
int64_t xpt_cnt_add(xpt_cnt *c, const uint64_t *ids, int64_t n) {
    enum { AHEAD = 24 };
    for (int64_t i = 0; i < n; i++) {
        if (i + AHEAD < n) {
            const cnt_slot *slot = c->slot;
            const uint64_t slots = (uint64_t)c->slots;
            uint64_t ahead = mix64(ids[i + AHEAD]);
            __builtin_prefetch(slot + (int64_t)(((unsigned __int128)ahead * slots) >> 64));
        }
        uint64_t key = ids[i];
        int64_t h = cnt_find(c->slot, c->slots, key);
        if (!c->slot[h].count) {
            if (4 * (c->n + 1) > 3 * c->slots) {
                if (!cnt_grow(c)) return -1;
                h = cnt_find(c->slot, c->slots, key);
            }
            c->slot[h].key = key;
            c->n++;
        } else if (c->slot[h].count == UINT32_MAX) {
            return -1;
        }
        c->slot[h].count++;
        c->idsum += key;
    }
    c->accesses += n;
    return 0;
}

/* info[0..2] = distinct ids, accesses, the ids summed. */
void xpt_cnt_info(const xpt_cnt *c, int64_t *info) {
    info[0] = c->n; info[1] = c->accesses; info[2] = (int64_t)c->idsum;
}

static int cmp_desc32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x < y) - (x > y);
}

/* The rank-th largest count (1 = the largest; counts with repeats), 0 if rank is out of range
 * or -1 when memory runs out. Small counts are tallied, the few large ones sorted. */
int64_t xpt_cnt_rank(const xpt_cnt *c, int64_t rank) {
    enum { SMALL = 1 << 16 };
    if (rank < 1 || rank > c->n) return 0;
    int64_t *tally = calloc(SMALL, sizeof(int64_t));
    int64_t n_big = 0;
    if (!tally) return -1;
    for (int64_t i = 0; i < c->slots; i++) {
        uint32_t v = c->slot[i].count;
        if (v >= SMALL) n_big++;
        else tally[v]++;
    }
    int64_t result = 0;
    if (rank <= n_big) {
        uint32_t *big = malloc((size_t)n_big * sizeof(uint32_t));
        if (!big) { free(tally); return -1; }
        int64_t j = 0;
        for (int64_t i = 0; i < c->slots; i++)
            if (c->slot[i].count >= SMALL) big[j++] = c->slot[i].count;
        qsort(big, (size_t)n_big, sizeof(uint32_t), cmp_desc32);
        result = big[rank - 1];
        free(big);
    } else {
        int64_t seen = n_big;
        for (int64_t v = SMALL - 1; v >= 1; v--) {
            seen += tally[v];
            if (seen >= rank) { result = v; break; }
        }
    }
    free(tally);
    return result;
}

/* The ids counted at least `least` times (least >= 1) into out (room for cap); returns how
 * many there are (more than cap: only cap written). */
int64_t xpt_cnt_at_least(const xpt_cnt *c, int64_t least, uint64_t *out, int64_t cap) {
    int64_t n = 0;
    for (int64_t i = 0; i < c->slots; i++) {
        if (c->slot[i].count && (int64_t)c->slot[i].count >= least) {
            if (n < cap) out[n] = c->slot[i].key;
            n++;
        }
    }
    return n;
}

/* ------------------------------------------------------------------------------------------ *
 * Trace text helpers for the reader (xputune/plan/traces.py). The JSON has been validated by
 * the decoder already; these only read what it left as raw text, and refuse anything that is
 * not the plain case so that the caller's per-line path can name the line and the reason.
 * ------------------------------------------------------------------------------------------ */

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/*
 * buf holds n_arrays JSON arrays back to back (as the decoder left them). Writes their
 * elements to ids (room for cap) and each array's length to counts. Returns the number of ids,
 * or -(i + 1) when array i is not a list of integers in 0..2^64-1 (or ids would overflow cap).
 */
int64_t xpt_parse_id_arrays(const char *buf, int64_t len, int64_t n_arrays, uint64_t *ids,
                            int64_t cap, int64_t *counts) {
    int64_t pos = 0, total = 0;
    for (int64_t a = 0; a < n_arrays; a++) {
        while (pos < len && is_ws(buf[pos])) pos++;
        if (pos >= len || buf[pos] != '[') return -(a + 1);
        pos++;
        int64_t k = 0;
        while (pos < len && is_ws(buf[pos])) pos++;
        if (pos < len && buf[pos] == ']') { pos++; counts[a] = 0; continue; }
        for (;;) {
            while (pos < len && is_ws(buf[pos])) pos++;
            if (pos >= len || buf[pos] < '0' || buf[pos] > '9') return -(a + 1);
            uint64_t v = 0;
            while (pos < len && buf[pos] >= '0' && buf[pos] <= '9') {
                uint64_t digit = (uint64_t)(buf[pos] - '0');
                if (v > (UINT64_MAX - digit) / 10) return -(a + 1);
                v = v * 10 + digit;
                pos++;
            }
            if (total >= cap) return -(a + 1);
            ids[total++] = v;
            k++;
            while (pos < len && is_ws(buf[pos])) pos++;
            if (pos >= len) return -(a + 1);
            if (buf[pos] == ',') { pos++; continue; }
            if (buf[pos] == ']') { pos++; break; }
            return -(a + 1); /* '.', 'e': a float */
        }
        counts[a] = k;
    }
    return total;
}

/* The ids of the `field` array of every line of buf: for the counting pass, which needs only
 * the ids, when each line is plain enough to read without decoding it: no backslash or CR in
 * buf, and each non-blank line an object holding `"<field>"` once, followed by ':' and an
 * array of integers in 0..2^64-1. Any other line is left to the decoder (returns -1), so on a
 * trace that the decoder reads these are its ids. Returns the number of ids written (room for
 * cap), or -1. */
int64_t xpt_scan_ids(const char *buf, int64_t len, const char *field, int64_t flen,
                     uint64_t *ids, int64_t cap) {
    if (memchr(buf, '\\', (size_t)len) || memchr(buf, '\r', (size_t)len)) return -1;
    int64_t pos = 0, total = 0;
    while (pos < len) {
        const char *nl = memchr(buf + pos, '\n', (size_t)(len - pos));
        int64_t end = nl ? (int64_t)(nl - buf) : len;
        int64_t i = pos;
        while (i < end && is_ws(buf[i])) i++;
        if (i == end) { pos = end + 1; continue; }
        if (buf[i] != '{') return -1;
        /* the one `"<field>"` of the line */
        int64_t at = -1;
        for (int64_t j = i; j + flen + 2 <= end; j++) {
            const char *q = memchr(buf + j, '"', (size_t)(end - j));
            if (!q) break;
            j = (int64_t)(q - buf);
            if (j + flen + 2 > end) break;
            if (memcmp(buf + j + 1, field, (size_t)flen) == 0 && buf[j + 1 + flen] == '"') {
                if (at >= 0) return -1;
                at = j;
                j += flen + 1;
            }
        }
        if (at < 0) return -1;
        int64_t j = at + flen + 2;
        while (j < end && is_ws(buf[j])) j++;
        if (j >= end || buf[j] != ':') return -1;
        j++;
        while (j < end && is_ws(buf[j])) j++;
        if (j >= end || buf[j] != '[') return -1;
        j++;
        while (j < end && is_ws(buf[j])) j++;
        if (j < end && buf[j] == ']') { pos = end + 1; continue; }
        for (;;) {
            while (j < end && is_ws(buf[j])) j++;
            if (j >= end || buf[j] < '0' || buf[j] > '9') return -1;
            uint64_t v = 0;
            while (j < end && buf[j] >= '0' && buf[j] <= '9') {
                uint64_t digit = (uint64_t)(buf[j] - '0');
                if (v > (UINT64_MAX - digit) / 10) return -1;
                v = v * 10 + digit;
                j++;
            }
            if (total >= cap) return -1;
            ids[total++] = v;
            while (j < end && is_ws(buf[j])) j++;
            if (j >= end) return -1;
            if (buf[j] == ',') { j++; continue; }
            if (buf[j] == ']') break;
            return -1;
        }
        pos = end + 1;
    }
    return total;
}

/* Fold the rolling prefix hash over each request's page hashes (traces.chain, in C), in place,
 * for the requests whose chained[r] is 0. */
void xpt_chain_ids(uint64_t *ids, const int64_t *counts, int64_t n_req, const int8_t *chained) {
    for (int64_t r = 0; r < n_req; r++) {
        int64_t k = counts[r];
        if (!chained[r]) {
            uint64_t h = 0;
            for (int64_t j = 0; j < k; j++) {
                uint64_t z = h * 0x100000001B3ULL + ids[j] + 0x9E3779B97F4A7C15ULL;
                h = mix64(z);
                ids[j] = h;
            }
        }
        ids += k;
    }
}
