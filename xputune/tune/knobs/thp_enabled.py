"""thp.enabled: whether anonymous memory gets transparent huge pages.

The L2 host KV buffer is anonymous memory of tens to hundreds of GB; with 4 KiB pages it needs
millions of page-table and IOMMU entries. `madvise` gives huge pages to regions that ask with
madvise(MADV_HUGEPAGE), which the host buffer does before it is registered (pinned).
"""

from __future__ import annotations

from xputune.tune.knobs.sysfs_choice import ChoiceKnob


class ThpEnabled(ChoiceKnob):
    name = "thp.enabled"
    summary = "transparent huge pages for anonymous memory (the pinned host KV buffer)"
    path = "/sys/kernel/mm/transparent_hugepage/enabled"
    choices = ("always", "madvise", "never")
