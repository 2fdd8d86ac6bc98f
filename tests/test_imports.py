"""No import circles: no two of xputune's modules import each other, directly or through others.

What counts as "A imports B" here is every import statement in A, wherever it stands: at the
top, inside a function, under `if TYPE_CHECKING:`. A maintainer who changes B has to know A's
needs in all three cases, and a circle hidden in a function is the usual way one is kept
alive: it works until somebody moves the import to the top (or a type checker follows it).
So the graph is the one a reader sees, not only the one Python executes at import time.

`from P import x` counts as an import of the module P.x when x is a module, else of P; the
package a module sits in is not counted as imported by it (Python runs a package's __init__
before its modules, but that is a facade, not a dependency the module chose). A module may
import its own package's facade only when that facade does not import it back.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "xputune"


def module_names(package: Path) -> dict[str, Path]:
    """Dotted name -> file, for every module of the package (a package is its __init__)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module `name` is or lives in (an attribute path is cut back to its module)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that `module` names in any import statement."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package `module` is in (or is)
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                       for a in node.names]  # fmt: skip
        for target in targets:
            resolved = _resolve(target, modules)
            if resolved is not None and resolved != module:
                found.add(resolved)
    return found


def import_graph(package: Path) -> dict[str, set[str]]:
    modules = module_names(package)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected component of more than one module, as a path
    A -> B -> ... -> A (Tarjan's algorithm, iterative: no recursion limit to meet)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.append(member)
                        if member == node:
                            break
                    if len(members) > 1:
                        components.append(set(members))
    return [_circle(graph, component) for component in components]


def _circle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest circle through the component's first module, for the failure message."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    return [*paths[node], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"{component} is not a cycle")


def test_no_module_imports_itself_through_others() -> None:
    found = [" -> ".join(circle) for circle in cycles(import_graph(PACKAGE))]
    assert found == []


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_circle_hidden_in_a_function_or_type_check_is_found(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "def f():\n    from pkg.b import g\n",
            "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import c\n",
            "c.py": "from . import a\n",
            "d.py": "import pkg.a\n",  # into the circle, not part of it
        },
    )
    assert cycles(import_graph(root)) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]


def test_a_facade_and_its_modules_are_no_circle_unless_a_module_uses_the_facade(
    tmp_path: Path,
) -> None:
    files = {
        "__init__.py": "",
        "sub/__init__.py": "from pkg.sub.x import X\n",
        "sub/x.py": "from pkg.sub import y\nX = 1\n",
        "sub/y.py": "import os\n",
    }
    assert cycles(import_graph(_package(tmp_path, files))) == []
    files["sub/y.py"] = "from pkg.sub import X\n"  # a name of the facade, which imports x
    assert cycles(import_graph(_package(tmp_path / "2", files))) == [
        ["pkg.sub", "pkg.sub.x", "pkg.sub.y", "pkg.sub"]
    ]
