"""Noise into the smi parsers: each input parses or raises SmiParseError, nothing else.

A traceback from `xputune smi --input` would be a bug (docs/architecture.md: user errors are one
line), so the property is checked on random text, random bytes, and samples cut, spliced and
garbled.
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.devices.conftest import DATA
from tests.devices.test_real_outputs import REAL
from xputune.devices.xpusmi import PARSERS, SmiParseError, SmiReport, parse, parse_bytes

SAMPLES = sorted(
    p.read_text() for d in (DATA, REAL) for p in d.iterdir() if p.suffix in (".txt", ".xml")
)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Characters the parsers treat specially, so noise hits the interesting paths often.
ALPHABET = st.sampled_from(list(' \t\n:"<>/=()%,.-_XxPUGSYNODEHBI0123456789abcdef\x1b[m&;!'))


def holds(run, *args: object) -> None:
    try:
        report = run(*args)
    except SmiParseError as exc:
        assert "\n" not in str(exc)
    else:
        assert isinstance(report, SmiReport)
        assert all("\n" not in w for w in report.warnings)
        report.as_json()


@FUZZ
@given(st.text(ALPHABET, max_size=400) | st.text(max_size=200))
def test_random_text(text: str) -> None:
    holds(parse, text)


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes(data: bytes) -> None:
    holds(parse_bytes, data)


@FUZZ
@given(st.sampled_from(sorted(PARSERS)), st.text(ALPHABET, max_size=300))
def test_each_parser_forced(form: str, text: str) -> None:
    holds(parse, text, form)


@FUZZ
@given(
    st.sampled_from(SAMPLES),
    st.lists(
        st.tuples(st.floats(0, 1), st.integers(0, 40), st.text(ALPHABET, max_size=8)),
        max_size=4,
    ),
    st.floats(0, 1),
)
def test_samples_garbled_and_cut(text: str, edits: list, keep: float) -> None:
    for where, drop, insert in edits:
        at = int(where * len(text))
        text = text[:at] + insert + text[at + drop :]
    holds(parse, text[: int(keep * len(text)) or len(text)])


def colour(text: str) -> str:
    """What a terminal-attached run writes: bold keys, green numbers, resets everywhere."""
    return re.sub(r"\b(\d+)\b", "\x1b[32m\\1\x1b[0m", text)


@FUZZ
@given(st.sampled_from(SAMPLES), st.sampled_from(["ansi", "crlf", "tabs", "both"]))
def test_terminal_and_windows_noise_reads_the_same(text: str, noise: str) -> None:
    plain = parse(text)
    noisy = text
    if noise in ("ansi", "both"):
        noisy = colour(noisy)
    if noise in ("crlf", "both"):
        noisy = noisy.replace("\n", "\r\n")
    if noise == "tabs" and not text.lstrip().startswith("<"):
        noisy = noisy.replace("        ", "\t")
    assert parse(noisy).cards == plain.cards
