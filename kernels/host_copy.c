/*
 * Host copy backend: memcpy over a segment table, split across a few threads.
 *
 * Why threads: one core cannot saturate a socket's memory bandwidth, so a large layer copy
 * (tens of MB) goes faster on a few cores. Why not always: a thread costs tens of microseconds
 * to start, so small copies stay on the caller's thread, and a thread that has to wait for a
 * busy core delays the whole copy, so no more threads than idle CPUs, and at most
 * XT_AUTO_MAX_THREADS unless the caller asks. Threads are started by the caller's thread and
 * inherit its CPU affinity, so a process bound to a NUMA node copies on that node's CPUs. A
 * table of few segments is split by bytes, so one huge segment (a merged layer_first layer) is
 * shared as evenly as forty thousand small ones; a transfer of many small segments (page_first)
 * is split by positions in its segment order instead (copy_split), without a table. Either way
 * threads take chunks as they go, so a descheduled thread on a busy machine does not hold the
 * whole copy back.
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
/* The automatic choice stops at a small fixed count: one core fetches page_first's strided
 * items at 0.56-0.96 of its contiguous read speed (bench_copy part 3 on a busy Zen 5 VM, median
 * 0.71: its misses in flight run out, not the memory), so a second to fourth core lift such a
 * copy most, while every further one is a core taken from the server the copy runs in. */
#define XT_AUTO_MAX_THREADS 4

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
    if (requested > 0) return requested < XT_MAX_THREADS ? requested : XT_MAX_THREADS;
    int cap = xt_host_cpu_count();
    if (cap > XT_AUTO_MAX_THREADS) cap = XT_AUTO_MAX_THREADS;
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
/* A larger segment that starts far from the previous one (a page_first_direct page: 72 KB, the
 * next one 5.75 MB on) is a new stream the hardware prefetcher takes a few kilobytes to pick
 * up; its first XT_PREFETCH_HEAD bytes are asked for while the segment before it is copied
 * (measured in a bare C loop, 512 pages of 72 KB gathered, streamed: 0.96 -> 1.05 of one
 * memcpy). Streamed runs do better still: see emit_flush_before. */
#define XT_PREFETCH_HEAD ((uint64_t)8192)

static inline void prefetch_bytes(uint64_t address, uint64_t n) {
    const char *p = (const char *)(uintptr_t)address;
    for (uint64_t k = 0; k < n; k += 64) __builtin_prefetch(p + k, 0, 3);
}

/*
 * A small segment written into a flat pool (page_first: one item every num_layers items, a
 * new 4 KiB page for every item) has its destination's first line asked for as its source
 * is. Why: the streaming stores of each item otherwise wait for the address translation of a
 * page no access has touched yet (in a VM, a two-level page walk), one item after another;
 * the prefetch does that walk ahead. Measured on a Zen 5 VM, 32K items of 1152 B scattered
 * 89,856 B apart, streamed: 0.55-0.63 -> 1.04-1.26 of one memcpy of the bytes. A gathered
 * item's destination is a contiguous buffer, whose next page the prefetch of its source
 * already covers, so only flat destinations: the extra line read is 1/18 of such an item.
 */
static inline void prefetch_destination(uint64_t address) {
    __builtin_prefetch((const char *)(uintptr_t)address, 1, 0);
}

/*
 * The small segments of a transfer larger than the last-level cache (and, see copy_segment,
 * some large ones) are written with non-temporal (streaming) stores. Why: glibc writes around
 * the cache itself, but only for one call above ~3/4 of the L3 share (288 MiB on a VM that
 * reports a 384 MiB share); a page_first transfer is 32K calls of 1 KB each and a layer is at
 * most a few 256 KiB pieces, so it never does, although the transfer as a whole (tens of MB)
 * cannot stay in the cache either. Written through the cache, every destination line is first
 * read (a read-for-ownership), a third more memory traffic; streamed, it is not (measured on
 * 32K items of 1152 B: 0.64 -> 0.85 of memcpy gathering, 0.67 -> 0.93 scattering). Whole
 * 64-byte lines only; a segment's unaligned head and tail go through copy_small, so a line is
 * never half streamed. x86-64 only (SSE2, always there); elsewhere every segment is a memcpy.
 */
#define XT_STREAM_MIN_FALLBACK ((uint64_t)32 << 20)
#define XT_STREAM_MAX ((uint64_t)16 << 10)
#define XT_STREAM_ALL_FACTOR 4

/*
 * Fewer than 64 bytes (a streamed segment's unaligned head or tail) with a few fixed-size,
 * possibly overlapping moves the compiler inlines, instead of a call to memcpy. Why: an item
 * gathered into a buffer that is not 64-byte aligned has both, so every item of a page_first
 * load paid two library calls for a few bytes each. Source and destination never overlap
 * (memcpy's contract), so overlapping moves within one side are harmless.
 */
static inline void copy_small(char *dst, const char *src, uint64_t n) {
    uint64_t a, b;
    if (n >= 16) {
        char t[64];
        const uint64_t k = n >= 32 ? 32 : 16;
        __builtin_memcpy(t, src, 16);
        if (k == 32) __builtin_memcpy(t + 16, src + 16, 16);
        __builtin_memcpy(t + 32, src + n - k, 16);
        if (k == 32) __builtin_memcpy(t + 48, src + n - 16, 16);
        __builtin_memcpy(dst, t, 16);
        if (k == 32) __builtin_memcpy(dst + 16, t + 16, 16);
        __builtin_memcpy(dst + n - k, t + 32, 16);
        if (k == 32) __builtin_memcpy(dst + n - 16, t + 48, 16);
    } else if (n >= 8) {
        __builtin_memcpy(&a, src, 8);
        __builtin_memcpy(&b, src + n - 8, 8);
        __builtin_memcpy(dst, &a, 8);
        __builtin_memcpy(dst + n - 8, &b, 8);
    } else if (n >= 4) {
        uint32_t x, y;
        __builtin_memcpy(&x, src, 4);
        __builtin_memcpy(&y, src + n - 4, 4);
        __builtin_memcpy(dst, &x, 4);
        __builtin_memcpy(dst + n - 4, &y, 4);
    } else {
        for (uint64_t i = 0; i < n; ++i) dst[i] = src[i];
    }
}

#if defined(__x86_64__)
#include <emmintrin.h>
#define XT_SSE2 1 /* x86-64 always has it: streaming stores and the index scan use it */

/*
 * Streaming stores 64 bytes a step (the unaligned head and the tail through copy_small), asking
 * for one line of `ahead` (a later item's source, n bytes too; NULL: none) with each line it
 * copies, instead of the whole item at once before it. Why: eighteen
 * prefetches in a burst overrun the core's queue of misses in flight and some are dropped;
 * one a line keeps it full and even (measured on a Zen 5 VM in a bare C loop, 32K items of
 * 1152 B gathered 89,856 B apart into a contiguous buffer: 0.67-0.86 -> 0.86-0.98 of one
 * memcpy; the operator, bookkeeping and all, stayed at 0.72-0.78 in bench_copy there).
 */
static inline __attribute__((always_inline)) void stream_bytes_ahead(
    char *dst, const char *src, uint64_t n, const char *ahead, uint64_t ahead_n) {
    const uint64_t whole = n;
    uint64_t head = (64 - ((uintptr_t)dst & 63)) & 63, done = 0;
    if (head > n) head = n;
    if (head) {
        copy_small(dst, src, head);
        dst += head;
        src += head;
        n -= head;
    }
    for (uint64_t lines = n / 64; lines; --lines, done += 64) {
        if (ahead && done < ahead_n) __builtin_prefetch(ahead + done, 0, 3);
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
    if (n & 63) copy_small(dst, src, n & 63);
    if (ahead) /* the lines the head and tail left out, never more than this segment's size */
        for (; done < whole && done < ahead_n; done += 64) __builtin_prefetch(ahead + done, 0, 3);
}

/* stream_bytes_ahead with nothing ahead: inlined, so the compiler drops the prefetch. */
static void stream_bytes(char *dst, const char *src, uint64_t n) {
    stream_bytes_ahead(dst, src, n, NULL, 0);
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
static inline __attribute__((always_inline)) void stream_bytes_ahead(
    char *dst, const char *src, uint64_t n, const char *ahead, uint64_t ahead_n) {
    if (ahead) prefetch_bytes((uint64_t)(uintptr_t)ahead, ahead_n < n ? ahead_n : n);
    copy_bytes(dst, src, n);
}
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

/* 0: no streaming; 1: small segments (and short-distance ones) streamed; 2: every segment. */
static inline int use_stream(uint64_t total) {
    const uint64_t min = (uint64_t)xt_host_stream_min(-1);
    if (!XT_SSE2 || total < min) return 0;
    return total / XT_STREAM_ALL_FACTOR >= min ? 2 : 1;
}

/*
 * One segment: streamed if the transfer streams and the segment is small, else memcpy pieces
 * (copy_bytes), with two exceptions where a large segment streams too. A transfer of
 * XT_STREAM_ALL_FACTOR caches or more (stream == 2): cut into 256 KiB pieces, its segments
 * never reach glibc's own non-temporal path and would pay a read-for-ownership on every
 * destination line (measured on a Zen 5 VM, 78 segments of 4.7 MB: streamed 1.31x one memcpy
 * of the 368 MB, pieces 1.11x). A segment whose destination is just past its source modulo
 * 4 KiB, which would otherwise go through the SSE2 loop (one 37.7 MB layer: streamed 1.18x,
 * the loop 0.94x). Below that size, other large segments stay rep movsb pieces, which are no
 * worse there (37.7 MB in 72 KB pages written back into a huge-page pool: pieces 0.91-0.98 of
 * memcpy, streamed 0.87-0.93). Gathered large runs stream anyway: emit_flush_before.
 */
static inline void copy_segment(char *dst, const char *src, uint64_t n, int stream) {
    if (stream && (n <= XT_STREAM_MAX || stream == 2 ||
                   (n >= XT_SHORT_DISTANCE_MIN && short_distance(dst, src))))
        stream_bytes(dst, src, n);
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

/* Every slot of idx[0..n) is >= 0 and (slots >= 0) below slots: one branch-free pass. */
static int all_in_range(const int64_t *idx, int64_t n, int64_t slots) {
    const uint64_t limit = slots < 0 ? (uint64_t)INT64_MAX + 1 : (uint64_t)slots;
    uint64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) bad |= (uint64_t)((uint64_t)idx[i] >= limit);
    return bad == 0;
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

/*
 * Copy (or table) the segment held, knowing the next one's source (next_len 0: none known).
 * A large segment of a streamed transfer whose successor's source does not go on from where
 * its own ends (a gather of scattered pages: page_first_direct, layer_first in shuffled pages)
 * is streamed, asking for the successor's source one line per line it copies. Why: each such
 * run is a new stream the hardware prefetcher starts cold; fetched this way it is already in
 * flight when its copy starts (measured on a Zen 5 VM, 512 pages of 72 KB gathered 5.75 MB
 * apart, in a bare C loop: 32.6 GB/s, 1.36-1.41x one memcpy of the bytes, against 28.5 GB/s
 * for memcpy pieces with the first 8 KB asked for; in bench_copy, page_first_direct's one-layer
 * load 0.63-0.72 -> 1.04-1.14 of memcpy, layer_first's in shuffled pages 0.77 -> 1.15-1.24). A
 * successor that goes on from the end is left to the hardware prefetcher (a contiguous source:
 * one layer written back page by page).
 */
static inline void emit_flush_before(xt_emit *e, uint64_t next_src, uint64_t next_len) {
    if (!e->len) return;
    if (e->tsrc) {
        e->tsrc[e->count] = e->src;
        e->tdst[e->count] = e->dst;
        e->tlen[e->count] = e->len;
    } else if (e->stream && e->len > XT_STREAM_MAX && next_len && next_src != e->src + e->len) {
        stream_bytes_ahead((char *)(uintptr_t)e->dst, (const char *)(uintptr_t)e->src, e->len,
                           (const char *)(uintptr_t)next_src, next_len);
    } else {
        copy_segment((char *)(uintptr_t)e->dst, (const char *)(uintptr_t)e->src, e->len,
                     e->stream);
    }
    e->count++;
    e->len = 0;
}

static inline void emit_flush(xt_emit *e) { emit_flush_before(e, 0, 0); }

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
        emit_flush_before(e, src, len);
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
    if (len <= XT_PREFETCH_MAX) {
        prefetch_bytes(side_address(R->s, member, layer, R->s->idx[a], item), len);
        if (!R->d->per_layer)
            prefetch_destination(side_address(R->d, member, layer, R->d->idx[a], item));
    }
}

/* The head of run q when it is a large one (XT_PREFETCH_HEAD), asked for one run ahead; not
 * when its source goes on from where run q - 1's ends (a contiguous source: the hardware
 * prefetcher is already on it, and a burst of prefetches there would only crowd the misses in
 * flight). */
static inline void prefetch_run_head(const xt_runs *R, int64_t member, int64_t layer, int64_t q,
                                     int64_t item) {
    if (R->mode != 1 || q >= R->runs) return;
    int64_t a, b;
    run_bounds(R, q, &a, &b);
    const uint64_t len = (uint64_t)(b - a) * (uint64_t)item;
    if (len <= XT_PREFETCH_MAX) return;
    const uint64_t start = side_address(R->s, member, layer, R->s->idx[a], item);
    if (q > 0) {
        int64_t pa, pb;
        run_bounds(R, q - 1, &pa, &pb);
        const uint64_t before = side_address(R->s, member, layer, R->s->idx[pa], item);
        if (before + (uint64_t)(pb - pa) * (uint64_t)item == start) return;
    }
    prefetch_bytes(start, len < XT_PREFETCH_HEAD ? len : XT_PREFETCH_HEAD);
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
                        if (!e->tsrc) {
                            prefetch_run(R, m, l, q + XT_PREFETCH_AHEAD, item);
                            prefetch_run_head(R, m, l, q + 1, item);
                        }
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
/*
 * Streamed items (a transfer larger than the cache), sources asked for line by line
 * XT_STREAM_AHEAD items ahead (stream_bytes_ahead), and the first source line of the item
 * XT_TLB_AHEAD ahead touched on its own, so the address translation of its page is done by
 * the time the line-by-line prefetch reaches it (measured in a bare C loop with the
 * line-by-line prefetch: 0.74-0.89 -> 0.86-0.98). A flat pool's destination line is asked
 * for too (prefetch_destination). Same order and bytes as copy_unmergeable_items.
 */
#define XT_STREAM_AHEAD 16
#define XT_TLB_AHEAD 64

static void copy_unmergeable_streamed(const xt_runs *R, int64_t members, int64_t layers,
                                      int64_t item) {
    const xt_side *s = R->s, *d = R->d;
    const int prefetch_dst = !d->per_layer;
    for (int64_t m = 0; m < members; ++m) {
        int64_t aq = XT_STREAM_AHEAD / layers, al = XT_STREAM_AHEAD % layers;
        int64_t tq = XT_TLB_AHEAD / layers, tl = XT_TLB_AHEAD % layers;
        for (int64_t q = 0; q < R->n; ++q) {
            const int64_t ss = s->idx[q], ds = d->idx[q];
            for (int64_t l = 0; l < layers; ++l) {
                const char *ahead = NULL;
                if (aq < R->n) {
                    ahead = (const char *)(uintptr_t)side_address(s, m, al, s->idx[aq], item);
                    if (prefetch_dst)
                        prefetch_destination(side_address(d, m, al, d->idx[aq], item));
                    if (++al == layers) {
                        al = 0;
                        ++aq;
                    }
                }
                if (tq < R->n) {
                    __builtin_prefetch(
                        (const char *)(uintptr_t)side_address(s, m, tl, s->idx[tq], item), 0, 0);
                    if (++tl == layers) {
                        tl = 0;
                        ++tq;
                    }
                }
                stream_bytes_ahead((char *)(uintptr_t)side_address(d, m, l, ds, item),
                                   (const char *)(uintptr_t)side_address(s, m, l, ss, item),
                                   (uint64_t)item, ahead, (uint64_t)item);
            }
        }
    }
}

static int64_t copy_unmergeable_items(const xt_runs *R, int64_t members, int64_t layers,
                                      int64_t item, int stream) {
    const xt_side *s = R->s, *d = R->d;
    if (stream && (uint64_t)item <= XT_PREFETCH_MAX) {
        copy_unmergeable_streamed(R, members, layers, item);
        return members * R->n * layers;
    }
    const int prefetch = (uint64_t)item <= XT_PREFETCH_MAX;
    const int prefetch_dst = prefetch && !d->per_layer;
    for (int64_t m = 0; m < members; ++m) {
        int64_t pq = XT_PREFETCH_AHEAD / layers, pl = XT_PREFETCH_AHEAD % layers;
        for (int64_t q = 0; q < R->n; ++q) {
            const int64_t ss = s->idx[q], ds = d->idx[q];
            for (int64_t l = 0; l < layers; ++l) {
                if (prefetch && pq < R->n) {
                    prefetch_bytes(side_address(s, m, pl, s->idx[pq], item), (uint64_t)item);
                    if (prefetch_dst)
                        prefetch_destination(side_address(d, m, pl, d->idx[pq], item));
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
 * Several threads without a segment table. Why: the table of a page_first backup (one segment
 * per token per layer: 2.5M for 32K tokens x 78 layers) is 60 MB written and read again, more
 * memory traffic than the copy it describes. Instead the emit sequence of one thread
 * (emit_all's order: members x runs x layers) is cut into chunks of positions, which threads
 * take from a shared counter as xt_host_copy's byte chunks are taken (a thread parked on a busy
 * machine holds back only its chunk). Each chunk is emitted and merged as one thread would, so
 * the bytes are the same; a segment that one thread would have merged across a chunk boundary
 * is copied in two parts, and the count is corrected for it afterwards, so *segments stays
 * the planner's. Destinations are assumed distinct across chunks (a repeated destination slot
 * is written by whichever thread comes last, as with the byte-split table). The threads are
 * started by the caller's thread, so they inherit its CPU affinity: a process bound to one
 * NUMA node (numactl, taskset, SGLang's CPU binding) copies on that node's CPUs only.
 */
#define XT_SPLIT_MIN_PER_CHUNK 64

/* Positions per chunk below which several threads use the byte-split table instead (few,
 * large segments: one merged layer cannot be cut into positions); xt_host_split_min sets it
 * (tests force the position split on tiny transfers with 0). */
static _Atomic int64_t xt_split_min = XT_SPLIT_MIN_PER_CHUNK;

/* Set that threshold (>= 0; < 0 leaves it); returns the one in force before. */
int64_t xt_host_split_min(int64_t positions) {
    const int64_t before = atomic_load(&xt_split_min);
    if (positions >= 0) atomic_store(&xt_split_min, positions);
    return before;
}

typedef struct {
    int64_t m, q, l;
} xt_pos;

static inline xt_pos pos_at(int64_t p, int64_t runs, int64_t layers, int run_major) {
    const int64_t per = runs * layers, r = p % per;
    xt_pos x = {p / per, run_major ? r / layers : r % runs, run_major ? r % layers : r / runs};
    return x;
}

static inline void pos_next(xt_pos *x, int64_t runs, int64_t layers, int run_major) {
    if (run_major) {
        if (++x->l == layers) {
            x->l = 0;
            if (++x->q == runs) {
                x->q = 0;
                ++x->m;
            }
        }
    } else if (++x->q == runs) {
        x->q = 0;
        if (++x->l == layers) {
            x->l = 0;
            ++x->m;
        }
    }
}

/* Whether emit() would merge the segment at y into the one at x (x just before y). */
static int merges_into(const xt_runs *R, xt_pos x, xt_pos y, int64_t item) {
    if (x.m != y.m) return 0; /* K and V never merge */
    const xt_side *s = R->s, *d = R->d;
    int64_t a, b, c, e;
    run_bounds(R, x.q, &a, &b);
    run_bounds(R, y.q, &c, &e);
    const uint64_t len = (uint64_t)(b - a) * (uint64_t)item;
    const int64_t sx = s->idx[a], dx = d->idx[a], sy = s->idx[c], dy = d->idx[c];
    return side_address(s, x.m, x.l, sx, item) + len == side_address(s, y.m, y.l, sy, item) &&
           side_address(d, x.m, x.l, dx, item) + len == side_address(d, y.m, y.l, dy, item) &&
           (s->per_layer ? x.l == y.l : 1) && (d->per_layer ? x.l == y.l : 1) &&
           (s->cut > 0 ? sx / s->cut == sy / s->cut : 1) &&
           (d->cut > 0 ? dx / d->cut == dy / d->cut : 1);
}

typedef struct {
    const xt_runs *R;
    int64_t layers, item, positions, chunk, chunks;
    int run_major, stream;
    atomic_int_fast64_t next, count;
} xt_split;

static void *split_worker(void *arg) {
    xt_split *J = (xt_split *)arg;
    const xt_runs *R = J->R;
    const int64_t runs = R->runs, layers = J->layers, item = J->item;
    int64_t count = 0;
    for (;;) {
        const int64_t c = (int64_t)atomic_fetch_add(&J->next, 1);
        if (c >= J->chunks) break;
        const int64_t lo = c * J->chunk;
        const int64_t hi = lo + J->chunk < J->positions ? lo + J->chunk : J->positions;
        xt_emit e = {0};
        e.stream = J->stream;
        xt_pos x = pos_at(lo, runs, layers, J->run_major);
        int64_t ahead = lo + XT_PREFETCH_AHEAD;
        xt_pos pf = pos_at(ahead, runs, layers, J->run_major);
        for (int64_t p = lo; p < hi; ++p) {
            if (ahead < J->positions) {
                prefetch_run(R, pf.m, pf.l, pf.q, item);
                pos_next(&pf, runs, layers, J->run_major);
                ++ahead;
            }
            int64_t a, b;
            run_bounds(R, x.q, &a, &b);
            emit(&e, R->s, R->d, x.m, x.l, a, b, item);
            const int64_t m = x.m;
            pos_next(&x, runs, layers, J->run_major);
            if (x.m != m) emit_flush(&e); /* K and V never merge */
            else if (p + 1 < hi) prefetch_run_head(R, x.m, x.l, x.q, item);
        }
        emit_flush(&e);
        count += e.count;
    }
    if (J->stream) stream_fence();
    atomic_fetch_add(&J->count, count);
    return NULL;
}

static int copy_split(xt_runs *R, int64_t members, int64_t layers, int64_t item, int run_major,
                      int threads, int stream, int64_t *segments) {
    int64_t *heap = NULL;
    if (R->mode == 2) { /* chunks start anywhere: every run's start, found again */
        heap = (int64_t *)malloc(sizeof(int64_t) * (size_t)R->runs);
        if (!heap) return XT_ENOMEM;
        int64_t q = 0;
        for (int64_t a = 0, b; a < R->n; a = b, ++q) {
            b = next_break(R->s, R->d, a + 1, R->n);
            heap[q] = a;
        }
        R->starts = heap;
        R->mode = 1;
    }
    xt_split J;
    J.R = R;
    J.layers = layers;
    J.item = item;
    J.positions = R->runs * layers * members;
    J.chunk = (J.positions + (int64_t)threads * XT_CHUNKS_PER_THREAD - 1) /
              ((int64_t)threads * XT_CHUNKS_PER_THREAD);
    J.chunks = (J.positions + J.chunk - 1) / J.chunk;
    J.run_major = run_major;
    J.stream = stream;
    atomic_init(&J.next, 0);
    atomic_init(&J.count, 0);
    pthread_t tids[XT_MAX_THREADS];
    int started[XT_MAX_THREADS] = {0};
    for (int t = 1; t < threads; ++t)
        started[t] = pthread_create(&tids[t], NULL, split_worker, &J) == 0;
    split_worker(&J); /* the caller's thread works too, and finishes alone if no thread started */
    for (int t = 1; t < threads; ++t)
        if (started[t]) pthread_join(tids[t], NULL);
    int64_t count = (int64_t)atomic_load(&J.count);
    for (int64_t c = 1; c < J.chunks; ++c) {
        const int64_t p = c * J.chunk;
        if (merges_into(R, pos_at(p - 1, R->runs, layers, run_major),
                        pos_at(p, R->runs, layers, run_major), item))
            --count;
    }
    free(heap);
    *segments = count;
    return XT_OK;
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

    /* Pass 1: the runs, each checked at its two ends (nothing moves on a bad slot). Every slot
     * its own run: both index arrays checked whole first, in a loop the compiler vectorises
     * (~20 us less per 32K-token page_first layer than a slot at a time); only when that finds
     * a bad slot does the loop below say which side's comes first. */
    int64_t starts[XT_STARTS_CAP];
    xt_runs R = {&s, &d, n, 0, s.always || d.always ? 0 : 1, starts};
    const int checked = R.mode == 0 && all_in_range(si, n, s.slots) && all_in_range(di, n, d.slots);
    for (int64_t a = 0, b; a < n && !checked; a = b) {
        b = R.mode == 0 ? a + 1 : next_break(&s, &d, a + 1, n);
        if (!run_in_range(&s, a, b)) return XT_ERANGE_SRC;
        if (!run_in_range(&d, a, b)) return XT_ERANGE_DST;
        if (R.mode != 0) {
            if (R.runs < XT_STARTS_CAP) starts[R.runs] = a;
            else R.mode = 2;
        }
        R.runs++;
    }
    if (checked) R.runs = n;

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
    const int threads = xt_host_thread_count(total, nthreads);
    const int64_t positions = R.runs * layers * members;
    if (positions >= (int64_t)threads * XT_CHUNKS_PER_THREAD * atomic_load(&xt_split_min))
        return copy_split(&R, members, layers, item, run_major, threads, use_stream(total),
                          segments);
    /* Few segments (a merged layer_first layer is one): a table, split by bytes. */
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

/* -- references for benchmarks: what a strided pattern costs by itself ------------------------ */

/*
 * A plain C loop of memcpy over count items of item bytes, the k-th from src + k * src_stride
 * to dst + k * dst_stride: what a strided layout (page_first: one item every num_layers items)
 * costs with the obvious code, for benchmarks to set beside one memcpy of the same bytes and
 * beside the operators. No checks: a benchmark's own buffers only.
 */
void xt_host_strided_memcpy(void *dst, const void *src, uint64_t item, uint64_t count,
                            uint64_t dst_stride, uint64_t src_stride) {
    char *d = (char *)dst;
    const char *s = (const char *)src;
    for (uint64_t k = 0; k < count; ++k) memcpy(d + k * dst_stride, s + k * src_stride, item);
}

/*
 * Read count items of item bytes (a multiple of 8), one every stride bytes, the source of
 * the item XT_PREFETCH_AHEAD ahead asked for as each is read, and return the XOR of every
 * 8-byte word (so nothing is optimised away). With stride == item it is one contiguous read.
 * Why: how fast one core can read a strided pattern at all bounds every copy of it; benchmarks
 * set it beside a contiguous read of the same bytes.
 */
uint64_t xt_host_strided_read(const void *src, uint64_t item, uint64_t count, uint64_t stride) {
    const char *s = (const char *)src;
    uint64_t acc = 0;
    for (uint64_t k = 0; k < count; ++k) {
        const char *p = s + k * stride;
        if (stride != item && k + XT_PREFETCH_AHEAD < count)
            prefetch_bytes((uint64_t)(uintptr_t)(p + XT_PREFETCH_AHEAD * stride), item);
        for (uint64_t i = 0; i + 8 <= item; i += 8) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            acc ^= w;
        }
    }
    return acc;
}
