"""Attacks on xputune's caches, kept as tests: another local user against root.

Each test plays a local user (uid 65534, through setpriv) who plants a library, a folder or
a parsed-profile entry where root's xputune used to look, then runs what root runs and checks
that nothing planted was loaded or believed: the planted library's constructor would write a
marker file as root, and a poisoned profile would shrink `apply`'s plan. Root is needed to act
as another uid; CI runs as root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from xputune.host import usercache
from xputune.kernels import build, native
from xputune.tune import profiles

NOBODY = 65534
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("gcc") is None,
    reason="acting as another uid needs root, setpriv and gcc",
)

PLANTED_C = r"""
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen(MARKER, "w");
    if (f) { fputs("ran as root\n", f); fclose(f); }
}
int v(void) { return 666; }
"""


def as_attacker(*argv: str) -> None:
    """Run argv as uid/gid 65534 with no supplementary groups."""
    subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv],
        check=True,
        capture_output=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": "/tmp"},
    )


@pytest.fixture
def arena() -> Iterator[Path]:
    """A root-owned 0755 folder in /tmp that the attacker can reach (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="xputune-attack-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def marker(arena: Path) -> Path:
    return arena / "planted-code-ran"


@pytest.fixture
def evil_source(arena: Path, marker: Path) -> Path:
    src = arena / "planted.c"
    src.write_text(PLANTED_C.replace("MARKER", f'"{marker}"'))
    src.chmod(0o644)
    return src


def plant_library(evil_source: Path, folder: Path, name: str) -> Path:
    """The attacker compiles a library whose constructor writes the marker, named `name`."""
    as_attacker("mkdir", "-p", str(folder))
    target = folder / name
    as_attacker("gcc", "-shared", "-fPIC", "-o", str(target), str(evil_source))
    return target


@pytest.fixture
def sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A one-function kernel source; returns the file name build() gives its library."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.c").write_text("int v(void) { return 1; }\n")
    monkeypatch.setattr(build, "source_dir", lambda: src)
    monkeypatch.setattr(build, "_loaded", {})
    monkeypatch.setenv("XPUTUNE_CACHE_DIR", str(tmp_path / "scratch"))
    return build.build("t", ["a.c"]).name  # the predictable name an attacker would use


def _setup_owned_dir(arena: Path, evil: Path, lib: str, mp: pytest.MonkeyPatch) -> Path:
    cache = arena / "evil"  # theirs, as their home is
    cache.mkdir()
    os.chown(cache, NOBODY, NOBODY)
    plant_library(evil, cache / "kernels", lib)
    mp.setenv("XPUTUNE_CACHE_DIR", str(cache))
    return cache


def _setup_symlink(arena: Path, evil: Path, lib: str, mp: pytest.MonkeyPatch) -> Path:
    public = arena / "public"  # a sticky world-writable folder, as /tmp is
    public.mkdir()
    public.chmod(0o1777)
    plant_library(evil, public / "evil" / "kernels", lib)
    as_attacker("ln", "-s", str(public / "evil"), str(public / "cache"))
    mp.setenv("XPUTUNE_CACHE_DIR", str(public / "cache"))
    return public / "evil"


def _setup_open_dir(arena: Path, evil: Path, lib: str, mp: pytest.MonkeyPatch) -> Path:
    cache = arena / "shared"  # made by root, 0777 (an old umask, a careless mkdir)
    (cache / "kernels").mkdir(parents=True)
    for folder in (cache, cache / "kernels"):
        folder.chmod(0o777)
    plant_library(evil, cache / "kernels", lib)
    mp.setenv("XPUTUNE_CACHE_DIR", str(cache))
    return cache


def _setup_open_dir_their_subdir(arena: Path, evil: Path, lib: str, mp: pytest.MonkeyPatch) -> Path:
    cache = arena / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    plant_library(evil, cache / "kernels", lib)  # the attacker makes kernels/ too
    mp.setenv("XPUTUNE_CACHE_DIR", str(cache))
    return cache


def _setup_sudo_home(arena: Path, evil: Path, lib: str, mp: pytest.MonkeyPatch) -> Path:
    home = arena / "home"
    home.mkdir()
    os.chown(home, NOBODY, NOBODY)
    plant_library(evil, home / ".cache" / "xputune" / "kernels", lib)
    mp.setenv("HOME", str(home))  # sudo keeping the user's HOME
    mp.delenv("XDG_CACHE_HOME", raising=False)
    mp.delenv("XPUTUNE_CACHE_DIR", raising=False)
    mp.setattr(usercache, "ROOT_DIR", str(arena / "var-cache" / "xputune"))
    return home / ".cache" / "xputune"


SETUPS = {
    "their-folder": _setup_owned_dir,
    "through-a-symlink": _setup_symlink,
    "root-made-0777": _setup_open_dir,
    "root-made-0777-their-subfolder": _setup_open_dir_their_subdir,
    "sudo-keeping-home": _setup_sudo_home,
}
#: What root is told on stderr, one line each (None: nothing, the place is never looked at).
WARNINGS = {
    "their-folder": ["evil is owned by uid 65534, not by this user (uid 0)"],
    "through-a-symlink": ["evil is owned by uid 65534, not by this user (uid 0)"],
    "root-made-0777": [
        "shared was writable by others (mode 0777); now 0700",
        "shared/kernels was writable by others (mode 0777); now 0700",
        "owned by uid 65534, not by this user (uid 0)); rebuilt",
    ],
    "root-made-0777-their-subfolder": [
        "shared was writable by others (mode 0777); now 0700",
        "shared/kernels is owned by uid 65534, not by this user (uid 0)",
    ],
    "sudo-keeping-home": [],
}


@pytest.mark.parametrize("attack", list(SETUPS))
def test_a_planted_library_is_never_loaded(
    attack: str,
    arena: Path,
    marker: Path,
    evil_source: Path,
    sources: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    planted_in = SETUPS[attack](arena, evil_source, sources, monkeypatch)
    capsys.readouterr()
    lib = build.load("t", ["a.c"])
    assert lib.v() == 1  # ours, built afresh; the planted one returns 666
    assert not marker.exists(), "the planted library ran as root"
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == len(WARNINGS[attack]), lines
    for line, expected in zip(lines, WARNINGS[attack], strict=True):
        assert line.startswith("xputune: warning: ") and expected in line, line
    planted = planted_in / "kernels" / sources
    built = build.build("t", ["a.c"])
    if attack == "root-made-0777":  # root's folder, tightened: the planted file is replaced
        assert built == planted and planted.stat().st_uid == 0
    else:  # the attacker's folder is left alone and never used
        assert planted.stat().st_uid == NOBODY
        assert not built.resolve().is_relative_to(planted_in.resolve())
    if attack == "sudo-keeping-home":
        assert built.parent == Path(usercache.ROOT_DIR, "kernels")
        assert oct(Path(usercache.ROOT_DIR).stat().st_mode & 0o777) == "0o700"


@pytest.mark.slow
def test_tiers_with_a_planted_stack_distance_kernel(
    arena: Path, marker: Path, evil_source: Path, tmp_path: Path
) -> None:
    """The path attacked: `xputune tiers` loads kernels/stackdist.c's library from the cache."""
    env = {**os.environ, "XPUTUNE_CACHE_DIR": str(tmp_path / "clean")}
    scratch = subprocess.run(  # the name the attacker predicts, from a clean cache
        [sys.executable, "-c", "from xputune.kernels import build; "
         "print(build.build('stackdist', ['stackdist.c']).name)"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (arena / "evil").mkdir()
    os.chown(arena / "evil", NOBODY, NOBODY)
    plant_library(evil_source, arena / "evil" / "kernels", scratch)
    trace = tmp_path / "trace.jsonl"
    lines = []
    for i in range(40):
        ids = [0, 1 + i % 3, 10 + i % 3] if i % 2 else [0, 20 + i]
        doc = {"timestamp": i, "input_length": 512 * len(ids) - 100, "output_length": 1}
        lines.append(json.dumps({**doc, "hash_ids": ids}) + "\n")
    trace.write_text("".join(lines))
    argv = [sys.executable, "-m", "xputune", "tiers", "--trace", str(trace), "-f", "json"]
    clean = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    attacked = subprocess.run(
        argv,
        env={**env, "XPUTUNE_CACHE_DIR": str(arena / "evil")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert not marker.exists(), "the planted library ran as root"
    assert (attacked.returncode, attacked.stdout) == (clean.returncode, clean.stdout)
    assert clean.returncode == 0, clean.stderr
    assert attacked.stderr == (
        f"xputune: warning: no cache this run: {arena}/evil is owned by uid 65534, "
        "not by this user (uid 0)\n"
    )


# -- a library installed with the wheel ---------------------------------------------------------


@pytest.fixture
def installed(arena: Path, sources: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the wheel's library t (a.c: v() == 1) is installed: .../site/xputune/kernels/libs.

    Root-owned 0755 folders down from /tmp, as root's pip makes them; the library's file name
    is the one the loader looks for, and nothing is there yet.
    """
    monkeypatch.setattr(native, "LIBRARIES", {"t": native.Library("t", "test", ("a.c",), "wheel")})
    libs = arena / "site" / "xputune" / "kernels" / "libs"
    libs.mkdir(parents=True)
    for folder in (libs, *libs.parents):
        if folder == arena:
            break
        folder.chmod(0o755)
    monkeypatch.setattr(native, "PACKAGED_DIR", libs)
    monkeypatch.setenv("XPUTUNE_CACHE_DIR", str(tmp_path / "cache"))
    return libs / native.packaged_name(native.LIBRARIES["t"], build.source_dir())


def _compiled_by_root(evil_source: Path, target: Path) -> None:
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(target), str(evil_source)], check=True)
    target.chmod(0o755)


def _installed_group_writable(installed: Path, evil: Path, arena: Path) -> None:
    libs = installed.parent  # the one folder left open: the attacker's group may write
    os.chown(libs, 0, NOBODY)
    libs.chmod(0o775)
    as_attacker("gcc", "-shared", "-fPIC", "-o", str(installed), str(evil))


def _installed_theirs(installed: Path, evil: Path, arena: Path) -> None:
    _compiled_by_root(evil, installed)
    os.chown(installed, NOBODY, NOBODY)  # the file alone is another user's


def _their_folder(arena: Path) -> Path:
    folder = arena / "evil"
    folder.mkdir()
    os.chown(folder, NOBODY, NOBODY)
    return folder


def _installed_symlink(installed: Path, evil: Path, arena: Path) -> None:
    plant_library(evil, _their_folder(arena), "lib.so")
    installed.symlink_to(arena / "evil" / "lib.so")


def _installed_libs_symlink(installed: Path, evil: Path, arena: Path) -> None:
    plant_library(evil, _their_folder(arena), installed.name)
    installed.parent.rmdir()
    installed.parent.symlink_to(arena / "evil")  # libs/ itself leads to their folder


def _installed_hard_linked(installed: Path, evil: Path, arena: Path) -> None:
    _compiled_by_root(evil, installed)
    os.link(installed, installed.parent / "second-name")


INSTALLED = {
    "group-writable-libs": (_installed_group_writable, "libs is writable by others (mode 0775)"),
    "another-owner": (_installed_theirs, "owned by uid 65534, not by root or this user (uid 0)"),
    "symlinked-library": (_installed_symlink, "(a symbolic link)"),
    "symlinked-libs": (_installed_libs_symlink, "/evil is owned by uid 65534"),
    "hard-linked": (_installed_hard_linked, "(2 hard links)"),
}


@pytest.mark.parametrize("attack", list(INSTALLED))
def test_a_planted_installed_library_is_never_loaded(
    attack: str,
    installed: Path,
    arena: Path,
    marker: Path,
    evil_source: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    plant, why = INSTALLED[attack]
    plant(installed, evil_source, arena)
    capsys.readouterr()
    lib = build.load_native("t")
    assert not marker.exists(), "the planted library ran as root"
    assert lib.v() == 1  # built from the sources on first use; the planted one returns 666
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("xputune: warning: installed ") and why in line, line
    assert line.endswith("; built on first use instead"), line
    assert [o.status for o in build.build_all()] == ["built"]


def test_a_clean_installed_library_is_loaded(
    installed: Path, marker: Path, evil_source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: root's own library, installed as pip installs it, is loaded, unbuilt.

    So the tests above can fail: the same planted code, placed as a trusted install would
    place it, runs (its constructor writes the marker).
    """
    _compiled_by_root(evil_source, installed)
    capsys.readouterr()
    lib = build.load_native("t")
    assert lib.v() == 666 and marker.exists()
    assert lib._name.startswith("/proc/self/fd/")
    assert os.path.samestat(os.stat(lib._name), installed.stat())
    assert capsys.readouterr().err == ""
    assert [o.status for o in build.build_all()] == ["installed"]


# -- a poisoned parsed profile ------------------------------------------------------------------


def _apply_plan(run_cli) -> tuple[int, str, str]:
    return run_cli("apply", "--example", "h3c-hygon-p800", "--profile", "hygon-p800", "--dry-run")


def _profile() -> tuple[str, str, object]:
    """hygon-p800's entry name, text and parsed form."""
    import yaml

    path = profiles.locate("hygon-p800")
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    return profiles._cache_entry(path) or "", text, yaml.safe_load(text)


def _poisoned_entry(tmp_path: Path) -> tuple[Path, bytes]:
    """The entry a run would keep for hygon-p800.yaml, forged: THP never, IDO not managed."""
    name, text, raw = _profile()
    raw["knobs"] = {"pcie.ido": None, "thp.enabled": {"value": "never", "severity": "warn"}}
    return tmp_path / "cache" / "profiles" / name, usercache.pack((text, raw))


def _plant(kind: str, entry: Path, blob: bytes) -> None:
    """Left by the attacker while the folder was open to them (or by a careless root)."""
    entry.write_bytes(blob)
    if kind == "owned-by-another-uid":
        os.chown(entry, NOBODY, NOBODY)
    elif kind == "group-writable":
        entry.chmod(0o620)
    elif kind == "hard-linked":
        os.link(entry, entry.parent / "second-name")
    elif kind == "symlink":
        real = entry.with_name("elsewhere")
        entry.rename(real)
        entry.symlink_to(real.name)


@pytest.mark.parametrize(
    "kind", ["owned-by-another-uid", "group-writable", "hard-linked", "symlink"]
)
def test_a_poisoned_profile_entry_is_not_believed(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli
) -> None:
    monkeypatch.setenv("XPUTUNE_CACHE", "off")
    want = _apply_plan(run_cli)  # parsed from the YAML itself
    assert want[0] == 1 and "dry run: " in want[1]
    monkeypatch.delenv("XPUTUNE_CACHE")
    monkeypatch.setenv("XPUTUNE_CACHE_DIR", str(tmp_path / "cache"))
    _apply_plan(run_cli)  # makes the folders and the honest entries
    entry, forged = _poisoned_entry(tmp_path)
    _plant(kind, entry, forged)

    code, out, err = _apply_plan(run_cli)
    assert (code, out) == want[:2]  # the profile's whole plan, not the poisoned one
    assert err.count("xputune: warning: ") == 1 and f"cache entry {entry} refused" in err
    assert not entry.is_symlink()
    st = entry.stat()
    assert (st.st_uid, st.st_mode & 0o777, st.st_nlink) == (0, 0o600, 1)  # rewritten, ours
    name, text, raw = _profile()
    assert usercache.load("profiles", name, 1 << 20) == (text, raw)


def test_the_forged_entry_would_change_the_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli
) -> None:
    """The control: the same bytes, kept as root keeps its own entries, are believed.

    Only the owner can write there, which is what the tests above rely on; this one shows
    the forged content would matter, so they can fail.
    """
    monkeypatch.setenv("XPUTUNE_CACHE_DIR", str(tmp_path / "cache"))
    want = _apply_plan(run_cli)
    entry, forged = _poisoned_entry(tmp_path)
    entry.write_bytes(forged)
    code, out, _ = _apply_plan(run_cli)
    assert code == 1 and out != want[1]
    assert "thp.enabled" not in out or "never" in out
