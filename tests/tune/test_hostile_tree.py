"""A tampered journal or a hostile tree cannot turn apply/rollback into writes outside the root.

Each attack runs through the CLI as an operator would, and asserts the exit code, a single
line on stderr, and that nothing outside the root (and nothing in it but the state dir) changed.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from tests.tune import minihost
from xputune.tune import persist
from xputune.tune.journal import checksum

STATE = "var/lib/xputune"
JOURNAL = f"{STATE}/journal.json"


@pytest.fixture
def box(mini, tmp_path):
    """(root, outside): the mini host and a directory next to it with a victim file."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("precious\n")
    return mini, str(outside)


def _tree(path: str) -> dict[str, bytes]:
    """Every entry under path (files by bytes and mode, links by target, dirs by mode)."""
    out = {}
    for folder, dirs, files in os.walk(path):
        for name in dirs + files:
            full = os.path.join(folder, name)
            st = os.lstat(full)
            rel = os.path.relpath(full, path)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = b"->" + os.readlink(full).encode()
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = f"<dir {st.st_mode:o}>".encode()
            else:
                with open(full, "rb") as fh:
                    out[rel] = f"{st.st_mode:o}:".encode() + fh.read()
    return out


def _world(tmp_path) -> dict[str, bytes]:
    """All of tmp_path except the state dir's own files (the lock is always created)."""
    return {k: v for k, v in _tree(str(tmp_path)).items() if "/var/lib/xputune" not in k}


def _load(root: str) -> dict:
    with open(os.path.join(root, JOURNAL)) as fh:
        return json.load(fh)


def _save(root: str, data: dict, reseal: bool = True) -> None:
    if reseal:
        data["checksum"] = checksum(data["transactions"], data.get("host_id", ""))
    with open(os.path.join(root, JOURNAL), "w") as fh:
        json.dump(data, fh)


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _applied(root: str, run_cli, *extra: str) -> dict:
    code, _, err = run_cli("apply", "--root", root, "--only", "numa.balancing", *extra)
    assert code == 0, err
    return _load(root)


def _refused(run_cli, tmp_path, root, *args: str, code: int = 6) -> str:
    before = _world(tmp_path)
    got, _, err = run_cli(*args, "--root", root)
    assert got == code, err
    assert _world(tmp_path) == before
    return _one_line(err)


PERSIST_STEP = {
    "n": 9,
    "knob": "persist",
    "label": "x",
    "new": None,
    "original_raw": None,
    "done": False,
    "original_text": "",
}


@pytest.mark.parametrize(
    ("name", "step", "says"),
    [
        (
            "setuid file outside the root",
            {"kind": "file", "target": {"path": "/../../outside/x", "mode": 0o4755},
             "original": "#!/bin/sh\n"},
            "persist may only write",
        ),
        (
            "setuid unit",
            {"kind": "file", "target": {"path": persist.UNIT_PATH, "mode": 0o4755},
             "original": "#!/bin/sh\n"},
            "mode 0644",
        ),
        (
            "original null deletes outside",
            {"kind": "file", "target": {"path": "/../../outside/victim",
                                        "created_dirs": ["/../../outside"]},
             "original": None},
            "persist may only write",
        ),
        (
            "created_dirs outside",
            {"kind": "file", "target": {"path": persist.UNIT_PATH,
                                        "created_dirs": ["/../../outside", "/etc"]},
             "original": None},
            "created_dirs names '/../../outside'",
        ),
        (
            "symlink to /etc/shadow",
            {"kind": "symlink", "target": {"path": persist.WANTS_LINK},
             "original": "/etc/shadow"},
            "is not an xputune.service unit",
        ),
        (
            "symlink elsewhere",
            {"kind": "symlink", "target": {"path": "/../../outside/link"},
             "original": "/etc/shadow"},
            "persist may only link",
        ),
    ],
)  # fmt: skip
def test_tampered_persist_steps_are_refused_before_anything_runs(
    box, tmp_path, run_cli, name, step, says
):
    root, _ = box
    data = _applied(root, run_cli)
    data["transactions"][0]["steps"].append({**PERSIST_STEP, **step})
    _save(root, data)
    line = _refused(run_cli, tmp_path, root, "rollback")
    assert says in line and "nothing was changed" in line
    assert not os.path.exists(os.path.join(tmp_path, "outside/x"))


def _pci_applied(root: str, run_cli) -> dict:
    code, _, err = run_cli("apply", "--root", root, "--only", "pcie.ido")
    assert code == 0, err
    return _load(root)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"offset": 4, "mask": 7}, "owns only bits 8-9"),
        ({"offset": 4, "mask": 7, "field": ""}, "standard header"),
        ({"offset": 4, "mask": 0x300}, "is not Device Control 2"),
        ({"offset": "0x68"}, "is not an integer"),
        ({"offset": 0x69}, "not an aligned"),
        ({"offset": 104.0}, "is not an integer"),
        ({"offset": True}, "is not an integer"),
        ({"width": 3}, "is not 1, 2 or 4"),
        ({"mask": 0x0700}, "owns only bits 8-9"),
        ({"field": "devctl"}, "owns no bits of field"),
        ({"path": "/sys/devices/pci0000:00/../../../outside/config"}, "config file"),
        ({"path": "/sys/kernel/mm/transparent_hugepage/enabled"}, "config file"),
    ],
)
def test_tampered_pci_steps_are_refused(box, tmp_path, run_cli, change, says):
    root, _ = box
    data = _pci_applied(root, run_cli)
    data["transactions"][0]["steps"][0]["target"].update(change)
    _save(root, data)
    assert says in _refused(run_cli, tmp_path, root, "rollback")


def test_a_pci_step_on_a_function_off_the_cards_paths_is_refused(box, tmp_path, run_cli):
    root, _ = box
    data = _pci_applied(root, run_cli)
    step = data["transactions"][0]["steps"][0]
    # Any other function with a PCIe capability: the card's own config, copied to a new BDF.
    src = os.path.join(root, step["target"]["path"].lstrip("/"))
    stranger = os.path.join(root, "sys/devices/pci0000:00/0000:00:07.0")
    os.makedirs(stranger)
    shutil.copy(src, os.path.join(stranger, "config"))
    step["target"]["path"] = "/sys/devices/pci0000:00/0000:00:07.0/config"
    _save(root, data)
    assert "neither a card nor a port" in _refused(run_cli, tmp_path, root, "rollback")


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s: s.pop("kind"),
        lambda s: s["target"].pop("mask"),
        lambda s: s.update(extra=1),
        lambda s: s.update(original="3"),
        lambda s: s.update(knob="evil"),
        lambda s: s.update(target=["/etc/shadow"]),
    ],
    ids=["no kind", "no mask", "unknown key", "string original", "unknown knob", "list target"],
)
def test_missing_keys_and_wrong_types_are_one_line(box, tmp_path, run_cli, mutate):
    root, _ = box
    data = _pci_applied(root, run_cli)
    mutate(data["transactions"][0]["steps"][0])
    _save(root, data)
    line = _refused(run_cli, tmp_path, root, "rollback")
    assert "journal" in line


def test_an_edited_journal_fails_its_checksum(box, tmp_path, run_cli):
    root, _ = box
    data = _applied(root, run_cli)
    data["transactions"][0]["steps"][0]["original"] = 0
    _save(root, data, reseal=False)
    line = _refused(run_cli, tmp_path, root, "rollback")
    assert "checksum does not match" in line
    line = _refused(run_cli, tmp_path, root, "apply")
    assert "checksum does not match" in line


def test_a_journal_from_another_host_is_refused(box, tmp_path, run_cli):
    root, _ = box
    os.makedirs(os.path.join(root, "etc"), exist_ok=True)
    with open(os.path.join(root, "etc/machine-id"), "w") as fh:
        fh.write("a" * 32 + "\n")
    data = _applied(root, run_cli)
    assert data["host_id"] == "a" * 32
    with open(os.path.join(root, "etc/machine-id"), "w") as fh:
        fh.write("b" * 32 + "\n")
    line = _refused(run_cli, tmp_path, root, "rollback")
    assert "was written on host 'aaaa" in line and "this is 'bbbb" in line


# -- symlinked state pieces ----------------------------------------------------------------
def _plant(root: str, rel: str, target: str) -> None:
    path = os.path.join(root, rel)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.symlink(target, path)


@pytest.mark.parametrize(
    ("rel", "to_outside", "args"),
    [
        ("etc", True, ("apply", "--persist")),
        ("etc/systemd", True, ("apply", "--persist")),
        ("etc/systemd/system", True, ("apply", "--persist")),
        ("var/lib", True, ("apply",)),
        ("var", True, ("apply",)),
        ("var/lib/xputune", True, ("apply",)),
        ("var/lib/xputune/lock", False, ("apply",)),
        ("var/lib/xputune/journal.json", False, ("apply",)),
        ("var/lib/xputune", True, ("rollback",)),
        ("var/lib/xputune/lock", False, ("rollback",)),
    ],
)
def test_symlinked_state_and_unit_paths_are_refused(box, tmp_path, run_cli, rel, to_outside, args):
    root, outside = box
    if args[0] == "rollback":
        _applied(root, run_cli)
        if rel == "var/lib/xputune":
            os.rename(os.path.join(root, rel), os.path.join(outside, "moved"))
    target = outside if to_outside else os.path.join(outside, "victim")
    _plant(root, rel, target)
    before = _world(tmp_path)
    code, _, err = run_cli(*args, "--root", root)
    assert code != 0
    line = _one_line(err)
    assert "symlink" in line
    assert _world(tmp_path) == before
    with open(os.path.join(outside, "victim")) as fh:
        assert fh.read() == "precious\n"


def test_state_dir_is_0700_and_a_foreign_or_open_one_is_refused(box, tmp_path, run_cli):
    root, _ = box
    _applied(root, run_cli)
    folder = os.path.join(root, STATE)
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert os.stat(folder).st_uid == os.getuid()
    os.chmod(folder, 0o777)
    line = _refused(run_cli, tmp_path, root, "rollback", code=2)
    assert "writable by others" in line
    if os.getuid() == 0:
        os.chmod(folder, 0o700)
        os.chown(folder, 12345, 12345)
        assert "owned by uid 12345" in _refused(run_cli, tmp_path, root, "rollback", code=2)


def test_tmp_files_of_a_killed_writer_are_cleaned_at_the_next_apply(box, run_cli):
    root, _ = box
    _applied(root, run_cli)
    stale = [
        f"{JOURNAL}.tmp.999999",
        f"{persist.UNIT_PATH.lstrip('/')}.tmp.424242",
    ]
    for rel in stale:
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        with open(os.path.join(root, rel), "w") as fh:
            fh.write("half")
    code, _, err = run_cli("apply", "--root", root, "--persist")
    assert code == 0, err
    assert not [rel for rel in stale if os.path.exists(os.path.join(root, rel))]
    with open(os.path.join(root, f"{JOURNAL}.tmp.1"), "w") as fh:
        fh.write("half")
    assert run_cli("rollback", "--root", root)[0] == 0
    assert not os.path.exists(os.path.join(root, f"{JOURNAL}.tmp.1"))


def test_kill_during_a_journal_write_leaves_no_tmp_after_rollback(box, tmp_path):
    root, _ = box
    start = minihost.snapshot(root)
    env = {**os.environ, "XPUTUNE_TEST_CRASH_AT_STEP": "2:after"}
    cmd = [sys.executable, "-m", "xputune", "apply", "--root", root]
    assert subprocess.run(cmd, env=env, capture_output=True, check=False).returncode == -9
    with open(os.path.join(root, f"{JOURNAL}.tmp.77"), "w") as fh:
        fh.write("{")  # what a kill between create and rename leaves
    cmd = [sys.executable, "-m", "xputune", "rollback", "--root", root]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert minihost.snapshot(root) == start
    assert not [f for f in os.listdir(os.path.join(root, STATE)) if ".tmp." in f]
