"""The knobs, one module each, in the order apply changes them.

PCIe ordering comes first: it is the change most likely to be refused (lockdown, hardware that
ignores the bits), and refusing before the memory settings change keeps a failed apply short.
"""

from __future__ import annotations

from xputune.tune.knobs.base import Knob, Row, TuneContext, Want
from xputune.tune.knobs.numa_balancing import NumaBalancing
from xputune.tune.knobs.pcie_ido import PcieIdo
from xputune.tune.knobs.shm_huge import ShmHuge
from xputune.tune.knobs.thp_defrag import ThpDefrag
from xputune.tune.knobs.thp_enabled import ThpEnabled
from xputune.tune.knobs.thp_shmem_enabled import ThpShmemEnabled

KNOBS: dict[str, Knob] = {
    knob.name: knob
    for knob in (
        PcieIdo(),
        ThpEnabled(),
        ThpDefrag(),
        ThpShmemEnabled(),
        ShmHuge(),
        NumaBalancing(),
    )
}

__all__ = ["KNOBS", "Knob", "Row", "TuneContext", "Want"]
