"""Install the heavy test lane's dependencies into the running interpreter's environment.

    python tests/sglang/install_sglang.py          # from the venv that runs pytest

What it installs, in this order:
  1. torch 2.13.0, CPU build only (the local version "+cpu" is pinned, so pip can never pick a
     CUDA build from the registry instead);
  2. sglang 0.5.20 with --no-deps (its declared dependencies are CUDA kernels and hundreds of
     MB we do not need);
  3. the pure-Python packages that importing sglang's cache modules actually needs, with
     --no-deps and exact versions (sglang's own pins where it has them), so the result is
     the same on every machine;
  4. what a running `sglang.launch_server` needs on CPU on top of that (the real-server lane,
     tests/server): the web stack (fastapi, uvicorn, uvloop, ...) and the rest of the imports
     the server's processes make, also exact versions with --no-deps;
  5. the Mooncake store's non-CUDA wheel for the L3 lane, and Debian's libibverbs1 it links
     (apt-get, only when running as root and the library is missing);
  6. this checkout again (editable, no deps) when the xputune entry point in the group
     sglang.srt.plugins is not visible yet, so SGLang's plugin loader can find it.
GPU-only modules (triton, torchvision, sgl_kernel) are never installed: the lanes stand in for
them (tests/sglang/gpu_standins.py; the server lane loads it in every server process through
tests/server/standin_site). Idempotent and fast: when every pin is already met it only reads package
metadata and exits.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import PackageNotFoundError, entry_points, version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TORCH = ("torch", "2.13.0+cpu")
SGLANG = ("sglang", "0.5.20")
# What `import sglang.srt.mem_cache.hiradix_cache` (and the plugin loader) needs on CPU.
PURE: tuple[tuple[str, str], ...] = (
    ("aiohappyeyeballs", "2.7.1"),
    ("aiohttp", "3.14.5"),
    ("aiosignal", "1.4.0"),
    ("annotated-types", "0.8.0"),
    ("anyio", "4.16.0"),
    ("apache-tvm-ffi", "0.1.11"),
    ("attrs", "26.1.0"),
    ("certifi", "2026.10.19.post1"),
    ("compressed-tensors", "0.18.0"),
    ("dill", "0.4.1"),
    ("distro", "1.9.0"),
    ("filelock", "4.3.1"),
    ("frozenlist", "1.8.0"),
    ("fsspec", "2026.9.0"),
    ("gguf", "0.19.0"),
    ("h11", "0.16.0"),
    ("hf-xet", "1.8.0"),
    ("httpcore", "1.0.9"),
    ("httpx", "0.29.0"),
    ("huggingface-hub", "1.33.0"),
    ("idna", "3.20"),
    ("ipython", "9.18.1"),
    ("loguru", "0.7.3"),
    ("msgspec", "0.23.0"),
    ("multidict", "7.2.1"),
    ("openai", "2.6.1"),
    ("orjson", "3.13.0"),
    ("packaging", "26.4"),
    ("partial-json-parser", "0.2.1.1.post7"),
    ("pillow", "13.0.0"),
    ("propcache", "0.5.4"),
    ("pybase64", "1.5.1"),
    ("pydantic", "2.14.4"),
    ("pydantic-core", "2.50.5"),
    ("pyzmq", "27.3.0"),
    ("regex", "2026.11.19"),
    ("requests", "2.34.2"),
    ("safetensors", "0.8.0"),
    ("sentencepiece", "0.2.3"),
    ("sniffio", "1.3.1"),
    ("starlette", "1.10.0"),
    ("tokenizers", "0.22.2"),
    ("tqdm", "4.70.1"),
    ("traitlets", "5.16.1"),
    ("transformers", "5.12.1"),
    ("typing-inspection", "0.4.5"),
    ("urllib3", "2.8.0"),
    ("xgrammar", "0.2.1"),
    ("yarl", "1.25.1"),
)
# What `python -m sglang.launch_server --device cpu` imports beyond PURE (found by starting one).
SERVER: tuple[tuple[str, str], ...] = (
    ("annotated-doc", "0.0.7"),
    ("cffi", "2.1.1"),
    ("click", "8.5.1"),
    ("einops", "0.8.2"),
    ("fastapi", "0.165.0"),
    ("jsonschema", "4.26.0"),
    ("jsonschema-specifications", "2025.9.1"),
    ("opentelemetry-api", "1.45.2"),
    ("prometheus-client", "0.26.0"),
    ("pycparser", "3.12"),
    ("python-multipart", "0.0.34"),
    ("referencing", "0.37.0"),
    ("rpds-py", "2026.9.1"),
    ("setproctitle", "1.3.8"),
    ("soundfile", "0.13.1"),
    ("uvicorn", "0.55.0"),
    ("uvloop", "0.23.0"),
)

# The L3 lane (tests/server, Mooncake store over tcp on 127.0.0.1): the store's non-CUDA build
# (the plain mooncake-transfer-engine links libcuda and cannot load on a CPU host) and what it
# imports. Its native library links libibverbs.so.1 even over tcp: Debian's libibverbs1,
# installed with apt-get when this runs as root and it is missing.
STORE: tuple[tuple[str, str], ...] = (
    ("mooncake-transfer-engine-non-cuda", "0.3.13.post1"),
    ("msgpack", "1.2.4"),
)
VERBS = "libibverbs.so.1"


def _verbs_ok() -> bool:
    import ctypes

    try:
        ctypes.CDLL(VERBS)
    except OSError:
        return False
    return True


def _install_verbs() -> None:
    """apt-get install libibverbs1 where that is possible (root, a Debian-like system)."""
    import os
    import shutil

    if _verbs_ok():
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        print(f"sglang lane: {VERBS} missing; the Mooncake lane will be skipped", flush=True)
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "libibverbs1"]):
        print("+", " ".join(cmd), flush=True)
        if subprocess.run(cmd, env=env, check=False).returncode != 0:
            print(f"sglang lane: could not install {VERBS}; the Mooncake lane will be skipped")
            return


def _installed(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def missing(pins: tuple[tuple[str, str], ...]) -> list[str]:
    """Requirement strings whose exact version is not installed."""
    return [f"{name}=={want}" for name, want in pins if _installed(name) != want]


def _torch_ok() -> bool:
    found = _installed(TORCH[0])
    return found is not None and found == TORCH[1]


def _entry_point_ok() -> bool:
    return any(ep.name == "xputune" for ep in entry_points(group="sglang.srt.plugins"))


def _pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", *args]
    print("+", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True)


def main() -> int:
    _install_verbs()
    todo_pure = missing((SGLANG, *PURE, *SERVER, *STORE))
    if _torch_ok() and not todo_pure and _entry_point_ok():
        print("sglang lanes: torch 2.13.0 (cpu), sglang 0.5.20, its server deps and the store")
        return 0
    if not _torch_ok():
        found = _installed(TORCH[0])
        if found is not None and found.startswith("2.13.0") and "+cpu" not in found:
            print(f"refusing: torch {found} is installed; the lane needs the CPU build", flush=True)
            return 1
        _pip(f"{TORCH[0]}=={TORCH[1]}")
    if todo_pure:
        _pip("--no-deps", *todo_pure)
    if not _entry_point_ok():
        isolation = [] if _installed("setuptools") is None else ["--no-build-isolation"]
        _pip("--no-deps", *isolation, "-e", str(ROOT))
    still = missing((SGLANG, *PURE, *SERVER, *STORE))
    if still or not _torch_ok():
        print(f"sglang lane: still missing {', '.join(still) or 'torch 2.13.0+cpu'}", flush=True)
        return 1
    print("sglang lane: dependencies installed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
