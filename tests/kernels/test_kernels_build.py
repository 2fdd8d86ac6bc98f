"""The on-demand builder: cache keys, readable failures, and the CUDA source under nvcc."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from xputune.errors import UnsupportedError
from xputune.kernels import build
from xputune.kernels.backends import cuda


@pytest.fixture
def sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    monkeypatch.setattr(build, "source_dir", lambda: src)
    monkeypatch.setenv("XPUTUNE_CACHE_DIR", str(tmp_path / "cache"))
    return src


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


@pytest.mark.slow
@pytest.mark.skipif(cuda.cuda_toolkit() is None, reason="nvcc not installed")
def test_cuda_source_compiles_with_nvcc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XPUTUNE_CACHE_DIR", str(tmp_path))
    lib_path = cuda.build_cuda(force=True)
    lib = ctypes.CDLL(str(lib_path))  # static cudart: loads without a GPU or driver
    for symbol in ("xt_cuda_copy", "xt_cuda_copy_items", "xt_cuda_has_batch"):
        assert hasattr(lib, symbol)
    assert lib.xt_cuda_abi_version() == 1
