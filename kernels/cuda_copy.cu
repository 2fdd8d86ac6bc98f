/*
 * CUDA copy backend, two modes over the same planner.
 *
 * direct: one cudaMemcpyAsync per segment of the shared segment table (cudaMemcpyDefault, so
 *   unified addressing tells host from device), or one cudaMemcpyBatchAsync for the whole table
 *   where the runtime has it (CUDA >= 12.8): a layer_first layer is then one DMA submission.
 * kernel: a warp per token slot copies item_size bytes for every layer, reading or writing
 *   pinned host memory through unified addressing. It wins where segments are tiny (page_first:
 *   every token of every layer is its own segment) because it needs no submission per segment.
 *
 * Only a C ABI is exported (no torch C++ ABI), so one build serves every torch version.
 */
#include <cuda_runtime.h>

#include <stdint.h>

#include "xt_copy.h"

/* Address layout of one side of a transfer; the planner's Endpoint in C. */
enum { XT_LAYOUT_TABLE = 0, XT_LAYOUT_LAYER_FIRST = 1, XT_LAYOUT_PAGE_FIRST = 2, XT_LAYOUT_PF_DIRECT = 3 };

extern "C" {
typedef struct xt_side {
    int64_t layout;      /* XT_LAYOUT_* */
    uint64_t base;       /* flat layouts: buffer start */
    const uint64_t *tbl; /* XT_LAYOUT_TABLE: one base per processed layer (host memory) */
    int64_t slots;       /* token slots per layer (flat layouts) */
    int64_t layers;      /* layers held by a flat buffer */
    int64_t first_layer; /* layer of the buffer that processed layer 0 maps to */
    int64_t page_size;   /* XT_LAYOUT_PF_DIRECT */
} xt_side;
}

namespace {

constexpr int kWarp = 32;

struct DevSide {
    int64_t layout;
    uint64_t base;
    const uint64_t *tbl; /* device copy of the table */
    int64_t layers;
    int64_t first_layer;
    int64_t page_size;
    int64_t slots;
};

__device__ __forceinline__ char *slot_addr(const DevSide &s, int64_t j, int64_t slot, int64_t item) {
    const int64_t layer = s.first_layer + j;
    switch (s.layout) {
        case XT_LAYOUT_TABLE:
            return reinterpret_cast<char *>(s.tbl[j]) + slot * item;
        case XT_LAYOUT_LAYER_FIRST:
            return reinterpret_cast<char *>(s.base) + (layer * s.slots + slot) * item;
        case XT_LAYOUT_PAGE_FIRST:
            return reinterpret_cast<char *>(s.base) + (slot * s.layers + layer) * item;
        default: {
            const int64_t page = slot / s.page_size, in_page = slot % s.page_size;
            return reinterpret_cast<char *>(s.base) +
                   ((page * s.layers + layer) * s.page_size + in_page) * item;
        }
    }
}

__device__ __forceinline__ void copy_item(int lane, const char *src, char *dst, int64_t item) {
    const bool wide = ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) |
                        static_cast<uintptr_t>(item)) & 7) == 0;
    if (wide) {
        const uint64_t *s = reinterpret_cast<const uint64_t *>(src);
        uint64_t *d = reinterpret_cast<uint64_t *>(dst);
        for (int64_t k = lane; k < item / 8; k += kWarp) d[k] = __ldg(s + k);
    } else {
        for (int64_t k = lane; k < item; k += kWarp) dst[k] = src[k];
    }
}

__global__ void copy_items_kernel(DevSide src, DevSide dst, const int64_t *__restrict__ src_idx,
                                  const int64_t *__restrict__ dst_idx, int64_t n_items,
                                  int64_t item, int64_t num_layers) {
    const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int lane = static_cast<int>(tid % kWarp);
    const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp;
    for (int64_t i = tid / kWarp; i < n_items; i += warps) {
        const int64_t s = src_idx[i], d = dst_idx[i];
        for (int64_t j = 0; j < num_layers; ++j)
            copy_item(lane, slot_addr(src, j, s, item), slot_addr(dst, j, d, item), item);
    }
}

/* Stage a small host array into stream-ordered device memory (freed after the kernel). */
cudaError_t stage(const void *host, size_t bytes, void **dev, cudaStream_t stream) {
    cudaError_t rc = cudaMallocAsync(dev, bytes ? bytes : 8, stream);
    if (rc != cudaSuccess) return rc;
    return cudaMemcpyAsync(*dev, host, bytes, cudaMemcpyHostToDevice, stream);
}

cudaError_t to_dev_side(const xt_side *in, int64_t num_layers, DevSide *out, void **scratch,
                        cudaStream_t stream) {
    *out = DevSide{in->layout, in->base, nullptr, in->layers, in->first_layer, in->page_size, in->slots};
    *scratch = nullptr;
    if (in->layout != XT_LAYOUT_TABLE) return cudaSuccess;
    cudaError_t rc = stage(in->tbl, sizeof(uint64_t) * static_cast<size_t>(num_layers), scratch, stream);
    out->tbl = static_cast<const uint64_t *>(*scratch);
    return rc;
}

#if defined(CUDART_VERSION) && CUDART_VERSION >= 12080
#define XT_HAVE_BATCH 1
cudaError_t batch_copy(const uint64_t *src, const uint64_t *dst, const uint64_t *nbytes, int64_t n,
                       cudaStream_t stream) {
    cudaMemcpyAttributes attr = {};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t attr_idx = 0;
    void *const *dsts = reinterpret_cast<void *const *>(dst);
    const void *const *srcs = reinterpret_cast<const void *const *>(src);
    const size_t *sizes = reinterpret_cast<const size_t *>(nbytes);
#if CUDART_VERSION >= 13000
    return cudaMemcpyBatchAsync(dsts, srcs, sizes, static_cast<size_t>(n), &attr, &attr_idx, 1, stream);
#else
    size_t fail_idx = 0;
    return cudaMemcpyBatchAsync(const_cast<void **>(dsts), const_cast<void **>(srcs),
                                const_cast<size_t *>(sizes), static_cast<size_t>(n), &attr,
                                &attr_idx, 1, &fail_idx, stream);
#endif
}
#else
#define XT_HAVE_BATCH 0
#endif

}  // namespace

extern "C" {

int xt_cuda_abi_version(void) { return XT_ABI_VERSION; }

/* Runtime version this library runs against (e.g. 12080), or -1. */
int xt_cuda_runtime_version(void) {
    int v = -1;
    return cudaRuntimeGetVersion(&v) == cudaSuccess ? v : -1;
}

/* 1 when this build can use cudaMemcpyBatchAsync and the runtime is new enough. */
int xt_cuda_has_batch(void) { return XT_HAVE_BATCH && xt_cuda_runtime_version() >= 12080; }

const char *xt_cuda_error_string(int rc) { return cudaGetErrorString(static_cast<cudaError_t>(rc)); }

int xt_cuda_sync(void *stream) { return cudaStreamSynchronize(static_cast<cudaStream_t>(stream)); }

/*
 * direct mode. use_batch: 1 = one cudaMemcpyBatchAsync where available (the legacy default
 * stream cannot batch, so a NULL stream falls back), 0 = one cudaMemcpyAsync per segment.
 * Returns 0 or a cudaError_t.
 */
int xt_cuda_copy(const uint64_t *src, const uint64_t *dst, const uint64_t *nbytes, int64_t n,
                 void *stream, int use_batch, int sync) {
    if (n < 0 || (n > 0 && (!src || !dst || !nbytes))) return XT_EINVAL;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    cudaError_t rc = cudaSuccess;
    bool done = false;
#if XT_HAVE_BATCH
    if (use_batch && s != nullptr && n > 1 && xt_cuda_has_batch()) {
        rc = batch_copy(src, dst, nbytes, n, s);
        done = rc == cudaSuccess;
        if (!done) (void)cudaGetLastError(); /* clear, then fall back to one call per segment */
    }
#else
    (void)use_batch;
#endif
    for (int64_t i = 0; !done && i < n; ++i) {
        if (nbytes[i] == 0) continue;
        rc = cudaMemcpyAsync(reinterpret_cast<void *>(dst[i]), reinterpret_cast<const void *>(src[i]),
                             static_cast<size_t>(nbytes[i]), cudaMemcpyDefault, s);
        if (rc != cudaSuccess) return rc;
    }
    if (sync) rc = cudaStreamSynchronize(s);
    return rc;
}

/*
 * kernel mode: dst[l][dst_idx[i]] = src[l][src_idx[i]] for the num_layers processed layers.
 * src_idx/dst_idx are device-accessible when idx_on_host is 0, else host arrays staged here.
 * block_quota and warps_per_block size the grid as SGLang's kernel does.
 */
int xt_cuda_copy_items(const xt_side *src, const xt_side *dst, const int64_t *src_idx,
                       const int64_t *dst_idx, int idx_on_host, int64_t n_items, int64_t item_size,
                       int64_t num_layers, int block_quota, int warps_per_block, void *stream,
                       int sync) {
    if (!src || !dst || n_items < 0 || item_size <= 0 || num_layers <= 0 || block_quota <= 0 ||
        warps_per_block <= 0 || warps_per_block > 32)
        return XT_EINVAL;
    if (n_items == 0) return XT_OK;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    void *scratch[4] = {nullptr, nullptr, nullptr, nullptr};
    DevSide ds, dd;
    const int64_t *si = src_idx, *di = dst_idx;
    cudaError_t rc = to_dev_side(src, num_layers, &ds, &scratch[0], s);
    if (rc == cudaSuccess) rc = to_dev_side(dst, num_layers, &dd, &scratch[1], s);
    if (rc == cudaSuccess && idx_on_host) {
        const size_t bytes = sizeof(int64_t) * static_cast<size_t>(n_items);
        rc = stage(src_idx, bytes, &scratch[2], s);
        if (rc == cudaSuccess) rc = stage(dst_idx, bytes, &scratch[3], s);
        si = static_cast<const int64_t *>(scratch[2]);
        di = static_cast<const int64_t *>(scratch[3]);
    }
    if (rc == cudaSuccess) {
        const int64_t warps_total = static_cast<int64_t>(block_quota) * warps_per_block;
        const int64_t per_warp = (n_items + warps_total - 1) / warps_total;
        const int64_t blocks = (n_items + per_warp * warps_per_block - 1) / (per_warp * warps_per_block);
        copy_items_kernel<<<static_cast<unsigned>(blocks), warps_per_block * kWarp, 0, s>>>(
            ds, dd, si, di, n_items, item_size, num_layers);
        rc = cudaGetLastError();
    }
    for (void *p : scratch)
        if (p) (void)cudaFreeAsync(p, s);
    if (rc == cudaSuccess && sync) rc = cudaStreamSynchronize(s);
    return rc;
}

}  // extern "C"
