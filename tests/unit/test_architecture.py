"""The package's shape: no module-level import cycle, no source file over 600 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import paraplan

ROOT = Path(paraplan.__file__).parent
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = ("paraplan", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Module -> paraplan modules it imports at module level (``from pkg import submodule`` counts
    as the submodule; imports inside functions are lazy and cannot form an import-time cycle)."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.parse(path.read_text()).body:
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("paraplan")
            ):
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    deps.add(sub if sub in modules else node.module)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("paraplan")}
        graph[name] = {
            d for d in deps if d in modules and d != name and not name.startswith(d + ".")
        }
    return graph


def test_no_import_cycles():
    graph = _imports()
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in graph[node]:
            if state.get(dep) == 1:
                cycles.append(" -> ".join(path[path.index(dep) :] + [dep]))
            elif dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for module in graph:
        if module not in state:
            visit(module, [module])
    assert not cycles, cycles


def test_no_source_file_over_600_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in ROOT.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, long
