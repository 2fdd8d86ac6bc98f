/*
 * Kunlunxin XPU copy backend: one xpu_memcpy_async per segment on one stream (XRE runtime API).
 *
 * The segment table comes from the shared planner, so a layer_first layer costs one submission
 * and a page_first_direct layer costs one per page: the submission count, not the bytes, is what
 * decides whether a layer reaches sequential bandwidth on this DMA engine.
 *
 * Built against the real <xpu/runtime.h> and libxpurt.so where they exist; CI builds the same file
 * against kernels/testing/xpu/runtime.h, a host-memory stand-in, so this logic runs everywhere.
 */
#include <xpu/runtime.h>

#include <atomic>
#include <mutex>

#include "xt_copy.h"

namespace {

std::atomic<int64_t> g_submitted{0};
std::once_flag g_stream_once;
XPUStream g_stream = nullptr;
int g_stream_rc = 0;

XPUStream own_stream(int* rc) {
    std::call_once(g_stream_once, [] { g_stream_rc = xpu_stream_create(&g_stream); });
    *rc = g_stream_rc;
    return g_stream;
}

/* Map our direction codes to XRE's names rather than trusting their numeric values. */
bool to_xpu_kind(int kind, XPUMemcpyKind* out) {
    switch (kind) {
        case XT_D2H: *out = XPU_DEVICE_TO_HOST; return true;
        case XT_H2D: *out = XPU_HOST_TO_DEVICE; return true;
        case XT_D2D: *out = XPU_DEVICE_TO_DEVICE; return true;
        default: return false;
    }
}

}  // namespace

extern "C" {

int xt_xpu_abi_version(void) { return XT_ABI_VERSION; }

/* Async copies submitted by this library since load: what a test or a benchmark compares with
 * the planner's segment count. */
int64_t xt_xpu_submitted(void) { return g_submitted.load(); }

/*
 * Submit n segments of one direction on `stream` (NULL: a stream this library owns). With
 * `sync` set, wait for the stream before returning, so the caller's buffers are safe to reuse.
 * Returns XT_OK, XT_EINVAL, or the XRE error code of the first call that failed (the copies
 * submitted before it are still waited for when sync is set, so nothing is left in flight).
 */
int xt_xpu_copy(const uint64_t* src, const uint64_t* dst, const uint64_t* nbytes, int64_t n,
                int kind, void* stream, int sync) {
    XPUMemcpyKind xkind;
    if (n < 0 || !to_xpu_kind(kind, &xkind) || (n > 0 && (!src || !dst || !nbytes)))
        return XT_EINVAL;
    int rc = 0;
    XPUStream s = stream ? static_cast<XPUStream>(stream) : own_stream(&rc);
    if (rc != 0) return rc;
    int first_error = 0;
    for (int64_t i = 0; i < n; ++i) {
        if (nbytes[i] == 0) continue;
        rc = xpu_memcpy_async(reinterpret_cast<void*>(static_cast<uintptr_t>(dst[i])),
                              reinterpret_cast<const void*>(static_cast<uintptr_t>(src[i])),
                              nbytes[i], xkind, s);
        if (rc != 0) {
            first_error = rc;
            break;
        }
        g_submitted.fetch_add(1, std::memory_order_relaxed);
    }
    if (sync) {
        rc = xpu_wait(s);
        if (first_error == 0) first_error = rc;
    }
    return first_error;
}

/* Wait for a stream (NULL: this library's own stream). */
int xt_xpu_wait(void* stream) {
    int rc = 0;
    XPUStream s = stream ? static_cast<XPUStream>(stream) : own_stream(&rc);
    return rc != 0 ? rc : xpu_wait(s);
}

}  // extern "C"
