"""docs/design.md's layers: core < models < backends < app < commands/cli; an import only ever points down.

Checked two ways: on the source (every import statement, lazy ones inside functions included, and every string
that names a module, as plugin targets and ``importlib.import_module`` arguments do), and by importing every core
and models module in a fresh interpreter and looking at what came with it.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

# the layer each importable twinrun name belongs to (old alias paths included)
LAYER_OF = {
    "twinrun.core": "core",
    "twinrun.models": "models",
    "twinrun.backends": "backends",
    "twinrun.app": "app",
    "twinrun.commands": "cli",
    "twinrun.cli": "cli",
}
ORDER = ["core", "models", "backends", "app", "cli"]
CHECKED = ("core", "models", "backends")  # app and commands may import everything below them


def _layer(module: str) -> str | None:
    for prefix, layer in LAYER_OF.items():
        if module == prefix or module.startswith(prefix + "."):
            return layer
    return None


def imported_modules(source: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every module a source text imports or names: ``import a.b``, ``from a.b import c``
    (also as ``a.b.c``: c may be a module), ``from twinrun import x``, and string constants such as
    ``"twinrun.backends.trl.train:train"``; wherever they sit (a lazy import in a function counts). A module
    named after ``-m`` in a command line is a new process's entry point (torchrun relaunching ``twinrun.cli``),
    not an import, and is left out."""
    tree = ast.parse(source)
    launched = {
        id(b) for node in ast.walk(tree) if isinstance(node, (ast.List, ast.Tuple))
        for a, b in zip(node.elts, node.elts[1:]) if isinstance(a, ast.Constant) and a.value == "-m"
    }
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in launched:
            m = re.fullmatch(r"(twinrun(?:\.\w+)+)(?::\w+)?", node.value.strip())
            if m:
                out.append((node.lineno, m.group(1)))
    return out


def upward_imports(root: Path, layer: str) -> list[str]:
    """``path:line imports NAME (LAYER)`` for every import from a layer above ``layer`` in its folder."""
    rank = ORDER.index(layer)
    bad = []
    for path in sorted((root / "twinrun" / layer).rglob("*.py")):
        for line, name in imported_modules(path.read_text(encoding="utf-8")):
            target = _layer(name)
            if target is not None and ORDER.index(target) > rank:
                bad.append(f"{path.relative_to(root)}:{line} imports {name} ({target})")
    return bad


@pytest.mark.parametrize("layer", CHECKED)
def test_no_layer_imports_a_layer_above_it(repo_root: Path, layer: str) -> None:
    bad = upward_imports(repo_root, layer)
    assert not bad, f"{layer} imports upwards:\n" + "\n".join(bad)


def test_the_source_check_sees_lazy_and_string_imports() -> None:
    src = (
        "import os\n"
        "def f():\n"
        "    from twinrun.models.tiny import resolve_model\n"
        "    import twinrun.cli\n"
        "    from twinrun import app\n"
        "TARGET = 'twinrun.backends.trl.train:train'\n"
        "CMD = [sys.executable, '-m', 'twinrun.commands.run']\n"
    )
    layers = {_layer(name) for _, name in imported_modules(src)} - {None}
    assert layers == {"models", "cli", "app", "backends"}


def test_importing_core_and_models_loads_nothing_above_them() -> None:
    """The import graph as Python sees it: every core and models module imported in a fresh interpreter loads no
    backend, application or CLI module (and core alone loads no models module)."""
    code = """
import importlib, pkgutil, sys
import twinrun.core as core
def load(pkg):
    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):
        importlib.import_module(m.name)
def above(prefixes):
    return sorted(m for m in sys.modules if m.split('.')[:2] in prefixes)
load(core)
print(above([['twinrun', p] for p in ('models', 'backends', 'app', 'commands', 'cli')]))
import twinrun.models as models
load(models)
print(above([['twinrun', p] for p in ('backends', 'app', 'commands', 'cli')]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    core_above, models_above = out.stdout.strip().splitlines()
    assert core_above == "[]", f"importing core loaded {core_above}"
    assert models_above == "[]", f"importing models loaded {models_above}"


# ------------------------------------------------------------------------------------------------------------
# Inside core: concept packages in an order (docs/layout.md), and no import circles anywhere

CONCEPTS = ["errors", "spec", "records", "envs", "executors", "skills", "rewards", "advantages", "curation", "sweeps",
            "compare", "sft"]


def _concept(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["twinrun", "core"] else None


def upward_concept_imports(root: Path) -> list[str]:
    """``path:line imports NAME (CONCEPT)`` for every import, in a core concept package, of a concept after it."""
    bad = []
    for path in sorted((root / "twinrun" / "core").rglob("*.py")):
        rel = path.relative_to(root / "twinrun" / "core")
        if len(rel.parts) == 1 and rel.name == "__init__.py":
            continue  # core's own docstring
        own = rel.parts[0].removesuffix(".py")
        for line, name in imported_modules(path.read_text(encoding="utf-8")):
            target = _concept(name)
            if target in CONCEPTS and CONCEPTS.index(target) > CONCEPTS.index(own):
                bad.append(f"{path.relative_to(root)}:{line} imports {name} ({target} comes after {own})")
    return bad


def test_core_holds_exactly_the_concept_packages(repo_root: Path) -> None:
    entries = sorted(p.name.removesuffix(".py") for p in (repo_root / "twinrun" / "core").iterdir()
                     if p.name != "__init__.py" and not p.name.startswith((".", "__pycache__")))
    assert entries == sorted(CONCEPTS), "twinrun/core holds other entries than its concepts (docs/layout.md)"
    assert len(entries) <= 12


def test_no_concept_imports_a_concept_after_it(repo_root: Path) -> None:
    bad = upward_concept_imports(repo_root)
    assert not bad, "core concepts import upwards (move the piece down, or pass it in):\n" + "\n".join(bad)


def test_the_concept_check_sees_an_upward_import(tmp_path: Path) -> None:
    pkg = tmp_path / "twinrun" / "core" / "records"
    pkg.mkdir(parents=True)
    (pkg / "files.py").write_text("def f():\n    from twinrun.core.sweeps.plan import SweepPlan\n")
    assert "twinrun/core/records/files.py:2 imports twinrun.core.sweeps.plan (sweeps comes after records)" in \
        upward_concept_imports(tmp_path)
    (pkg / "files.py").write_text("from twinrun.core.spec import load_spec\n")
    assert upward_concept_imports(tmp_path) == []


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:``: they never run (an annotation's name), so no circle."""
    return {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
            and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING"
            for stmt in node.body for n in ast.walk(stmt)}


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the twinrun modules it imports when it runs (lazy imports included, ``if TYPE_CHECKING:`` ones not;
    ``from pkg import name`` counts as pkg unless name is a module)."""
    files = {}
    for path in (root / "twinrun").rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        out: set[str] = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_only(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                out |= {a.name for a in node.names if a.name in files}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    out |= {full} if full in files else ({node.module} if node.module in files else set())
        graph[mod] = out - {mod}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    circles.append(sorted(comp))
    return circles


def test_no_two_modules_import_each_other(repo_root: Path) -> None:
    circles = import_circles(import_graph(repo_root))
    assert not circles, "import circles (what both need moves down):\n" + "\n".join(map(" <-> ".join, circles))


def test_the_circle_check_sees_a_lazy_circle(tmp_path: Path) -> None:
    pkg = tmp_path / "twinrun"
    pkg.mkdir()
    (pkg / "a.py").write_text("def f():\n    import twinrun.b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from twinrun import a\n")
    assert import_circles(import_graph(tmp_path)) == []
    (pkg / "b.py").write_text("from twinrun import a\n")
    assert import_circles(import_graph(tmp_path)) == [["twinrun.a", "twinrun.b"]]
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_no_module_is_an_alias_of_another(repo_root: Path) -> None:
    """An old import path kept alive by ``sys.modules[__name__] = ...`` hides where a thing lives: none is kept."""
    aliases = [str(p.relative_to(repo_root)) for p in (repo_root / "twinrun").rglob("*.py")
               if "sys.modules[__name__]" in p.read_text(encoding="utf-8")]
    assert not aliases
