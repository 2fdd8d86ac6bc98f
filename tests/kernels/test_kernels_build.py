"""The on-demand builder: cache keys, readable failures, checked loading, CUDA under nvcc;
native.py's table: a library built with the wheel is used when it matches the sources.

(Libraries planted by another uid: tests/host/test_usercache_attacks.py; the wheel itself, built
and run with no compiler: tests/kernels/test_wheel.py.)
"""

from __future__ import annotations

import ctypes
import os
import stat
from pathlib import Path

import pytest

from xputune.errors import UnsupportedError
from xputune.host import usercache
from xputune.kernels import build, native


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
@pytest.mark.skipif(native.cuda_toolkit() is None, reason="nvcc not installed")
def test_cuda_source_compiles_with_nvcc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XPUTUNE_CACHE_DIR", str(tmp_path))
    lib_path = build.build_native("xt_cuda", force=True)
    lib = build.load_library(lib_path)  # static cudart: loads without a GPU or driver
    for symbol in ("xt_cuda_copy", "xt_cuda_copy_items", "xt_cuda_has_batch"):
        assert hasattr(lib, symbol)
    assert lib.xt_cuda_abi_version() == 1


# -- native.py's table: built with the wheel, else on first use --------------------------------


@pytest.fixture
def table(sources: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A table of one WHEEL library t (a.c: v() == 1); returns the package's library folder."""
    (sources / "a.c").write_text("int v(void) { return 1; }\n")
    lib = native.Library("t", "test", ("a.c",), native.WHEEL)
    monkeypatch.setattr(native, "LIBRARIES", {"t": lib})
    monkeypatch.setattr(native, "PACKAGED_DIR", tmp_path / "libs")
    (tmp_path / "libs").mkdir()
    return tmp_path / "libs"


def _package(libs: Path, sources: Path, body: str) -> Path:
    """What setup.py installs: the library under the name native.packaged_name gives it."""
    (sources / "b.c").write_text(body)
    built = build.build("b", ["b.c"])
    target = libs / native.packaged_name(native.LIBRARIES["t"], sources)
    target.write_bytes(built.read_bytes())
    return target


def _cache_entries(tmp_path: Path) -> list[str]:
    folder = tmp_path / "cache" / "kernels"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_an_installed_library_is_loaded_and_nothing_is_built(
    table: Path, sources: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed = _package(table, sources, "int v(void) { return 7; }\n")
    before = _cache_entries(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-compilers"))
    monkeypatch.delenv("CC", raising=False)
    lib = build.load_native("t")
    assert lib.v() == 7
    assert lib._name.startswith("/proc/self/fd/")  # the very inode checked
    assert os.path.samestat(os.stat(lib._name), os.stat(installed))
    assert _cache_entries(tmp_path) == before
    outcome = build.build_all()
    assert [(o.status, o.detail) for o in outcome] == [("installed", str(installed))]


def test_a_library_that_does_not_match_its_sources_is_built_instead(
    table: Path, sources: Path, tmp_path: Path
) -> None:
    stale = _package(table, sources, "int v(void) { return 7; }\n")
    (sources / "a.c").write_text("int v(void) { return 2; }\n")  # edited after the build
    assert build.packaged("t") is None
    lib = build.load_native("t")
    assert lib.v() == 2
    assert lib._name.startswith("/proc/self/fd/")  # through the checked cache
    assert stale.exists()
    assert [o.status for o in build.build_all()] == ["built"]


def test_the_packaged_name_follows_sources_headers_and_flags(sources: Path) -> None:
    (sources / "a.c").write_text("int v(void) { return 1; }\n")
    lib = native.Library("t", "test", ("a.c",), native.WHEEL)
    first = native.packaged_name(lib, sources)
    assert first.startswith("libt-") and first.endswith(".so")
    assert native.packaged_name(lib, sources) == first
    (sources / "x.h").write_text("#define X 1\n")
    with_header = native.packaged_name(lib, sources)
    no_flags = native.Library("t", "test", ("a.c",), native.WHEEL, cflags=())
    flags = native.packaged_name(no_flags, sources)
    assert len({first, with_header, flags}) == 3


def test_build_all_skips_a_missing_toolkit_and_fails_a_missing_compiler(
    sources: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (sources / "a.c").write_text("int v(void) { return 1; }\n")
    table = {
        "c": native.Library("c", "plain", ("a.c",), native.FIRST_USE),
        "x": native.Library("x", "on xre", ("a.c",), native.FIRST_USE, toolkit="xre"),
        "n": native.Library("n", "on nvcc", ("a.c",), native.FIRST_USE, toolkit="nvcc"),
    }
    monkeypatch.setattr(native, "LIBRARIES", table)
    for var in ("CC", "NVCC", *native._XRE_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    monkeypatch.setattr(native, "_XRE_DEFAULTS", ())
    monkeypatch.setenv("PATH", str(tmp_path / "no-compilers"))
    outcome = {o.title: (o.status, o.detail) for o in build.build_all()}
    assert outcome == {
        "plain": ("failed", "no C compiler found (set CC or install gcc)"),
        "on xre": ("skipped", native.toolchain(table["x"], sources)),
        "on nvcc": ("skipped", "nvcc not found: set NVCC or CUDA_HOME to build the CUDA backend"),
    }
    assert outcome["on xre"][1].startswith("Kunlunxin XRE not found")


def test_the_table_holds_what_the_loaders_load() -> None:
    src_dir = build.source_dir()
    for lib in native.LIBRARIES.values():
        for source in lib.sources:
            assert (src_dir / source).is_file(), source
        for folder in lib.include_dirs:
            assert (src_dir / folder).is_dir(), folder
    wheel = {n for n, lib in native.LIBRARIES.items() if lib.when == native.WHEEL}
    assert wheel == {"xt_host", "stackdist", "xt_xpu_fake"}  # no vendor toolkit behind them
    assert all(lib.toolkit for lib in native.LIBRARIES.values() if lib.when != native.WHEEL)
