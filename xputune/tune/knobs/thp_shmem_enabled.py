"""thp.shmem_enabled: huge pages for the kernel's internal shmem mount.

It covers SysV shared memory, memfd and MAP_SHARED|MAP_ANONYMOUS mappings, which some runtimes
use for host staging buffers. It does NOT cover /dev/shm, a separate tmpfs mount whose behaviour
is the huge= mount option (see shm.huge).
"""

from __future__ import annotations

from xputune.tune.knobs.sysfs_choice import ChoiceKnob


class ThpShmemEnabled(ChoiceKnob):
    name = "thp.shmem_enabled"
    summary = "huge pages for memfd / SysV shm / shared anonymous memory (not /dev/shm)"
    path = "/sys/kernel/mm/transparent_hugepage/shmem_enabled"
    choices = ("always", "within_size", "advise", "never", "deny", "force")
