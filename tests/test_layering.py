"""Who may import what: the project's layers and the privacy of underscored names.

Scans every ``.py`` under tune_gym/, agents/, benchmarks/ and scripts/ (the source, not the
imported modules, so nothing is imported and the scan takes well under a second):

* No module uses a private name (``_x``; dunder names are public) of another project module:
  neither ``from M import _x`` nor ``M._x``, where ``M`` is a project module or a name
  imported from one.
* A private module (``pkg._mod``) is imported only by modules of its own package ``pkg``.
* Layers: ``tune_gym`` imports neither ``agents`` nor ``benchmarks``; ``agents`` does not import
  ``benchmarks``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tune_gym", "agents", "benchmarks", "scripts")
#: Top-level package -> the project packages it must not import.
FORBIDDEN = {"tune_gym": ("agents", "benchmarks"), "agents": ("benchmarks",)}


@dataclass(frozen=True)
class Import:
    """One imported module (``name`` None) or one name imported from a module, at ``line``."""

    module: str
    name: str | None
    alias: str
    line: int


def is_private(name: str) -> bool:
    """``_x`` is private; ``__x__`` (a dunder) is not."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_name(path: Path, root: Path) -> str:
    """``<root>/tune_gym/tasks/task.py`` -> ``tune_gym.tasks.task`` (a package is its ``__init__``)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def imports(tree: ast.AST, me: str, is_package: bool) -> Iterator[Import]:
    """The project imports of a module's syntax tree (relative imports resolved)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in PACKAGES:
                    yield Import(a.name, None, a.asname or a.name.split(".")[0], node.lineno)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = me.split(".")[: len(me.split(".")) - node.level + (1 if is_package else 0)]
                module = ".".join([*base, module] if module else base)
            if module.split(".")[0] in PACKAGES:
                for a in node.names:
                    yield Import(module, a.name, a.asname or a.name, node.lineno)


def problems(path: Path, root: Path = ROOT) -> list[str]:
    """Every rule the module at ``path`` (under the checkout ``root``) breaks, as ``file:line: what``."""
    me = module_name(path, root)
    where = path.relative_to(root)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = list(imports(tree, me, path.name == "__init__.py"))
    out = []
    for imp in found:
        parts = imp.module.split(".")
        for i, part in enumerate(parts):
            owner = ".".join(parts[:i])
            if is_private(part) and not (me == owner or me.startswith(owner + ".")):
                out.append(f"{where}:{imp.line}: imports the private module {'.'.join(parts[:i + 1])}")
        if imp.name is not None and is_private(imp.name) and imp.module != me:
            out.append(f"{where}:{imp.line}: imports the private name {imp.name} of {imp.module}")
        for layer in FORBIDDEN.get(me.split(".")[0], ()):
            if parts[0] == layer:
                out.append(f"{where}:{imp.line}: {me.split('.')[0]} imports {layer} ({imp.module})")
    aliases = {imp.alias for imp in found}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in aliases:
                out.append(f"{where}:{node.lineno}: uses {ast.unparse(node)}, a private name of another module")
    return out


def test_no_module_reaches_into_another_or_across_layers():
    broken = [line for path in project_files() for line in problems(path)]
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize(("source", "me", "expected"), [
    ("from tune_gym.records import _jsonable", "agents.x", "imports the private name _jsonable of tune_gym.records"),
    ("import tune_gym.records\ntune_gym.records._jsonable(1)", "agents.x", "uses tune_gym.records._jsonable"),
    ("from tune_gym import records as r\nr._jsonable(1)", "agents.x", "uses r._jsonable"),
    ("from tune_gym.tvm_support import _stack", "tune_gym.space", "imports the private name _stack"),
    ("from tune_gym.tasks.checks import show", "agents.x", None),
    ("from tune_gym.tasks._tir_json import load", "tune_gym.tasks.prim_func", None),
    ("from tune_gym.tasks._tir_json import load", "tune_gym.space",
     "imports the private module tune_gym.tasks._tir_json"),
    ("from tune_gym.space import __all__", "agents.x", None),
    ("from benchmarks.leaderboard import runner", "agents.demo", "agents imports benchmarks"),
    ("import agents.base", "tune_gym.cli", "tune_gym imports agents"),
    ("from agents.base import Agent", "benchmarks.speed", None),
    ("from . import _private", "tune_gym.tasks.task", "imports the private name _private of tune_gym.tasks"),
])
def test_the_rules_catch_what_they_name(tmp_path, source, me, expected):
    """The scan itself: each rule on a small module placed where ``me`` lives."""
    path = tmp_path.joinpath(*me.split(".")).with_suffix(".py")
    path.parent.mkdir(parents=True)
    path.write_text(source + "\n")
    found = problems(path, tmp_path)
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0], found
