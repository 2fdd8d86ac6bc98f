"""Discovery's reader: odd values become unknown with one warning each; strict mode stops."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from xputune.errors import HostDataError, RootEscapeError
from xputune.host.reader import Reader
from xputune.host.values import parse_int
from xputune.host.view import DirView


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "sys").mkdir()
    (tmp_path / "sys/good").write_text("7\n")
    (tmp_path / "sys/odd").write_text("banana\n")
    (tmp_path / "sys/adir").mkdir()
    os.symlink("../../../../etc", tmp_path / "sys/escape")
    return tmp_path


def test_good_value(tree: Path) -> None:
    reader = Reader(DirView(str(tree)))
    assert reader.value("/sys/good", parse_int) == 7
    assert reader.warnings == []


def test_odd_value_is_unknown_with_one_warning_naming_path_content_and_expectation(
    tree: Path,
) -> None:
    reader = Reader(DirView(str(tree)))
    assert reader.value("/sys/odd", parse_int) is None
    (warning,) = reader.warnings
    assert warning.startswith("/sys/odd: read 'banana'")
    assert "expected an integer" in warning and "unknown" in warning


def test_missing_is_quiet_unless_the_kernel_always_provides_it(tree: Path) -> None:
    reader = Reader(DirView(str(tree)))
    assert reader.value("/sys/absent", parse_int) is None
    assert reader.warnings == []
    assert reader.value("/sys/absent", parse_int, required=True) is None
    assert reader.warnings == [
        "/sys/absent: missing, expected the kernel to provide it; taken as unknown"
    ]


def test_unreadable_is_a_warning(tree: Path) -> None:
    reader = Reader(DirView(str(tree)))
    assert reader.text("/sys/adir") is None
    (warning,) = reader.warnings
    assert warning.startswith("/sys/adir: unreadable (") and "\n" not in warning


def test_root_escape_stays_fatal(tree: Path) -> None:
    reader = Reader(DirView(str(tree)))
    with pytest.raises(RootEscapeError):
        reader.value("/sys/escape/passwd", parse_int)


def test_strict_stops_at_the_first_oddity(tree: Path) -> None:
    reader = Reader(DirView(str(tree)), strict=True)
    with pytest.raises(HostDataError, match="banana"):
        reader.value("/sys/odd", parse_int)
    with pytest.raises(HostDataError, match="missing"):
        reader.value("/sys/absent", parse_int, required=True)
