"""thp.defrag: how hard the kernel works to find a huge page when a fault asks for one.

With `madvise`, regions marked MADV_HUGEPAGE compact memory at fault time, so the host KV buffer
really is built from huge pages, while everything else falls back to small pages without stalls.
"""

from __future__ import annotations

from xputune.tune.knobs.sysfs_choice import ChoiceKnob


class ThpDefrag(ChoiceKnob):
    name = "thp.defrag"
    summary = "huge page compaction at fault time for MADV_HUGEPAGE regions"
    path = "/sys/kernel/mm/transparent_hugepage/defrag"
    choices = ("always", "defer", "defer+madvise", "madvise", "never")
