"""deploy/ansible: the role run for real with ansible-playbook, on a copy of the seed box.

The example playbook (site.yml) runs against localhost (connection local) with the role's
install step off (xputune_install: false; xputune_bin is this environment's xputune) and
xputune_root pointing at a writable copy of the seed's recording, so apply, check and rollback
change that tree and nothing else. Run twice: the first run applies (changed), the second
finds nothing to do (ok, changed=0); `xputune check` then holds. Then check mode and rollback.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.fixtures.trees import copy_tree

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE = ROOT / "deploy" / "ansible"
ROLE = ANSIBLE / "roles" / "xputune"
XPUTUNE = Path(sys.executable).with_name("xputune")
PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")
RECAP = re.compile(r"^(localhost\s*:.*)$", re.M)


def _playbook(tmp: Path, tree: Path, *extra: str, **variables: object) -> tuple[str, dict]:
    """Run site.yml on localhost; (the recap line, its counters). Fails on a failed run."""
    assert PLAYBOOK.is_file(), "ansible-core is in the test extra: pip install -e '.[test]'"
    inventory = tmp / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"accelerators": {"hosts": {"localhost": {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "ansible_become": False,  # the tree is ours; the play's become is for real hosts
    }}}}))  # fmt: skip
    extra_vars = {"xputune_install": False, "xputune_bin": str(XPUTUNE),
                  "xputune_root": str(tree), **variables}  # fmt: skip
    home = tmp / "home"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LC_ALL": "C.UTF-8",
        "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
        "ANSIBLE_REMOTE_TEMP": str(home / "remote-tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_CONFIG": str(tmp / "none.cfg"),  # no ansible.cfg of the machine or the cwd
        "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME", str(home / "cache")),
        # root's xputune caches in /var/cache/xputune unless told otherwise
        "XPUTUNE_CACHE_DIR": os.environ.get("XPUTUNE_CACHE_DIR", str(home / "cache" / "xputune")),
    }
    proc = subprocess.run(
        [str(PLAYBOOK), "-i", str(inventory), "-e", json.dumps(extra_vars), *extra,
         str(ANSIBLE / "site.yml")],
        env=env, cwd=tmp, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    [recap] = RECAP.findall(proc.stdout)
    counts = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", recap)}
    return recap.strip(), counts


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return copy_tree("h3c-hygon-p800", tmp_path / "seed")


def _check(tree: Path, *select: str) -> tuple[int, dict]:
    proc = subprocess.run([str(XPUTUNE), "check", "--root", str(tree), "-f", "json", *select],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    return proc.returncode, json.loads(proc.stdout)


def test_first_run_changes_second_run_is_ok_and_the_profile_holds(
    tree: Path, tmp_path: Path
) -> None:
    code, before = _check(tree)
    assert code == 1 and not before["ok"]

    first, counts = _playbook(tmp_path, tree)
    assert counts["changed"] >= 1 and counts["failed"] == 0, first
    second, counts = _playbook(tmp_path, tree)
    assert counts["changed"] == 0 and counts["failed"] == 0 and counts["ok"] >= 1, second

    code, after = _check(tree)
    assert code == 0 and after["ok"], after
    assert {r["knob"] for r in after["rows"]} >= {"pcie.ido", "persist"}
    assert (tree / "etc/systemd/system/xputune.service").is_file()  # --persist, in the tree
    print(f"\nfirst run:  {first}\nsecond run: {second}")  # the two runs' summaries, shown with -s


def test_check_mode_predicts_without_writing_and_absent_rolls_back(
    tree: Path, tmp_path: Path
) -> None:
    _, counts = _playbook(tmp_path, tree, "--check")
    assert counts["changed"] >= 1  # apply --dry-run plans changes
    assert _check(tree)[0] == 1 and not (tree / "var/lib/xputune").exists()

    _playbook(tmp_path, tree)
    _, counts = _playbook(tmp_path, tree, xputune_state="absent")
    assert counts["changed"] == 1  # the rollback
    assert _check(tree)[0] == 1
    assert not (tree / "etc/systemd/system/xputune.service").exists()
    _, counts = _playbook(tmp_path, tree, xputune_state="absent")
    assert counts["changed"] == 0  # nothing left to roll back


def test_skip_and_profile_reach_the_command_line(tree: Path, tmp_path: Path) -> None:
    _, counts = _playbook(tmp_path, tree, xputune_profile="hygon-p800", xputune_skip=["pcie.ido"])
    assert counts["changed"] >= 1
    assert _check(tree, "--profile", "hygon-p800", "--skip", "pcie.ido")[0] == 0
    code, doc = _check(tree)  # the whole profile: IDO was left alone, the units say so
    assert code == 1
    assert {r["knob"] for r in doc["rows"] if r["verdict"] != "ok"} == {"pcie.ido", "persist"}
    watch_unit = (tree / "etc/systemd/system/xputune-watch.service").read_text()
    assert "watch --profile hygon-p800 --skip pcie.ido" in watch_unit


def test_the_role_has_its_parts() -> None:
    for part in ("tasks/main.yml", "defaults/main.yml", "meta/main.yml", "handlers/main.yml"):
        assert yaml.safe_load((ROLE / part).read_text()), part
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    assert {"xputune_profile", "xputune_root", "xputune_state", "xputune_venv",
            "xputune_install", "xputune_bin", "xputune_wheel"} <= set(defaults)  # fmt: skip
    assert defaults["xputune_persist"] is True and defaults["xputune_watch"] is True


def test_the_install_takes_dependencies_by_hash_and_xputune_from_its_wheel() -> None:
    """Nothing unpinned from the index: the dependencies by the hashes of the same file the
    container image installs, xputune from a wheel without the index."""
    files = ROLE / "files" / "requirements.txt"
    kube = ROOT / "deploy" / "kubernetes" / "requirements.txt"
    assert files.is_symlink() and files.resolve() == kube.resolve()  # one lock, two users
    tasks = yaml.safe_load((ROLE / "tasks" / "install.yml").read_text())
    pips = [t["ansible.builtin.pip"] for t in tasks if "ansible.builtin.pip" in t]
    assert len(pips) == 2
    deps, own = pips
    assert deps["requirements"] == "{{ xputune_venv }}/requirements.txt"
    assert deps["extra_args"].split() == ["--require-hashes", "--only-binary=:all:"]
    assert "name" not in deps
    assert own["name"] == "{{ xputune_venv }}/{{ xputune_wheel | basename }}"
    assert sorted(own["extra_args"].split()) == ["--no-deps", "--no-index"]
    copies = [t["ansible.builtin.copy"] for t in tasks if "ansible.builtin.copy" in t]
    assert {c["src"] for c in copies} == {"requirements.txt", "{{ xputune_wheel }}"}


def test_installing_without_a_wheel_is_refused_first(tree: Path, tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"accelerators": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "ansible_become": False}}}}))  # fmt: skip
    extra = {"xputune_install": True, "xputune_venv": str(tmp_path / "venv"),
             "xputune_root": str(tree)}  # fmt: skip
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "home"),
           "LC_ALL": "C.UTF-8", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CONFIG": str(tmp_path / "none.cfg")}  # fmt: skip
    proc = subprocess.run(
        [str(PLAYBOOK), "-i", str(inventory), "-e", json.dumps(extra), str(ANSIBLE / "site.yml")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "xputune_install needs xputune_wheel" in proc.stdout
    assert not (tmp_path / "venv").exists() and not (tree / "var/lib/xputune").exists()


TASK_KEYWORDS = {"name", "register", "when", "changed_when", "failed_when", "check_mode",
                 "notify", "loop", "vars", "become", "tags", "listen"}  # fmt: skip


def test_every_module_ships_with_ansible_core() -> None:
    """The role needs no collection: each task's module is an ansible.builtin one that exists
    (the tests run only the --root path, so the live-host tasks are checked here)."""
    import importlib.util

    seen = set()
    for path in [*(ROLE / "tasks").glob("*.yml"), ROLE / "handlers" / "main.yml"]:
        for task in yaml.safe_load(path.read_text()):
            [module] = set(task) - TASK_KEYWORDS
            assert module.startswith("ansible.builtin."), (path.name, module)
            name = module.removeprefix("ansible.builtin.")
            assert importlib.util.find_spec(f"ansible.modules.{name}"), module
            seen.add(name)
    assert {"pip", "command", "systemd_service"} <= seen
