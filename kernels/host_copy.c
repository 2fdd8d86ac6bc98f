/*
 * Host copy backend: memcpy over a segment table, split across a few threads.
 *
 * Why threads: one core cannot saturate a socket's memory bandwidth, so a large layer copy
 * (tens of MB) goes faster on two to eight cores. Why not always: a thread costs tens of
 * microseconds to start, so small copies stay on the caller's thread, and a thread that has
 * to wait for a busy core delays the whole copy, so no more threads than idle CPUs. The work is split by
 * bytes, not by segments, so one huge segment (a merged layer_first layer) is shared as evenly
 * as forty thousand small ones; threads take chunks as they go, so a descheduled thread on a
 * busy machine does not hold the whole copy back.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h> /* snprintf, fopen: the cache size from sysfs */
#include <stdlib.h> /* getloadavg (with _GNU_SOURCE) */
#include <string.h>
#include <unistd.h>

#include "xt_copy.h"

/* Below this many bytes per thread, another thread costs more than it saves. */
#define XT_MIN_BYTES_PER_THREAD ((uint64_t)4 << 20)
#define XT_MAX_THREADS 16

int xt_host_abi_version(void) { return XT_ABI_VERSION; }

/* CPUs this process may run on (affinity mask), not the machine's total. */
int xt_host_cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Threads used for `total` bytes when the caller asks for `requested` (<= 0 means auto). */
int xt_host_thread_count(uint64_t total, int requested) {
    int cap = xt_host_cpu_count();
    if (cap > XT_MAX_THREADS) cap = XT_MAX_THREADS;
    if (requested > 0) return requested < XT_MAX_THREADS ? requested : XT_MAX_THREADS;
    uint64_t by_size = total / XT_MIN_BYTES_PER_THREAD;
    if (by_size <= 1) return 1;
    /* Do not oversubscribe: on a busy machine a second thread waits for a core, and the copy
     * waits for it. The 1-minute load includes this process, hence the + 1. */
    double load;
    if (getloadavg(&load, 1) == 1) {
        int idle = cap - (int)(load + 0.5) + 1;
        if (idle < cap) cap = idle < 1 ? 1 : idle;
    }
    return by_size < (uint64_t)cap ? (int)by_size : cap;
}

/* One plain memcpy: the baseline every benchmark compares against, from the same library. */
void xt_host_memcpy(void *dst, const void *src, uint64_t nbytes) {
    memcpy(dst, src, (size_t)nbytes);
}

/*
 * Every copy below goes through copy_bytes, which hands memcpy pieces of at most XT_PIECE bytes.
 * Why: glibc picks its copy strategy by size, and on some x86 CPUs its path for copies above its
 * "rep movsb stop threshold" (the L2 size on AMD, 512 KiB to 1 MiB) is 25-35% slower than the
 * rep movsb it uses below it (measured on a Zen host, 38 MB: 1 MiB pieces 0.95x one memcpy,
 * 1 MiB - 4 KiB pieces 1.36x). 256 KiB stays below that threshold on every tuning glibc has,
 * and ~150 calls per 38 MB layer cost nothing measurable. What it gives up: glibc's
 * non-temporal path for copies above ~3/4 of the L3 share, which none of these pieces reach.
 */
#define XT_PIECE ((uint64_t)256 << 10)

/*
 * Those pieces (and any copy from ~2 KiB up) are glibc's rep movsb, which on AMD Zen runs
 * several times slower when the destination sits less than a cache line past the source modulo
 * 4 KiB (measured 37.7 MB in 256 KiB pieces: 2.6 GB/s at (dst - src) % 4096 == 16, 6.8 GB/s at 0
 * or >= 32; one memcpy and a plain vector loop: 6.8 and 7.2). Buffers from different allocators
 * land there all the time: a 2 MiB-aligned huge-page host buffer and a malloc'ed array that
 * starts 16 bytes into its page. Such copies go through vector_bytes, a plain SSE2 loop.
 */
#define XT_SHORT_DISTANCE 64
#define XT_SHORT_DISTANCE_MIN ((uint64_t)1024)

static inline int short_distance(const char *dst, const char *src) {
    const uint64_t d = ((uintptr_t)dst - (uintptr_t)src) & 4095;
    return d != 0 && d < XT_SHORT_DISTANCE;
}

static void vector_bytes(char *dst, const char *src, uint64_t n);

static inline void copy_bytes(char *dst, const char *src, uint64_t n) {
    if (n >= XT_SHORT_DISTANCE_MIN && short_distance(dst, src)) {
        vector_bytes(dst, src, n);
        return;
    }
    while (n > XT_PIECE) {
        memcpy(dst, src, (size_t)XT_PIECE);
        dst += XT_PIECE;
        src += XT_PIECE;
        n -= XT_PIECE;
    }
    memcpy(dst, src, (size_t)n);
}

/*
 * Small scattered segments (a page_first token: one item every num_layers items) leave the
 * hardware prefetcher a new stream every kilobyte; asking for the source of the segment
 * XT_PREFETCH_AHEAD places ahead hides most of that miss latency (measured 0.67 -> 0.74-0.77 of
 * memcpy for 32K items of 1152 B). Segments above XT_PREFETCH_MAX are streams the hardware
 * prefetcher follows on its own.
 */
#define XT_PREFETCH_AHEAD 8
#define XT_PREFETCH_MAX ((uint64_t)4096)

static inline void prefetch_bytes(uint64_t address, uint64_t n) {
    const char *p = (const char *)(uintptr_t)address;
    for (uint64_t k = 0; k < n; k += 64) __builtin_prefetch(p + k, 0, 3);
}

/*
 * Small segments of a large transfer are written with non-temporal (streaming) stores.
 * Why: glibc writes around the cache itself, but only for one call above ~3/4 of the L3
 * share; a page_first transfer is 32K calls of 1 KB each, so it never does, although the
 * transfer as a whole (tens of MB) cannot stay in the cache either. Written through the cache,
 * every destination line is first read (a read-for-ownership), a third more memory traffic;
 * streamed, it is not (measured on 32K items of 1152 B: 0.64 -> 0.85 of memcpy gathering,
 * 0.67 -> 0.93 scattering). Only segments up to XT_STREAM_MAX: a large segment is one memcpy
 * call that glibc sizes itself. Whole 64-byte lines only; a segment's unaligned head and tail
 * go through memcpy, so a line is never half streamed. x86-64 only (SSE2, always there);
 * elsewhere every segment is a memcpy.
 */
#define XT_STREAM_MAX ((uint64_t)16 << 10)
#define XT_STREAM_MIN_FALLBACK ((uint64_t)32 << 20)

#if defined(__x86_64__)
#include <emmintrin.h>
#define XT_SSE2 1 /* x86-64 always has it: streaming stores and the index scan use it */

static void stream_bytes(char *dst, const char *src, uint64_t n) {
    uint64_t head = (64 - ((uintptr_t)dst & 63)) & 63;
    if (head > n) head = n;
    if (head) {
        memcpy(dst, src, (size_t)head);
        dst += head;
        src += head;
        n -= head;
    }
    for (uint64_t lines = n / 64; lines; --lines) {
        const __m128i *s = (const __m128i *)src;
        __m128i *d = (__m128i *)dst;
        const __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1);
        const __m128i c = _mm_loadu_si128(s + 2), e = _mm_loadu_si128(s + 3);
        _mm_stream_si128(d, a);
        _mm_stream_si128(d + 1, b);
        _mm_stream_si128(d + 2, c);
        _mm_stream_si128(d + 3, e);
        dst += 64;
        src += 64;
    }
    if (n & 63) memcpy(dst, src, (size_t)(n & 63));
}

/* Streaming stores are weakly ordered: fence them before the copy counts as done. */
static inline void stream_fence(void) { _mm_sfence(); }

/* Cached loads and stores, 64 bytes a step; the tail (< 64 bytes) through memcpy. */
static void vector_bytes(char *dst, const char *src, uint64_t n) {
    for (uint64_t lines = n / 64; lines; --lines) {
        const __m128i *s = (const __m128i *)src;
        __m128i *d = (__m128i *)dst;
        const __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1);
        const __m128i c = _mm_loadu_si128(s + 2), e = _mm_loadu_si128(s + 3);
        _mm_storeu_si128(d, a);
        _mm_storeu_si128(d + 1, b);
        _mm_storeu_si128(d + 2, c);
        _mm_storeu_si128(d + 3, e);
        dst += 64;
        src += 64;
    }
    if (n & 63) memcpy(dst, src, (size_t)(n & 63));
}
#else
#define XT_SSE2 0
static void stream_bytes(char *dst, const char *src, uint64_t n) { copy_bytes(dst, src, n); }
static inline void stream_fence(void) {}
static void vector_bytes(char *dst, const char *src, uint64_t n) { memcpy(dst, src, (size_t)n); }
#endif

/* Transfers of at least this many bytes stream their small segments: the size of the last-level
 * cache cpu0 sees (sysfs; glibc's figure is the whole package's on some VMs), 32 MiB if unknown;
 * xt_host_stream_min sets it (tests, tuning). */
static _Atomic int64_t xt_stream_min = -1;

static int64_t llc_bytes(void) {
    char path[64], text[32];
    int64_t best = 0;
    for (int index = 0; index < 8; ++index) {
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
        FILE *f = fopen(path, "r");
        if (!f) break;
        char *got = fgets(text, sizeof(text), f);
        fclose(f);
        if (!got) continue;
        char *end;
        long long v = strtoll(text, &end, 10);
        if (*end == 'K') v <<= 10;
        else if (*end == 'M') v <<= 20;
        if (v > best) best = v;
    }
    return best > 0 ? best : (int64_t)XT_STREAM_MIN_FALLBACK;
}

/* Set the streaming threshold (bytes >= 0; < 0 leaves it); returns the one in force before. */
int64_t xt_host_stream_min(int64_t bytes) {
    int64_t now = atomic_load(&xt_stream_min);
    if (now < 0) {
        now = llc_bytes();
        atomic_store(&xt_stream_min, now);
    }
    if (bytes >= 0) atomic_store(&xt_stream_min, bytes);
    return now;
}

static inline int use_stream(uint64_t total) {
    return XT_SSE2 && total >= (uint64_t)xt_host_stream_min(-1);
}

/* One segment: streamed if the transfer streams and the segment is small, else memcpy pieces. */
static inline void copy_segment(char *dst, const char *src, uint64_t n, int stream) {
    if (stream && n <= XT_STREAM_MAX) stream_bytes(dst, src, n);
    else copy_bytes(dst, src, n);
}

/* Chunks of the byte stream are handed out from a shared counter (work stealing): a thread
 * that the scheduler parks, on a busy machine, then delays only its current chunk, not a fixed
 * half of the copy. */
#define XT_CHUNK_MIN ((uint64_t)1 << 20)
#define XT_CHUNKS_PER_THREAD 8

typedef struct {
    const uint64_t *src;
    const uint64_t *dst;
    const uint64_t *prefix; /* prefix[i] = bytes before segment i; prefix[n] = total */
    int64_t n;
    uint64_t chunk;
    uint64_t chunks;
    int stream;
    atomic_uint_fast64_t next;
} xt_job;

static int64_t first_segment_ending_after(const uint64_t *prefix, int64_t n, uint64_t pos) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) { /* smallest i with prefix[i + 1] > pos */
        int64_t mid = lo + (hi - lo) / 2;
        if (prefix[mid + 1] > pos) hi = mid; else lo = mid + 1;
    }
    return lo;
}

/* Copy bytes [lo, hi) of the concatenated segments. */
static void copy_range(const xt_job *job, uint64_t lo, uint64_t hi) {
    int64_t i = first_segment_ending_after(job->prefix, job->n, lo);
    uint64_t pos = lo;
    while (pos < hi && i < job->n) {
        uint64_t seg_start = job->prefix[i];
        uint64_t seg_end = job->prefix[i + 1];
        uint64_t a = pos > seg_start ? pos : seg_start;
        uint64_t b = hi < seg_end ? hi : seg_end;
        if (b > a) {
            uint64_t skip = a - seg_start;
            copy_segment((char *)(uintptr_t)job->dst[i] + skip,
                         (const char *)(uintptr_t)job->src[i] + skip, b - a, job->stream);
        }
        pos = b;
        ++i;
    }
}

static void *worker(void *arg) {
    xt_job *job = (xt_job *)arg;
    const uint64_t total = job->prefix[job->n];
    for (;;) {
        uint64_t c = atomic_fetch_add(&job->next, 1);
        if (c >= job->chunks) break;
        uint64_t lo = c * job->chunk;
        uint64_t hi = lo + job->chunk < total ? lo + job->chunk : total;
        copy_range(job, lo, hi);
    }
    if (job->stream) stream_fence();
    return NULL;
}

/*
 * Copy n segments. nthreads <= 0 picks a count from the byte total and the CPUs this process
 * may use. Returns XT_OK or XT_ENOMEM. A thread that cannot be started is not an error: the
 * bytes it would have copied are copied on the caller's thread, so the copy is always complete.
 */
int xt_host_copy(const uint64_t *src, const uint64_t *dst, const uint64_t *nbytes, int64_t n,
                 int nthreads) {
    if (n < 0 || (n > 0 && (!src || !dst || !nbytes))) return XT_EINVAL;
    if (n == 0) return XT_OK;
    uint64_t total = 0;
    for (int64_t i = 0; i < n; ++i) total += nbytes[i];
    int threads = xt_host_thread_count(total, nthreads);
    const int stream = use_stream(total);
    if (threads <= 1) {
        for (int64_t i = 0; i < n; ++i) {
            const int64_t ahead = i + XT_PREFETCH_AHEAD;
            if (ahead < n && nbytes[ahead] <= XT_PREFETCH_MAX) prefetch_bytes(src[ahead], nbytes[ahead]);
            copy_segment((char *)(uintptr_t)dst[i], (const char *)(uintptr_t)src[i], nbytes[i],
                         stream);
        }
        if (stream) stream_fence();
        return XT_OK;
    }
    uint64_t *prefix = (uint64_t *)malloc(sizeof(uint64_t) * (size_t)(n + 1));
    if (!prefix) return XT_ENOMEM;
    prefix[0] = 0;
    for (int64_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + nbytes[i];

    xt_job job;
    job.src = src;
    job.dst = dst;
    job.prefix = prefix;
    job.n = n;
    job.chunk = total / ((uint64_t)threads * XT_CHUNKS_PER_THREAD);
    if (job.chunk < XT_CHUNK_MIN) job.chunk = XT_CHUNK_MIN;
    job.chunk = (job.chunk + 4095) & ~(uint64_t)4095; /* page-aligned split points */
    job.chunks = (total + job.chunk - 1) / job.chunk;
    job.stream = stream;
    atomic_init(&job.next, 0);
    pthread_t tids[XT_MAX_THREADS];
    int started[XT_MAX_THREADS] = {0};
    for (int t = 1; t < threads; ++t)
        started[t] = pthread_create(&tids[t], NULL, worker, &job) == 0;
    worker(&job); /* the caller's thread works too, and finishes alone if no thread started */
    for (int t = 1; t < threads; ++t)
        if (started[t]) pthread_join(tids[t], NULL);
    free(prefix);
    return XT_OK;
}

/*
 * Planning in C: a transfer given as index pairs and the geometry of both sides, cut into the
 * planner's segments (planner.py: same cuts, same merges, same count) and copied as they are
 * found. Planning the same thing in numpy costs several full-length temporaries per call, a
 * tenth of a 32K-token layer_first copy and as long as the copy itself for page_first.
 *
 * A side's geometry is six int64: per_layer (1: one base per processed layer, the "layers"
 * layout; 0: one flat buffer), slots (< 0: unknown, only negatives are refused), page,
 * page_stride, layer_stride, cut. Slot s of processed layer l of member m (K or V) is at
 *     bases[m * (per_layer ? layers : 1) + (per_layer ? l : 0)]
 *     + (s / page) * page_stride + (s % page) * item + l * layer_stride
 * (a first_layer is folded into the bases by the caller). cut > 0: runs never cross a slot that
 * is a multiple of cut, and segments starting in different cut-pages never merge
 * (page_first_direct copies page by page).
 */
#define XT_SIDE_FIELDS 6

typedef struct {
    const uint64_t *bases;
    const int64_t *idx;
    int64_t per_layer, slots, page, page_stride, layer_stride, cut, nb;
    int always; /* no two slots are ever one segment on this side */
} xt_side;

static void side_init(xt_side *sd, const uint64_t *bases, const int64_t *geometry,
                      const int64_t *idx, int64_t item, int64_t layers) {
    sd->bases = bases;
    sd->idx = idx;
    sd->per_layer = geometry[0] != 0;
    sd->slots = geometry[1];
    sd->page = geometry[2] > 0 ? geometry[2] : 1;
    sd->page_stride = geometry[3];
    sd->layer_stride = geometry[4];
    sd->cut = geometry[5] > 0 ? geometry[5] : 0;
    sd->nb = sd->per_layer ? layers : 1;
    sd->always = (sd->page == 1 && sd->page_stride != item) || sd->cut == 1;
}

static inline uint64_t side_address(const xt_side *sd, int64_t member, int64_t layer, int64_t slot,
                                    int64_t item) {
    uint64_t base = sd->bases[member * sd->nb + (sd->per_layer ? layer : 0)];
    uint64_t q = (uint64_t)slot, r = 0;
    if (sd->page != 1) {
        q = (uint64_t)(slot / sd->page);
        r = (uint64_t)(slot % sd->page);
    }
    return base + q * (uint64_t)sd->page_stride + r * (uint64_t)item +
           (uint64_t)layer * (uint64_t)sd->layer_stride;
}

/* A run [a, b) of consecutive slots is in range when its two ends are (the ends bound it). */
static inline int run_in_range(const xt_side *sd, int64_t a, int64_t b) {
    const int64_t lo = sd->idx[a], hi = sd->idx[b - 1];
    return lo >= 0 && hi >= lo && (sd->slots < 0 || hi < sd->slots);
}

/* Slot k cannot continue the run that holds k - 1 (k >= 1). */
static inline int breaks_at(const xt_side *s, const xt_side *d, int64_t k) {
    const int64_t a = s->idx[k], b = d->idx[k];
    return (uint64_t)a != (uint64_t)s->idx[k - 1] + 1 || (uint64_t)b != (uint64_t)d->idx[k - 1] + 1 ||
           (s->cut > 1 && a % s->cut == 0) || (d->cut > 1 && b % d->cut == 0);
}

/* Whether the 8 slots from v on (if consecutive) may hold a multiple of cut. */
static inline int may_cross(const xt_side *sd, int64_t v) {
    if (sd->cut <= 1) return 0;
    const int64_t r = v % sd->cut;
    return v < 0 || r == 0 || r + 7 >= sd->cut;
}

/* Whether p[j] == p[j - 1] + 1 and q[j] == q[j - 1] + 1 for j = 0..7: an OR of
 * (step - 1) over the block, without a branch per slot. */
static inline int steps_by_one(const int64_t *p, const int64_t *q) {
#if XT_SSE2
    const __m128i one = _mm_set1_epi64x(1);
    __m128i acc = _mm_setzero_si128();
    for (int j = 0; j < 8; j += 2) {
        const __m128i a = _mm_loadu_si128((const __m128i *)(p + j));
        const __m128i a0 = _mm_loadu_si128((const __m128i *)(p + j - 1));
        const __m128i b = _mm_loadu_si128((const __m128i *)(q + j));
        const __m128i b0 = _mm_loadu_si128((const __m128i *)(q + j - 1));
        acc = _mm_or_si128(acc, _mm_xor_si128(_mm_sub_epi64(a, a0), one));
        acc = _mm_or_si128(acc, _mm_xor_si128(_mm_sub_epi64(b, b0), one));
    }
    return _mm_movemask_epi8(_mm_cmpeq_epi8(acc, _mm_setzero_si128())) == 0xFFFF;
#else
    uint64_t acc = 0;
    for (int j = 0; j < 8; ++j)
        acc |= (((uint64_t)p[j] - (uint64_t)p[j - 1]) ^ 1) | (((uint64_t)q[j] - (uint64_t)q[j - 1]) ^ 1);
    return acc == 0;
#endif
}

/*
 * The first k' >= k where a run breaks (n if none). Eight slots at a time (steps_by_one, with
 * plain SSE2 on x86-64), and only a block with a break in it is looked at slot by slot. The
 * scan reads every index once, so it runs at memory speed: 1 MB of indices for a 32K-token
 * layer is ~3% of the copy itself. k >= 1.
 */
static int64_t next_break(const xt_side *s, const xt_side *d, int64_t k, int64_t n) {
    const int64_t *si = s->idx, *di = d->idx;
    while (k < n) {
        if (k + 8 <= n) {
            if (steps_by_one(si + k, di + k) && !may_cross(s, si[k]) && !may_cross(d, di[k])) {
                k += 8;
                continue;
            }
            for (int j = 0; j < 8; ++j)
                if (breaks_at(s, d, k + j)) return k + j;
            k += 8;
            continue;
        }
        if (breaks_at(s, d, k)) return k;
        ++k;
    }
    return n;
}

/* Where runs start: each slot (always), a table filled by the checking pass, or found again. */
#define XT_STARTS_CAP 2048

typedef struct {
    const xt_side *s, *d;
    int64_t n, runs;
    int mode; /* 0: every slot a run; 1: starts[] holds every run; 2: scan again */
    const int64_t *starts;
} xt_runs;

static inline void run_bounds(const xt_runs *R, int64_t q, int64_t *a, int64_t *b) {
    if (R->mode == 0) {
        *a = q;
        *b = q + 1;
    } else {
        *a = R->starts[q];
        *b = q + 1 < R->runs ? R->starts[q + 1] : R->n;
    }
}

/* Segments leave here: merged with the previous one where the planner would merge them, then
 * copied at once (one thread) or written to a table (several). */
typedef struct {
    uint64_t src, dst, len;
    int64_t sbuf, dbuf, spage, dpage; /* of the last segment added, for the merge rule */
    int64_t count;
    int stream;                   /* copy small segments with streaming stores */
    uint64_t *tsrc, *tdst, *tlen; /* NULL: copy now */
} xt_emit;

static inline void emit_flush(xt_emit *e) {
    if (!e->len) return;
    if (e->tsrc) {
        e->tsrc[e->count] = e->src;
        e->tdst[e->count] = e->dst;
        e->tlen[e->count] = e->len;
    } else {
        copy_segment((char *)(uintptr_t)e->dst, (const char *)(uintptr_t)e->src, e->len,
                     e->stream);
    }
    e->count++;
    e->len = 0;
}

static inline void emit(xt_emit *e, const xt_side *s, const xt_side *d, int64_t member,
                        int64_t layer, int64_t a, int64_t b, int64_t item) {
    const int64_t ss = s->idx[a], ds = d->idx[a];
    const uint64_t src = side_address(s, member, layer, ss, item);
    const uint64_t dst = side_address(d, member, layer, ds, item);
    const uint64_t len = (uint64_t)(b - a) * (uint64_t)item;
    const int64_t sbuf = s->per_layer ? layer : 0, dbuf = d->per_layer ? layer : 0;
    const int64_t spage = s->cut > 0 ? ss / s->cut : 0, dpage = d->cut > 0 ? ds / d->cut : 0;
    if (e->len && e->src + e->len == src && e->dst + e->len == dst && e->sbuf == sbuf &&
        e->dbuf == dbuf && e->spage == spage && e->dpage == dpage) {
        e->len += len;
    } else {
        emit_flush(e);
        e->src = src;
        e->dst = dst;
        e->len = len;
    }
    e->sbuf = sbuf;
    e->dbuf = dbuf;
    e->spage = spage;
    e->dpage = dpage;
}

/* Source of run q of one layer, asked for ahead of its copy when it is small. */
static inline void prefetch_run(const xt_runs *R, int64_t member, int64_t layer, int64_t q,
                                int64_t item) {
    if (R->mode == 2 || q >= R->runs) return;
    int64_t a, b;
    run_bounds(R, q, &a, &b);
    const uint64_t len = (uint64_t)(b - a) * (uint64_t)item;
    if (len <= XT_PREFETCH_MAX)
        prefetch_bytes(side_address(R->s, member, layer, R->s->idx[a], item), len);
}

static void emit_all(const xt_runs *R, xt_emit *e, int64_t members, int64_t layers, int64_t item,
                     int run_major) {
    const xt_side *s = R->s, *d = R->d;
    for (int64_t m = 0; m < members; ++m) {
        if (run_major) {
            /* Ahead by segments, not runs: with many layers per run (a page_first backup: 78
             * one-item segments per token), eight runs ahead is ~700 KB, out of L1 before use. */
            const int prefetch = !e->tsrc && R->mode != 2;
            int64_t pq = XT_PREFETCH_AHEAD / layers, pl = XT_PREFETCH_AHEAD % layers;
            int64_t a = 0, b = 0;
            for (int64_t q = 0; q < R->runs; ++q) {
                if (R->mode == 2) {
                    a = b;
                    b = next_break(s, d, a + 1, R->n);
                } else {
                    run_bounds(R, q, &a, &b);
                }
                for (int64_t l = 0; l < layers; ++l) {
                    if (prefetch) {
                        prefetch_run(R, m, pl, pq, item);
                        if (++pl == layers) {
                            pl = 0;
                            ++pq;
                        }
                    }
                    emit(e, s, d, m, l, a, b, item);
                }
            }
        } else {
            for (int64_t l = 0; l < layers; ++l) {
                int64_t a = 0, b = 0;
                for (int64_t q = 0; q < R->runs; ++q) {
                    if (R->mode == 2) {
                        a = b;
                        b = next_break(s, d, a + 1, R->n);
                    } else {
                        run_bounds(R, q, &a, &b);
                        if (!e->tsrc) prefetch_run(R, m, l, q + XT_PREFETCH_AHEAD, item);
                    }
                    emit(e, s, d, m, l, a, b, item);
                }
            }
        }
        emit_flush(e); /* K and V never merge */
    }
}

/*
 * Every slot its own run on a side that never puts two slots next to each other (page_first
 * with several layers), the other side a buffer per layer: no two segments can ever merge
 * (consecutive ones differ in layer buffer, or are a pool row apart), so each is one item,
 * copied at once without emit()'s merge bookkeeping, which costs as much as a small copy.
 * Run-major order, as the planner's; the source eight segments ahead is prefetched.
 */
static int64_t copy_unmergeable_items(const xt_runs *R, int64_t members, int64_t layers,
                                      int64_t item, int stream) {
    const xt_side *s = R->s, *d = R->d;
    const int prefetch = (uint64_t)item <= XT_PREFETCH_MAX;
    for (int64_t m = 0; m < members; ++m) {
        int64_t pq = XT_PREFETCH_AHEAD / layers, pl = XT_PREFETCH_AHEAD % layers;
        for (int64_t q = 0; q < R->n; ++q) {
            const int64_t ss = s->idx[q], ds = d->idx[q];
            for (int64_t l = 0; l < layers; ++l) {
                if (prefetch && pq < R->n) {
                    prefetch_bytes(side_address(s, m, pl, s->idx[pq], item), (uint64_t)item);
                    if (++pl == layers) {
                        pl = 0;
                        ++pq;
                    }
                }
                copy_segment((char *)(uintptr_t)side_address(d, m, l, ds, item),
                             (const char *)(uintptr_t)side_address(s, m, l, ss, item),
                             (uint64_t)item, stream);
            }
        }
    }
    return members * R->n * layers;
}

/*
 * Copy slot si[i] to slot di[i] for every i, processed layer and member. Indices are checked
 * before anything is written: XT_ERANGE_SRC / XT_ERANGE_DST when a slot is negative or >= its
 * side's slot count (the first bad run decides which). run_major: segments ordered run by run
 * (layers inner) instead of layer by layer, as the planner orders them when a side keeps a
 * slot's layers together. *segments receives the number of copies (the planner's count times
 * members).
 */
int xt_host_copy_layout(const uint64_t *src_bases, const uint64_t *dst_bases,
                        const int64_t *src_geometry, const int64_t *dst_geometry, int64_t members,
                        int64_t layers, const int64_t *si, const int64_t *di, int64_t n,
                        int64_t item, int run_major, int nthreads, int64_t *segments) {
    *segments = 0;
    if (n < 0 || members < 0 || layers < 0 || item <= 0) return XT_EINVAL;
    if (n == 0 || members == 0 || layers == 0) return XT_OK;
    if (!src_bases || !dst_bases || !src_geometry || !dst_geometry || !si || !di) return XT_EINVAL;
    xt_side s, d;
    side_init(&s, src_bases, src_geometry, si, item, layers);
    side_init(&d, dst_bases, dst_geometry, di, item, layers);

    /* Pass 1: the runs, each checked at its two ends (nothing moves on a bad slot). */
    int64_t starts[XT_STARTS_CAP];
    xt_runs R = {&s, &d, n, 0, s.always || d.always ? 0 : 1, starts};
    for (int64_t a = 0, b; a < n; a = b) {
        b = R.mode == 0 ? a + 1 : next_break(&s, &d, a + 1, n);
        if (!run_in_range(&s, a, b)) return XT_ERANGE_SRC;
        if (!run_in_range(&d, a, b)) return XT_ERANGE_DST;
        if (R.mode != 0) {
            if (R.runs < XT_STARTS_CAP) starts[R.runs] = a;
            else R.mode = 2;
        }
        R.runs++;
    }

    const uint64_t total = (uint64_t)n * (uint64_t)item * (uint64_t)layers * (uint64_t)members;
    xt_emit e = {0};
    if (xt_host_thread_count(total, nthreads) <= 1) {
        e.stream = use_stream(total);
        if (R.mode == 0 && run_major && (s.per_layer != d.per_layer) && !s.cut && !d.cut)
            e.count = copy_unmergeable_items(&R, members, layers, item, e.stream);
        else
            emit_all(&R, &e, members, layers, item, run_major);
        if (e.stream) stream_fence();
        *segments = e.count;
        return XT_OK;
    }
    const uint64_t bound = (uint64_t)R.runs * (uint64_t)layers * (uint64_t)members;
    uint64_t *table = (uint64_t *)malloc(sizeof(uint64_t) * 3 * (size_t)bound);
    if (!table) return XT_ENOMEM;
    e.tsrc = table;
    e.tdst = table + bound;
    e.tlen = table + 2 * bound;
    emit_all(&R, &e, members, layers, item, run_major);
    int rc = xt_host_copy(e.tsrc, e.tdst, e.tlen, e.count, nthreads);
    free(table);
    *segments = e.count;
    return rc;
}

/*
 * Per-layer buffers on both sides (every SGLang per-layer operator): nbufs buffer pairs, each
 * copied with the same indices. Kept for callers of the first ABI; xt_host_copy_layout does
 * the work.
 */
int xt_host_copy_items(const uint64_t *src_bases, const uint64_t *dst_bases, int64_t nbufs,
                       const int64_t *si, const int64_t *di, int64_t n, int64_t item,
                       int64_t src_slots, int64_t dst_slots, int nthreads, int64_t *segments) {
    const int64_t sg[XT_SIDE_FIELDS] = {1, src_slots, 1, item, 0, 0};
    const int64_t dg[XT_SIDE_FIELDS] = {1, dst_slots, 1, item, 0, 0};
    if (item <= 0 || nbufs < 0 || n < 0) {
        *segments = 0;
        return XT_EINVAL;
    }
    return xt_host_copy_layout(src_bases, dst_bases, sg, dg, 1, nbufs, si, di, n, item, 0,
                               nthreads, segments);
}
