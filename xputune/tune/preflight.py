"""Checks that must pass before an apply or rollback changes anything.

Failing halfway is the worst outcome for an operator, so everything knowable up front is checked
up front: the root must be writable, the live host needs root (euid 0), and kernel lockdown
(integrity or confidentiality) makes the kernel refuse PCI config-space writes from user space.

Under --root DIR the euid check is skipped (the fixture is ordinary files) but lockdown is read
from the fixture's /sys/kernel/security/lockdown, so the refusal itself can be tested.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from xputune.errors import PermissionRequired
from xputune.host import HostView

LOCKDOWN = "/sys/kernel/security/lockdown"
#: Lockdown levels under which the kernel rejects config-space writes (LOCKDOWN_PCI_ACCESS).
BLOCKING_LOCKDOWN = ("integrity", "confidentiality")

#: The effective user id; a module attribute so tests can stand in for a non-root user.
geteuid: Callable[[], int] = os.geteuid


def lockdown_level(view: HostView) -> str:
    """The bracketed lockdown level; "none" when the lockdown LSM is absent."""
    text = view.read_optional(LOCKDOWN)
    if not text:
        return "none"
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return "none"


def require_writable(view: HostView) -> None:
    """A recording is read-only: its error names the commands that make a copy to change."""
    if not view.writable():
        raise view.read_only_error()


def require_root(view: HostView, action: str) -> None:
    """The live host needs euid 0; a fixture root does not (its files are ordinary files)."""
    if view.live and geteuid() != 0:
        raise PermissionRequired(
            f"{action} changes kernel settings and needs root: run it with sudo "
            "(nothing was changed; --dry-run and `xputune check` work without root)"
        )


def require_pci_writes(view: HostView) -> None:
    """Refuse config-space writes under kernel lockdown, before anything changes."""
    level = lockdown_level(view)
    if level in BLOCKING_LOCKDOWN:
        raise PermissionRequired(
            f"kernel lockdown is '{level}' ({LOCKDOWN}): the kernel refuses PCI config-space "
            "writes, so PCIe ordering (pcie.ido) cannot be changed at runtime. Nothing was "
            "changed. Leave it out with --skip pcie.ido, or boot with lockdown=none "
            "(Secure Boot enables lockdown on many distributions)"
        )
