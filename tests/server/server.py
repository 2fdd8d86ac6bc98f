"""One real `sglang.launch_server`, started through `xputune launch sglang`, on 127.0.0.1.

Each server runs the SGLang release it is given, in that release's own environment
(tests/sglang/releases.py): the launcher runs here, SGLang runs under `--python` of that
environment, as it does for a user whose SGLang lives in another virtual environment.

The server runs in its own session (process group), so stopping it by its pid also stops the
engine's scheduler and detokenizer processes: SIGTERM to the group, then SIGKILL after a grace
period. Every request goes over HTTP to 127.0.0.1; the plugin's counters come from the stats
files it writes (XPUTUNE_HICACHE_STATS, one per scheduler process).
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.sglang.releases import OLDEST, python_for
from xputune.measure.ports import server_port

REPO = Path(__file__).resolve().parents[2]
STANDIN_SITE = Path(__file__).resolve().parent / "standin_site"
START_TIMEOUT = float(os.environ.get("XPUTUNE_SERVER_START_TIMEOUT", "240"))
DEVICE = os.environ.get("XPUTUNE_SERVER_DEVICE", "cpu")  # tests/gpu/run_device_checks.sh: cuda
# Extra `xputune launch sglang` options (the GPU script passes --force: a lent GPU box is not
# tuned to the card profile, and the lane tests the cache, not the host settings).
LAUNCH_ARGS = os.environ.get("XPUTUNE_SERVER_LAUNCH_ARGS", "").split()


class ServerFailed(AssertionError):
    pass


@dataclass
class Result:
    output_ids: list[int]
    logprobs: list[float]
    cached: int
    device: int
    host: int
    storage: int = 0  # from the L3 backend (cached_tokens_details.storage)


@dataclass
class Server:
    """A server with the given plugin features and SGLang flags; use as a context manager."""

    model: Path
    workdir: Path
    features: str
    write_policy: str = "write_through_selective"
    extra_args: list[str] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)
    launcher_args: list[str] = field(default_factory=list)
    max_total_tokens: int = 1024
    release: str = OLDEST
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    start_seconds: float = 0.0
    shm_before: frozenset[str] = frozenset()

    @property
    def stats_dir(self) -> Path:
        return self.workdir / "stats"

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    def command(self) -> list[str]:
        args = [
            sys.executable, "-m", "xputune", "launch", "sglang",
            "--write-policy", self.write_policy, "--features", self.features,
            "--stats-dir", str(self.stats_dir), "--python", str(python_for(self.release)),
            *LAUNCH_ARGS, *self.launcher_args, "--",
            "--model-path", str(self.model), "--device", DEVICE,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--max-total-tokens", str(self.max_total_tokens),
            "--hicache-size", "0", "--hicache-ratio", "2",
            "--chunked-prefill-size", "128", "--skip-server-warmup",
            "--max-running-requests", "4", "--log-level", "info", *self.extra_args,
        ]  # fmt: skip
        return args

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(STANDIN_SITE), str(REPO), env.get("PYTHONPATH", "")) if p
        )
        env["XPUTUNE_TEST_REPO"] = str(REPO)
        env["XPUTUNE_STANDIN_CALLS"] = str(self.workdir / "standins")
        env["TOKENIZERS_PARALLELISM"] = "false"
        env["HF_HUB_OFFLINE"] = "1"
        env["TRANSFORMERS_OFFLINE"] = "1"
        env["SGLANG_PLUGINS"] = "xputune"
        env.update(self.extra_env)
        return env

    def start(self) -> Server:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "standins").mkdir(exist_ok=True)
        self.port = self.port or server_port()
        self.shm_before = _shm_leftovers()
        t0 = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.command(), env=self.environment(), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.workdir,
            )  # fmt: skip
        try:
            self._wait_ready(t0)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def _wait_ready(self, t0: float) -> None:
        while time.monotonic() - t0 < START_TIMEOUT:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise ServerFailed(f"server exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                self._get("/model_info", timeout=2)
                return
            except (OSError, urllib.error.URLError):
                time.sleep(0.5)
        raise ServerFailed(f"server not ready after {START_TIMEOUT:.0f} s:\n{self.tail()}")

    def stop(self) -> None:
        """SIGTERM the server's process group (its pid), then SIGKILL what is left."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)  # the server's own group: it leads its session
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                if proc.poll() is not None and not _group_alive(proc.pid):
                    _sweep_shm(self.shm_before)
                    return
                time.sleep(0.2)

    def stop_in_background(self) -> None:
        """stop() on a thread (SGLang's shutdown mostly sleeps); join_stops() waits for it."""
        thread = threading.Thread(target=self.stop, name=f"stop-{self.port}")
        thread.start()
        _stopping.append(thread)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop_in_background()

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def _get(self, path: str, timeout: float = 10) -> Any:
        url = f"http://127.0.0.1:{self.port}{path}"
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.loads(resp.read())

    def generate(self, ids: list[int], max_new_tokens: int = 4) -> Result:
        body = {
            "input_ids": ids,
            "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0},
            "return_logprob": True,
        }
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/generate", json.dumps(body).encode(),
            {"Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                out = json.loads(resp.read())
        except OSError as exc:
            raise ServerFailed(f"/generate failed ({exc}):\n{self.tail()}") from exc
        meta = out["meta_info"]
        details = meta.get("cached_tokens_details") or {}
        return Result(
            output_ids=list(out.get("output_ids") or []),
            logprobs=[float(x[0]) for x in meta.get("output_token_logprobs") or []],
            cached=int(meta.get("cached_tokens") or 0),
            device=int(details.get("device", 0)),
            host=int(details.get("host", 0)),
            storage=int(details.get("storage", 0)),
        )

    def post(self, path: str, timeout: float = 60) -> tuple[int, str]:
        """POST with no body (/flush_cache?timeout=30): the HTTP status and the reply's text."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", b"", method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return int(resp.status), resp.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode(errors="replace")

    def stats(self, settle: float = 0.3) -> dict[str, int]:
        """The plugin's counters summed over this server's processes, once they stop moving
        (the plugin rewrites its files within 0.2 s of a change)."""
        last: dict[str, int] | None = None
        deadline = time.monotonic() + 15
        time.sleep(settle)
        while True:
            now = self._read_stats()
            if now == last or time.monotonic() > deadline:
                return now
            last = now
            time.sleep(0.3)

    def stats_files(self) -> list[dict[str, Any]]:
        out = []
        for path in sorted(glob.glob(str(self.stats_dir / "xputune-stats-*.json"))):
            try:
                out.append(json.loads(Path(path).read_text()))
            except (OSError, ValueError):
                continue
        return out

    def _read_stats(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for data in self.stats_files():
            for key, value in data["counters"].items():
                total[key] = total.get(key, 0) + int(value)
        return total

    def standin_calls(self) -> list[str]:
        calls = []
        for path in sorted((self.workdir / "standins").glob("calls-*.txt")):
            calls += path.read_text().splitlines()
        return calls


_stopping: list[threading.Thread] = []


def join_stops() -> None:
    """Wait until every server stopped in the background is gone."""
    while _stopping:
        _stopping.pop().join()


atexit.register(join_stops)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


SHM = Path("/dev/shm")
# What a SIGKILLed server leaves in /dev/shm: Python multiprocessing's named semaphores, and
# SGLang's own files (the loads report of every server, the message queue of a TP > 1 one),
# which SGLang removes only in its own CI.
LEFTOVERS = ("sem.mp-", "sglang_loads_", "sgl_shm_mq_")


def _shm_leftovers() -> frozenset[str]:
    """Names in /dev/shm a server may leave behind (LEFTOVERS), as they are now."""
    try:
        return frozenset(p.name for p in SHM.iterdir() if p.name.startswith(LEFTOVERS))
    except OSError:
        return frozenset()


def _mapped_shm_names() -> set[str]:
    """/dev/shm names some live process still maps (an open semaphore is mapped)."""
    names: set[str] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        with contextlib.suppress(OSError):
            for line in maps.read_text().splitlines():
                path = line.rsplit(None, 1)[-1] if "/dev/shm/" in line else ""
                if path.startswith("/dev/shm/"):
                    names.add(path[len("/dev/shm/") :])
    return names


def _sweep_shm(before: frozenset[str]) -> None:
    """Remove what a stopped server left in /dev/shm (its resource tracker may have died).

    Only names that appeared while the server ran and that no live process maps: another
    program's file in use is never touched.
    """
    left = _shm_leftovers() - before
    if not left:
        return
    in_use = _mapped_shm_names()
    for name in left - in_use:
        with contextlib.suppress(OSError):
            (SHM / name).unlink()


def store_unavailable() -> str | None:
    """Why the Mooncake store cannot run here (its package, the verbs library it links), or
    None."""
    import ctypes
    import importlib.util

    if importlib.util.find_spec("mooncake") is None:
        return "mooncake-transfer-engine-non-cuda is not installed (tests/sglang/install_sglang.py)"
    try:
        ctypes.CDLL("libibverbs.so.1")
    except OSError:
        return "libibverbs.so.1 is missing (Debian: apt install libibverbs1)"
    return None


class Report:
    """A lane's documents by name, written as they come to $XPUTUNE_MEASURE_REPORT (plus
    `suffix`), so that a lane that fails later still leaves what it measured."""

    def __init__(self, suffix: str = "") -> None:
        self.suffix = suffix
        self.documents: dict[str, object] = {}

    def save(self, name: str, doc: object) -> None:
        self.documents[name] = doc
        path = os.environ.get("XPUTUNE_MEASURE_REPORT")
        if path:
            Path(f"{path}{self.suffix}").write_text(json.dumps(self.documents, indent=1))


#: What a sweep run inside a lane passes on to the servers it starts (Server.environment's).
SWEEP_ENV = ("PYTHONPATH", "XPUTUNE_TEST_REPO", "TOKENIZERS_PARALLELISM", "HF_HUB_OFFLINE",
             "TRANSFORMERS_OFFLINE", "SGLANG_PLUGINS")  # fmt: skip


def sweep_environment(server: Server, monkeypatch, tmp_path: Path) -> None:
    """This process set up as a lane's server would be, for `xputune sweep` run in it: the
    servers it starts inherit the environment, its logs (and L3 folders) go to tmp_path."""
    import tempfile

    env = server.environment()
    for key in SWEEP_ENV:
        monkeypatch.setenv(key, env[key])
    monkeypatch.setenv("XPUTUNE_STANDIN_CALLS", str(tmp_path / "standins"))
    (tmp_path / "standins").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
