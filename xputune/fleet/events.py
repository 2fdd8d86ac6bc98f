"""What wakes `xputune watch`: udev events on the live host, a timer under --root.

A card loses its PCIe ordering bits when it is reset, hot-plugged, or its driver rebinds; the
kernel announces each of these as a udev event of the pci subsystem (add, bind, change) for
the function concerned. On the live host `UdevSource` listens to them with pyudev and wakes the
watch for events of a card, of a port on a card's path, or of a function below such a port (a
card hot-plugged into a slot shows up there first). THP and NUMA balancing raise no event, so
the live source also wakes every `interval` seconds. Under --root there is no kernel behind
the tree: `PollSource` wakes every `interval` seconds, and tests drive the watch by editing the
tree.

pyudev is imported only by `UdevSource` (the live path); without it the watch says which extra
to install in one line. Both sources wait with select() on their descriptors and on the wake
pipe of a `Stopper`, so SIGTERM ends a wait at once instead of after the interval.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Protocol

from xputune.errors import XputuneError
from xputune.topology.model import Topology

#: udev actions of the pci subsystem after which a function's config space may be reset.
ACTIONS = ("add", "bind", "change")
#: After a first event, more of the same reset (remove, add, bind) arrive within this time;
#: they are gathered into one pass.
SETTLE = 0.2


@dataclass(frozen=True)
class Event:
    """Why a pass runs: a udev action on a watched function, a timer tick, the start."""

    kind: str  # "start", "poll", "interval", or a udev action ("add", "bind", "change")
    bdf: str | None = None
    what: str = ""  # the watched function it concerns, for the log ("card xpu1", ...)


@dataclass
class Watched:
    """The functions whose udev events matter: every card and every port on a card's path.

    `ports` maps a bus id to what it is; `paths` maps the sysfs device path of a bridge port
    (as udev writes DEVPATH: /devices/pci0000:20/0000:20:03.1) to its bus id, so a function
    that appears below it (a new card in that slot) is recognised too.
    """

    ports: dict[str, str] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, topology: Topology) -> Watched:
        """The ports pcie.ido owns (the same list and names as `check`'s rows)."""
        from xputune.tune.knobs.pcie_ido import ido_ports

        out = cls()
        for port in ido_ports(topology):
            out.ports[port.bdf] = port.label[len(port.bdf) :].strip()
            if not port.role.startswith("card"):
                out.paths[_devpath(port.config_path.rsplit("/", 1)[0])] = port.bdf
        return out

    def match(
        self, action: str | None, subsystem: str | None, name: str, devpath: str
    ) -> Event | None:
        """The event for a udev action on function `name` at `devpath`, or None to ignore."""
        if subsystem != "pci" or action not in ACTIONS:
            return None
        if name in self.ports:
            return Event(action, name, self.ports[name])
        parent = _devpath(devpath)
        while "/" in parent.strip("/"):
            parent = parent.rsplit("/", 1)[0]
            if parent in self.paths:
                bdf = self.paths[parent]
                return Event(action, name, f"below {bdf} {self.ports.get(bdf, '')}".rstrip())
        return None


def _devpath(sysfs_path: str) -> str:
    """A function's path as udev's DEVPATH writes it (relative to /sys, leading slash)."""
    path = "/" + sysfs_path.strip("/")
    return path[len("/sys") :] if path.startswith("/sys/") else path


def event_of(device: Any, watched: Watched, action: str | None = None) -> Event | None:
    """The event for a pyudev Device (its own action unless `action` is given), or None."""
    return watched.match(
        action if action is not None else device.action,
        device.subsystem,
        device.sys_name,
        device.device_path,
    )


class Stopper:
    """A stop request that wakes a select(): set by SIGTERM/SIGINT, read between passes.

    The handler only sets a flag and writes one byte to a pipe, so a pass in progress runs to
    its end (its transaction is never cut in half) and a wait returns at once.
    """

    def __init__(self) -> None:
        self.signal: str | None = None
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._previous: dict[int, Any] = {}

    @property
    def fd(self) -> int:
        return self._read

    @property
    def stopped(self) -> bool:
        return self.signal is not None

    def stop(self, why: str = "stop") -> None:
        self.signal = self.signal or why
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._write, b"x")

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.stop(signal.Signals(signum).name)

    def install(self) -> None:
        """Handle SIGTERM and SIGINT (main thread only); `close` puts the old handlers back."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handler)

    def close(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)


class EventSource(Protocol):
    """Blocks until there is a reason for a pass (events), a stop, or the timeout."""

    name: str

    def watch(self, watched: Watched) -> None:
        """Which functions matter from now on (after each pass: a hot-plug changes them)."""

    def wait(self, timeout: float, stopper: Stopper) -> list[Event]:
        """Events to act on; [] when woken by a stop."""

    def close(self) -> None: ...


def _readable(fds: list[int], timeout: float) -> list[int]:
    """The descriptors readable within `timeout` (select retries itself after a signal)."""
    ready, _, _ = select.select(fds, [], [], max(timeout, 0.0))
    return ready


class PollSource:
    """Under --root: a tick every `interval` seconds; nothing else can happen to a tree."""

    name = "poll"

    def watch(self, watched: Watched) -> None:
        pass

    def wait(self, timeout: float, stopper: Stopper) -> list[Event]:
        if stopper.stopped or _readable([stopper.fd], timeout):
            return []
        return [Event("poll")]

    def close(self) -> None:
        pass


class UdevSource:
    """On the live host: pci udev events for watched functions, and a tick every interval."""

    name = "udev"

    def __init__(self) -> None:
        try:
            import pyudev
        except ImportError:
            raise XputuneError(
                "xputune watch on the live host listens to udev and needs pyudev: "
                "pip install 'xputune[udev]' (or run it with --root, which polls)"
            ) from None
        try:
            self._monitor = pyudev.Monitor.from_netlink(pyudev.Context())
            self._monitor.filter_by("pci")
            self._monitor.start()
        except (OSError, ImportError) as exc:  # libudev missing, netlink refused
            raise XputuneError(f"cannot listen to udev events: {exc}") from None
        self._watched = Watched()

    def watch(self, watched: Watched) -> None:
        self._watched = watched

    def _drain(self) -> list[Event]:
        out = []
        while (device := self._monitor.poll(timeout=0)) is not None:
            event = event_of(device, self._watched)
            if event is not None:
                out.append(event)
        return out

    def wait(self, timeout: float, stopper: Stopper) -> list[Event]:
        deadline = time.monotonic() + timeout
        fds = [self._monitor.fileno(), stopper.fd]
        while True:
            left = deadline - time.monotonic()
            if stopper.stopped:
                return []
            if left <= 0:
                return [Event("interval")]
            ready = _readable(fds, left)
            if stopper.fd in ready:
                return []
            if not ready:
                continue
            events = self._drain()
            if not events:
                continue  # another function's event: keep waiting for the same deadline
            time.sleep(SETTLE)  # the rest of the same reset (remove, add, bind)
            return events + self._drain()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._monitor.stop()
