"""Install the SGLang releases the test lanes run, each into its own environment.

    python tests/sglang/install_sglang.py                    # every release (what CI runs)
    python tests/sglang/install_sglang.py --release 0.5.23   # one release only

Run it with the test environment's interpreter (.venv/bin/python). Where each release lives is
tests/sglang/releases.py's: 0.5.20 in the running (test) environment itself, every newer one in
a virtual environment of its own under .venvs/ (created here from the same base interpreter).
For each release, in this order, all with exact versions:
  1. torch: 0.5.20 takes the CPU build of 2.13.0 (the local version "+cpu" is pinned, so pip
     can never pick a CUDA build instead); 0.5.23 needs 2.14.1, which has no CPU build: the
     registry's CUDA 13 build runs on a CPU once its nvidia-* libraries are there (libtorch
     links them), so torch goes in with --no-deps beside its declared dependencies, pinned,
     less triton (GPU-only) and cuda-bindings (never imported on CPU);
  2. sglang with --no-deps (its declared dependencies are CUDA kernels and GBs we do not need);
  3. the pure-Python packages that importing sglang's cache modules actually needs, with
     --no-deps (sglang's own pins where it has them), so the result is the same everywhere;
  4. what a running `sglang.launch_server --device cpu` needs on top of that (the real-server
     lanes, tests/server): the web stack and the rest of the server processes' imports;
  5. the Mooncake store's non-CUDA wheel for the L3 lane, and Debian's libibverbs1 it links
     (apt-get, only when running as root and the library is missing);
  6. in a release's own environment, xputune's runtime dependencies (the test environment has
     them already);
  7. this checkout, editable and with no deps (`pip install --no-deps -e .`, the way a user
     installs xputune beside SGLang), when that environment does not see this checkout's
     `xputune` entry point in the group sglang.srt.plugins yet, so SGLang's plugin loader finds it.
Each list was found by starting real servers (tests/server/models.py's MLA and MHA models, HiCache
on and off) and adding what was missing. GPU-only modules (triton, torchvision, sgl_kernel /
sglang-kernel, flashinfer) are never installed: the lanes stand in for them
(tests/sglang/gpu_standins.py; the server lanes load it in every server process through
tests/server/standin_site); in a release's own environment any that are found are removed.
Idempotent and fast: when every pin is already met it only reads package metadata and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from importlib.metadata import Distribution, distributions
from pathlib import Path
from urllib.parse import unquote, urlparse

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.sglang.releases import NEWEST, OLDEST, RELEASES, VENVS, python_for, venv_for  # noqa: E402

Pins = tuple[tuple[str, str], ...]

# --- sglang 0.5.20 (the test environment) ------------------------------------------------------
# What `import sglang.srt.mem_cache.hiradix_cache` (and the plugin loader) needs on CPU.
PURE: Pins = (
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
    ("psutil", "7.2.2"),  # sglang.srt.utils.common imports it (xputune no longer needs it)
    ("pydantic", "2.14.4"),
    ("pydantic-core", "2.50.5"),
    ("pyzmq", "27.3.0"),
    ("regex", "2026.11.19"),
    ("requests", "2.34.2"),
    ("safetensors", "0.8.0"),
    ("sentencepiece", "0.2.3"),
    ("shellingham", "1.5.4"),  # typer's
    ("sniffio", "1.3.1"),
    ("starlette", "1.10.0"),
    ("tokenizers", "0.22.2"),
    ("tqdm", "4.70.1"),
    ("traitlets", "5.16.1"),
    ("transformers", "5.12.1"),
    # transformers requires typer (and typer rich): an SGLang environment has both, and the
    # cluster image's check (tests/deploy) walks SGLang's requirements through them
    ("typer", "0.29.2"),
    ("typing-inspection", "0.4.5"),
    ("urllib3", "2.8.0"),
    ("xgrammar", "0.2.1"),
    ("yarl", "1.25.1"),
)
# What `python -m sglang.launch_server --device cpu` imports beyond PURE (found by starting one).
SERVER: Pins = (
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
STORE: Pins = (
    ("mooncake-transfer-engine-non-cuda", "0.3.13.post1"),
    ("msgpack", "1.2.4"),
)
VERBS = "libibverbs.so.1"

# sglang-router for `launch cluster` (tests/launch/test_cluster.py, the cluster lane on both
# releases): a Rust binary in a wheel; what it imports (aiohttp, fastapi, orjson, setproctitle,
# uvicorn) is in SERVER. `launch cluster` runs it with SGLang's interpreter.
ROUTER: Pins = (("sglang-router", "0.3.2"),)

# --- sglang 0.5.23 (.venvs/sglang-0.5.23) ------------------------------------------------------
# torch 2.14.1's declared dependencies (cuda-toolkit's extras spelled out), as pip resolves them
# from this machine's local index, less triton (GPU-only: the stand-in serves) and cuda-bindings
# (Python CUDA bindings nothing imports on CPU). libtorch_cuda.so, which `import torch` loads
# even on a CPU, links every library below but nvtx (kept: cuda-toolkit[nvtx] names it).
TORCH_2_14_DEPS: Pins = (
    ("cuda-toolkit", "13.0.3.0"),
    ("jinja2", "3.1.6"),
    ("markupsafe", "3.0.4"),
    ("mpmath", "1.3.0"),
    ("networkx", "3.6.1"),
    ("nvidia-cublas", "13.1.1.3"),
    ("nvidia-cuda-cupti", "13.0.85"),
    ("nvidia-cuda-nvrtc", "13.0.88"),
    ("nvidia-cuda-runtime", "13.0.96"),
    ("nvidia-cudnn-cu13", "9.24.0.43"),
    ("nvidia-cufft", "12.0.0.61"),
    ("nvidia-cufile", "1.15.1.6"),
    ("nvidia-curand", "10.4.0.35"),
    ("nvidia-cusolver", "12.0.4.66"),
    ("nvidia-cusparse", "12.6.3.3"),
    ("nvidia-cusparselt-cu13", "0.8.1"),
    ("nvidia-nccl-cu13", "2.30.7"),
    ("nvidia-nvjitlink", "13.4.92"),
    ("nvidia-nvshmem-cu13", "3.4.5"),
    ("nvidia-nvtx", "13.0.85"),
    ("setuptools", "84.2.1"),  # also builds the editable xputune (>= 70.1, pyproject.toml)
    ("sympy", "1.14.0"),
    ("typing-extensions", "4.16.0"),
    # filelock and fsspec: in PURE, same versions
)
# sglang 0.5.23's own pins (its METADATA: transformers, tokenizers, openai, xgrammar,
# sentencepiece, apache-tvm-ffi, compressed-tensors, soundfile) replace 0.5.20's; the rest of
# 0.5.20's lists serve 0.5.23 unchanged (servers started with exactly these). Not needed, so not
# here, though sglang pins it: python-dateutil (only sglang.multimodal_gen imports it).
PINS_0_5_23: dict[str, str] = {
    "openai": "2.8.0",
    "sentencepiece": "0.2.1",
    "tokenizers": "0.23.2",
    "transformers": "5.19.0",
    "xgrammar": "0.2.7",
}
# xputune's runtime dependencies (pyproject.toml) and theirs, at the test environment's versions
# (numpy and msgspec: sglang's server imports them too).
XPUTUNE_DEPS: Pins = (
    ("markdown-it-py", "4.3.0"),
    ("mdurl", "0.1.2"),
    ("numpy", "2.4.6"),
    ("pygments", "2.21.0"),
    ("pyyaml", "6.0.4"),
    ("rich", "15.0.0"),
    # msgspec, typing-extensions: in SERVER, PURE and TORCH_2_14_DEPS; psutil in PURE
)

# Distributions that would shadow a stand-in (triton, torchvision, sgl_kernel) or only serve a
# GPU: removed from a release's own environment (a plain `pip install torch==2.14.1` there brings
# triton and cuda-bindings).
GPU_ONLY_DISTS = (
    "triton",
    "torchvision",
    "sgl-kernel",
    "sglang-kernel",
    "flashinfer-python",
    "cuda-bindings",
)


def _repin(pins: Pins, new: dict[str, str]) -> Pins:
    """`pins` with the versions in `new` (each of which must name a package in `pins`)."""
    assert set(new) <= {name for name, _ in pins}, sorted(set(new) - {n for n, _ in pins})
    return tuple((name, new.get(name, want)) for name, want in pins)


@dataclass(frozen=True)
class Lane:
    """One release's environment: where it lives and exactly what goes into it."""

    release: str
    torch: str  # the exact torch version (pip's spelling, local version included)
    torch_deps: Pins | None  # None: pip resolves torch's own dependencies (the +cpu build's)
    pure: Pins  # everything else, installed with --no-deps
    venv: Path | None  # None: the running interpreter's environment

    @property
    def python(self) -> Path:
        return python_for(self.release)

    @property
    def where(self) -> str:
        return "the test environment" if self.venv is None else str(self.venv)


LANES: dict[str, Lane] = {
    OLDEST: Lane(
        release=OLDEST,
        torch="2.13.0+cpu",
        torch_deps=None,
        pure=(*PURE, *SERVER, *STORE, *ROUTER),
        venv=venv_for(OLDEST),
    ),
    NEWEST: Lane(
        release=NEWEST,
        torch="2.14.1",
        torch_deps=TORCH_2_14_DEPS,
        pure=(*_repin((*PURE, *SERVER), PINS_0_5_23), *STORE, *ROUTER, *XPUTUNE_DEPS),
        venv=venv_for(NEWEST),
    ),
}
assert set(LANES) == set(RELEASES), "every release in releases.py needs a lane here"


# --- what an environment has (metadata reads only) ---------------------------------------------


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _site_packages(lane: Lane) -> list[str]:
    """Where `lane`'s environment installs packages (not sys.path: the checkout on it holds
    xputune.egg-info, which is not the installed xputune)."""
    if lane.venv is None:
        paths = sysconfig.get_paths()
        return list(dict.fromkeys((paths["purelib"], paths["platlib"])))
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return [str(lane.venv / "lib" / version / "site-packages")]


def _dists(lane: Lane) -> dict[str, Distribution]:
    """The distributions `lane`'s environment has, by normalized name (first on its path wins)."""
    out: dict[str, Distribution] = {}
    for dist in distributions(path=_site_packages(lane)):
        name = dist.metadata["Name"]
        if name:
            out.setdefault(_norm(name), dist)
    return out


def _requirements(lane: Lane) -> Pins:
    return (*(lane.torch_deps or ()), ("sglang", lane.release), *lane.pure)


def missing(pins: Pins, dists: dict[str, Distribution]) -> list[str]:
    """Requirement strings whose exact version is not installed."""
    return [
        f"{name}=={want}"
        for name, want in pins
        if _norm(name) not in dists or dists[_norm(name)].version != want
    ]


def _torch_ok(lane: Lane, dists: dict[str, Distribution]) -> bool:
    return not missing((("torch", lane.torch),), dists)


def _entry_point_ok(dists: dict[str, Distribution]) -> bool:
    """This checkout's xputune is what the environment's plugin loader finds."""
    dist = dists.get("xputune")
    if dist is None:
        return False
    if not any(
        ep.name == "xputune" and ep.group == "sglang.srt.plugins" for ep in dist.entry_points
    ):
        return False
    try:
        url = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        return False
    where = urlparse(str(url.get("url", "")))
    if where.scheme != "file" or not url.get("dir_info", {}).get("editable"):
        return False
    return Path(unquote(where.path)).resolve() == ROOT


def _gpu_only(dists: dict[str, Distribution]) -> list[str]:
    return [name for name in GPU_ONLY_DISTS if name in dists]


def _venv_ok(venv: Path) -> bool:
    """`venv` exists and was made from the base interpreter of the one running this."""
    try:
        cfg = (venv / "pyvenv.cfg").read_text()
    except OSError:
        return False
    fields = dict(
        (k.strip(), v.strip()) for k, _, v in (ln.partition("=") for ln in cfg.splitlines())
    )
    base = Path(getattr(sys, "_base_executable", sys.executable)).parent.resolve()
    return (
        os.access(venv / "bin" / "python", os.X_OK)
        and fields.get("version", "").split(".")[:2] == [str(v) for v in sys.version_info[:2]]
        and Path(fields.get("home", "/nonexistent")).resolve() == base
    )


def _met(lane: Lane) -> bool:
    if lane.venv is not None and not _venv_ok(lane.venv):
        return False
    dists = _dists(lane)
    owned = lane.venv is not None
    return (
        _torch_ok(lane, dists)
        and not missing(_requirements(lane), dists)
        and _entry_point_ok(dists)
        and not (owned and _gpu_only(dists))
    )


# --- installing --------------------------------------------------------------------------------


def _verbs_ok() -> bool:
    import ctypes

    try:
        ctypes.CDLL(VERBS)
    except OSError:
        return False
    return True


def _install_verbs() -> None:
    """apt-get install libibverbs1 where that is possible (root, a Debian-like system)."""
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


def _pip(lane: Lane, verb: str, *args: str) -> None:
    cmd = [str(lane.python), "-m", "pip", verb, "-q", "--disable-pip-version-check", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def _make_venv(venv: Path) -> None:
    """(Re)create `venv` from the base interpreter of the one running this."""
    if venv.exists():
        if venv.parent != VENVS or not venv.name.startswith("sglang-"):
            raise SystemExit(f"refusing to replace {venv}: not a lane environment")
        print(f"sglang lane: {venv} was made by another interpreter; making it again", flush=True)
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "venv", str(venv)]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def _setuptools_ok(dists: dict[str, Distribution]) -> bool:
    dist = dists.get("setuptools")
    if dist is None:
        return False
    head = re.match(r"(\d+)\.(\d+)", dist.version)
    return head is not None and (int(head[1]), int(head[2])) >= (70, 1)


def ensure(lane: Lane) -> int:
    """Bring `lane`'s environment to its pins; 0 when it is (or was already) there."""
    head = f"sglang {lane.release} lane ({lane.where})"
    if _met(lane):
        print(f"{head}: torch {lane.torch}, sglang {lane.release}, its server deps and the store")
        return 0
    owned = lane.venv is not None
    if owned and not _venv_ok(lane.venv):
        _make_venv(lane.venv)
    dists = _dists(lane)
    if owned and _gpu_only(dists):
        _pip(lane, "uninstall", "-y", *_gpu_only(dists))
        dists = _dists(lane)
    if not _torch_ok(lane, dists):
        found = dists["torch"].version if "torch" in dists else None
        if not owned and found is not None and found.split("+")[0] == lane.torch.split("+")[0]:
            print(f"refusing: torch {found} is installed; the lane needs {lane.torch}", flush=True)
            return 1
        if lane.torch_deps is None:
            _pip(lane, "install", f"torch=={lane.torch}")
        else:
            _pip(lane, "install", "--no-deps", f"torch=={lane.torch}")
    todo = missing(_requirements(lane), _dists(lane))
    if todo:
        _pip(lane, "install", "--no-deps", *todo)
    dists = _dists(lane)
    if not _entry_point_ok(dists):
        isolation = ["--no-build-isolation"] if _setuptools_ok(dists) else []
        _pip(lane, "install", "--no-deps", *isolation, "-e", str(ROOT))
    dists = _dists(lane)
    still = missing((("torch", lane.torch), *_requirements(lane)), dists)
    if not _entry_point_ok(dists):
        still.append(f"xputune (editable from {ROOT})")
    if owned and _gpu_only(dists):
        still.append(f"the absence of {', '.join(_gpu_only(dists))}")
    if still:
        print(f"{head}: still missing {', '.join(still)}", flush=True)
        return 1
    print(f"{head}: dependencies installed")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--release", choices=RELEASES, help="install this release only (default: every one)"
    )
    args = parser.parse_args(argv)
    _install_verbs()
    status = 0
    for release in [args.release] if args.release else list(RELEASES):
        status = max(status, ensure(LANES[release]))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
