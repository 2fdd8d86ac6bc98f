"""The one reader for every value format the kernel writes under /sys and /proc.

topology/, tune/ and hicache/ all parse these through here, so a quirk learned once (a trailing
NUL from an old kernel, a 32-bit all-ones "unknown") is handled everywhere. Every parser is
liberal about what real kernels write and raises HostDataError, naming the file, the text and
what was expected, for anything else. Whether that error stops a command or becomes an unknown
value with a warning is the caller's policy, not the parser's (see host/facts.py).
"""

from __future__ import annotations

import re

from xputune.errors import HostDataError
from xputune.tuples import NamedTuple

#: What surrounds a value: whitespace, and the NUL that older kernels left after the newline.
_PADDING = " \t\r\n\0"
_LINK_SPEED = re.compile(r"^(\d+(?:\.\d+)?) ?GT/s(?: PCIe)?$")
_BRACKETED = re.compile(r"\[([^\]\s]+)\]")
#: A 32-bit "-1": what the kernel prints for SPEED_UNKNOWN through an unsigned format.
_U32_UNKNOWN = 0xFFFFFFFF
_SIZE_SUFFIX = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def clean(text: str) -> str:
    """The value without the whitespace and NUL bytes around it."""
    return text.strip(_PADDING)


# -- numbers ------------------------------------------------------------------------------------
def parse_int(text: str, path: str, minimum: int | None = None) -> int:
    value_text = clean(text)
    try:
        value = int(value_text)
    except ValueError:
        raise HostDataError(path, text, "expected an integer") from None
    if minimum is not None and value < minimum:
        raise HostDataError(path, text, f"expected an integer >= {minimum}")
    return value


def parse_hex(text: str, path: str, bits: int = 16) -> int:
    """A sysfs hex ID like "0x1d22" (the 0x is optional: some tools record bare hex)."""
    value_text = clean(text)
    digits = value_text[2:] if value_text[:2].lower() == "0x" else value_text
    if not digits or any(c not in "0123456789abcdefABCDEF" for c in digits):
        raise HostDataError(path, text, "expected a hex number like 0x1d22")
    value = int(digits, 16)
    if value >= 1 << bits:
        raise HostDataError(path, text, f"expected a hex number of at most {bits} bits")
    return value


def parse_numa_node(text: str, path: str) -> int | None:
    """A device's node; -1 is the kernel's "no affinity known", other negatives are garbage."""
    value = parse_int(text, path, minimum=-1)
    return None if value == -1 else value


def parse_distances(text: str, path: str) -> tuple[int, ...]:
    """A node's distance row ("10 16 32 32"), one column per node in the kernel's order."""
    fields = clean(text).split()
    if not fields:
        raise HostDataError(path, text, "expected a row of distances like 10 21")
    return tuple(parse_int(field, path, minimum=0) for field in fields)


def parse_net_speed(text: str, path: str) -> int | None:
    """A netdev's speed in Mb/s; None for a down or unknown link.

    A down link or an IPoIB port reads "" or "-1" (SPEED_UNKNOWN), and older kernels print
    the same -1 unsigned, as 4294967295.
    """
    value_text = clean(text)
    if not value_text:
        return None
    value = parse_int(value_text, path)
    return None if value <= 0 or value == _U32_UNKNOWN else value


# -- PCIe links ---------------------------------------------------------------------------------
def parse_link_speed(text: str, path: str) -> float | None:
    """ "32.0 GT/s PCIe" (new kernels) or "8 GT/s" (old); "Unknown" when the link is down."""
    value_text = clean(text)
    if value_text.lower().startswith("unknown"):
        return None
    match = _LINK_SPEED.match(value_text)
    speed = float(match.group(1)) if match and len(match.group(1)) < 16 else None
    if speed is None or not 0 < speed <= 1000:  # PCIe 7 runs 128 GT/s; 5000 digits is no speed
        raise HostDataError(path, text, 'expected a link speed like "32.0 GT/s PCIe"')
    return speed


def parse_link_width(text: str, path: str) -> int | None:
    """Lanes; 0 (a down link, or a port without link registers) means unknown."""
    value_text = clean(text)
    if value_text.lower().startswith("x"):  # seen in some tools' recordings: "x16"
        value_text = value_text[1:]
    width = parse_int(value_text, path, minimum=0)
    return width or None


# -- CPU sets -----------------------------------------------------------------------------------
def parse_cpulist(text: str, path: str = "cpulist") -> tuple[int, ...]:
    """CPUs named by a cpulist ("0-15,128-143"), sorted and unique; "" (no CPUs) gives ()."""
    value_text = clean(text)
    if not value_text:
        return ()
    cpus: set[int] = set()
    for chunk in value_text.split(","):
        lo, sep, hi = chunk.strip().partition("-")
        try:
            first = int(lo)
            last = int(hi) if sep else first
        except ValueError:
            raise HostDataError(path, text, "expected a cpulist like 0-15,128-143") from None
        if first < 0 or last < first:
            raise HostDataError(path, text, "expected a cpulist like 0-15,128-143")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def parse_cpumask(text: str, path: str = "cpumap") -> tuple[int, ...]:
    """CPUs set in a kernel bitmap ("%*pb": 32-bit hex words, most significant first)."""
    digits = clean(text).replace(",", "")
    if not digits:
        return ()
    if any(c not in "0123456789abcdefABCDEF" for c in digits):
        raise HostDataError(path, text, "expected a CPU mask like 00000000,0000ffff")
    mask = int(digits, 16)
    return tuple(bit for bit in range(mask.bit_length()) if mask >> bit & 1)


def format_cpulist(cpus: tuple[int, ...] | list[int] | set[int]) -> str:
    """The shortest cpulist for a set of CPUs, as the kernel prints it."""
    ordered = sorted(set(cpus))
    ranges: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        ranges.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(ranges)


# -- selectors ("always [madvise] never") -------------------------------------------------------
def current_choice(text: str, path: str) -> str:
    """The bracketed word of a selector file."""
    found = _BRACKETED.findall(text)
    if len(found) != 1:
        raise HostDataError(path, text, "expected one [bracketed] current choice")
    return found[0]


def rebracket(text: str, choice: str, path: str) -> str:
    """The selector text with `choice` bracketed instead of the current one, other bytes kept."""
    words = re.split(r"(\s+)", text)
    bare = [w.strip("[]") for w in words]
    if choice not in bare:
        raise HostDataError(path, text, f"expected a list of choices that includes {choice!r}")
    out = []
    for word, plain in zip(words, bare, strict=True):
        if not plain or plain.isspace():
            out.append(word)
        else:
            out.append(f"[{plain}]" if plain == choice else plain)
    return "".join(out)


# -- meminfo ------------------------------------------------------------------------------------
def meminfo_bytes(text: str, key: str, path: str) -> int:
    """One size of /proc/meminfo ("MemTotal: 1 kB") or a node's ("Node 0 MemTotal: 1 kB")."""
    label = f"{key}:"
    for line in text.splitlines():
        fields = line.split()
        if label not in fields:
            continue
        at = fields.index(label)
        rest = fields[at + 1 :]
        if not rest or rest[1:] not in ([], ["kB"]):
            raise HostDataError(path, line, f"expected '{key}: <number> kB'")
        return parse_int(rest[0], path, minimum=0) * (1024 if rest[1:] else 1)
    raise HostDataError(path, None, f"expected a {key} line")


# -- mountinfo ----------------------------------------------------------------------------------
class Mount(NamedTuple):
    """One line of /proc/self/mountinfo."""

    line: int  # index of the line in the file, so a fixture can rewrite it in place
    mount_point: str
    fstype: str
    mount_options: tuple[str, ...]
    super_options: tuple[str, ...]

    def option(self, name: str) -> str | None:
        """A NAME=VALUE option's value (super options first, as the kernel applies them)."""
        for opt in self.super_options + self.mount_options:
            key, sep, value = opt.partition("=")
            if key == name and sep:
                return value
        return None

    @property
    def huge(self) -> str:
        """tmpfs huge= mode; the kernel omits the option when it is never."""
        return self.option("huge") or "never"


def unescape_octal(field: str) -> str:
    """The kernel's seq_file path escapes (mountinfo, numa_maps' file=: space, tab, newline
    and backslash as octal, \\040) back to characters."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        octal = field[i + 1 : i + 4]
        if field[i] == "\\" and len(octal) == 3 and all(c in "01234567" for c in octal):
            out.append(chr(int(octal, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mount(line: str, index: int, path: str) -> Mount:
    """One mountinfo line: ID PARENT MAJ:MIN ROOT POINT OPTS [TAGS...] - FSTYPE SOURCE SUPER."""
    fields = line.split()
    try:
        sep = fields.index("-", 6)
        return Mount(
            index,
            unescape_octal(fields[4]),
            fields[sep + 1],
            tuple(fields[5].split(",")),
            tuple(fields[sep + 3].split(",")),
        )
    except (ValueError, IndexError):
        raise HostDataError(path, line, "expected a mountinfo line") from None


def find_mount(text: str, mount_point: str, path: str) -> Mount | None:
    """The visible mount at `mount_point`: the last one listed (/dev/shm can be mounted twice).

    Lines about other mount points are not judged, so one odd line elsewhere costs nothing.
    """
    found = None
    for index, line in enumerate(text.splitlines()):
        fields = line.split(maxsplit=5)
        if len(fields) > 4 and unescape_octal(fields[4]) == mount_point:
            found = parse_mount(line, index, path)
    return found


def parse_size(text: str, path: str) -> int | None:
    """A tmpfs size= option ("64g", "1048576k", bytes); None for a share of RAM ("50%")."""
    value_text = clean(text).lower()
    if value_text.endswith("%"):
        return None
    scale = _SIZE_SUFFIX.get(value_text[-1:], 1)
    digits = value_text[:-1] if value_text[-1:] in _SIZE_SUFFIX else value_text
    if not digits.isdecimal():
        raise HostDataError(path, text, "expected a size like 64g, 1048576k or 50%")
    return int(digits) * scale
