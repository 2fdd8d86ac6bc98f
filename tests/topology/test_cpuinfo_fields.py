"""cpuinfo's keys are found by a pattern the regex engine can jump through:
the same fields as the MULTILINE "^...$" reading it replaced, on any text and on every real
cpuinfo in hwloc's recordings (x86, arm, arm64, ppc, s390, ia64)."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.host.test_text_span import EDGES, OneFile
from xputune.host.view import text_span
from xputune.topology.numa import cpuinfo_fields

HWLOC = Path(__file__).resolve().parents[1] / "data" / "hwloc"
KEYS = ("processor", "vendor_id", "vendor", "model name", "Processor", "cpu", "physical id")
REFERENCE = re.compile(
    r"^(processor|vendor_id|vendor|model name|Processor|cpu|CPU implementer|physical id)"
    r"[ \t]*(\d*)[ \t]*:(.*)$",
    re.M,
)

line = st.one_of(
    st.builds(
        lambda k, sp, n, sp2, v: f"{k}{sp}{n}{sp2}:{v}",
        st.sampled_from([*KEYS, "CPU implementer", "flags", "bogomips", "Processor 0"]),
        st.sampled_from(["", " ", "\t", " \t "]),
        st.sampled_from(["", "0", "17"]),
        st.sampled_from(["", " ", "\t"]),
        st.text(st.characters(blacklist_characters="\n"), max_size=12),
    ),
    st.text(max_size=20),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(line, max_size=12), st.sampled_from(["\n", "\r\n", "\n\n"]), st.booleans())
def test_any_text_reads_as_the_multiline_pattern(lines, end, trailing) -> None:
    text = end.join(lines) + (end if trailing else "")
    assert cpuinfo_fields(text) == REFERENCE.findall(text)


def _cpuinfos() -> list[tuple[str, str]]:
    found = []
    for archive in sorted(HWLOC.glob("*.tar.bz2")):
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.endswith("/proc/cpuinfo"):
                    data = tar.extractfile(member).read().decode("utf-8", "replace")
                    found.append((archive.name.split(".")[0], data))
    return found


@pytest.mark.parametrize(("name", "text"), _cpuinfos(), ids=lambda v: v if len(v) < 60 else "")
def test_every_real_cpuinfo_reads_as_before(name: str, text: str) -> None:
    assert cpuinfo_fields(text) == REFERENCE.findall(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(line, max_size=8), EDGES, EDGES)
def test_a_span_reads_as_the_text_read_text_gives(lines, head, tail) -> None:
    """The probe decodes cpuinfo once and reads the span read_text would keep: no copy."""
    text = head + "\n".join(lines) + tail
    assume(all(not 0xD800 <= ord(c) <= 0xDFFF for c in text))  # a file decodes to no surrogate
    kept = OneFile(text.encode()).read_text("/proc/cpuinfo")
    assert cpuinfo_fields(text, *text_span(text)) == cpuinfo_fields(kept)
