"""Derive expected.yaml from hwloc's own expected lstopo output (not run by the tests).

    cd tests/data/hwloc && ../../../.venv/bin/python derive_expected.py HWLOC > expected.yaml

HWLOC is a checkout of https://github.com/open-mpi/hwloc, or a bare clone of it (then
files are read at HEAD with `git show`). For every recording tests/hwloc/linux/**/NAME.tar.bz2
the script picks the .test that renders it with default options (its target is NAME.console or
NAME.xml), parses that target and writes what hwloc found:

- numa_nodes: the P# (OS index) of every NUMANode, sorted;
- pus: the number of PU objects;
- pci: every PCI function hwloc lists (PCI and PCIBridge lines; PCIDev and Bridge objects with
  a pci_busid in XML): busid, vendor and device id, class (4 hex digits), the parent bridge's
  busid (null when the function hangs directly under a HostBridge) and the NUMA node (P#) of
  its HostBridge: the one NUMA node in the subtree of the nearest ancestor of the HostBridge
  that has any, null when that subtree holds several (locality spanning nodes).

Nothing here looks at xputune. Where a test's configuration makes hwloc show less than the
kernel does (a cgroup restricts CPUs and nodes, hwloc hides or merges nodes by policy, an
environment variable moves I/O), CASES below says so, by hand, with the reason; the tests then
check a weaker property. Those notes were checked against the recordings' cgroup files.
"""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import yaml

LINUX = "tests/hwloc/linux"

# Hand-written knowledge about cases whose default hwloc output is not the machine's kernel view.
#   numa: "equal" (hwloc's nodes are the online nodes) or "subset" (hwloc shows only some)
#   pus: "equal" (hwloc's PUs are the online CPUs) or "at_most" (hwloc shows only some)
#   io_locality: False when an environment variable decides where hwloc hangs I/O
#   facts_from: take NUMA nodes and PUs from another .test of the same recording
CASES: dict[str, dict[str, Any]] = {
    "16amd64-8n2c-cpusets": {
        "facts_from": "16amd64-8n2c-cpusets-disallowed",
        "why": "the recorded cpuset /dummy (cpus 0-6,12-15, mems 1-4) hides CPUs and nodes by "
        "default; the --disallowed variant of the same recording shows the whole machine",
    },
    "nvidiagpunumanodes": {
        "facts_from": "nvidiagpunumanodes-kept",
        "why": "hwloc hides the V100 GPU-memory NUMA nodes 250-255 unless "
        "HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES=1; the kernel lists them online (the -kept variant)",
    },
    "16amd64-4n4c-cgroup-distance-merge": {
        "numa": "subset",
        "pus": "at_most",
        "why": "cpuset /prout (cpus 0-3, mems 2-3) restricts hwloc's view of a 16-CPU 4-node box",
    },
    "16em64t-4s2ca2c-cpusetreorder": {
        "pus": "at_most",
        "why": "cpuset /prout (cpus 2-11,13) restricts hwloc's view to 11 of the online CPUs",
    },
    "32amd64-4s2n4c-cgroup2": {
        "numa": "subset",
        "pus": "at_most",
        "why": "cgroup v2 step_0 (cpus 0-5, mems 0-5) restricts hwloc's view of a 32-CPU "
        "8-node box",
    },
    "4fake-4gr1nu1pu": {
        "numa": "subset",
        "pus": "at_most",
        "why": "cpuset /dummy (cpus 0-1, mems 0,2) restricts hwloc's view of the 4 nodes and PUs",
    },
    "fakememinitiators-1np2c+1npp+gi": {
        "numa": "subset",
        "why": "hwloc hides the memory-less CPU-only nodes 0-3 and the generic initiator node 4",
    },
    "8em64t-2s2ca2c-buggynuma": {
        "numa": "subset",
        "why": "the kernel lists 8 nodes with identical CPU sets; hwloc merges them into node 0",
    },
    "40intel64-2g2n4c+pcilocality": {
        "io_locality": False,
        "why": "HWLOC_PCI_LOCALITY overrides where hwloc hangs the host bridges",
    },
    "fakepcilocalities": {
        "io_locality": False,
        "why": "HWLOC_PCI_LOCALITY overrides where hwloc hangs the host bridges",
    },
}


class Source:
    """Files of the hwloc checkout, from a work tree or (bare clone) from git HEAD."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)
        self.bare = not (self.root / LINUX).is_dir()

    def commit(self) -> str:
        return subprocess.run(
            ["git", "-C", str(self.root), "rev-parse", "HEAD"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    def names(self) -> list[str]:
        if not self.bare:
            return sorted(str(p.relative_to(self.root)) for p in (self.root / LINUX).rglob("*"))
        out = subprocess.run(
            ["git", "-C", str(self.root), "ls-tree", "-r", "--name-only", "HEAD", LINUX],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return sorted(out.split())

    def read(self, name: str) -> str:
        if not self.bare:
            return (self.root / name).read_text(encoding="utf-8")
        return subprocess.run(
            ["git", "-C", str(self.root), "show", f"HEAD:{name}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout


class Obj:
    """One object of hwloc's tree, from either output format."""

    def __init__(self, kind: str, parent: Obj | None, **attrs: Any) -> None:
        self.kind = kind  # numa, pu, hostbridge, pci, other
        self.parent = parent
        self.children: list[Obj] = []
        self.attrs = attrs
        if parent is not None:
            parent.children.append(self)


_CONSOLE_OBJ = re.compile(r"^(\s*)(\S+) L#\d+(?: \((.*?)\))?(?: \".*\")?\s*$")


def parse_console(text: str) -> Obj:
    root = Obj("other", None)
    stack: list[tuple[int, Obj]] = [(-1, root)]
    for line in text.splitlines():
        if re.match(r"^\s*(Special )?depth -?\d+:", line):
            break  # the summary after the tree
        m = _CONSOLE_OBJ.match(line)
        if not m:
            continue
        indent, typ, attrs = len(m.group(1)), m.group(2), m.group(3) or ""
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if typ.startswith("NUMANode"):
            obj = Obj("numa", parent, os_index=int(re.search(r"P#(\d+)", attrs).group(1)))
        elif typ == "PU":
            obj = Obj("pu", parent)
        elif typ == "HostBridge":
            obj = Obj("hostbridge", parent)
        elif typ in ("PCI", "PCIBridge"):
            ids = re.search(r"\bid=([0-9a-fA-F]{4}):([0-9a-fA-F]{4})", attrs)
            obj = Obj(
                "pci",
                parent,
                busid=re.search(r"\bbusid=(\S+)", attrs).group(1).lower(),
                vendor=ids.group(1).lower(),
                device=ids.group(2).lower(),
                cls=re.search(r"\bclass=([0-9a-fA-F]{4})", attrs).group(1).lower(),
            )
        else:
            obj = Obj("other", parent)
        stack.append((indent, obj))
    return root


_PCI_TYPE = re.compile(r"^([0-9a-fA-F]{4}) \[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\]")


def parse_xml(text: str) -> Obj:
    root = Obj("other", None)

    def walk(elem: ET.Element, parent: Obj) -> None:
        for child in elem.findall("object"):
            typ = child.get("type")
            if typ == "NUMANode":
                obj = Obj("numa", parent, os_index=int(child.get("os_index")))
            elif typ == "PU":
                obj = Obj("pu", parent)
            elif typ == "Bridge" and not child.get("pci_busid"):
                obj = Obj("hostbridge", parent)
            elif typ in ("Bridge", "PCIDev"):
                m = _PCI_TYPE.match(child.get("pci_type", ""))
                obj = Obj(
                    "pci",
                    parent,
                    busid=child.get("pci_busid").lower(),
                    vendor=m.group(2).lower(),
                    device=m.group(3).lower(),
                    cls=m.group(1).lower(),
                )
            else:
                obj = Obj("other", parent)
            walk(child, obj)

    walk(ET.fromstring(text), root)
    return root


def _all(obj: Obj) -> list[Obj]:
    out = [obj]
    for child in obj.children:
        out.extend(_all(child))
    return out


def _nodes_below(obj: Obj) -> set[int]:
    return {o.attrs["os_index"] for o in _all(obj) if o.kind == "numa"}


def _hostbridge_node(bridge: Obj) -> int | None:
    up = bridge.parent
    while up is not None:
        nodes = _nodes_below(up)
        if nodes:
            return next(iter(nodes)) if len(nodes) == 1 else None
        up = up.parent
    return None


def facts(root: Obj, io_locality: bool) -> dict[str, Any]:
    objs = _all(root)
    pci = []
    for obj in objs:
        if obj.kind != "pci":
            continue
        up = obj.parent
        parent = up.attrs["busid"] if up is not None and up.kind == "pci" else None
        while up is not None and up.kind != "hostbridge":
            up = up.parent
        node = _hostbridge_node(up) if up is not None and io_locality else None
        pci.append(
            {
                "busid": obj.attrs["busid"],
                "vendor": obj.attrs["vendor"],
                "device": obj.attrs["device"],
                "class": obj.attrs["cls"],
                "parent": parent,
                "numa_node": node,
            }
        )
    return {
        "numa_nodes": sorted(o.attrs["os_index"] for o in objs if o.kind == "numa"),
        "pus": sum(1 for o in objs if o.kind == "pu"),
        "pci": sorted(pci, key=lambda p: p["busid"]),
    }


def parse_test(text: str) -> dict[str, list[str]]:
    fields: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+):\s*(.*)$", line)
        if m:
            fields.setdefault(m.group(1), []).append(m.group(2).strip())
    return fields


def derive(src: Source) -> dict[str, Any]:
    names = src.names()
    tests = {n: parse_test(src.read(n)) for n in names if n.endswith(".test")}
    out: dict[str, Any] = {}
    for tarball in (n for n in names if n.endswith(".tar.bz2")):
        name = Path(tarball).name[: -len(".tar.bz2")]
        folder = str(Path(tarball).parent)
        users = {
            t: f
            for t, f in tests.items()
            if str(Path(t).parent) == folder
            and Path(tarball).name in f.get("source", []) + f.get("fsroot", [])
        }
        canonical = [
            t for t, f in users.items() if Path(f["target"][0]).stem == name and "source" in f
        ]
        if not canonical:  # allowed/test1: a synthetic topology over an fsroot, not a host
            out[name] = {
                "hwloc_test": ", ".join(sorted(Path(t).name for t in users)),
                "host_tree": False,
                "why": "hwloc uses it as --fsroot under a synthetic topology; it holds no sys/",
            }
            continue
        test = canonical[0]
        case = CASES.get(name, {})
        fields = tests[test]
        target = f"{folder}/{fields['target'][0]}"
        text = src.read(target)
        root = parse_xml(text) if target.endswith(".xml") else parse_console(text)
        entry: dict[str, Any] = {
            "hwloc_test": Path(test).name,
            "hwloc_target": Path(target).name,
            "host_tree": True,
        }
        if fields.get("options"):
            entry["hwloc_options"] = fields["options"][0]
        if fields.get("env"):
            entry["hwloc_env"] = [e for e in fields["env"] if not e.startswith("export ")]
        found = facts(root, case.get("io_locality", True))
        if "facts_from" in case:
            other = tests[f"{folder}/{case['facts_from']}.test"]
            other_target = f"{folder}/{other['target'][0]}"
            other_text = src.read(other_target)
            other_root = (
                parse_xml(other_text)
                if other_target.endswith(".xml")
                else parse_console(other_text)
            )
            other_facts = facts(other_root, case.get("io_locality", True))
            found["numa_nodes"], found["pus"] = other_facts["numa_nodes"], other_facts["pus"]
            entry["facts_from"] = Path(other_target).name
        entry["numa_nodes"] = found["numa_nodes"]
        entry["numa_check"] = case.get("numa", "equal")
        entry["pus"] = found["pus"]
        entry["pus_check"] = case.get("pus", "equal")
        entry["io_locality"] = case.get("io_locality", True)
        if "why" in case:
            entry["why"] = case["why"]
        entry["pci"] = found["pci"]
        out[name] = entry
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: derive_expected.py HWLOC_CHECKOUT > expected.yaml", file=sys.stderr)
        return 2
    src = Source(argv[1])
    data = derive(src)
    print(
        "# GENERATED by tests/data/hwloc/derive_expected.py; do not edit by hand.\n"
        "# Facts from hwloc's own expected lstopo output (tests/hwloc/linux/*.console and\n"
        f"# *.xml of https://github.com/open-mpi/hwloc at commit {src.commit()}),\n"
        "# never from xputune. numa_check/pus_check/io_locality/why are the script's\n"
        "# hand-written CASES table: where hwloc's default view is not the kernel's."
    )
    print(yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
