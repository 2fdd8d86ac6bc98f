"""Where a running SGLang server's ranks and their host KV pools really are (`xputune verify`).

xputune plans each rank's placement (its card's NUMA node, huge pages) and the launcher asks
for it; this package reads, through a host view, what the kernel actually did: each rank's
scheduler process (procs.py), what was planned for it (intent.py), the mapping that holds its
host KV pool (pool.py), and the verdict with its fix (judge.py), gathered by read.py into one
report (report.py). It reads /proc only through host/, so a recording of /proc and /sys
(`--root`) runs the same code as the live host.
"""
