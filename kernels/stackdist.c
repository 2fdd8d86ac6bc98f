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

/* ------------------------------------------------------------------------------------------ *
 * Streaming: the same pass fed request by request from a trace reader, so a trace is never
 * held whole. Memory is O(distinct blocks): an id map, per-id last time and parent, a Fenwick
 * tree over 1.5 to 1.9 x the distinct blocks, and the position histogram (hit tokens per
 * position) that the curve is the cumulative sum of. Positions, histogram and chain checks are
 * those of xpt_stack_distances (the time numbering differs, which positions do not depend on).
 * Every kept block weighs `weight` (1 = exact; a sample of whole prefix trees at rate 1/w
 * gives each kept block weight w, as xpt_stack_distances with uniform weights would).
 * ------------------------------------------------------------------------------------------ */

typedef struct {
    uint64_t *keys;
    int32_t *vals; /* dense id + 1; 0 = empty slot */
    int64_t mask, n;
    int32_t *last;   /* per dense id: latest time, 0 = never */
    int32_t *parent; /* per dense id: -2 unseen, -1 root, else the parent's dense id */
    int64_t ids_cap;
    int32_t *tree; /* Fenwick tree over times (1-based, cap + 1): int32 halves its cache
                    * footprint; total weight is kept below 2^31 (feed refuses beyond) */
    int64_t cap;
    int32_t *by_time; /* time -> dense id + 1, 0 = free */
    int64_t now, live, weight;
    int64_t *hist; /* hist[p]: hit tokens (times weight) of accesses at position p */
    int64_t hist_cap, max_pos, violations, accesses;
    int32_t *scratch;
    int64_t scratch_cap;
} xpt_sd;

void xpt_sd_free(xpt_sd *s) {
    if (!s) return;
    free(s->keys); free(s->vals); free(s->last); free(s->parent); free(s->tree);
    free(s->by_time); free(s->hist); free(s->scratch); free(s);
}

xpt_sd *xpt_sd_new(int64_t weight) {
    xpt_sd *s = calloc(1, sizeof(xpt_sd));
    if (!s) return NULL;
    s->weight = weight < 1 ? 1 : weight;
    s->mask = (1 << 16) - 1;
    s->keys = malloc((size_t)(s->mask + 1) * sizeof(uint64_t));
    s->vals = calloc((size_t)(s->mask + 1), sizeof(int32_t));
    s->cap = 1024;
    s->tree = calloc((size_t)s->cap + 1, sizeof(int32_t));
    s->by_time = calloc((size_t)s->cap + 1, sizeof(int32_t));
    if (!s->keys || !s->vals || !s->tree || !s->by_time) { xpt_sd_free(s); return NULL; }
    return s;
}

static int sd_map_grow(xpt_sd *s) {
    int64_t slots = 2 * (s->mask + 1), mask = slots - 1;
    uint64_t *keys = malloc((size_t)slots * sizeof(uint64_t));
    int32_t *vals = calloc((size_t)slots, sizeof(int32_t));
    if (!keys || !vals) { free(keys); free(vals); return 0; }
    for (int64_t i = 0; i <= s->mask; i++) {
        if (!s->vals[i]) continue;
        int64_t h = (int64_t)(mix64(s->keys[i]) & (uint64_t)mask);
        while (vals[h]) h = (h + 1) & mask;
        keys[h] = s->keys[i];
        vals[h] = s->vals[i];
    }
    free(s->keys); free(s->vals);
    s->keys = keys; s->vals = vals; s->mask = mask;
    return 1;
}

/* Grow an array of `old` elements of `size` bytes to `want`, zero-filling (or -2 filling) the
 * new tail; 0 when memory runs out (the old array is kept). */
static int grow(void **p, int64_t old, int64_t want, size_t size, int fill) {
    void *q = realloc(*p, (size_t)want * size);
    if (!q) return 0;
    memset((char *)q + (size_t)old * size, fill, (size_t)(want - old) * size);
    *p = q;
    return 1;
}

static int64_t sd_id(xpt_sd *s, uint64_t key) {
    int64_t h = (int64_t)(mix64(key) & (uint64_t)s->mask);
    while (s->vals[h]) {
        if (s->keys[h] == key) return s->vals[h] - 1;
        h = (h + 1) & s->mask;
    }
    if (4 * (s->n + 1) > 3 * (s->mask + 1)) { /* load factor 3/4 */
        if (!sd_map_grow(s)) return -1;
        return sd_id(s, key);
    }
    if (s->n >= INT32_MAX / 2) return -1;
    if (s->n == s->ids_cap) {
        int64_t want = s->ids_cap ? s->ids_cap + s->ids_cap / 2 : 1 << 16;
        if (!grow((void **)&s->last, s->ids_cap, want, sizeof(int32_t), 0)) return -1;
        if (!grow((void **)&s->parent, s->ids_cap, want, sizeof(int32_t), 0xff)) return -1;
        s->ids_cap = want; /* parent -1 (0xff bytes) reads as "seen, root": fixed below */
    }
    s->keys[h] = key;
    s->vals[h] = (int32_t)(s->n + 1);
    s->last[s->n] = 0;
    s->parent[s->n] = -2;
    return s->n++;
}

/* Renumber live times densely from 1 into a tree of `cap` (>= live count + 1). */
static int sd_compact(xpt_sd *s, int64_t cap) {
    if (cap != s->cap) {
        int32_t *tree = realloc(s->tree, (size_t)(cap + 1) * sizeof(int32_t));
        if (!tree) return 0;
        s->tree = tree;
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
    for (int64_t t = 1; t <= t2; t++) s->tree[t] = (int32_t)s->weight;
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
int64_t xpt_sd_feed(xpt_sd *s, const uint64_t *ids, const int64_t *counts, int64_t n_req,
                    const int64_t *last_tokens, int64_t block) {
    const int64_t w = s->weight;
    for (int64_t r = 0; r < n_req; r++) {
        int64_t k = counts[r];
        if (k <= 0) continue;
        if (k > s->scratch_cap) {
            int32_t *sc = realloc(s->scratch, (size_t)k * sizeof(int32_t));
            if (!sc) return -1;
            s->scratch = sc;
            s->scratch_cap = k;
        }
        int32_t *dense = s->scratch;
        /* Look the request's ids up after prefetching their slots: the map is far bigger than
         * the caches, so overlapping the misses is most of the speed here. */
        for (int64_t j = 0; j < k; j++) {
            int64_t h = (int64_t)(mix64(ids[j]) & (uint64_t)s->mask);
            __builtin_prefetch(s->keys + h);
            __builtin_prefetch(s->vals + h);
        }
        for (int64_t j = 0; j < k; j++) {
            int64_t d = sd_id(s, ids[j]);
            if (d < 0) return -1;
            dense[j] = (int32_t)d;
            __builtin_prefetch(s->last + d);
        }
        ids += k;
        int64_t need = s->n + s->n / 2 + 1024;
        if ((s->n + 1) * w > INT32_MAX) return -1; /* the int32 tree's total weight */
        if (need > s->cap) {
            if (need > INT32_MAX) return -1;
            if (!sd_compact(s, need + need / 4)) return -1;
        }
        /* The tree nodes that the queries and the moves below will touch, fetched together. */
        for (int64_t j = 0; j < k; j++) {
            int64_t t = s->last[dense[j]];
            if (!t) continue;
            for (int64_t i = t - 1; i > 0; i -= i & -i) __builtin_prefetch(s->tree + i);
            for (int64_t i = t; i <= s->cap; i += i & -i) __builtin_prefetch(s->tree + i, 1);
        }
        int64_t run = 0; /* running max; INT64_MAX once a cold block breaks the prefix */
        for (int64_t j = 0; j < k; j++) {
            int32_t id = dense[j];
            if (w == 1) {
                int32_t p = j == 0 ? -1 : dense[j - 1];
                if (s->parent[id] == -2) s->parent[id] = p;
                else if (s->parent[id] != p) s->violations++;
            }
            if (run == INT64_MAX) continue; /* the prefix already broke: position 0 */
            int64_t t = s->last[id];
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
            int64_t t = s->last[id], cap = s->cap;
            int32_t *tree = s->tree; /* locals: the stores below cannot alias them */
            const int32_t w32 = (int32_t)w;
            if (t) {
                for (int64_t i = t; i <= cap; i += i & -i) tree[i] -= w32;
                s->by_time[t] = 0;
            } else {
                s->live += w;
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
    return 0;
}

/* info[0..3] = distinct blocks, largest position with hits, chain violations, accesses. */
void xpt_sd_info(const xpt_sd *s, int64_t *info) {
    info[0] = s->n; info[1] = s->max_pos; info[2] = s->violations; info[3] = s->accesses;
}

/* hist[0..n) (positions past what was seen read 0). */
void xpt_sd_hist(const xpt_sd *s, int64_t *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = i < s->hist_cap ? s->hist[i] : 0;
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

/*
 * For sampling before decoding: split buf into lines at '\n' (at most max_lines) and, per
 * line, find `"<field>"` then ':' '[' and the first integer of that array. starts[i] is where
 * line i begins (starts[n] = len), status[i] 0 for a blank line, 1 with keys[i] set, 2 when the
 * key cannot be read this cheaply (the line must be decoded). Returns the number of lines.
 */
int64_t xpt_line_keys(const char *buf, int64_t len, const char *field, int64_t flen,
                      int64_t max_lines, int64_t *starts, uint64_t *keys, int8_t *status) {
    int64_t pos = 0, n = 0;
    while (pos < len && n < max_lines) {
        const char *nl = memchr(buf + pos, '\n', (size_t)(len - pos));
        int64_t end = nl ? (int64_t)(nl - buf) : len;
        starts[n] = pos;
        keys[n] = 0;
        int64_t i = pos;
        while (i < end && is_ws(buf[i])) i++;
        status[n] = i == end ? 0 : 2;
        for (; status[n] == 2 && i + flen + 2 <= end; i++) {
            if (buf[i] != '"' || memcmp(buf + i + 1, field, (size_t)flen) != 0
                || buf[i + 1 + flen] != '"')
                continue;
            int64_t j = i + flen + 2;
            while (j < end && is_ws(buf[j])) j++;
            if (j >= end || buf[j] != ':') break;
            j++;
            while (j < end && is_ws(buf[j])) j++;
            if (j >= end || buf[j] != '[') break;
            j++;
            while (j < end && is_ws(buf[j])) j++;
            if (j >= end || buf[j] < '0' || buf[j] > '9') break;
            uint64_t v = 0;
            int ok = 1;
            while (j < end && buf[j] >= '0' && buf[j] <= '9') {
                uint64_t digit = (uint64_t)(buf[j] - '0');
                if (v > (UINT64_MAX - digit) / 10) { ok = 0; break; }
                v = v * 10 + digit;
                j++;
            }
            if (ok) { keys[n] = v; status[n] = 1; }
            break;
        }
        n++;
        pos = end + 1;
    }
    starts[n] = pos < len ? pos : len;
    return n;
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
