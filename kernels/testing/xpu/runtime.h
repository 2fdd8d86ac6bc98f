/*
 * Test stand-in for Kunlunxin's XRE <xpu/runtime.h>: the handful of xpu_* calls the copy backend
 * uses, implemented on host memory, so CI compiles and runs kernels/xpu_copy.cc without a card.
 *
 * It is stricter than a plain memcpy so that it catches backend bugs a real card would punish:
 *   - "device" memory is what xpu_malloc returned; every copy checks that each side lies inside
 *     (or outside) a device allocation as its kind says, and inside its bounds;
 *   - xpu_memcpy_async only queues: nothing moves until xpu_wait(stream), so a backend that
 *     forgets to wait leaves the destination untouched and the test fails.
 * Counters (xpu_fake_*) let tests compare submissions with the planner's segment count.
 * Include it from exactly one translation unit: it defines the functions it declares.
 */
#ifndef XPUTUNE_FAKE_XPU_RUNTIME_H
#define XPUTUNE_FAKE_XPU_RUNTIME_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

enum XPUMemcpyKind {
    XPU_DEVICE_TO_HOST = 0,
    XPU_HOST_TO_DEVICE = 1,
    XPU_DEVICE_TO_DEVICE = 2,
};

/* Error codes of the stand-in (the real runtime has its own; 0 is success in both). */
enum { XPU_FAKE_SUCCESS = 0, XPU_FAKE_EKIND = 1, XPU_FAKE_ERANGE = 2, XPU_FAKE_ENOMEM = 3 };

typedef struct xpu_fake_op {
    void *dst;
    const void *src;
    uint64_t size;
} xpu_fake_op;

typedef struct xpu_fake_stream {
    xpu_fake_op *ops;
    int64_t count;
    int64_t capacity;
} xpu_fake_stream;

typedef xpu_fake_stream *XPUStream;

typedef struct xpu_fake_alloc {
    char *base;
    uint64_t size;
    struct xpu_fake_alloc *next;
} xpu_fake_alloc;

static xpu_fake_alloc *xpu_fake_allocs = NULL;
static xpu_fake_stream xpu_fake_default_stream = {NULL, 0, 0};
static int64_t xpu_fake_submit_count = 0;
static int64_t xpu_fake_wait_count = 0;

/* 1 if [p, p + size) lies inside one device allocation, 0 if it touches none, -1 if it straddles. */
static int xpu_fake_where(const void *p, uint64_t size) {
    const char *c = (const char *)p;
    for (xpu_fake_alloc *a = xpu_fake_allocs; a; a = a->next) {
        if (c >= a->base && c < a->base + a->size)
            return (c + size <= a->base + a->size) ? 1 : -1;
        if (c < a->base && c + size > a->base) return -1;
    }
    return 0;
}

int xpu_malloc(void **ptr, uint64_t size) {
    xpu_fake_alloc *a = (xpu_fake_alloc *)malloc(sizeof(xpu_fake_alloc));
    char *base = (char *)malloc(size ? size : 1);
    if (!a || !base) {
        free(a);
        free(base);
        return XPU_FAKE_ENOMEM;
    }
    memset(base, 0, size);
    a->base = base;
    a->size = size;
    a->next = xpu_fake_allocs;
    xpu_fake_allocs = a;
    *ptr = base;
    return XPU_FAKE_SUCCESS;
}

int xpu_free(void *ptr) {
    for (xpu_fake_alloc **pp = &xpu_fake_allocs; *pp; pp = &(*pp)->next) {
        if ((*pp)->base == (char *)ptr) {
            xpu_fake_alloc *a = *pp;
            *pp = a->next;
            free(a->base);
            free(a);
            return XPU_FAKE_SUCCESS;
        }
    }
    return XPU_FAKE_ERANGE;
}

static int xpu_fake_check(void *dst, const void *src, uint64_t size, enum XPUMemcpyKind kind) {
    int d = xpu_fake_where(dst, size), s = xpu_fake_where(src, size);
    if (d < 0 || s < 0) return XPU_FAKE_ERANGE;
    switch (kind) {
        case XPU_HOST_TO_DEVICE: return (d == 1 && s == 0) ? 0 : XPU_FAKE_EKIND;
        case XPU_DEVICE_TO_HOST: return (d == 0 && s == 1) ? 0 : XPU_FAKE_EKIND;
        case XPU_DEVICE_TO_DEVICE: return (d == 1 && s == 1) ? 0 : XPU_FAKE_EKIND;
    }
    return XPU_FAKE_EKIND;
}

int xpu_stream_create(XPUStream *stream) {
    xpu_fake_stream *s = (xpu_fake_stream *)calloc(1, sizeof(xpu_fake_stream));
    if (!s) return XPU_FAKE_ENOMEM;
    *stream = s;
    return XPU_FAKE_SUCCESS;
}

int xpu_stream_destroy(XPUStream stream) {
    if (stream && stream != &xpu_fake_default_stream) {
        free(stream->ops);
        free(stream);
    }
    return XPU_FAKE_SUCCESS;
}

int xpu_memcpy_async(void *dst, const void *src, uint64_t size, enum XPUMemcpyKind kind,
                     XPUStream stream) {
    int rc = xpu_fake_check(dst, src, size, kind);
    if (rc) return rc;
    xpu_fake_stream *s = stream ? stream : &xpu_fake_default_stream;
    if (s->count == s->capacity) {
        int64_t cap = s->capacity ? s->capacity * 2 : 64;
        xpu_fake_op *ops = (xpu_fake_op *)realloc(s->ops, sizeof(xpu_fake_op) * (size_t)cap);
        if (!ops) return XPU_FAKE_ENOMEM;
        s->ops = ops;
        s->capacity = cap;
    }
    s->ops[s->count].dst = dst;
    s->ops[s->count].src = src;
    s->ops[s->count].size = size;
    s->count++;
    xpu_fake_submit_count++;
    return XPU_FAKE_SUCCESS;
}

int xpu_wait(XPUStream stream) {
    xpu_fake_stream *s = stream ? stream : &xpu_fake_default_stream;
    for (int64_t i = 0; i < s->count; ++i) memcpy(s->ops[i].dst, s->ops[i].src, s->ops[i].size);
    s->count = 0;
    xpu_fake_wait_count++;
    return XPU_FAKE_SUCCESS;
}

int xpu_memcpy(void *dst, const void *src, uint64_t size, enum XPUMemcpyKind kind) {
    int rc = xpu_fake_check(dst, src, size, kind);
    if (rc) return rc;
    memcpy(dst, src, size);
    return XPU_FAKE_SUCCESS;
}

/* Test hooks: not part of XRE. */
int64_t xpu_fake_submissions(void) { return xpu_fake_submit_count; }
int64_t xpu_fake_waits(void) { return xpu_fake_wait_count; }
int64_t xpu_fake_pending(XPUStream stream) {
    return (stream ? stream : &xpu_fake_default_stream)->count;
}

#ifdef __cplusplus
}
#endif

#endif /* XPUTUNE_FAKE_XPU_RUNTIME_H */
