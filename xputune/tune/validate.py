"""The journal is data, not commands: every step is checked against the knob that owns it.

Before rollback executes anything, each step must be exactly what that knob could have
written: pcie.ido only bits 8-9 of Device Control 2 (at the offset the function's own PCIe
capability puts it) of a card or a port on a card's path, or a register its profile's
platform_registers describe; the THP knobs only their own sysfs file with one of its words;
numa.balancing only /proc/sys/kernel/numa_balancing with 0, 1 or 2; shm.huge only /dev/shm's
huge=; persist only its units (boot and watch; mode 0644, text) and their wants links (each
pointing at its own unit), and only the /etc directories above them. Anything else (a path
outside, a setuid mode, a foreign mask, a misaligned offset, a missing key, a wrong type) is
refused with one line naming the transaction and step, and nothing runs.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from xputune.errors import XputuneError
from xputune.host import HostView, pciconfig
from xputune.tune.errors import JournalError
from xputune.tune.journal import Step, Transaction

SYSFS_CHOICES = {
    "thp.enabled": (
        "/sys/kernel/mm/transparent_hugepage/enabled",
        ("always", "madvise", "never"),
    ),
    "thp.defrag": (
        "/sys/kernel/mm/transparent_hugepage/defrag",
        ("always", "defer", "defer+madvise", "madvise", "never"),
    ),
    "thp.shmem_enabled": (
        "/sys/kernel/mm/transparent_hugepage/shmem_enabled",
        ("always", "within_size", "advise", "never", "deny", "force"),
    ),
}
NUMA_PATH = "/proc/sys/kernel/numa_balancing"
SHM_MODES = ("never", "always", "within_size", "advise")
IDO_MASK = pciconfig.DEVCTL2_IDO
_CONFIG_RE = re.compile(
    r"^/sys/devices/pci[0-9a-f]{4}:[0-9a-f]{2}"
    r"(/[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])+/config$"
)
MAX_RAW = 1 << 20


class _Bad(Exception):
    pass


def validate(view: HostView, transactions: list[Transaction]) -> None:
    """Raise JournalError (one line) at the first step no knob could have journaled."""
    ctx = _Context(view)
    for txn in transactions:
        for step in txn.steps:
            try:
                _step(ctx, txn, step)
            except _Bad as exc:
                n = step.n if isinstance(step.n, int) else "?"
                raise JournalError(
                    f"journal transaction {txn.id} step {n}: {exc}; refusing to roll back "
                    "anything (nothing was changed)"
                ) from None


class _Context:
    def __init__(self, view: HostView) -> None:
        self.view = view
        self._ports: set[str] | None = None

    def card_paths(self) -> set[str]:
        """Real host paths of the config files pcie.ido owns on this host."""
        if self._ports is None:
            from xputune.topology.discover import discover
            from xputune.tune.knobs.pcie_ido import ido_ports

            try:
                topology = discover(self.view)
            except XputuneError as exc:
                raise _Bad(f"cannot discover the cards to check a pci-bits step ({exc})") from None
            self._ports = {self._real(p.config_path) for p in ido_ports(topology)}
        return self._ports

    def _real(self, path: str) -> str:
        try:
            return self.view.realpath(path)
        except (OSError, XputuneError):
            return path


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"{what} {value!r} is not an integer")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise _Bad(f"{what} {value!r} is not a string")
    return value


def _keys(target: dict[str, Any], required: set[str], optional: set[str] = frozenset()) -> None:
    missing = sorted(required - set(target))
    if missing:
        raise _Bad(f"target lacks {missing[0]!r}")
    extra = sorted(set(target) - required - set(optional))
    if extra:
        raise _Bad(f"target has unexpected key {extra[0]!r}")


def _step(ctx: _Context, txn: Transaction, step: Step) -> None:
    _int(step.n, "step number")
    knob = _str(step.knob, "knob")
    kind = _str(step.kind, "kind")
    _str(step.label, "label")
    if not isinstance(step.target, dict):
        raise _Bad(f"target {step.target!r} is not a mapping")
    if step.original_raw is not None:
        raw = _str(step.original_raw, "original_raw")
        if len(raw) > MAX_RAW * 4 // 3 + 4:
            raise _Bad("original_raw is too large")
        try:
            base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise _Bad("original_raw is not base64") from None
    target = step.target
    if knob in SYSFS_CHOICES:
        path, words = SYSFS_CHOICES[knob]
        _kind(kind, "sysfs-choice", knob)
        _keys(target, {"path"})
        if target["path"] != path:
            raise _Bad(f"{knob} may only write {path}, not {target['path']!r}")
        for what in ("original", "new"):
            if getattr(step, what) not in words:
                raise _Bad(f"{what} {getattr(step, what)!r} is not a {knob} word")
    elif knob == "numa.balancing":
        _kind(kind, "sysctl-int", knob)
        _keys(target, {"path"})
        if target["path"] != NUMA_PATH:
            raise _Bad(f"{knob} may only write {NUMA_PATH}, not {target['path']!r}")
        for what in ("original", "new"):
            if _int(getattr(step, what), what) not in (0, 1, 2):
                raise _Bad(f"{what} {getattr(step, what)!r} is not 0, 1 or 2")
    elif knob == "shm.huge":
        _kind(kind, "shm-huge", knob)
        _keys(target, {"mount_point"})
        if target["mount_point"] != "/dev/shm":
            raise _Bad(f"{knob} may only remount /dev/shm, not {target['mount_point']!r}")
        for what in ("original", "new"):
            if getattr(step, what) not in SHM_MODES:
                raise _Bad(f"{what} {getattr(step, what)!r} is not a huge= mode")
    elif knob == "persist":
        _persist(step)
    elif knob == "pcie.ido":
        _kind(kind, "pci-bits", knob)
        _pci(ctx, txn, step)
    else:
        raise _Bad(f"unknown knob {knob!r}")


def _kind(kind: str, expected: str, knob: str) -> None:
    if kind != expected:
        raise _Bad(f"{knob} writes {expected} steps, not {kind!r}")


def _persist(step: Step) -> None:
    from xputune.tune.persist import UNITS, allowed_dirs

    target = step.target
    _keys(target, {"path"}, {"mode", "created_dirs"})
    files = {u.path: u for u in UNITS}
    links = {u.link: u for u in UNITS}
    if step.kind == "file":
        if target["path"] not in files:
            raise _Bad(f"persist may only write {' or '.join(files)}, not {target['path']!r}")
        mode = _int(target.get("mode", 0o644), "mode")
        if mode != 0o644:
            raise _Bad(f"persist writes its unit with mode 0644, not {mode:#o}")
        for what in ("original", "new"):
            value = getattr(step, what)
            if value is not None and not isinstance(value, str):
                raise _Bad(f"{what} of the unit is not text")
    elif step.kind == "symlink":
        if target["path"] not in links:
            raise _Bad(f"persist may only link {' or '.join(links)}, not {target['path']!r}")
        if "mode" in target:
            raise _Bad("a link has no mode")
        name = links[target["path"]].name
        for what in ("original", "new"):
            value = getattr(step, what)
            # The link is only ever restored as a link (never followed), and only ever to a
            # unit of its own name: systemctl enable's own link, or one the operator had.
            if value is not None and not _unit_link(value, name):
                raise _Bad(f"{what} link target {value!r} is not an {name} unit")
    else:
        raise _Bad(f"persist writes file and symlink steps, not {step.kind!r}")
    created = target.get("created_dirs", [])
    if not isinstance(created, list):
        raise _Bad("created_dirs is not a list")
    allowed = allowed_dirs(target["path"])
    for folder in created:
        if folder not in allowed:
            raise _Bad(f"created_dirs names {folder!r}, not a directory above {target['path']}")


def _platform(
    ctx: _Context, txn: Transaction, path: str, offset: int, width: int, mask: int
) -> None:
    """A profile-described register: one the apply's profile named (journaled with the
    transaction), on a function of its vendor (and device), never in the standard header."""
    if offset < pciconfig.HEADER_BYTES:
        raise _Bad(f"offset {offset:#x} is in the standard header, which xputune never writes")
    entries = txn.platform_registers
    if not isinstance(entries, list):
        raise _Bad("platform_registers is not a list")
    try:
        data = ctx.view.read_bytes(path)
    except (OSError, XputuneError) as exc:
        raise _Bad(f"cannot read {path} to check the step ({exc})") from None
    vendor = int.from_bytes(data[0:2], "little") if len(data) >= 4 else -1
    device = int.from_bytes(data[2:4], "little") if len(data) >= 4 else -1
    for e in entries:
        if not isinstance(e, dict):
            continue
        if (e.get("offset"), e.get("width"), e.get("mask")) != (offset, width, mask):
            continue
        if e.get("vendor") != vendor or e.get("device") not in (None, device):
            continue
        return
    raise _Bad(
        f"register {offset:#x}/{width}/{mask:#x} of {path} is not a platform register of "
        f"profile {txn.profile!r} for this function"
    )


def _unit_link(value: Any, name: str) -> bool:
    if not isinstance(value, str) or "\0" in value or not value.startswith("/"):
        return False
    parts = value.split("/")
    return ".." not in parts and parts[-1] == name


def _pci(ctx: _Context, txn: Transaction, step: Step) -> None:
    target = step.target
    _keys(target, {"path", "offset", "width", "mask"}, {"label", "field"})
    path = _str(target["path"], "path")
    if not _CONFIG_RE.match(path):
        raise _Bad(f"pcie.ido writes only a PCI function's config file, not {path!r}")
    offset = _int(target["offset"], "offset")
    width = _int(target["width"], "width")
    mask = _int(target["mask"], "mask")
    if width not in (1, 2, 4):
        raise _Bad(f"width {width} is not 1, 2 or 4")
    if offset < 0 or offset % width or offset + width > 4096:
        raise _Bad(f"offset {offset:#x} is not an aligned config-space offset for width {width}")
    if not 0 < mask < 1 << (8 * width):
        raise _Bad(f"mask {mask:#x} does not fit {width} bytes")
    field = target.get("field", "")
    if field == "devctl2":
        if width != 2 or mask & ~IDO_MASK:
            raise _Bad(
                f"pcie.ido owns only bits 8-9 (mask {IDO_MASK:#06x}) of Device Control 2, "
                f"not mask {mask:#x} width {width}"
            )
        try:
            space = pciconfig.decode(ctx.view.read_bytes(path), path)
        except (OSError, XputuneError) as exc:
            raise _Bad(f"cannot read {path} to check the step ({exc})") from None
        if space.pcie is None or offset != space.pcie.offset + pciconfig.PCIE_DEVCTL2:
            raise _Bad(
                f"offset {offset:#x} is not Device Control 2 of {path} "
                f"({'no PCIe capability' if space.pcie is None else hex(space.pcie.devctl2)})"
            )
        if ctx._real(path) not in ctx.card_paths():
            raise _Bad(f"{path} is neither a card nor a port on a card's path")
    elif field == "":
        _platform(ctx, txn, path, offset, width, mask)
    else:
        raise _Bad(f"pcie.ido owns no bits of field {field!r}")
    for what in ("original", "new"):
        value = _int(getattr(step, what), what)
        if value & ~mask:
            raise _Bad(f"{what} {value:#x} has bits outside mask {mask:#x}")
