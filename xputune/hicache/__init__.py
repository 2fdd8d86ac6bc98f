"""SGLang-independent parts of the cache patch, each usable and tested on its own.

- lifo: LIFO host slot allocator (hot-page reuse, misuse detection, decision digest)
- hostbuf: private host KV buffer (THP advice and NUMA policy before pinning, placement checked)
- tpshared: one host KV buffer shared by a TP group for MLA models (/dev/shm, 0600, unlinked)
- submitter: D2H and H2D submission lanes on daemon threads; failures surface to the caller
- write_policy: hit counts that count distinct requests (write_through_selective)
- ghost: ghost list of chained page hashes evicted from L1 without a host copy
- numa_mem, linux_mm: the memory-policy syscalls and /proc/self readers under them
- hostbench: the measurement behind `xputune bench host`
"""
