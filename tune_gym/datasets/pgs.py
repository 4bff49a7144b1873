"""Task sampling for pretraining cost models: One-Shot Tuner's prior-guided task sampling (PGS).

One-Shot Tuner (Ryu, Park & Sung, CC 2022) trains its predictor on tasks drawn from the layer
statistics of a model zoo: the first layer parameter is drawn by its frequency in the zoo, each
later one by its frequency among the zoo layers that share the values already drawn (a chain of
conditional frequencies). :class:`TaskPrior` does this over the conv layers of
:mod:`tune_gym.datasets.zoo`, parameter by parameter in :data:`ORDER`: op, kernel ``r``, stride
``s``, padding ``p``, input size ``h`` (= ``w``), in channels ``c``, out channels ``k``.

What each parameter is conditioned on (``parents``):

* ``parents="chain"`` conditions every parameter on all those drawn before it, the paper's
  Algorithm 1 taken literally. The chain of all conditionals is the zoo's joint distribution, so
  every sampled task is a zoo layer, drawn by its frequency: it is the paper's "model zoo"
  baseline, not a sampler of new tasks.
* The default (:data:`DEFAULT_PARENTS`) conditions each parameter on the earlier ones it depends
  on in a network: the stride and padding on the kernel, the input size on the op, kernel and stride,
  the in channels on the op and input size, the out channels on the op and in channels. Each
  conditional is still a zoo frequency (so every (parameter, parents) combination of a sample
  occurs in the zoo, and each parameter's marginal is the zoo's), but the combination of all of
  them is new: e.g. a 3x3 kernel on 192 channels at 28x28 going to 96 channels, which no zoo
  network has, although each of its pairs occurs. That generality is what PGS is for (the
  paper's PGS beats the model-zoo sampler in its Table 4).

Draws that do not make a valid task (a kernel larger than the padded input) are redrawn, as are
duplicates and the tasks in ``exclude`` (by default every task of the held-out networks'
suites, so evaluation networks stay unseen: :data:`~tune_gym.datasets.zoo.HELD_OUT_NETWORKS`).
:func:`uniform_tasks` is the paper's "random task sampling" ablation: each parameter uniformly
from its values in the zoo, independently.

Example:
    >>> prior = TaskPrior.from_zoo()
    >>> tasks = prior.sample(200, np.random.default_rng(0))   # 200 distinct llvm tasks
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from tune_gym.datasets.zoo import HELD_OUT_NETWORKS, ZooLayer, zoo_layers
from tune_gym.errors import TaskError
from tune_gym.tasks.task import Task

__all__ = ["DEFAULT_PARENTS", "ORDER", "TaskPrior", "held_out_tasks", "layer_task", "uniform_tasks"]

#: The order in which a task's parameters are drawn.
ORDER = ("op", "r", "s", "p", "h", "c", "k")
#: Default conditioning of each parameter (see the module docstring).
DEFAULT_PARENTS: dict[str, tuple[str, ...]] = {
    "op": (), "r": ("op",), "s": ("op", "r"), "p": ("r", "s"), "h": ("op", "r", "s"),
    "c": ("op", "h"), "k": ("op", "c"),
}
_MAX_TRIES = 1000


def layer_task(row: Mapping[str, Any], target: str = "llvm") -> Task:
    """The task of a layer row (``op, c, h, k, r, s, p``); raises TaskError if it is not valid."""
    layer = ZooLayer("", str(row["op"]), *(int(row[key]) for key in ("c", "h", "k", "r", "s", "p")))
    if layer.op == "depthwise_conv2d_nchw" and layer.k % layer.c:
        raise TaskError(f"a depthwise layer's out channels ({layer.k}) must be a multiple of its in channels "
                        f"({layer.c})")
    params: dict[str, Any] = layer.params  # shape parameters only: never target, dtype or weights
    return Task.make(layer.op, target=target, **params)


def held_out_tasks(networks: Iterable[str] = HELD_OUT_NETWORKS, target: str = "llvm") -> set[str]:
    """URIs of every task of the named suites (names without a suite are skipped)."""
    from tune_gym.tasks.suites import SUITES

    return {st.task.with_target(target).uri for name in networks if name in SUITES for st in SUITES[name].tasks}


class TaskPrior:
    """The empirical conditional frequencies of layer parameters, and a sampler of tasks from them.

    Args:
        rows: layers as mappings with the keys of :data:`ORDER` (one row per occurrence).
        parents: per parameter, the earlier parameters it is conditioned on; ``"chain"`` for all
            earlier ones (see the module docstring).
    """

    def __init__(self, rows: Sequence[Mapping[str, Any]], parents: Mapping[str, Sequence[str]] | str | None = None):
        if not rows:
            raise ValueError("a task prior needs at least one layer row")
        if parents == "chain":
            parents = {name: ORDER[:i] for i, name in enumerate(ORDER)}
        parents = dict(DEFAULT_PARENTS if parents is None else parents)  # type: ignore[arg-type]
        for name in ORDER:
            bad = [q for q in parents.get(name, ()) if q not in ORDER[: ORDER.index(name)]]
            if bad:
                raise ValueError(f"parameter {name!r} can only be conditioned on parameters drawn before it "
                                 f"({', '.join(ORDER[: ORDER.index(name)]) or 'none'}), not {bad}")
        self.parents = {name: tuple(parents.get(name, ())) for name in ORDER}
        self.rows = [{name: row[name] for name in ORDER} for row in rows]
        self._tables: dict[str, dict[tuple[Any, ...], tuple[list[Any], np.ndarray]]] = {}
        for name in ORDER:
            counts: dict[tuple[Any, ...], Counter[Any]] = defaultdict(Counter)
            for row in self.rows:
                counts[tuple(row[q] for q in self.parents[name])][row[name]] += 1
            self._tables[name] = {key: _normalised(c) for key, c in counts.items()}
        self._cdf = {name: {key: np.cumsum(p) for key, (_, p) in table.items()} for name, table in self._tables.items()}

    @classmethod
    def from_zoo(cls, models: list[str] | None = None, parents: Mapping[str, Sequence[str]] | str | None = None
                 ) -> TaskPrior:
        """The prior of the zoo's conv layers (:func:`tune_gym.datasets.zoo.zoo_layers`)."""
        rows = [{"op": x.op, "c": x.c, "h": x.h, "k": x.k, "r": x.r, "s": x.s, "p": x.p} for x in zoo_layers(models)]
        return cls(rows, parents)

    def conditional(self, name: str, given: Mapping[str, Any]) -> tuple[list[Any], np.ndarray]:
        """Values of ``name`` and their probabilities given the values of its parents in ``given``."""
        key = tuple(given[q] for q in self.parents[name])
        return self._tables[name][key]

    def marginal(self, name: str) -> dict[Any, float]:
        """The zoo frequency of each value of ``name``."""
        values, probs = _normalised(Counter(row[name] for row in self.rows))
        return dict(zip(values, probs.tolist()))

    def draw(self, rng: np.random.Generator) -> dict[str, Any]:
        """One draw of every parameter (not checked for validity)."""
        out: dict[str, Any] = {}
        for name in ORDER:
            values, probs = self.conditional(name, out)
            cdf = self._cdf[name][tuple(out[q] for q in self.parents[name])]
            out[name] = values[min(int(np.searchsorted(cdf, rng.random(), side="right")), len(values) - 1)]
        return out

    def sample(self, n: int, rng: np.random.Generator, target: str = "llvm", exclude: Iterable[str] | None = None,
               unique: bool = True) -> list[Task]:
        """``n`` valid tasks (distinct if ``unique``), none in ``exclude`` (URIs; default
        :func:`held_out_tasks`)."""
        return _sample(lambda: self.draw(rng), n, target, exclude, unique)


def uniform_tasks(rows: Sequence[Mapping[str, Any]], n: int, rng: np.random.Generator, target: str = "llvm",
                  exclude: Iterable[str] | None = None, unique: bool = True) -> list[Task]:
    """Random task sampling (the ablation): each parameter uniformly from its distinct zoo values,
    independently of the others."""
    support = {name: sorted({row[name] for row in rows}, key=str) for name in ORDER}

    def draw() -> dict[str, Any]:
        return {name: vals[int(rng.integers(len(vals)))] for name, vals in support.items()}

    return _sample(draw, n, target, exclude, unique)


def _normalised(counts: Counter[Any]) -> tuple[list[Any], np.ndarray]:
    values = sorted(counts, key=str)
    weights = np.array([counts[v] for v in values], dtype=np.float64)
    return values, weights / weights.sum()


def _sample(draw: Any, n: int, target: str, exclude: Iterable[str] | None, unique: bool) -> list[Task]:
    if n < 0:
        raise ValueError(f"number of tasks must be >= 0, got {n}")
    banned = set(held_out_tasks(target=target) if exclude is None else exclude)
    out: list[Task] = []
    seen: set[str] = set()
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > _MAX_TRIES * max(n, 1):
            raise ValueError(f"drew {tries - 1} tasks and found only {len(out)} valid, new ones of the {n} asked for")
        row = draw()
        if row["op"] == "depthwise_conv2d_nchw":
            row["k"] = row["c"]  # a depthwise draw keeps one output channel per input channel
        try:
            task = layer_task(row, target)
        except TaskError:
            continue
        if task.uri in banned or (unique and task.uri in seen):
            continue
        seen.add(task.uri)
        out.append(task)
    return out
