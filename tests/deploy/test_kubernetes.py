"""deploy/kubernetes (the watch agent) and deploy/kubernetes/l3 (the L3 tier's Mooncake master
and decode-node donors): every manifest is valid against a current Kubernetes' own schemas, the
containers' xputune arguments parse with the real CLI (and Mooncake's flags with the real
Mooncake binaries), and the pieces agree with each other.

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
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import xputune
from xputune.cli import registry
from xputune.cli.parse import UsageError, parse
from xputune.fleet.labels import FILE_NAME as NFD_FILE

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
L3 = KUBE / "l3"
#: The kustomize folders: each is applied on its own (`kubectl apply -k`).
FOLDERS = (KUBE, L3)
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


def _yaml_files(folder: Path = KUBE) -> list[Path]:
    """The manifests of one kustomize folder (not of the folders inside it)."""
    return sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml"))


def _documents(folder: Path = KUBE) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in _yaml_files(folder):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc is not None:
                out.append((f"{path.relative_to(KUBE)}#{i}", doc))
    return out


def _objects(folder: Path = KUBE) -> list[tuple[str, dict[str, Any]]]:
    """Every Kubernetes API object (the kustomization is kustomize's, not the API's)."""
    return [(w, d) for w, d in _documents(folder) if d.get("kind") != "Kustomization"]


def _all_objects() -> list[tuple[str, dict[str, Any]]]:
    return [found for folder in FOLDERS for found in _objects(folder)]


def _one(kind: str, folder: Path = KUBE) -> dict[str, Any]:
    [doc] = [d for _, d in _objects(folder) if d["kind"] == kind]
    return doc


def _pods(folder: Path) -> list[dict[str, Any]]:
    """The pod templates of a folder's workloads."""
    return [d["spec"]["template"] for _, d in _objects(folder) if "template" in d.get("spec", {})]


def _daemonset() -> dict[str, Any]:
    return _one("DaemonSet")


def _container() -> dict[str, Any]:
    [container] = _daemonset()["spec"]["template"]["spec"]["containers"]
    return container


def test_the_schemas_are_of_a_current_kubernetes() -> None:
    major, minor = (int(x) for x in VERSION.split(".")[:2])
    assert (major, minor) >= OLDEST_ACCEPTABLE, VERSION


@pytest.mark.parametrize(("where", "doc"), _all_objects(), ids=[w for w, _ in _all_objects()])
def test_every_manifest_validates_strictly(where: str, doc: dict[str, Any]) -> None:
    used = kubernetes_validate.validate(doc, VERSION, strict=True)
    assert used == ".".join(VERSION.split(".")[:2])  # that release's schema, not an older one


def test_the_manifests_are_found_and_a_typo_fails() -> None:
    kinds = sorted(d["kind"] for _, d in _objects())
    assert kinds == ["DaemonSet", "Namespace", "ServiceAccount"]
    l3_kinds = sorted(d["kind"] for _, d in _objects(L3))
    assert l3_kinds == ["DaemonSet", "Deployment", "Service", "ServiceAccount"]
    bad = copy.deepcopy(_daemonset())
    pod = bad["spec"]["template"]["spec"]
    pod["tolerationz"] = pod.pop("tolerations")
    with pytest.raises(kubernetes_validate.ValidationError, match="tolerationz"):
        kubernetes_validate.validate(bad, VERSION, strict=True)
    bad = copy.deepcopy(_daemonset())
    bad["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] = "yes"
    with pytest.raises(kubernetes_validate.ValidationError, match="is not of type 'boolean'"):
        kubernetes_validate.validate(bad, VERSION, strict=True)


@pytest.mark.parametrize("folder", FOLDERS, ids=["agent", "l3"])
def test_kustomization_lists_every_manifest_and_pins_the_image(folder: Path) -> None:
    [(_, kustomization)] = [
        (w, d) for w, d in _documents(folder) if d.get("kind") == "Kustomization"
    ]
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    others = {p.name for p in _yaml_files(folder)} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(others)
    namespace = _one("Namespace")["metadata"]["name"]  # deploy/kubernetes makes it
    assert kustomization["namespace"] == namespace
    for _, doc in _objects(folder):
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == namespace
    [image] = kustomization["images"]
    containers = [c for pod in _pods(folder) for c in pod["spec"]["containers"]]
    assert containers and {c["image"] for c in containers} == {f"{image['name']}:{image['newTag']}"}
    assert image["newTag"] == xputune.__version__  # the manifests ship with their release


@pytest.mark.parametrize("folder", FOLDERS, ids=["agent", "l3"])
def test_no_api_access_by_design(folder: Path) -> None:
    account = _one("ServiceAccount", folder)
    assert account["automountServiceAccountToken"] is False
    for pod in _pods(folder):
        assert pod["spec"]["automountServiceAccountToken"] is False
        assert pod["spec"]["serviceAccountName"] == account["metadata"]["name"]
    assert not [d for _, d in _objects(folder) if "Role" in d["kind"]]  # no RBAC at all


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


def _init_args() -> list[str]:
    (init,) = _daemonset()["spec"]["template"]["spec"]["initContainers"]
    argv = [*init.get("command", []), *init.get("args", [])]
    assert argv[0] == "xputune"
    return argv[1:]


def _parse(argv: list[str]) -> dict[str, Any]:
    """The values xputune's own parser takes from argv (`CMD [SUBCMD] FLAGS...`), without
    running it: an unknown or renamed flag, a missing value or a bad value raises here."""
    found = registry.find(argv)
    assert found is not None, argv
    words, taken = found
    return parse(registry.load(words), argv[taken:])


def test_container_arguments_parse_with_the_real_cli() -> None:
    argv = _watch_args()
    assert argv[0] == "watch"
    params = _parse(argv)
    assert params["textfile"] and params["nfd"]
    assert params.get("root") is None  # the live host, never a recording
    with pytest.raises(UsageError, match="--textfil"):
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


def _locked(path: Path = KUBE / "requirements.txt") -> dict[str, tuple[str, list[str]]]:
    """A requirements file: name -> (version, hashes), continuation lines joined."""
    text = path.read_text().replace("\\\n", " ")
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
    assert main([*argv, "--once", "--root", str(tree)]) == 1  # nothing applied: report only
    init = _init_args()
    assert init[0] == "apply" and "--profile" not in init  # the recommended profile
    assert main([*init, "--root", str(tree)]) == 0
    assert main([*argv, "--once", "--root", str(tree)]) == 0  # the watch holds what apply set

    text = (moved[params["textfile"]] / METRICS_FILE).read_text()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"xputune_cards", "xputune_profile_holds"} <= names
    labels = parse_feature_file((moved[params["nfd"]] / NFD_FILE).read_text())
    assert labels["xputune.io/profile-holds"] == "true" and labels["xputune.io/ido"] == "on"


# -- the L3 tier: deploy/kubernetes/l3 -------------------------------------------------------

#: What the kubelet puts in $(POD_IP) on a node, for the checks below.
POD_IP = "10.0.0.7"
#: A value no Mooncake flag takes: with it, a Mooncake binary lists its flag errors and exits
#: before it starts (gflags reports every error at once, an unknown flag among them).
SENTINEL = "xputune-sentinel"


def _l3(kind: str) -> dict[str, Any]:
    return _one(kind, L3)


def _l3_container(kind: str) -> dict[str, Any]:
    [container] = _l3(kind)["spec"]["template"]["spec"]["containers"]
    return container


def _kubelet_argv(container: dict[str, Any]) -> list[str]:
    """command + args as the kubelet runs them: $(VAR) replaced by the container's env (a
    downward-API value by a sample); a reference to an undeclared variable fails here."""
    env = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        elif var["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP":
            env[var["name"]] = POD_IP

    def expand(word: str) -> str:
        return re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], word)

    return [expand(w) for w in (*container.get("command", []), *container.get("args", []))]


def _donors_argv() -> list[str]:
    argv = _kubelet_argv(_l3_container("DaemonSet"))
    assert argv[0] == "xputune"
    return argv[1:]


def _master_address() -> str:
    service = _l3("Service")
    [port] = service["spec"]["ports"]
    return f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc:{port['port']}"


def test_the_donors_arguments_parse_with_the_real_cli() -> None:
    argv = _donors_argv()
    assert argv[:2] == ["launch", "l3-donors"]
    params = _parse(argv)
    assert params["l3_master"] == _master_address()  # the master's Service, by name
    assert params["l3_host"] == POD_IP  # the downward API's pod IP: the node's, hostNetwork
    assert params["root"] is None and params["example"] is None and not params["dry_run"]
    assert params["l3_segment_gb"] > 0
    with pytest.raises(UsageError, match="--l3-mastr"):
        _parse([a.replace("--l3-master", "--l3-mastr") for a in argv])


@pytest.fixture
def pod_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """numactl and mooncake_client on PATH, as the L3 image has them (a dry run without them
    would say it refuses and end 3, whatever this machine is)."""
    from xputune.launch import donors

    folder = tmp_path / "pod-bin"
    folder.mkdir()
    for name in ("numactl", "mooncake_client"):
        (folder / name).write_text("#!/bin/sh\nexit 0\n")
        (folder / name).chmod(0o755)
    monkeypatch.setattr(donors, "package_client", lambda: None)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def _donor_lines(capsys: pytest.CaptureFixture[str]) -> list[list[str]]:
    """The pod's command, run as a dry run on the bundled P800 recording."""
    from xputune.cli.entry import main

    capsys.readouterr()
    assert main([*_donors_argv(), "--dry-run", "--example", "h3c-hygon-p800"]) == 0
    out = capsys.readouterr().out.replace("\\\n", " ")  # a long line may be continued
    return [shlex.split(line) for line in out.splitlines()]


def test_one_dry_run_of_the_donors_command_on_a_recording(capsys, pod_tools) -> None:
    params = _parse(_donors_argv())
    lines = _donor_lines(capsys)
    assert len(lines) == 4  # one per RDMA NIC of the P800 box
    for words in lines:
        assert words[0] == "numactl" and "--membind=" in words[2]
        assert f"--host={POD_IP}" in words
        assert f"--master_server_address={_master_address()}" in words
    sizes = [int(w.split("=")[1].removesuffix("GB")) for ws in lines for w in ws
             if w.startswith("--global_segment_size=")]  # fmt: skip
    assert 0 < sum(sizes) <= params["l3_segment_gb"]
    # The segments are the pod's own memory (Mooncake's "GB" is 2^30 bytes): the limit holds
    # the largest donation the cap allows and the clients' own, and the request is all of it.
    resources = _l3_container("DaemonSet")["resources"]
    limit = resources["limits"]["memory"]
    assert limit.endswith("Gi") and resources["requests"]["memory"] == limit
    assert int(limit[:-2]) >= params["l3_segment_gb"] + 4


def _mooncake_binary(name: str) -> Path:
    spec = importlib.util.find_spec("mooncake")
    if spec is None or spec.origin is None:
        pytest.skip("the mooncake package is not installed here (the L3 lane installs it)")
    return Path(spec.origin).parent / name


def _flag_errors(binary: Path, flags: list[str], sentinel_flag: str) -> list[str]:
    """The flag errors `binary` reports for `flags` (it exits on the sentinel, unstarted)."""
    done = subprocess.run(
        [str(binary), *flags, f"--{sentinel_flag}={SENTINEL}"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR:")]
    sentinel = f"ERROR: illegal value '{SENTINEL}' specified for int32 flag '{sentinel_flag}'"
    assert sentinel in errors, done.stderr[-2000:]
    return [e for e in errors if e != sentinel]


def test_mooncake_flags_are_the_real_binaries_own(capsys, pod_tools) -> None:
    """The master's arguments and each donor's mooncake_client flags (from the dry run above),
    given to the real binaries: no flag unknown, no value illegal."""
    master = _mooncake_binary("mooncake_master")
    container = _l3_container("Deployment")
    assert container["command"] == ["mooncake_master"]
    assert _flag_errors(master, container["args"], "rpc_thread_num") == []
    assert _flag_errors(master, ["--no_such_flag=1"], "rpc_thread_num") == [
        "ERROR: unknown command line flag 'no_such_flag'"
    ]  # the check can fail
    client = _mooncake_binary("mooncake_client")
    for words in _donor_lines(capsys):
        flags = [w for w in words if w.startswith("--")][2:]  # after numactl's two
        assert flags[0].startswith("--master_server_address=")
        assert _flag_errors(client, flags, "threads") == []


def test_the_master_runs_plan_s_command_behind_its_service() -> None:
    from xputune.plan.l3 import master_command

    deployment = _l3("Deployment")
    container = _l3_container("Deployment")
    address = _master_address()
    # xputune plan prints the master's command; the Deployment runs it (and names the metrics)
    argv = [*container["command"], *container["args"]]
    assert argv[: len(master_command(address))] == master_command(address)
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"  # never two masters
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    [port] = _l3("Service")["spec"]["ports"]
    assert ports[port["targetPort"]] == port["port"] == int(address.rsplit(":", 1)[1])
    assert container["readinessProbe"]["tcpSocket"]["port"] == port["targetPort"]
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert {"cpu", "memory"} <= set(container["resources"]["limits"])
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]


def test_labels_and_selectors_agree() -> None:
    master, donors = _l3("Deployment"), _l3("DaemonSet")
    for workload in (master, donors):
        selector = workload["spec"]["selector"]["matchLabels"]
        assert selector.items() <= workload["spec"]["template"]["metadata"]["labels"].items()
    service = _l3("Service")["spec"]["selector"]
    assert service.items() <= master["spec"]["template"]["metadata"]["labels"].items()
    assert not service.items() <= donors["spec"]["template"]["metadata"]["labels"].items()
    agent = _daemonset()["spec"]["template"]["metadata"]["labels"]
    for workload in (master, donors):  # neither selects the other's pods, nor the agent's
        selector = workload["spec"]["selector"]["matchLabels"]
        assert not selector.items() <= agent.items()
    assert master["spec"]["selector"] != donors["spec"]["selector"]


def test_the_donors_pod_reaches_rdma_with_two_capabilities() -> None:
    from xputune.launch.donors import STOP_GRACE_S
    from xputune.plan.l3 import CLIENT_PORT

    pod = _l3("DaemonSet")["spec"]["template"]["spec"]
    container = _l3_container("DaemonSet")
    assert pod["nodeSelector"] == {"xputune.io/l3-role": "decode"}
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    security = container["securityContext"]
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK", "SYS_NICE"]}
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["mountPath"]: host[m["name"]] for m in container["volumeMounts"]
              if m["name"] in host}  # fmt: skip
    assert mounts == {"/dev/infiniband": "/dev/infiniband"}
    [pod_ip] = [e for e in container["env"] if e["name"] == "POD_IP"]
    assert pod_ip["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert container["readinessProbe"]["tcpSocket"]["port"] == CLIENT_PORT  # the first donor
    assert pod["terminationGracePeriodSeconds"] > STOP_GRACE_S  # the supervisor's own grace
    assert pod["tolerations"] and container["resources"]["limits"]["cpu"]


def test_the_l3_containerfile_adds_the_store_pinned_on_the_agent_s_base() -> None:
    text = (L3 / "Containerfile").read_text()
    steps = _instructions(text)
    assert steps[0][0] == "FROM" and all(word in KNOWN for word, _ in steps), steps
    agent = _instructions((KUBE / "Containerfile").read_text())
    assert steps[0] == agent[0]  # the same base, by the same digest
    [apt] = [a for w, a in steps if w == "RUN" and "apt-get install" in a]
    assert {"libibverbs1", "ibverbs-providers", "numactl"} <= set(apt.split())
    [install] = [a for w, a in steps if w == "RUN" and "pip install" in a]
    shlex.split(install)
    assert "--mount=type=bind,target=/ctx" in install
    deps, own = [c.strip() for c in install.split("&&")][:2]
    assert deps.endswith(
        "pip install --no-cache-dir --require-hashes --only-binary=:all: "
        "-r /ctx/requirements.txt -r /ctx/l3/requirements.txt"
    )
    assert own == 'pip install --no-cache-dir --no-deps --no-index "/ctx/${XPUTUNE_WHEEL}"'
    assert "pip check" in install and "xputune --version" in install
    args = dict(a.split("=", 1) for w, a in steps if w == "ARG")
    assert json.loads(args["XPUTUNE_WHEEL"]) == f"xputune-{xputune.__version__}-py3-none-any.whl"
    assert [json.loads(a) for w, a in steps if w == "ENTRYPOINT"] == [["xputune"]]
    # Its build command tags the image both workloads run, from the folder above (the wheel).
    image = _l3_container("DaemonSet")["image"]
    assert image == _l3_container("Deployment")["image"]
    assert f"-t {image} -f deploy/kubernetes/l3/Containerfile deploy/kubernetes" in text
    assert "pip wheel --no-deps -w deploy/kubernetes ." in text


def test_l3_requirements_pin_the_store_and_all_it_needs_beside_the_agent_s() -> None:
    base = _locked()
    l3 = _locked(L3 / "requirements.txt")
    assert not base.keys() & l3.keys()  # one pip call takes both: each package pinned once
    store = canonicalize_name(LOCK.MOONCAKE)
    assert LOCK.MOONCAKE == "mooncake-transfer-engine-non-cuda"
    assert l3[store][0] == LOCK.MOONCAKE_VERSION == "0.3.13.post1"
    assert "xputune" not in l3
    both = {**base, **l3}
    checked = 0
    for name, (version, _) in both.items():
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        if dist.version != version:
            continue
        checked += 1
        for line in dist.requires or ():
            req = Requirement(line)
            if LOCK._needed(req, frozenset(), LOCK.PYTHONS_L3):
                assert canonicalize_name(req.name) in both, (name, req)
                assert req.specifier.contains(both[canonicalize_name(req.name)][0]), req
    assert checked > len(l3) // 2
    # Compiled wheels: one per machine for the image's Python.
    for name in (store, "aiohttp", "msgpack", "multidict"):
        assert len(l3[name][1]) >= len(LOCK.PYTHONS_L3) * len(LOCK.MACHINES), name
