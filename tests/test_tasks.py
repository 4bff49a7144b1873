from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tune_gym.errors import TaskError
from tune_gym.tasks import SUITES, TargetSpec, Task, get_suite, task_by_id

PACKAGE = Path(__file__).resolve().parent.parent / "tune_gym"


def test_uri_is_stable():
    task = Task.make("conv2d_nchw", c=64, h=56, w=56, k=64, r=3, p=1)
    assert task.uri == "op://conv2d_nchw-v1/n1_c64_h56_w56_k64_r3_s1_p1_d1?target=llvm"
    assert Task.from_uri("op://conv2d_nchw-v1/c64_h56_w56_k64_r3_p1") == task  # defaults filled
    opts = Task.from_uri("op://dense-v1/m1_n2_k3?target=llvm&mcpu=skylake-avx512&cores=4")
    assert opts.target.resolved() == {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 4}
    assert Task.from_uri(opts.uri) == opts


@pytest.mark.parametrize("uri, message", [
    ("dense/m1", "malformed task URI"),
    ("op://nope-v1/m1?target=llvm", "unknown op 'nope'"),
    ("op://dense-v9/m1_n1_k1", "version v1, not v9"),
    ("op://dense-v1/m1_n1", "missing parameter 'k'"),
    ("op://dense-v1/m1_n1_k1_q3", "unknown parameter"),
    ("op://dense-v1/m0_n1_k1", r"'m'=0 out of range; accepted: \[1, 65536\]"),
    ("op://dense-v1/m1_n1_k1?target=rocm", "unknown target kind 'rocm'"),
    ("op://dense-v1/m1_n1_k1?target=llvm&arch=sm_80", "unknown option 'arch'"),
    ("op://dense-v1/m1_n1_k1?dtype=int3", "unknown dtype"),
])
def test_bad_uris_name_the_problem(uri, message):
    with pytest.raises(TaskError, match=message):
        Task.from_uri(uri)


def test_unknown_task_id_lists_suites():
    with pytest.raises(TaskError, match="resnet18"):
        Task.parse("resnet19:1")
    with pytest.raises(TaskError, match="tasks 0..11"):
        task_by_id("resnet18:99")


def test_suites_match_published_flop_counts():
    # Multiply-adds of one 224x224 forward pass (conv + fc layers), as usually reported.
    gmacs = {name: sum(t.weight * t.task.flops for t in SUITES[name].tasks) / 2e9 for name in SUITES}
    assert gmacs["resnet18"] == pytest.approx(1.81, rel=0.02)
    assert gmacs["vgg16"] == pytest.approx(15.47, rel=0.02)
    assert gmacs["alexnet"] == pytest.approx(0.71, rel=0.02)
    assert gmacs["mobilenet_v2"] == pytest.approx(0.30, rel=0.03)
    assert gmacs["squeezenet1.0"] == pytest.approx(0.82, rel=0.03)
    assert sum(t.weight for t in SUITES["resnet18"].tasks) == 21  # 20 convs + fc
    assert sum(t.weight for t in SUITES["bert_base"].tasks) == 12 * 8 + 1


def test_cuda_suite_variant():
    suite = get_suite("resnet18", "cuda")
    assert all(t.task.target.kind == "cuda" for t in suite.tasks)
    assert Task.parse("resnet18:1@cuda") == suite[1].task


def test_ir_module_and_flops(dense_task):
    mod = dense_task.ir_module()
    assert "main" in [gv.name_hint for gv in mod.get_global_vars()]
    assert dense_task.flops == 2 * 32 * 32 * 32
    assert dense_task.output_shape() == (32, 32)


def test_host_target_is_detected():
    spec = TargetSpec("llvm").resolved()
    assert spec["mcpu"] not in ("", "native", "generic")
    assert spec["num-cores"] >= 1


def test_task_ids_resolve_through_the_registered_resolver():
    assert Task.parse(" resnet18:1 ") == SUITES["resnet18"][1].task
    assert Task.parse("resnet18:1@llvm&cores=2").target.option_dict == {"cores": "2"}
    with pytest.raises(TaskError, match="tasks 0..11"):
        Task.parse("resnet18:12345678901234567890")


# ---------------------------------------------------------------------------- import graph
def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """tune_gym modules ``path`` imports anywhere (top level, functions, TYPE_CHECKING blocks).

    ``from pkg import name`` counts as importing ``pkg.name`` when that is a module, else
    ``pkg`` (its ``__init__``). The implicit import of a module's parent packages is not an
    edge: a package ``__init__`` importing its own submodules is not a cycle.
    """
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in out if m in modules and m != name}


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_tasks_and_features_import_no_cycle():
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {m: _imports(p, set(files)) for m, p in files.items()}
    assert "tune_gym.tasks.suites" in graph["tune_gym.tasks"]  # the parser sees real edges
    assert "tune_gym.tasks.task" in graph["tune_gym.features.task"]  # (a TYPE_CHECKING import)
    ours = ("tune_gym.tasks", "tune_gym.features")
    cycles = [c for c in _cycles(graph) if any(m == p or m.startswith(p + ".") for m in c for p in ours)]
    assert not cycles, f"import cycles through tasks/features: {cycles}"
    assert "tune_gym.tasks.suites" not in graph["tune_gym.tasks.task"]
    assert not any(m.startswith("tune_gym.features") for m in graph["tune_gym.tasks.task"])
