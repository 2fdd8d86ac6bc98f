"""deploy/kubernetes/cluster: N SGLang instances (a StatefulSet, each pod `xputune launch sglang`
on one node) behind sglang-router (a Deployment), sharing the L3 tier of deploy/kubernetes/l3.

Validated as the other folders are (tests/deploy/test_kubernetes.py, whose helpers this uses):
every manifest strictly against a current Kubernetes' schemas; the instances' arguments with
xputune's own CLI parser, run once as a dry run on the bundled P800 recording, and their SGLang
arguments with the installed SGLang's own parser; the router's arguments with sglang-router's own
parser, its workers being exactly the StatefulSet's pods; and the pieces agree with each other
and with the L3 folder (labels, selectors, ports, the master's address, no API access).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.metadata as md
import importlib.util
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import xputune
from tests.deploy.test_kubernetes import (
    KNOWN,
    KUBE,
    L3,
    POD_IP,
    ROOT,
    VERSION,
    _documents,
    _instructions,
    _kubelet_argv,
    _locked,
    _master_address,
    _objects,
    _parse,
    _pods,
    _yaml_files,
)
from xputune.cli.parse import UsageError
from xputune.fleet.labels import PREFIX
from xputune.launch.cluster import POLICIES, ROUTER_MODULE
from xputune.plan.l3 import DEFAULT_PREFILL_SEGMENT, GIB

CLUSTER = KUBE / "cluster"
#: Every kustomize folder: a Service must select its own workload's pods across all of them.
FOLDERS = (KUBE, L3, CLUSTER)
#: The accelerator the instances request (the folder's README.md says how to switch).
ACCELERATOR = "kunlunxin.com/xpu"
#: The recording the instances' command is run on as a dry run (8 x P800, 4 RDMA NICs).
RECORDING = "h3c-hygon-p800"
STANDIN_SITE = ROOT / "tests" / "server" / "standin_site"


def _named(kind: str, name: str, folder: Path = CLUSTER) -> dict[str, Any]:
    [doc] = [d for _, d in _objects(folder) if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def _statefulset() -> dict[str, Any]:
    return _named("StatefulSet", "xputune-sglang")


def _router() -> dict[str, Any]:
    return _named("Deployment", "xputune-router")


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    [container] = workload["spec"]["template"]["spec"]["containers"]
    return container


def _port(container: dict[str, Any], name: str = "http") -> int:
    [port] = [p["containerPort"] for p in container["ports"] if p["name"] == name]
    return port


def _instance_argv() -> list[str]:
    """The instances' command as the kubelet runs it ($(POD_IP) replaced), less `xputune`."""
    argv = _kubelet_argv(_container(_statefulset()))
    assert argv[0] == "xputune"
    return argv[1:]


def _sglang_args() -> list[str]:
    """What the instances pass to SGLang: everything after `--`."""
    argv = _instance_argv()
    return argv[argv.index("--") + 1 :]


def _value(args: list[str], flag: str) -> str:
    [at] = [i for i, a in enumerate(args) if a == flag]
    return args[at + 1]


def _router_args() -> list[str]:
    return _kubelet_argv(_container(_router()))[3:]  # after python3 -m MODULE


def _worker_urls() -> list[str]:
    """The URL of each instance: its pod's name under the headless Service, and its port."""
    sts = _statefulset()
    service = _named("Service", sts["spec"]["serviceName"])
    namespace = sts["metadata"]["namespace"]
    port = _port(_container(sts))
    return [f"http://{sts['metadata']['name']}-{k}.{service['metadata']['name']}.{namespace}"
            f".svc:{port}" for k in range(sts["spec"]["replicas"])]  # fmt: skip


def _accelerators() -> int:
    resources = _container(_statefulset())["resources"]
    assert resources["requests"][ACCELERATOR] == resources["limits"][ACCELERATOR]
    return int(resources["limits"][ACCELERATOR])


def _gib(quantity: str) -> int:
    assert quantity.endswith("Gi"), quantity
    return int(quantity[:-2])


# -- the manifests ------------------------------------------------------------------------------


@pytest.mark.parametrize(("where", "doc"), _objects(CLUSTER), ids=[w for w, _ in _objects(CLUSTER)])
def test_every_manifest_validates_strictly(where: str, doc: dict[str, Any]) -> None:
    used = kubernetes_validate.validate(doc, VERSION, strict=True)
    assert used == ".".join(VERSION.split(".")[:2])


def test_the_manifests_are_found_and_a_typo_fails() -> None:
    kinds = sorted(d["kind"] for _, d in _objects(CLUSTER))
    assert kinds == ["Deployment", "Service", "Service", "ServiceAccount", "StatefulSet"]
    bad = copy.deepcopy(_statefulset())
    bad["spec"]["serviceNam"] = bad["spec"].pop("serviceName")
    with pytest.raises(kubernetes_validate.ValidationError, match="serviceNam"):
        kubernetes_validate.validate(bad, VERSION, strict=True)
    bad = copy.deepcopy(_statefulset())
    bad["spec"]["template"]["spec"]["hostNetwork"] = "yes"
    with pytest.raises(kubernetes_validate.ValidationError, match="is not of type 'boolean'"):
        kubernetes_validate.validate(bad, VERSION, strict=True)


def test_kustomization_lists_every_manifest_and_pins_the_image() -> None:
    [kustomization] = [d for _, d in _documents(CLUSTER) if d.get("kind") == "Kustomization"]
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    others = {p.name for p in _yaml_files(CLUSTER)} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(others)
    [namespace] = [d for _, d in _objects(KUBE) if d["kind"] == "Namespace"]
    assert kustomization["namespace"] == namespace["metadata"]["name"]
    for _, doc in _objects(CLUSTER):
        assert doc["metadata"]["namespace"] == kustomization["namespace"]
    [image] = kustomization["images"]
    containers = [c for pod in _pods(CLUSTER) for c in pod["spec"]["containers"]]
    assert len(containers) == 2  # the instance and the router: one image
    assert {c["image"] for c in containers} == {f"{image['name']}:{image['newTag']}"}
    assert image["newTag"] == xputune.__version__


def test_no_api_access_by_design() -> None:
    [account] = [d for _, d in _objects(CLUSTER) if d["kind"] == "ServiceAccount"]
    assert account["automountServiceAccountToken"] is False
    for pod in _pods(CLUSTER):
        assert pod["spec"]["automountServiceAccountToken"] is False
        assert pod["spec"]["serviceAccountName"] == account["metadata"]["name"]
    assert not [d for _, d in _objects(CLUSTER) if "Role" in d["kind"]]  # no RBAC at all
    # The router's workers are a static list: no service discovery, which would watch pods.
    args = _router_args()
    assert "--worker-urls" in args
    assert not [a for a in args if "selector" in a or "service-discovery" in a]


def test_labels_and_selectors_agree() -> None:
    """Every Service of every folder selects the pods of its own workload and no others."""
    workloads = {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
                 for folder in FOLDERS for _, d in _objects(folder)
                 if "template" in d.get("spec", {})}  # fmt: skip

    def chosen(selector: dict[str, str]) -> set[str]:
        return {n for n, labels in workloads.items() if selector.items() <= labels.items()}

    for folder in FOLDERS:
        for _, doc in _objects(folder):
            if "template" in doc.get("spec", {}):
                selected = chosen(doc["spec"]["selector"]["matchLabels"])
                assert selected == {doc["metadata"]["name"]}, selected
            if doc["kind"] == "Service":
                selected = chosen(doc["spec"]["selector"])
                assert selected == {doc["metadata"]["name"]}, selected
    # The StatefulSet's governing Service is headless: one DNS name per pod, no virtual IP.
    sts = _statefulset()
    headless = _named("Service", sts["spec"]["serviceName"])
    assert headless["metadata"]["name"] == sts["metadata"]["name"]
    assert headless["spec"]["clusterIP"] == "None"
    # One instance per node, by the instances' own labels.
    [term] = sts["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]


def test_the_ports_agree() -> None:
    sts, router = _statefulset(), _router()
    port = _port(_container(sts))
    assert int(_value(_sglang_args(), "--port")) == port  # SGLang listens where the pod says
    [headless] = _named("Service", sts["spec"]["serviceName"])["spec"]["ports"]
    assert headless["port"] == port and headless["targetPort"] == "http"
    router_port = _port(_container(router))
    assert int(_value(_router_args(), "--port")) == router_port
    [front] = _named("Service", "xputune-router")["spec"]["ports"]
    assert front["targetPort"] == "http" and front["port"] == router_port
    for workload in (sts, router):
        probe = _container(workload)["readinessProbe"]["httpGet"]
        assert probe["port"] == "http"


# -- the instances -------------------------------------------------------------------------------


def test_the_instances_arguments_parse_with_the_real_cli() -> None:
    argv = _instance_argv()
    assert argv[:2] == ["launch", "sglang"]
    params = _parse(argv)
    assert params["l3"] == "mooncake"
    assert params["l3_master"] == _master_address()  # deploy/kubernetes/l3's Service, by name
    assert params["l3_host"] == POD_IP  # the downward API's pod IP: the node's, hostNetwork
    assert params["user_args"] == _sglang_args()
    # A live launch with its checks: never a recording, a dry run or forced past a refusal.
    assert params["root"] is None and params["example"] is None
    assert not params["dry_run"] and not params["force"]
    assert params["tier"].endswith("GB")  # a fixed L2 size, which the pod's memory holds
    with pytest.raises(UsageError, match="--l3-mastr"):
        _parse([a.replace("--l3-master", "--l3-mastr") for a in argv])


def test_the_instances_pod_reaches_the_store_and_checks_the_node() -> None:
    pod = _statefulset()["spec"]["template"]["spec"]
    container = _container(_statefulset())
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    [pod_ip] = [e for e in container["env"] if e["name"] == "POD_IP"]
    assert pod_ip["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert _value(_sglang_args(), "--host") == POD_IP  # the node's address, not every interface
    # Scheduled where the watch agent says the profile holds (its label, as it writes it).
    assert pod["nodeSelector"] == {f"{PREFIX}profile-holds": "true"}
    security = container["securityContext"]
    assert security["privileged"] is False and security["runAsUser"] == 0
    assert sorted(security["capabilities"]["add"]) == ["IPC_LOCK", "SYS_ADMIN", "SYS_NICE"]
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["mountPath"]: (host[m["name"]], bool(m.get("readOnly")))
              for m in container["volumeMounts"] if m["name"] in host}  # fmt: skip
    assert mounts["/dev/shm"] == ("/dev/shm", False)  # the node's, huge= as the profile holds
    assert mounts["/dev/infiniband"] == ("/dev/infiniband", False)
    models = _value(_sglang_args(), "--model-path")
    assert any(models.startswith(f"{m}/") and ro for m, (_, ro) in mounts.items())
    # Every card of the node, one rank each.
    assert _accelerators() == int(_value(_sglang_args(), "--tp-size"))
    assert "cpu" not in container["resources"]["limits"]  # a throttled rank stalls the batch
    memory = container["resources"]
    assert memory["requests"]["memory"] == memory["limits"]["memory"]
    probe = container["readinessProbe"]["httpGet"]
    assert probe["path"] == "/health"


def test_sglang_serves_the_probe_s_path() -> None:
    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        pytest.skip("sglang is not installed here")
    server = Path(spec.origin).parent / "srt" / "entrypoints" / "http_server.py"
    path = _container(_statefulset())["readinessProbe"]["httpGet"]["path"]
    assert f'@app.get("{path}")' in server.read_text()


@cache
def _dry_run() -> tuple[int, list[str], str]:
    """The instances' command, run once as a dry run on the bundled recording: (exit status,
    the SGLang command it prints, what it says). The pod reads its model's config.json from
    the model's folder, absent here, so the preset is named."""
    from xputune.cli.entry import main

    argv = _instance_argv()
    cut = argv.index("--")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv[:cut], "--dry-run", "--example", RECORDING, "--model", "glm-5",
                     *argv[cut:]])  # fmt: skip
    words = shlex.split(out.getvalue().replace("\\\n", " "))
    start = words.index("-m")
    assert words[start + 1] == "sglang.launch_server"
    return code, words[start + 2 :], err.getvalue()


def test_one_dry_run_of_the_instances_command_on_a_recording() -> None:
    code, command, said = _dry_run()
    # The recording drifts from its profile (1); without sglang here the launch says so (3).
    assert code in (1, 3), said
    assert _value(command, "--host") == POD_IP
    assert _value(command, "--port") == _value(_sglang_args(), "--port")
    assert _value(command, "--tp-size") == str(_accelerators())
    assert _value(command, "--hicache-storage-backend") == "mooncake"
    extra = json.loads(_value(command, "--hicache-storage-backend-extra-config"))
    assert extra["master_server_address"] == _master_address()
    assert extra["local_hostname"] == POD_IP
    # The pod's memory holds the L2 tier of every rank, the Mooncake segment, and more.
    limit = _gib(_container(_statefulset())["resources"]["limits"]["memory"]) * GIB
    l2 = int(_value(command, "--hicache-size")) * 10**9 * _accelerators()
    assert extra["global_segment_size"] == DEFAULT_PREFILL_SEGMENT
    assert l2 + DEFAULT_PREFILL_SEGMENT + 32 * GIB <= limit


# Runs in the test environment's interpreter: each argv through SGLang's own parser.
PARSE = r"""
import argparse, json, sys, warnings
warnings.simplefilter("ignore")
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser(prog="sglang.launch_server")
ServerArgs.add_cli_args(parser)
out = {"options": sorted({s for a in parser._actions for s in a.option_strings}), "parsed": {}}
for name, argv in json.load(sys.stdin).items():
    try:
        ns = parser.parse_args(argv)
    except SystemExit as exc:
        out["parsed"][name] = {"exit": exc.code}
        continue
    out["parsed"][name] = {k: v for k, v in vars(ns).items()
                           if isinstance(v, (str, int, float, bool, list, type(None)))}
sys.stdout.write("\nPARSED " + json.dumps(out, default=str) + "\n")
"""


def test_the_sglang_arguments_parse_with_sglang_s_own_parser() -> None:
    for needed in ("sglang", "torch"):
        if importlib.util.find_spec(needed) is None:
            pytest.skip(f"{needed} is not installed here (tests/sglang/install_sglang.py)")
    args = _sglang_args()
    _, command, _ = _dry_run()
    cases = {"pod": args, "launched": command,
             "typo": [a.replace("--enable-metrics", "--enable-metricz") for a in args]}  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(STANDIN_SITE), "XPUTUNE_TEST_REPO": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", PARSE], input=json.dumps(cases), capture_output=True, text=True,
        env=env, timeout=300, check=False,
    )  # fmt: skip
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("PARSED ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    result = json.loads(lines[-1].removeprefix("PARSED "))
    pod, launched = result["parsed"]["pod"], result["parsed"]["launched"]
    assert pod["host"] == launched["host"] == POD_IP
    assert pod["port"] == launched["port"] == _port(_container(_statefulset()))
    assert pod["tp_size"] == launched["tp_size"] == _accelerators()
    assert pod["model_path"] == _value(args, "--model-path")
    assert pod["enable_metrics"] is True and launched["enable_metrics"] is True
    assert launched["hicache_storage_backend"] == "mooncake"
    assert result["parsed"]["typo"] == {"exit": 2}  # the check can fail
    # Each flag spelled in full: argparse also takes a prefix, which a later release can make
    # ambiguous.
    flags = {a.split("=")[0] for a in args if a.startswith("--")}
    assert flags <= set(result["options"]), flags - set(result["options"])


# -- the router ----------------------------------------------------------------------------------


def test_the_router_runs_launch_cluster_s_command_for_every_instance() -> None:
    """The command `xputune launch cluster` runs on one machine, with the pods' names for
    127.0.0.1: its module, every instance's URL, one of its policies, where it listens."""
    container = _container(_router())
    assert container["command"] == ["python3", "-m", ROUTER_MODULE]
    args = _router_args()
    assert [a for a in args if a.startswith("--")] == ["--worker-urls", "--policy", "--host",
                                                       "--port"]  # fmt: skip
    urls = args[1 : args.index("--policy")]
    assert urls == _worker_urls()
    assert len(urls) == _statefulset()["spec"]["replicas"] >= 2
    assert _value(args, "--policy") in POLICIES


@pytest.fixture
def router_modules_dropped() -> Iterator[None]:
    """sglang-router 0.3.2 puts `sglang.srt` and `sglang.srt.environ` of its own into
    sys.modules with no `sglang` above them: the in-process SGLang tests that import after
    this one would fail (`KeyError: 'sglang'`). What it imported is dropped after the test."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name == "sglang" or name.startswith(("sglang.", "sglang_router")):
            del sys.modules[name]


def test_the_router_arguments_parse_with_sglang_router_s_own_parser(
    router_modules_dropped: None,
) -> None:
    launch = pytest.importorskip("sglang_router.launch_router", reason="no sglang-router here")
    from sglang_router.router_args import RouterArgs

    args = _router_args()
    parsed = launch.parse_router_args(args)
    assert parsed.worker_urls == _worker_urls()
    assert parsed.policy == "cache_aware"
    assert parsed.host == "0.0.0.0" and parsed.port == _port(_container(_router()))
    assert parsed.service_discovery is False and not parsed.pd_disaggregation
    parser = argparse.ArgumentParser()
    RouterArgs.add_cli_args(parser, use_router_prefix=False)
    options = {s for a in parser._actions for s in a.option_strings}
    assert {a for a in args if a.startswith("--")} <= options  # in full, not a prefix
    with pytest.raises(SystemExit):  # the check can fail
        launch.parse_router_args([a.replace("--policy", "--polcy") for a in args])


def test_the_router_pod_is_unprivileged() -> None:
    pod = _router()["spec"]["template"]["spec"]
    container = _container(_router())
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert "hostNetwork" not in pod  # the pod network reaches the nodes' addresses
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert _router()["spec"]["replicas"] == 1  # cache_aware's tree lives in the one process
    assert container["readinessProbe"]["httpGet"]["path"] == "/readiness"
    assert {"cpu", "memory"} <= set(container["resources"]["limits"])


# -- the image -----------------------------------------------------------------------------------


def test_the_containerfile_takes_your_sglang_image_and_pins_what_it_adds() -> None:
    text = (CLUSTER / "Containerfile").read_text()
    steps = _instructions(text)
    assert all(word in KNOWN for word, _ in steps), steps
    # The base is yours, with no default: no digest is made up for an image nobody checked.
    assert steps[:2] == [("ARG", "SGLANG_IMAGE"), ("FROM", "${SGLANG_IMAGE}")]
    assert [w for w, _ in steps].count("FROM") == 1
    [install] = [a for w, a in steps if w == "RUN" and "pip install" in a]
    shlex.split(install)
    assert "--mount=type=bind,target=/ctx" in install
    router, own = [c.strip() for c in install.split("&&")][:2]
    assert router.endswith("pip install --no-cache-dir --require-hashes --only-binary=:all: "
                           "-r /ctx/cluster/requirements.txt")  # fmt: skip
    assert own.endswith('pip install --no-cache-dir --no-index --find-links /ctx '
                        '"xputune==${XPUTUNE_VERSION}"')  # fmt: skip
    assert install.count("pip install") == 2
    args = dict(a.split("=", 1) for w, a in steps if w == "ARG" and "=" in a)
    assert json.loads(args["XPUTUNE_VERSION"]) == xputune.__version__
    assert "xputune --version" in install
    assert f"python3 -m {ROUTER_MODULE} --help" in install  # the router's command, in the image
    assert [json.loads(a) for w, a in steps if w == "ENTRYPOINT"] == [["xputune"]]
    # Its build command tags the image both workloads run, from the folder above (the wheel).
    image = _container(_statefulset())["image"]
    assert image == _container(_router())["image"]
    build = (rf"-t {re.escape(image)} --build-arg SGLANG_IMAGE=\S+@sha256:\S+ "
             r"-f deploy/kubernetes/cluster/Containerfile deploy/kubernetes\n")  # fmt: skip
    assert re.search(build, text)
    assert "pip wheel --no-deps -w deploy/kubernetes ." in text


def test_requirements_pin_the_router_the_cluster_lane_runs() -> None:
    from tests.sglang.install_sglang import ROUTER

    locked = _locked(CLUSTER / "requirements.txt")
    assert {name: version for name, (version, _) in locked.items()} == dict(ROUTER)
    version, hashes = locked["sglang-router"]
    assert len(hashes) >= 2  # one abi3 wheel for each of x86_64 and aarch64
    with contextlib.suppress(md.PackageNotFoundError):
        assert md.version("sglang-router") == version  # the router the tests here run


def _needs(dist: md.Distribution) -> set[str]:
    """The names a distribution requires on Linux (no extras)."""
    env = {**default_environment(), "extra": "", "sys_platform": "linux",
           "platform_system": "Linux"}  # fmt: skip
    out = set()
    for line in dist.requires or ():
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(env):  # type: ignore[arg-type]
            out.add(canonicalize_name(req.name))
    return out


def test_what_xputune_and_the_router_need_comes_with_sglang() -> None:
    """The image installs both without an index and with no hash for anything else: each of
    their requirements must be SGLang's own (its requirements', transitively)."""
    try:
        sglang = md.distribution("sglang")
    except md.PackageNotFoundError:
        pytest.skip("sglang is not installed here")
    brings: set[str] = set()
    todo = [sglang]
    while todo:
        for name in _needs(todo.pop()) - brings:
            brings.add(name)
            with contextlib.suppress(md.PackageNotFoundError):
                todo.append(md.distribution(name))
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    ours = {canonicalize_name(Requirement(d).name) for d in declared}
    assert ours and ours <= brings, ours - brings
    with contextlib.suppress(md.PackageNotFoundError):
        router = _needs(md.distribution("sglang-router"))
        assert router and router <= brings, router - brings
