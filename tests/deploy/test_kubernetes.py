"""deploy/kubernetes: every manifest is valid against a current Kubernetes' own schemas, the
container's xputune arguments parse with the real CLI, and the pieces agree with each other.

The schemas are the ones kubernetes-validate ships (OpenAPI of each Kubernetes release turned
into JSON Schema); strict mode refuses keys the API does not know, so a typo such as
`tolerationz` or a field in the wrong place fails here, not at `kubectl apply` time.
"""

from __future__ import annotations

import copy
import importlib.metadata as md
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import typer
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import xputune
from xputune.cli.app import app
from xputune.fleet.labels import FILE_NAME as NFD_FILE

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
#: The newest Kubernetes whose schemas kubernetes-validate ships (asserted recent below).
VERSION = kubernetes_validate.latest_version()
OLDEST_ACCEPTABLE = (1, 33)  # released 2025-04; the package tracks each release
METRICS_FILE = "xputune.prom"  # `xputune metrics --textfile DIR` writes DIR/xputune.prom


def _lock_script():
    """deploy/lock-requirements.py, which writes requirements.txt (its rules, not a copy)."""
    spec = importlib.util.spec_from_file_location("lock", ROOT / "deploy" / "lock-requirements.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


LOCK = _lock_script()


def _yaml_files() -> list[Path]:
    return sorted(p for p in KUBE.rglob("*") if p.suffix in (".yaml", ".yml"))


def _documents() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in _yaml_files():
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc is not None:
                out.append((f"{path.relative_to(KUBE)}#{i}", doc))
    return out


def _objects() -> list[tuple[str, dict[str, Any]]]:
    """Every Kubernetes API object (the kustomization is kustomize's, not the API's)."""
    return [(w, d) for w, d in _documents() if d.get("kind") != "Kustomization"]


def _one(kind: str) -> dict[str, Any]:
    [doc] = [d for _, d in _objects() if d["kind"] == kind]
    return doc


def _daemonset() -> dict[str, Any]:
    return _one("DaemonSet")


def _container() -> dict[str, Any]:
    [container] = _daemonset()["spec"]["template"]["spec"]["containers"]
    return container


def test_the_schemas_are_of_a_current_kubernetes() -> None:
    major, minor = (int(x) for x in VERSION.split(".")[:2])
    assert (major, minor) >= OLDEST_ACCEPTABLE, VERSION


@pytest.mark.parametrize(("where", "doc"), _objects(), ids=[w for w, _ in _objects()])
def test_every_manifest_validates_strictly(where: str, doc: dict[str, Any]) -> None:
    used = kubernetes_validate.validate(doc, VERSION, strict=True)
    assert used == ".".join(VERSION.split(".")[:2])  # that release's schema, not an older one


def test_the_manifests_are_found_and_a_typo_fails() -> None:
    kinds = sorted(d["kind"] for _, d in _objects())
    assert kinds == ["DaemonSet", "Namespace", "ServiceAccount"]
    bad = copy.deepcopy(_daemonset())
    pod = bad["spec"]["template"]["spec"]
    pod["tolerationz"] = pod.pop("tolerations")
    with pytest.raises(kubernetes_validate.ValidationError, match="tolerationz"):
        kubernetes_validate.validate(bad, VERSION, strict=True)
    bad = copy.deepcopy(_daemonset())
    bad["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] = "yes"
    with pytest.raises(kubernetes_validate.ValidationError, match="is not of type 'boolean'"):
        kubernetes_validate.validate(bad, VERSION, strict=True)


def test_kustomization_lists_every_manifest_and_pins_the_image() -> None:
    [(_, kustomization)] = [(w, d) for w, d in _documents() if d.get("kind") == "Kustomization"]
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    others = {str(p.relative_to(KUBE)) for p in _yaml_files()} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(others)
    namespace = _one("Namespace")["metadata"]["name"]
    assert kustomization["namespace"] == namespace
    for _, doc in _objects():
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == namespace
    [image] = kustomization["images"]
    assert _container()["image"] == f"{image['name']}:{image['newTag']}"
    assert image["newTag"] == xputune.__version__  # the manifests ship with their release


def test_no_api_access_by_design() -> None:
    account = _one("ServiceAccount")
    pod = _daemonset()["spec"]["template"]["spec"]
    assert account["automountServiceAccountToken"] is False
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert not [d for _, d in _objects() if "Role" in d["kind"]]  # no RBAC at all


def test_pod_shape_privileged_scheduled_on_accelerators_with_limits() -> None:
    pod = _daemonset()["spec"]["template"]["spec"]
    container = _container()
    assert container["securityContext"]["privileged"] is True
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert {"cpu", "memory"} <= set(container["resources"]["limits"])
    assert pod["tolerations"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    keys = {e["key"] for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]}
    vendors = {re.fullmatch(r"feature\.node\.kubernetes\.io/pci-[0-9a-f]{4}_([0-9a-f]{4})"
                            r"\.present", k).group(1) for k in keys}  # fmt: skip
    assert vendors == {"1d22", "10de"}  # Kunlunxin, NVIDIA
    # A Namespace that admits a privileged pod under Pod Security Admission.
    labels = _one("Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"


def _host_mounts() -> dict[str, tuple[str, bool]]:
    """mountPath -> (host path, read-only) for every hostPath volume."""
    pod = _daemonset()["spec"]["template"]["spec"]
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    return {m["mountPath"]: (host[m["name"]], bool(m.get("readOnly")))
            for m in _container()["volumeMounts"] if m["name"] in host}  # fmt: skip


def _watch_args() -> list[str]:
    container = _container()
    argv = [*container.get("command", []), *container.get("args", [])]
    assert argv[0] == "xputune"
    return argv[1:]


def _parse(argv: list[str]) -> dict[str, Any]:
    """The parameters xputune's own CLI parses from argv (`CMD FLAGS...`), without running it:
    an unknown or renamed flag, a missing value or a bad type raises here."""
    group = typer.main.get_command(app)
    command = group.commands[argv[0]]  # type: ignore[attr-defined]
    with command.make_context(f"xputune {argv[0]}", list(argv[1:])) as ctx:
        return dict(ctx.params)


def test_container_arguments_parse_with_the_real_cli() -> None:
    argv = _watch_args()
    assert argv[0] == "watch"
    params = _parse(argv)
    assert params["textfile"] and params["nfd"]
    assert params.get("root") is None  # the live host, never a recording
    with pytest.raises(typer.TyperException, match="--textfil"):
        _parse([a.replace("--textfile", "--textfil") for a in argv])


def test_the_files_the_agent_writes_are_the_host_s() -> None:
    params = _parse(_watch_args())
    mounts = _host_mounts()
    for folder in (params["textfile"], params["nfd"]):
        assert mounts[folder] == (folder, False)  # same path inside and out, writable
    assert params["nfd"] == "/etc/kubernetes/node-feature-discovery/features.d"
    probe = _container()["readinessProbe"]["exec"]["command"]
    assert probe[-2] == f"{params['textfile']}/{METRICS_FILE}"
    assert float(probe[-1]) >= 2 * params["interval"]  # a late pass is not yet "stuck"
    assert NFD_FILE == "xputune" and not NFD_FILE.startswith(".")  # NFD skips dot files


def test_readiness_probe_is_ready_only_while_passes_complete(tmp_path: Path) -> None:
    """The probe's own command, run here: fresh file ready, stale or missing file not."""
    probe = _container()["readinessProbe"]["exec"]["command"]
    assert probe[0] == "python3" and probe[1] == "-c"
    metrics = tmp_path / METRICS_FILE

    def ready() -> int:
        argv = [sys.executable, *probe[1:-2], str(metrics), probe[-1]]
        return subprocess.run(argv, capture_output=True, timeout=30).returncode

    assert ready() != 0  # no pass yet
    metrics.write_text("xputune_cards 8\n")
    assert ready() == 0
    old = time.time() - float(probe[-1]) - 5
    os.utime(metrics, (old, old))
    assert ready() == 1


def test_host_paths_the_knobs_and_journal_need() -> None:
    mounts = _host_mounts()
    assert mounts["/sys"] == ("/sys", False)  # config space, THP
    assert mounts["/dev/shm"] == ("/dev/shm", False)  # huge= remount
    assert mounts["/var/lib/xputune"] == ("/var/lib/xputune", False)  # the journal
    assert mounts["/etc/machine-id"] == ("/etc/machine-id", True)  # the journal's owner
    assert mounts["/run/udev"] == ("/run/udev", True)  # pyudev's device database


def _instructions(text: str) -> list[tuple[str, str]]:
    """A Containerfile's instructions (continuations joined, comments dropped)."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word, rest.strip()))
    assert not pending, "a continuation runs off the end of the file"
    return out


KNOWN = {"FROM", "ARG", "RUN", "COPY", "ADD", "ENV", "ENTRYPOINT", "CMD", "LABEL", "USER"}
KNOWN |= {"WORKDIR", "EXPOSE", "VOLUME", "STOPSIGNAL", "HEALTHCHECK", "SHELL", "ONBUILD"}


def test_containerfile_pins_its_base_and_installs_by_hash() -> None:
    text = (KUBE / "Containerfile").read_text()
    steps = _instructions(text)
    assert steps[0][0] == "FROM" and all(word in KNOWN for word, _ in steps), steps
    # The base by digest (a tag alone can be moved to other bytes); bookworm, a Python the
    # hashed requirements cover.
    base = re.fullmatch(r"python:(3\.\d+)-slim-bookworm@sha256:([0-9a-f]{64})", steps[0][1])
    assert base, steps[0][1]
    assert base.group(1) in LOCK.PYTHONS
    [install] = [a for w, a in steps if w == "RUN" and "pip install" in a]
    shlex.split(install)  # balanced quotes
    assert "--mount=type=bind,target=/ctx" in install
    deps, own = [c.strip() for c in install.split("&&")][:2]
    assert deps.endswith("pip install --no-cache-dir --require-hashes --only-binary=:all: "
                         "-r /ctx/requirements.txt")  # fmt: skip
    assert own == 'pip install --no-cache-dir --no-deps --no-index "/ctx/${XPUTUNE_WHEEL}"'
    assert "pip check" in install and "xputune --version" in install
    args = dict(a.split("=", 1) for w, a in steps if w == "ARG")
    assert json.loads(args["XPUTUNE_WHEEL"]) == f"xputune-{xputune.__version__}-py3-none-any.whl"
    entry = [json.loads(a) for w, a in steps if w == "ENTRYPOINT"]
    assert entry == [["xputune"]] and json.loads(dict(steps)["CMD"])[0] == "watch"
    # The build command in its header tags the image the DaemonSet runs, after the wheel.
    assert f"-t {_container()['image']} " in text
    assert "pip wheel --no-deps -w deploy/kubernetes ." in text
    assert (KUBE / ".gitignore").read_text().splitlines()[-1] == "*.whl"  # never committed


def _locked() -> dict[str, tuple[str, list[str]]]:
    """requirements.txt: name -> (version, hashes), continuation lines joined."""
    text = (KUBE / "requirements.txt").read_text().replace("\\\n", " ")
    out = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        spec, *rest = line.split()
        name, _, version = spec.partition("==")
        assert version and all(r.startswith("--hash=sha256:") for r in rest), line
        hashes = [r.removeprefix("--hash=sha256:") for r in rest]
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), line
        assert len(set(hashes)) == len(hashes), line
        out[canonicalize_name(name)] = (version, hashes)
    return out


def test_requirements_pin_every_runtime_dependency_with_hashes() -> None:
    locked = _locked()
    assert "xputune" not in locked  # xputune comes from the checkout's wheel
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    direct = [Requirement(d) for d in declared["dependencies"]]
    direct += [Requirement(d) for d in declared["optional-dependencies"]["udev"]]
    for req in direct:
        version, _ = locked[canonicalize_name(req.name)]
        assert req.specifier.contains(version), (req, version)
    # Where this environment has a locked version installed, what it needs is locked too
    # (and satisfied): the lock is whole for the versions xputune is tested with.
    checked = 0
    for name, (version, _) in locked.items():
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        if dist.version != version:
            continue
        checked += 1
        for line in dist.requires or ():
            req = Requirement(line)
            if LOCK._needed(req, frozenset()):
                assert canonicalize_name(req.name) in locked, (name, req)
                assert req.specifier.contains(locked[canonicalize_name(req.name)][0]), req
    print(f"\n{len(locked)} locked, {checked} checked against their installed metadata, "
          f"{sum(len(h) for _, h in locked.values())} hashes")  # fmt: skip
    assert checked >= len(direct)
    # Compiled wheels differ per Python and machine: one hash for each that pip may pick.
    for name in ("numpy", "pyyaml", "msgspec"):
        assert len(locked[name][1]) >= len(LOCK.PYTHONS) * len(LOCK.MACHINES), name


def test_one_pass_of_the_pod_s_command_on_a_recording(tmp_path: Path) -> None:
    """The container's arguments, run once on a copy of a recording (the pod runs them on
    the live node): drift re-applied, and both files the node's agents read are written."""
    from prometheus_client.parser import text_string_to_metric_families

    from tests.fixtures.trees import copy_tree
    from xputune.cli.entry import main
    from xputune.fleet.labels import parse_feature_file

    params = _parse(_watch_args())
    tree = copy_tree("small-base", tmp_path / "node")
    moved = {params["textfile"]: tmp_path / "textfile", params["nfd"]: tmp_path / "features.d"}
    for folder in moved.values():
        folder.mkdir()
    argv = [str(moved.get(a, a)) for a in _watch_args()]
    assert main([*argv, "--once", "--root", str(tree)]) == 1  # drift found and re-applied
    assert main([*argv, "--once", "--root", str(tree)]) == 0  # the next pass: all holds

    text = (moved[params["textfile"]] / METRICS_FILE).read_text()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"xputune_cards", "xputune_profile_holds"} <= names
    labels = parse_feature_file((moved[params["nfd"]] / NFD_FILE).read_text())
    assert labels["xputune.io/profile-holds"] == "true" and labels["xputune.io/ido"] == "on"
