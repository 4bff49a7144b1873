"""Network suites: the tunable layers of well-known networks, with per-task weights.

Shapes are written out from each architecture's definition (batch 1, ImageNet 224x224
inputs, float32; BERT-base at sequence length 128). Layers with identical shapes are one
task; its ``weight`` is how many times that task occurs in one forward pass, so a network's
latency is ``sum(weight * task latency)`` over its tasks (plus untuned glue ops).

Task ids are ``<suite>:<index>`` (``resnet18:3``), indices in the order listed here, with an
optional target as in a URI after ``@`` (``resnet18:3@cuda``, ``resnet18:3@llvm&cores=4``).
Importing this module registers :func:`task_by_id` with :func:`Task.parse
<tune_gym.tasks.task.Task.parse>` (see :func:`tune_gym.tasks.task.register_id_resolver`).

Suites of registered target kinds (:attr:`tune_gym.kinds.TaskKind.suites`, built by the kind on
first use) are not in :data:`SUITES`, the network suites of the CPU and GPU targets; their ids
resolve the same way (``<suite>:3``, ``<suite>:1@<kind>&<option>=5``), their target defaults to
their kind, and a suite may number its tasks with its own ids (:attr:`Suite.ids`). Such a suite
is built once per process and target; :func:`clear_kind_suites` makes the next lookup build it
again.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass

from tune_gym import kinds
from tune_gym.errors import TaskError
from tune_gym.tasks.checks import show
from tune_gym.tasks.targets import TargetSpec
from tune_gym.tasks.task import Task, register_id_resolver

__all__ = ["SUITES", "Suite", "SuiteTask", "clear_kind_suites", "get_suite", "suite_names", "task_by_id"]

_Layer = tuple[str, tuple[tuple[str, int], ...]]


@dataclass(frozen=True)
class SuiteTask:
    task: Task
    weight: int


@dataclass(frozen=True)
class Suite:
    """Tasks with weights. ``ids``: the task ids, one per task (empty: 0, 1, ...); ``suite[id]``."""

    name: str
    description: str
    tasks: tuple[SuiteTask, ...]
    ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.ids and (len(self.ids) != len(self.tasks) or len(set(self.ids)) != len(self.ids)):
            raise TaskError(f"suite {self.name}: {len(self.ids)} ids for {len(self.tasks)} tasks; give one distinct "
                            "id per task (or none)")

    def __getitem__(self, index: int) -> SuiteTask:
        if self.ids:
            if isinstance(index, bool) or not isinstance(index, int) or index not in self.ids:
                raise TaskError(f"suite {self.name} has tasks {', '.join(map(str, self.ids))}, not {show(index)}")
            return self.tasks[self.ids.index(index)]
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.tasks):
            raise TaskError(f"suite {self.name} has tasks 0..{len(self.tasks) - 1}, not {show(index)}")
        return self.tasks[index]

    def __len__(self) -> int:
        return len(self.tasks)

    @property
    def task_ids(self) -> tuple[int, ...]:
        """The id of each task, in order."""
        return self.ids or tuple(range(len(self.tasks)))

    def with_target(self, target: str | TargetSpec) -> Suite:
        return Suite(self.name, self.description,
                     tuple(SuiteTask(t.task.with_target(target), t.weight) for t in self.tasks), self.ids)


def _conv(c: int, h: int, k: int, r: int, s: int = 1, p: int = 0) -> _Layer:
    return ("conv2d_nchw", (("c", c), ("h", h), ("w", h), ("k", k), ("r", r), ("s", s), ("p", p)))


def _dw(c: int, h: int, s: int) -> _Layer:
    return ("depthwise_conv2d_nchw", (("c", c), ("h", h), ("w", h), ("r", 3), ("s", s), ("p", 1)))


def _dense(m: int, n: int, k: int) -> _Layer:
    return ("dense", (("m", m), ("n", n), ("k", k)))


def _bmm(b: int, m: int, n: int, k: int) -> _Layer:
    return ("batch_matmul", (("b", b), ("m", m), ("n", n), ("k", k)))


def _tconv(c: int, h: int, k: int, s: int, p: int) -> _Layer:
    return ("conv2d_transpose_nchw", (("c", c), ("h", h), ("w", h), ("k", k), ("r", 4), ("s", s), ("p", p)))


def _resnet18() -> list[_Layer]:
    layers = [_conv(3, 224, 64, 7, 2, 3)] + [_conv(64, 56, 64, 3, 1, 1)] * 4
    for cin, h, cout in [(64, 56, 128), (128, 28, 256), (256, 14, 512)]:
        layers += [_conv(cin, h, cout, 3, 2, 1), _conv(cin, h, cout, 1, 2, 0)]
        layers += [_conv(cout, h // 2, cout, 3, 1, 1)] * 3
    return layers + [_dense(1, 1000, 512)]


def _vgg16() -> list[_Layer]:
    cfg = [(3, 224, 64), (64, 224, 64), (64, 112, 128), (128, 112, 128), (128, 56, 256),
           (256, 56, 256), (256, 56, 256), (256, 28, 512), (512, 28, 512), (512, 28, 512),
           (512, 14, 512), (512, 14, 512), (512, 14, 512)]
    return [_conv(c, h, k, 3, 1, 1) for c, h, k in cfg] + [
        _dense(1, 4096, 512 * 7 * 7), _dense(1, 4096, 4096), _dense(1, 1000, 4096)]


def _alexnet() -> list[_Layer]:
    return [_conv(3, 224, 64, 11, 4, 2), _conv(64, 27, 192, 5, 1, 2), _conv(192, 13, 384, 3, 1, 1),
            _conv(384, 13, 256, 3, 1, 1), _conv(256, 13, 256, 3, 1, 1),
            _dense(1, 4096, 256 * 6 * 6), _dense(1, 4096, 4096), _dense(1, 1000, 4096)]


def _squeezenet10() -> list[_Layer]:
    layers = [_conv(3, 224, 96, 7, 2, 0)]
    fires = [(96, 54, 16, 64), (128, 54, 16, 64), (128, 54, 32, 128), (256, 27, 32, 128),
             (256, 27, 48, 192), (384, 27, 48, 192), (384, 27, 64, 256), (512, 13, 64, 256)]
    for cin, h, squeeze, expand in fires:
        layers += [_conv(cin, h, squeeze, 1), _conv(squeeze, h, expand, 1), _conv(squeeze, h, expand, 3, 1, 1)]
    return layers + [_conv(512, 13, 1000, 1)]


def _mobilenet_v2() -> list[_Layer]:
    layers = [_conv(3, 224, 32, 3, 2, 1)]
    cin, h = 32, 112
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            if t != 1:
                layers.append(_conv(cin, h, hidden, 1))
            layers.append(_dw(hidden, h, stride))
            h //= stride
            layers.append(_conv(hidden, h, c, 1))
            cin = c
    return layers + [_conv(320, 7, 1280, 1), _dense(1, 1000, 1280)]


def _bert_base(seq: int = 128, hidden: int = 768, heads: int = 12, ffn: int = 3072, depth: int = 12) -> list[_Layer]:
    head_dim = hidden // heads
    per_layer = [_dense(seq, hidden, hidden)] * 4 + [_dense(seq, ffn, hidden), _dense(seq, hidden, ffn),
                 _bmm(heads, seq, seq, head_dim), _bmm(heads, seq, head_dim, seq)]
    return per_layer * depth + [_dense(1, hidden, hidden)]


def _dcgan() -> list[_Layer]:
    return [_tconv(100, 1, 512, 1, 0), _tconv(512, 4, 256, 2, 1), _tconv(256, 8, 128, 2, 1),
            _tconv(128, 16, 64, 2, 1), _tconv(64, 32, 3, 2, 1)]


_DEFS = {
    "resnet18": ("ResNet-18, ImageNet 224x224, batch 1", _resnet18),
    "vgg16": ("VGG-16, ImageNet 224x224, batch 1", _vgg16),
    "alexnet": ("AlexNet (torchvision variant), 224x224, batch 1", _alexnet),
    "squeezenet1.0": ("SqueezeNet 1.0, 224x224, batch 1", _squeezenet10),
    "mobilenet_v2": ("MobileNet-V2 (width 1.0), 224x224, batch 1 (depthwise + 1x1 convs)", _mobilenet_v2),
    "bert_base": ("BERT-base encoder, sequence 128, batch 1 (dense + attention batch_matmul)", _bert_base),
    "dcgan": ("DCGAN generator, 64x64 output, batch 1 (conv2d_transpose)", _dcgan),
}


def _build(name: str, target: str | TargetSpec) -> Suite:
    description, layers_fn = _DEFS[name]
    counts = Counter(layers_fn())  # insertion order = first occurrence in the network
    spec = TargetSpec.coerce(target)
    tasks = tuple(SuiteTask(Task(op, params, "float32", spec), weight) for (op, params), weight in counts.items())
    return Suite(name, description, tasks)


def suite_names() -> list[str]:
    """Every suite name: the network suites (:data:`SUITES`), then the registered kinds' suites."""
    return [*_DEFS, *kinds.suite_names()]


def _owner(name: object) -> kinds.TaskKind | None:
    """The registered kind whose suite ``name`` is (``None``: a network suite or no suite)."""
    return None if not isinstance(name, str) or name in _DEFS else kinds.owner_of_suite(name)


def get_suite(name: str, target: str | TargetSpec | None = None) -> Suite:
    """A suite by name (``resnet18``), its tasks on ``target`` (a spec, or a str as in a URI;
    ``None``: ``llvm``, or the kind whose suite it is)."""
    owner = _owner(name)
    if not isinstance(name, str) or (name not in _DEFS and owner is None):
        raise TaskError(f"unknown suite {show(name)}; known suites: {', '.join(suite_names())}")
    if owner is not None:
        spec = TargetSpec.coerce(owner.name if target is None else target)
        if spec.kind != owner.name:
            raise TaskError(f"suite {name} runs on target {owner.name} only, not {spec.kind}")
        return _get_kind_suite(name, spec)
    return _get_suite(name, TargetSpec.coerce("llvm" if target is None else target))


@functools.cache
def _get_suite(name: str, target: TargetSpec) -> Suite:
    return _build(name, target)


@functools.cache
def _get_kind_suite(name: str, target: TargetSpec) -> Suite:
    kind = kinds.get_kind(target.kind)
    assert kind is not None  # get_suite checked that the suite is this kind's
    suite: Suite = kinds.load(kind.suites[name])(target)
    return suite


def clear_kind_suites() -> None:
    """Forget the suites of registered kinds built so far (each is built once per process and
    target); a kind whose suite lists data found at run time calls this when that data changes."""
    _get_kind_suite.cache_clear()


#: Every suite on the host CPU target, by name.
SUITES: dict[str, Suite] = {name: get_suite(name) for name in _DEFS}
kinds.reserve("suite", _DEFS, "tune_gym.tasks.suites")


def task_by_id(task_id: str) -> Task:
    """Resolve ``suite:index`` (optionally ``suite:index@cuda``) to a Task."""
    if not isinstance(task_id, str):
        raise TaskError(f"a task id is a str such as resnet18:1, got {type(task_id).__name__} {show(task_id)}")
    text, _, target = task_id.strip().partition("@")
    name, sep, index = text.partition(":")
    if not sep or not (index.isascii() and index.isdecimal()):
        raise TaskError(
            f"unknown task {show(task_id)}: give a URI (op://...) or <suite>:<index> such as resnet18:1; "
            f"suites: {', '.join(suite_names())} (list them with `tune-gym tasks`)"
        )
    if name not in _DEFS and _owner(name) is None:
        raise TaskError(f"unknown task {show(task_id)}: no suite {show(name)}; suites: {', '.join(suite_names())} "
                        "(list them with `tune-gym tasks`)")
    suite = get_suite(name, target or None)
    if len(index) > 9:
        ids = ", ".join(map(str, suite.ids)) if suite.ids else f"0..{len(suite) - 1}"
        raise TaskError(f"suite {name} has tasks {ids}, not {index[:12]}...")
    return suite[int(index)].task


register_id_resolver(task_by_id)
