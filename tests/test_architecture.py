"""The rules of docs/architecture.md that a machine can check, checked (the layer order itself
is tests/test_layers.py):

- plan/ reads no machine: of xputune it imports only data and pure readers (its own modules,
  errors, user files, the topology's model, host/values.py's value formats) and the loader of
  its C core (kernels/build.py); nothing that opens /proc, /sys or a vendor tool.
- only host/ opens /proc and /sys: anywhere else a path there is read through a host view,
  never handed to open(), os.*, io, glob or pathlib.
- cli/ uses the layers below through their public names: it imports no `_private` name.

Each rule is an AST scan of the package; `test_a_violation_fails` plants one of each in a
copy of a module and shows the scan catching it.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "xputune"

#: What plan/ may import of xputune (modules, or packages with everything under them).
PLAN_MAY_IMPORT = (
    "xputune.plan",
    "xputune.errors",
    "xputune.userfiles",
    "xputune.topology.model",
    "xputune.host.values",
    "xputune.kernels.build",  # load_native: the stack pass's C core, built once per user
)
#: Calls that would open a path themselves: builtins and these modules' functions.
_OPENERS = ("os", "os.path", "io", "glob", "shutil", "pathlib")
_OPEN_BUILTINS = ("open", "Path", "PurePath")
#: Machine trees only host/ reads.
_TREES = ("/proc", "/sys")
#: Not a read of the machine: a descriptor this process holds, opened again by its number.
ALLOWED_OPENS = {("userfiles.py", "/proc/self/fd/")}


def _modules(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return out


def plan_imports(source: str, name: str) -> list[str]:
    """What a plan/ module imports of xputune beyond PLAN_MAY_IMPORT."""
    found = []
    for line, module in _modules(ast.parse(source, name)):
        if not module.startswith("xputune."):
            continue
        if not any(module == m or module.startswith(m + ".") for m in PLAN_MAY_IMPORT):
            found.append(f"{name}:{line} imports {module}")
    return found


def _leading_text(node: ast.AST) -> str | None:
    """The text a path expression starts with, where the source says it."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return str(node.values[0].value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _leading_text(node.left)
    return None


def _opener(func: ast.AST) -> bool:
    if isinstance(func, ast.Name):
        return func.id in _OPEN_BUILTINS
    if not isinstance(func, ast.Attribute):
        return False
    base = func.value
    if isinstance(base, ast.Name):
        return base.id in _OPENERS
    if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
        return f"{base.value.id}.{base.attr}" in _OPENERS
    return False


def machine_opens(source: str, name: str) -> list[str]:
    """Calls that open a path under /proc or /sys directly, not through a host view."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Call) and _opener(node.func) and node.args:
            text = _leading_text(node.args[0])
            if text and text.startswith(_TREES) and (name, text) not in ALLOWED_OPENS:
                found.append(f"{name}:{node.lineno} opens {text!r} itself")
    return found


def private_imports(source: str, name: str) -> list[str]:
    """`_private` names a cli/ module imports from outside cli/."""
    found = []
    for line, module in _modules(ast.parse(source, name)):
        outside = module.startswith("xputune.") and not module.startswith("xputune.cli.")
        private = module.rpartition(".")[2].startswith("_") and not module.endswith("__")
        if outside and private:
            found.append(f"{name}:{line} imports {module}")
    return found


def _files(under: str = "") -> list[tuple[Path, str]]:
    root = PACKAGE / under if under else PACKAGE
    return [(p, str(p.relative_to(PACKAGE))) for p in sorted(root.rglob("*.py"))]


def test_plan_reads_no_machine() -> None:
    found = [v for p, n in _files("plan") for v in plan_imports(p.read_text(), n)]
    assert found == []


def test_only_host_opens_proc_and_sys() -> None:
    found = [
        v
        for p, n in _files()
        if not n.startswith("host/")
        for v in machine_opens(p.read_text(), n if "/" in n else p.name)
    ]
    assert found == []


def test_cli_uses_public_names_only() -> None:
    found = [v for p, n in _files("cli") for v in private_imports(p.read_text(), n)]
    assert found == []


def test_a_violation_fails() -> None:
    """Each scan catches a planted violation (so none of the tests above passes vacuously)."""
    plan = (PACKAGE / "plan" / "l3.py").read_text()
    assert plan_imports(plan, "plan/l3.py") == []
    planted = plan + "\nfrom xputune.host.open import open_host\n"
    assert plan_imports(planted, "plan/l3.py") == [
        f"plan/l3.py:{planted.count(chr(10))} imports xputune.host.open.open_host"
    ]
    hicache = (PACKAGE / "hicache" / "numa_mem.py").read_text()
    assert machine_opens(hicache, "hicache/numa_mem.py") == []
    for call in ('open("/proc/self/status")', 'os.listdir(f"/sys/devices/{x}")',
                 'Path("/proc/meminfo").read_text()', 'io.open("/sys/" + name)'):  # fmt: skip
        (said,) = machine_opens(hicache + f"\n{call}\n", "hicache/numa_mem.py")
        assert "opens '/" in said, call
    assert machine_opens('view.read_text("/proc/meminfo")\n', "x.py") == []  # through a view
    cli = (PACKAGE / "cli" / "plan_cmds.py").read_text()
    assert private_imports(cli, "cli/plan_cmds.py") == []
    planted = cli + "\nfrom xputune.plan.l3 import _share_break_even\n"
    assert private_imports(planted, "cli/plan_cmds.py") == [
        f"cli/plan_cmds.py:{planted.count(chr(10))} imports xputune.plan.l3._share_break_even"
    ]
