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
            memcpy((char *)(uintptr_t)job->dst[i] + skip,
                   (const char *)(uintptr_t)job->src[i] + skip, (size_t)(b - a));
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
    if (threads <= 1) {
        for (int64_t i = 0; i < n; ++i)
            memcpy((void *)(uintptr_t)dst[i], (const void *)(uintptr_t)src[i], (size_t)nbytes[i]);
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
 * Fast path for the commonest transfer, per-layer buffers on both sides (every SGLang
 * layer_first operator): cut the maximal runs where both index sequences step by one (the
 * planner's rule for this case) and copy them for each of nbufs buffer pairs, in one call.
 * Planning the same thing in numpy costs several full-length temporaries, which on a 32K-token
 * layer (caches just flushed by the previous layer's copy) is a tenth of the copy itself.
 * Indices are checked before anything is written: XT_ERANGE_SRC / XT_ERANGE_DST when a slot is
 * negative or >= its side's slot count (a count < 0 means unknown: only negatives are refused).
 * *segments receives the number of copies (runs x nbufs).
 */
int xt_host_copy_items(const uint64_t *src_bases, const uint64_t *dst_bases, int64_t nbufs,
                       const int64_t *si, const int64_t *di, int64_t n, int64_t item,
                       int64_t src_slots, int64_t dst_slots, int nthreads, int64_t *segments) {
    *segments = 0;
    if (n < 0 || nbufs < 0 || item <= 0) return XT_EINVAL;
    if (n == 0 || nbufs == 0) return XT_OK;
    /* Pass 1: every index checked (nothing moves on a bad one) and the runs counted. */
    int64_t runs = 0;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t s = si[i], d = di[i];
        if (s < 0 || (src_slots >= 0 && s >= src_slots)) return XT_ERANGE_SRC;
        if (d < 0 || (dst_slots >= 0 && d >= dst_slots)) return XT_ERANGE_DST;
        runs += i == 0 || s != si[i - 1] + 1 || d != di[i - 1] + 1;
    }
    const uint64_t total = (uint64_t)n * (uint64_t)item * (uint64_t)nbufs;
    if (xt_host_thread_count(total, nthreads) <= 1) {
        /* One thread: copy each run as it is found, with no table to allocate or fill (on a
         * 32K-token layer that table's page faults alone cost a few percent of the copy). */
        for (int64_t b = 0; b < nbufs; ++b) {
            int64_t first = 0;
            for (int64_t i = 1; i <= n; ++i) {
                if (i < n && si[i] == si[i - 1] + 1 && di[i] == di[i - 1] + 1) continue;
                memcpy((char *)(uintptr_t)(dst_bases[b] + (uint64_t)di[first] * (uint64_t)item),
                       (const char *)(uintptr_t)(src_bases[b] + (uint64_t)si[first] * (uint64_t)item),
                       (size_t)((uint64_t)(i - first) * (uint64_t)item));
                first = i;
            }
        }
        *segments = runs * nbufs;
        return XT_OK;
    }
    int64_t *starts = (int64_t *)malloc(sizeof(int64_t) * (size_t)(runs + 1));
    if (!starts) return XT_ENOMEM;
    int64_t r = 0;
    for (int64_t i = 0; i < n; ++i)
        if (i == 0 || si[i] != si[i - 1] + 1 || di[i] != di[i - 1] + 1) starts[r++] = i;
    starts[runs] = n;
    const int64_t count = runs * nbufs;
    uint64_t *table = (uint64_t *)malloc(sizeof(uint64_t) * 3 * (size_t)count);
    if (!table) { free(starts); return XT_ENOMEM; }
    uint64_t *src = table, *dst = table + count, *len = table + 2 * count;
    int64_t k = 0;
    for (int64_t b = 0; b < nbufs; ++b) {
        for (int64_t q = 0; q < runs; ++q, ++k) {
            const int64_t first = starts[q];
            src[k] = src_bases[b] + (uint64_t)si[first] * (uint64_t)item;
            dst[k] = dst_bases[b] + (uint64_t)di[first] * (uint64_t)item;
            len[k] = (uint64_t)(starts[q + 1] - first) * (uint64_t)item;
        }
    }
    free(starts);
    int rc = xt_host_copy(src, dst, len, count, nthreads);
    free(table);
    *segments = count;
    return rc;
}
