"""The on-demand builder: cache keys, readable failures, checked loading, CUDA under nvcc.

(Libraries planted by another uid: tests/host/test_usercache_attacks.py.)
"""

from __future__ import annotations

import ctypes
import os
import stat
from pathlib import Path

import pytest

from xputune.errors import UnsupportedError
from xputune.host import usercache
from xputune.kernels import build
from xputune.kernels.backends import cuda


@pytest.fixture
def sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    monkeypatch.setattr(build, "source_dir", lambda: src)
    monkeypatch.setattr(build, "_loaded", {})
    monkeypatch.setenv("XPUTUNE_CACHE_DIR", str(tmp_path / "cache"))
    return src


@pytest.fixture
def one(sources: Path) -> Path:
    """A built one-function library (v() == 1) in the cache."""
    (sources / "a.c").write_text("int v(void) { return 1; }\n")
    return build.build("t", ["a.c"])


def test_cache_key_follows_source_and_headers(sources: Path) -> None:
    (sources / "a.h").write_text("#define V 1\n")
    (sources / "a.c").write_text('#include "a.h"\nint v(void) { return V; }\n')
    first = build.build("t", ["a.c"])
    assert build.build("t", ["a.c"]) == first
    assert ctypes.CDLL(str(first)).v() == 1
    (sources / "a.h").write_text("#define V 2\n")
    second = build.build("t", ["a.c"])
    assert second != first and ctypes.CDLL(str(second)).v() == 2


def test_compiler_error_is_one_readable_line(sources: Path) -> None:
    (sources / "bad.c").write_text("int f(void) { return undefined_name; }\n")
    with pytest.raises(UnsupportedError, match=r"building bad failed: .*error"):
        build.build("bad", ["bad.c"])
    assert not list((sources.parent / "cache").glob("**/.bad-*"))  # no temp file left


def test_missing_compiler_is_reported(sources: Path) -> None:
    (sources / "a.c").write_text("int v(void) { return 1; }\n")
    with pytest.raises(UnsupportedError, match="cannot run"):
        build.build("t", ["a.c"], cc="/nonexistent/cc")


def test_a_library_is_loaded_through_the_descriptor_it_was_checked_on(one: Path) -> None:
    lib = build.load("t", ["a.c"])
    assert lib.v() == 1
    assert lib._name.startswith("/proc/self/fd/")
    assert os.path.samestat(os.stat(lib._name), os.stat(one))  # the very inode checked
    assert stat.S_IMODE(one.stat().st_mode) == 0o700
    assert stat.S_IMODE(one.parent.stat().st_mode) == 0o700


def test_the_library_is_private_whatever_the_umask(sources: Path) -> None:
    (sources / "a.c").write_text("int v(void) { return 1; }\n")
    old = os.umask(0)
    try:
        built = build.build("t", ["a.c"])
    finally:
        os.umask(old)
    assert stat.S_IMODE(built.stat().st_mode) == 0o700
    assert stat.S_IMODE(built.parent.stat().st_mode) == 0o700
    assert build.load_library(built).v() == 1


@pytest.mark.parametrize("fault", ["group-writable", "hard-linked", "symlink", "directory"])
def test_a_library_that_fails_its_check_is_rebuilt(
    one: Path, capsys: pytest.CaptureFixture[str], fault: str
) -> None:
    if fault == "group-writable":
        one.chmod(0o770)
    elif fault == "hard-linked":
        os.link(one, one.with_name("other"))
    elif fault == "symlink":
        one.rename(one.with_name("elsewhere.so"))
        one.symlink_to("elsewhere.so")
    else:
        one.unlink()
        one.mkdir()
    capsys.readouterr()
    if fault == "directory":  # cannot be replaced: one readable line, nothing loaded
        with pytest.raises(UnsupportedError, match=r"building t failed: .*libt-"):
            build.load("t", ["a.c"])
        return
    lib = build.load("t", ["a.c"])
    assert lib.v() == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"cache entry {one} refused" in err[0], err
    st = one.lstat()
    assert stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and stat.S_IMODE(st.st_mode) == 0o700


def test_force_rebuilds_in_place(one: Path) -> None:
    before = one.stat().st_ino
    assert build.build("t", ["a.c"], force=True) == one
    assert one.stat().st_ino != before
    assert not [p for p in one.parent.iterdir() if p.name.startswith(".")]  # no temp left


def test_load_library_refuses_what_it_cannot_check(one: Path, tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    copy = loose / one.name
    copy.write_bytes(one.read_bytes())
    with pytest.raises(UnsupportedError, match="not loaded"):
        build.load_library(copy)
    with pytest.raises(UnsupportedError, match="not loaded"):
        build.load_library(one.with_name("libmissing.so"))


def test_a_refused_cache_builds_in_a_private_folder(
    sources: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("XPUTUNE_CACHE_DIR", str(shared / "cache"))
    (sources / "a.c").write_text("int v(void) { return 1; }\n")
    lib = build.load("t", ["a.c"])
    assert lib.v() == 1
    assert not (shared / "cache").exists()
    assert usercache.folder("kernels") is None
    assert "is writable by others (mode 0777)" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(cuda.cuda_toolkit() is None, reason="nvcc not installed")
def test_cuda_source_compiles_with_nvcc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XPUTUNE_CACHE_DIR", str(tmp_path))
    lib_path = cuda.build_cuda(force=True)
    lib = build.load_library(lib_path)  # static cudart: loads without a GPU or driver
    for symbol in ("xt_cuda_copy", "xt_cuda_copy_items", "xt_cuda_has_batch"):
        assert hasattr(lib, symbol)
    assert lib.xt_cuda_abi_version() == 1
