"""What the vendor tools print, saved inside a recording and read back from it.

`xputune record` on a live host runs, for each vendor whose cards it found, the tool's
`topo -m` (the link matrix: NV#, XL) and `-q -x` (bus ids by the tool's index, which pins
the matrix to cards by bus id rather than by order), and stores their output verbatim at a
fixed path outside sys/ and proc/: <top>/xputune/vendor/<tool>-topo-m.txt and
<tool>-q-x.xml. `probe` of a recording reads them back through the host view. Nothing is ever
run for a recording: a tool on this machine describes this machine. Recording an extracted
recording (`record --root DIR`) carries its saved outputs over.

An output that does not parse as the form asked for (Intel's unrelated xpu-smi, an error text
on stdout) is not saved, and the note says why. With scrubbing on (the default), serials,
UUIDs, board ids and process names in the `-q -x` document are replaced.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterable

from xputune.errors import HostError, XputuneError
from xputune.tuples import NamedTuple

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: start-up time
if TYPE_CHECKING:
    from xputune.host import HostView
    from xputune.topology.model import Topology

VENDOR_DIR = "/xputune/vendor"
NVIDIA_SMI_PATHS = ("/usr/bin/nvidia-smi", "/usr/local/nvidia/bin/nvidia-smi")
TIMEOUT_S = 20.0
MAX_SAVED = 16 << 20  # the host view's read cap: a larger output could not be read back


class Output(NamedTuple):
    vendor: str  # Card.vendor
    tool: str
    args: tuple[str, ...]
    name: str  # file name under VENDOR_DIR
    form: str  # the xpusmi form it must parse as

    @property
    def path(self) -> str:
        return f"{VENDOR_DIR}/{self.name}"

    @property
    def command(self) -> str:
        return " ".join((self.tool, *self.args))


OUTPUTS = (
    Output("nvidia", "nvidia-smi", ("topo", "-m"), "nvidia-smi-topo-m.txt", "topo"),
    Output("nvidia", "nvidia-smi", ("-q", "-x"), "nvidia-smi-q-x.xml", "xml"),
    Output("kunlunxin", "xpu-smi", ("topo", "-m"), "xpu-smi-topo-m.txt", "topo"),
    Output("kunlunxin", "xpu-smi", ("-q", "-x"), "xpu-smi-q-x.xml", "xml"),
)
#: Compiled on first use (re caches it): only `record` scrubs, and a probe's start-up need not.
_PRIVATE = rb"<(serial|uuid|board_id|gpu_serial|process_name)>[^<]*</\1>"


def outputs_for(vendors: Iterable[str]) -> tuple[Output, ...]:
    wanted = set(vendors)
    return tuple(o for o in OUTPUTS if o.vendor in wanted)


def scrub_xml(data: bytes) -> bytes:
    """`data` with the text of identifying elements replaced by "scrubbed"."""
    return re.sub(_PRIVATE, rb"<\1>scrubbed</\1>", data)


def find_tool(tool: str) -> str | None:
    """The tool on PATH, else at a usual install path; None when absent."""
    if tool == "xpu-smi":
        from xputune.devices.xpusmi.run import find_tool as find_xpu_smi

        return find_xpu_smi()
    import shutil  # not at module level: the probe imports this module, record runs tools

    found = shutil.which(tool)
    if found:
        return found
    return next((p for p in NVIDIA_SMI_PATHS if os.access(p, os.X_OK)), None)


def _check(output: Output, data: bytes) -> None:
    """SmiError unless `data` reads as the form `output` asks for."""
    from xputune.devices.xpusmi import parse_bytes, parse_file
    from xputune.devices.xpusmi.model import SmiError

    report = parse_file(io.BytesIO(data)) if output.form == "xml" else parse_bytes(data)
    if report.form != output.form:
        raise SmiError(f"output reads as the {report.tool} form, not {output.command}")


def run_output(output: Output, timeout: float) -> tuple[bytes | None, str | None]:
    """(the output, None), or (None, a note saying why nothing is saved)."""
    tool = find_tool(output.tool)
    if tool is None:
        return None, f"{output.tool} not found: {output.command} not saved"
    from xputune.devices.xpusmi.run import run_bytes

    try:
        data = run_bytes(tool, output.args, timeout)
        if len(data) > MAX_SAVED:
            return None, f"{output.command}: output over {MAX_SAVED >> 20} MiB, not saved"
        _check(output, data)
    except XputuneError as exc:
        return None, f"{exc}; {output.command} not saved"
    return data, None


def capture(
    view: HostView, topo: Topology, *, scrub: bool = True, timeout: float | None = None
) -> tuple[dict[str, bytes], list[str]]:
    """Host path -> bytes of the vendor outputs to store in a recording of `view`, and notes.

    Live host: run the tools of the vendors `topo` has cards of. A recorded or extracted host:
    its saved outputs, as they are (they describe that host; this machine's tools do not).
    """
    timeout = TIMEOUT_S if timeout is None else timeout
    wanted = outputs_for(c.vendor for c in topo.cards)
    files: dict[str, bytes] = {}
    notes: list[str] = []
    for output in wanted:
        if view.live:
            data, note = run_output(output, timeout)
            if note:
                notes.append(note)
        else:
            try:
                data = read_saved(view, output.path)
            except HostError as exc:
                notes.append(f"{exc}; not carried over")
                continue
        if data is None:
            continue
        files[output.path] = scrub_xml(data) if scrub and output.form == "xml" else data
    return files, notes


def read_saved(view: HostView, path: str) -> bytes | None:
    """A saved output in a recording, None when it holds none; HostError when unreadable."""
    try:
        return view.read_bytes(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise HostError(f"{view.label}: cannot read {path}: {exc.strerror or exc}") from None
