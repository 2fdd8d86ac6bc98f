"""One verdict on the host settings, shared by `probe` and `check`.

BASELINE is the single source of truth for which value of each host setting helps the KV
transfer path, whatever the platform: the probe judges with it, and the tuning profiles take
their values from it (the generic profile names no values of its own; a platform profile
changes severities, or overrides a value on purpose). So `probe` and `check --profile generic`
can never disagree on a setting: a value the probe calls "warn" is a drift for check.
"""

from __future__ import annotations

from dataclasses import dataclass

from xputune.topology.model import Topology

OK, WARN, BAD, UNKNOWN = "ok", "warn", "bad", "unknown"

# knob name -> the values that hold, the one `apply` sets first (words as the knobs parse them).
BASELINE: dict[str, tuple[str, ...]] = {
    "thp.enabled": ("madvise", "always"),
    "thp.defrag": ("madvise", "defer+madvise", "always"),
    "thp.shmem_enabled": ("advise", "within_size", "always"),
    "shm.huge": ("advise", "within_size", "always"),
    "numa.balancing": ("off",),
}


def baseline_holds(knob: str, value: object) -> bool | None:
    """Whether a setting's value holds by BASELINE; None when the value is unknown."""
    if value is None:
        return None
    if knob == "numa.balancing":
        value = "off" if value in (0, "0", "off", False) else "on"
    return str(value) in BASELINE[knob]


@dataclass(frozen=True)
class Verdict:
    setting: str
    value: str
    verdict: str
    why: str


def _ido_summary(topo: Topology) -> Verdict:
    # Each port once (a switch port above two cards is one port), as `check` counts them.
    seen = {fn.bdf: fn for card in topo.cards for fn in topo.ports_on_path(card)}
    states = [fn.ordering for fn in seen.values()]
    if not states:
        return Verdict("pcie ido", "no cards", OK, "nothing to order")
    if any(o.ido_request is None for o in states):
        reasons = sorted({o.reason or "unknown" for o in states if o.ido_request is None})
        return Verdict(
            "pcie ido",
            f"unknown: {', '.join(reasons)}",
            UNKNOWN,
            "config space needed to read Device Control 2",
        )
    on = sum(1 for o in states if o.ido_request and o.ido_completion)
    value = f"{on}/{len(states)} ports on card paths"
    if on == len(states):
        return Verdict("pcie ido", value, OK, "writes of cards under one switch do not block")
    shared = any(len(u.cards) > 1 for u in topo.uplinks)
    return Verdict(
        "pcie ido",
        value,
        WARN if shared else OK,
        "cards share uplinks: strict ordering makes their D2H writes block each other"
        if shared
        else "no shared uplinks",
    )


def settings_verdicts(topo: Topology) -> list[Verdict]:
    s = topo.settings
    out: list[Verdict] = []

    def add(name: str, value: object, good: bool | None, why_good: str, why_bad: str) -> None:
        if value is None:
            out.append(Verdict(name, "not available", UNKNOWN, "the kernel does not expose it"))
            return
        out.append(Verdict(name, str(value), OK if good else WARN, why_good if good else why_bad))

    add(
        "thp enabled",
        s.thp_enabled,
        baseline_holds("thp.enabled", s.thp_enabled),
        "MADV_HUGEPAGE host buffers get 2 MB pages",
        "host KV buffers stay on 4 KB pages: ~512x more page-table and IOMMU entries",
    )
    add(
        "thp defrag",
        s.thp_defrag,
        baseline_holds("thp.defrag", s.thp_defrag),
        "huge pages are assembled for madvised buffers",
        "madvised buffers may not get huge pages",
    )
    add(
        "thp shmem_enabled",
        s.thp_shmem_enabled,
        baseline_holds("thp.shmem_enabled", s.thp_shmem_enabled),
        "memfd / shared anonymous staging buffers get huge pages when they ask",
        "memfd / shared anonymous buffers stay on 4 KB pages even when they madvise "
        "(/dev/shm itself is the mount's huge= option)",
    )
    if s.shm is None:
        out.append(Verdict("/dev/shm huge", "not mounted", WARN, "TP-shared host buffer needs it"))
    elif s.shm.fstype != "tmpfs":
        out.append(Verdict("/dev/shm huge", f"{s.shm.fstype}", BAD, "/dev/shm is not a tmpfs"))
    else:
        good = baseline_holds("shm.huge", s.shm.huge)
        out.append(
            Verdict(
                "/dev/shm huge",
                s.shm.huge,
                OK if good else WARN,
                "TP-shared buffer can get THP (the XPU driver cannot register hugetlbfs)"
                if good
                else "TP-shared buffer stays on 4 KB pages: remount huge=advise",
            )
        )
    add(
        "numa balancing",
        s.numa_balancing,
        baseline_holds("numa.balancing", s.numa_balancing),
        "pinned host buffers are not migrated",
        "the kernel scans and migrates pages of pinned KV buffers; turn it off",
    )
    out.append(
        Verdict(
            "iommu",
            f"{s.iommu} ({s.iommu_groups} groups)",
            OK if s.iommu in ("passthrough", "off") else WARN,
            "DMA needs no IOMMU translation"
            if s.iommu != "translated"
            else "every DMA is translated: large registered buffers cost IOTLB misses",
        )
    )
    if s.lockdown is not None:
        out.append(
            Verdict(
                "kernel lockdown",
                s.lockdown,
                OK if s.lockdown == "none" else WARN,
                "PCI config writes allowed"
                if s.lockdown == "none"
                else "PCI config writes (IDO) are blocked",
            )
        )
    out.append(_ido_summary(topo))
    return out
