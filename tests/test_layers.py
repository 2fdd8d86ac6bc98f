"""The layering rule (docs/architecture.md), checked: a layer imports only the layers below it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "xputune"
# Bottom first, as in docs/architecture.md ("Layers").
LAYERS = ["host", "topology", "devices", "kernels", "hicache", "tune", "plan", "fleet", "sglang",
          "launch", "placement", "measure", "cli"]  # fmt: skip
RANK = {name: i for i, name in enumerate(LAYERS)}


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
    return out


def upward_imports() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        layer = path.relative_to(PACKAGE).parts[0]
        if layer not in RANK:
            continue
        for module in _imports(path):
            parts = module.split(".")
            if parts[0] == "xputune" and len(parts) > 1 and RANK.get(parts[1], -1) > RANK[layer]:
                found.append(f"{path.relative_to(PACKAGE)} imports {module}")
    return found


def test_every_layer_is_known() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages <= set(LAYERS) | {"data", "examples"}, packages - set(LAYERS)


def test_no_layer_imports_a_higher_one() -> None:
    assert upward_imports() == []
