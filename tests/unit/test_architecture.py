"""The package's shape (issue 31): every import counted, those inside functions too.

- ``LAYERS`` is the explicit order of the package's rooms, lowest first: a module may import its own
  room and the rooms below it, never one above (an "upward" import);
- no import circle between modules, whether the import runs at import time or inside a function;
- no source file over 500 lines and no function over 80 lines outside ``cli/`` (after ``ruff format``
  at line length 100, which CI checks too).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

import paraplan

ROOT = Path(paraplan.__file__).parent
REPO = ROOT.parent.parent
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80

# Lowest first. A room is a module prefix; a module belongs to the longest prefix that names it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("paraplan.units",),
    ("paraplan.specs",),
    ("paraplan.io",),
    ("paraplan.catalog",),
    ("paraplan.graph",),
    ("paraplan.cost",),
    ("paraplan.step",),
    ("paraplan.goodput",),
    ("paraplan.validate",),
    ("paraplan.search",),
    ("paraplan.report",),
    ("paraplan.sweep",),
    ("paraplan.export", "paraplan.importers"),
    ("paraplan.calibrate",),
    ("paraplan.api",),
    ("paraplan.web",),
    ("paraplan.cli",),
    ("paraplan", "paraplan.__main__"),
)

# Issue 31, in progress: what still breaks a rule. Each entry must still break it (a test says so), and
# the lists only shrink; the issue is done when they are empty.
PENDING_LONG_FILES = frozenset(())
PENDING_LONG_FUNCTIONS = frozenset(())

# the package's files are read and parsed once per process (``_sources``): one worker runs these tests
pytestmark = pytest.mark.xdist_group("architecture")


@lru_cache(maxsize=1)
def _sources() -> dict[Path, tuple[str, tuple[ast.AST, ...]]]:
    """Every package source file -> (its text, every node of its tree in ``ast.walk`` order), read and
    parsed once per process: the checks below all walk the same files."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        text = path.read_text()
        found[path] = (text, tuple(ast.walk(ast.parse(text))))
    return found


def _walk(path: Path) -> tuple[ast.AST, ...]:
    """``ast.walk(ast.parse(path.read_text()))`` for a package file, from ``_sources``."""
    return _sources()[path][1]


def _module_name(path: Path) -> str:
    parts = ("paraplan", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST):
    """Every node of the tree except those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def _absolute(node: ast.ImportFrom, name: str, path: Path) -> str:
    """The module an ``from ... import`` names, a relative one (``from . import x``, ``from ..a import b``)
    resolved against the importing module ``name`` (a package's ``__init__`` is its own package)."""
    if not node.level:
        return node.module or ""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for _ in range(node.level - 1):
        package = package.rsplit(".", 1)[0]
    return f"{package}.{node.module}" if node.module else package


def _imports_of(name: str, path: Path, modules, tree: ast.AST | None = None) -> set[str]:
    """The paraplan modules ``name`` imports anywhere in its body (see _imports); ``tree``: the file's
    parsed tree when already at hand."""
    deps = set()
    for node in _runtime_nodes(ast.parse(path.read_text()) if tree is None else tree):
        if isinstance(node, ast.ImportFrom):
            module = _absolute(node, name, path)
            if module == "paraplan" or module.startswith("paraplan."):
                for alias in node.names:
                    sub = f"{module}.{alias.name}"
                    deps.add(sub if sub in modules else module)
        elif isinstance(node, ast.Import):
            deps |= {a.name for a in node.names if a.name.split(".")[0] == "paraplan"}
    return {d for d in deps if d in modules and d != name}


@lru_cache(maxsize=1)
def _imports() -> dict[str, frozenset[str]]:
    """Module -> the paraplan modules it imports anywhere in its body, at module level or inside a
    function (``from pkg import submodule`` counts as the submodule; a relative import counts as the
    module it resolves to). An import of a module's own parent package (``from paraplan.catalog
    import x`` in ``paraplan.catalog.hf``) is the edge it is: the package's ``__init__`` runs. Only
    imports under ``if TYPE_CHECKING:`` are left out: they never run and name a type for annotations."""
    modules = {_module_name(p): p for p in _sources()}
    return {
        name: frozenset(_imports_of(name, path, modules, _walk(path)[0]))
        for name, path in modules.items()
    }


def _layer(module: str) -> int:
    best, level = -1, None
    for index, rooms in enumerate(LAYERS):
        for room in rooms:
            if (module == room or module.startswith(room + ".")) and len(room) > best:
                best, level = len(room), index
    assert level is not None, f"{module} is in no layer of LAYERS"
    return level


def test_every_module_has_a_layer():
    for module in _imports():
        _layer(module)


def test_no_import_goes_up_a_layer():
    upward = sorted(
        f"{module} -> {dep}"
        for module, deps in _imports().items()
        for dep in deps
        if _layer(dep) > _layer(module)
    )
    assert not upward, upward


def test_no_import_cycles():
    graph = _imports()
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append(" -> ".join(path[path.index(dep) :] + [dep]))
            elif dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, cycles


def test_no_source_file_over_500_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p, (text, _) in _sources().items()
        if (n := len(text.splitlines())) > MAX_FILE_LINES
    }
    assert set(long) <= PENDING_LONG_FILES, sorted(set(long) - PENDING_LONG_FILES)
    assert set(long) >= PENDING_LONG_FILES, sorted(PENDING_LONG_FILES - set(long))


def test_no_function_over_80_lines_outside_cli():
    long = {}
    for path in _sources():
        if "cli" in path.relative_to(ROOT).parts:
            continue
        for node in _walk(path):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = lines
    assert set(long) <= PENDING_LONG_FUNCTIONS, sorted(set(long) - PENDING_LONG_FUNCTIONS)
    assert set(long) >= PENDING_LONG_FUNCTIONS, sorted(PENDING_LONG_FUNCTIONS - set(long))


def test_sources_are_formatted():
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    done = subprocess.run(
        [ruff, "format", "--check", "--quiet", "src", "tests", "benchmarks"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_walk_sees_imports_inside_functions_but_not_type_checking_ones():
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import paraplan.cli\n"
        "def f():\n    from paraplan.step import compose\n"
    )
    found = {
        alias.name if isinstance(node, ast.Import) else node.module
        for node in _runtime_nodes(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert found == {"typing", "paraplan.step"}
    assert "paraplan.catalog" in _imports()["paraplan.cost.compute"]  # kernel_cap's lazy import
    assert "paraplan.specs.checked" in _imports()["paraplan.catalog"]


def test_the_walk_counts_parent_packages_and_resolves_relative_imports(tmp_path):
    """An import of a module's own parent package is an edge (its ``__init__`` runs); a relative import
    counts as the module it names, so neither hides a circle or an upward import."""
    package = tmp_path / "paraplan" / "catalog"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from . import hf\n")
    (package / "hf.py").write_text(
        "def f():\n    from paraplan.catalog import load\n    from ..specs import model\n"
    )
    modules = {
        "paraplan.catalog": package / "__init__.py",
        "paraplan.catalog.hf": package / "hf.py",
        "paraplan.specs.model": tmp_path / "model.py",
    }
    assert _imports_of("paraplan.catalog", package / "__init__.py", modules) == {
        "paraplan.catalog.hf"
    }
    assert _imports_of("paraplan.catalog.hf", package / "hf.py", modules) == {
        "paraplan.catalog",
        "paraplan.specs.model",
    }
    assert _layer("paraplan.cli.main") > _layer("paraplan.step.compose") > _layer("paraplan.specs")


def _calls_of(name: str) -> set[str]:
    """The modules (paths under the package) that call ``name(...)`` (or ``module.name(...)``) or define a
    class ``name``."""
    found = set()
    for path in _sources():
        for node in _walk(path):
            called = isinstance(node, ast.Call) and name in (
                getattr(node.func, "id", None),
                getattr(node.func, "attr", None),
            )
            defined = isinstance(node, ast.ClassDef) and node.name == name
            if called or defined:
                found.add(str(path.relative_to(ROOT)))
    return found


def _stage_rebuilds(source: str | tuple[ast.AST, ...]) -> bool:
    """Whether ``source`` (a text, or the nodes of its parsed tree) calls ``replace(...)`` (dataclasses.replace)
    setting a field of step.inputs.Stage that only a Stage has (``blocks``, ``p2p_s``, ``inputs``): a stage
    rebuilt from another one."""
    from dataclasses import fields

    from paraplan.step.inputs import Stage, StepInputs

    own = (
        {f.name for f in fields(Stage)} - {f.name for f in fields(StepInputs)} - {"index", "count"}
    )
    for node in ast.walk(ast.parse(source)) if isinstance(source, str) else source:
        if isinstance(node, ast.Call) and "replace" in (
            getattr(node.func, "id", None),
            getattr(node.func, "attr", None),
        ):
            if any(k.arg in own for k in node.keywords):
                return True
    return False


def test_one_module_builds_stages_and_one_defines_block_kinds():
    """Issue 31: step/layout.py alone constructs Stages (uniform and per-stage plans), directly or by
    ``replace(stage, blocks=...)``; step/blocks.py alone defines and instantiates block kinds;
    step/inputs.py defines Stage."""
    assert _calls_of("Stage") == {"step/layout.py", "step/inputs.py"}
    assert _stage_rebuilds("replace(stage, blocks=())") and _stage_rebuilds(
        "dc.replace(s, p2p_s=0)"
    )
    assert not _stage_rebuilds("replace(inp, stages=())")
    rebuilt = {str(p.relative_to(ROOT)) for p in _sources() if _stage_rebuilds(_walk(p))}
    assert rebuilt <= {"step/layout.py"}, sorted(rebuilt)
    assert _calls_of("BlockKind") == {"step/blocks.py"}
    assert _calls_of("BlockRef") == {"step/blocks.py"}


def test_head_divisibility_is_checked_in_specs_rules_alone():
    """Issue 31, one home for each plan rule: ``heads % tp`` (and kv_heads, tp·cp) is written in specs/rules.py
    (tp_rules, the Ulysses rule) and nowhere else; every caller asks those rules. specs/model.py keeps the
    model's own check, heads a multiple of kv_heads (no plan in it)."""
    found = set()
    for path in _sources():
        for node in _walk(path):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
                left = node.left
                name = left.attr if isinstance(left, ast.Attribute) else getattr(left, "id", "")
                if "heads" in name:
                    found.add(str(path.relative_to(ROOT)))
    assert found == {"specs/rules.py", "specs/model.py"}, sorted(found)


def test_the_layer_shape_is_built_in_step_layer_shape_alone():
    """Issue 31, one home for each rule: the layer shape, with the sequence-parallel rule (sp or a 2D grid,
    tp > 1), is built by step.layer_shape.layer_shape_from and nowhere else: LayerShape is constructed
    there alone (graph/transformer.py defines it) and no ``_replace`` anywhere sets sequence_parallel;
    the estimator, per-stage plans and the search's rows all call that function."""
    constructed = _calls_of("LayerShape")
    assert constructed == {"graph/transformer.py", "step/layer_shape.py"}, sorted(constructed)
    replaced = set()
    for path in _sources():
        for node in _walk(path):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) in ("_replace", "_make")
                and any(k.arg == "sequence_parallel" for k in node.keywords)
            ):
                replaced.add(str(path.relative_to(ROOT)))
    assert not replaced, sorted(replaced)
    callers = _calls_of("layer_shape_from")
    assert callers >= {"step/estimate.py", "step/stage_plan_settings.py", "search/shapes.py"}, (
        sorted(callers)
    )


def test_the_web_layer_imports_only_the_api():
    """The plan explorer (paraplan.web) calls paraplan.api only, so the page, the CLI and the API
    cannot disagree (issue 35)."""
    reached = sorted(
        f"{module} -> {dep}"
        for module, deps in _imports().items()
        if module.startswith("paraplan.web")
        for dep in deps
        if not (dep == "paraplan.api" or dep.startswith("paraplan.web"))
    )
    assert not reached, reached
