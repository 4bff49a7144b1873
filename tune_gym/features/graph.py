"""MetaTune's loop-structure graph of a config (Ryu & Sung), and its fixed-size batched form.

The graph of one config's kernel (:func:`loop_graph`), built from its loop nest
(:func:`tune_gym.features.loops.loop_nest`):

* nodes: one ``root``; one ``for`` node per loop; one ``interval`` node per loop carrying the
  loop's context features. In the encoded form every node starts with a node-type one-hot
  (root, for, interval); root and for nodes carry nothing else (zeros), as in the paper.
* edges: ``root -> for`` (kind ``control``) for every loop, ``for -> interval`` (kind
  ``metadata``). With ``nesting=True`` also ``parent for -> child for`` (kind ``nesting``).
  Nesting is off by default: the paper's graph has no such edges, and without them every
  config of a family has the same edges on the same slots (a star of loop/interval pairs),
  which is what the super-graph augmentation aims at; parent links change with compute-at
  decisions, so with nesting on the structure varies from config to config.

Interval features (:attr:`GraphTemplate.feature_names`), all numbers through AutoTVM's
``take_log`` (``log2(1 + x)``, ``-log2(1 - x)`` for negatives): the loop extent; the loop kind
one-hot (:data:`~tune_gym.features.loops.ANNOTATIONS`: blockIdx/threadIdx x/y/z, unrolled,
vectorized, parallel, serial, vthread); the float ``add``/``mul``/``div`` counts of its body;
its unroll pragma (``pragma_auto_unroll_max_step``: MetaSchedule's unroll decision, which the
paper's list leaves out, but without it configs that differ only in that knob encode the same);
then, per buffer slot of the family (an access ``<buffer>_<k>``, the k-th access of that buffer
in visit order), the access ``stride``, ``count`` and ``reuse`` under that loop (zeros where the
loop does not enclose that access).

Super-graph template (MetaTune's augmentation, :class:`GraphTemplate`): every graph of one op
family on one target kind is mapped onto the same node slots. A loop's slot is
``<owner block>/<loop role>``, read from the names MetaSchedule gives (inspected on the suite
tasks, both presets, llvm and cuda):

* the role is the loop variable's leading axis and tile level: ``nn_0_ff_0_yy_0_fused`` (the
  parallel fusion of the outer tiles, whose length varies with the config) and ``nn_0`` are
  both ``nn_0``; ``xx_3_fused`` (vectorized) is ``xx_3``; ``k`` stays ``k``. A fused loop that
  is split again keeps the split level: ``ax0_ax1_ax2_ax3_fused_1`` (a CUDA cooperative fetch)
  is ``ax0_fused_1``. A second loop with the same role under the same owner gets ``#2``.
* the owner is the block the loop was made for: the last block below it (in visit order) whose
  loops in the unscheduled program include the role's axis (``nn`` is an axis of
  ``conv2d_nchw``, so the tiled outer loops belong to ``conv2d_nchw_update`` whichever
  producers are computed at them); loops with generated axes (``ax0`` of a compute-at, cache
  read or write) belong to the first block below them (``pad_temp``, ``conv2d_nchw_global``).

The slots of a family do not depend on the task's shape: with templates built from 3 suite
tasks in both presets, sampled configs of every task of the resnet18, mobilenet_v2, bert_base
and dcgan suites, on llvm and cuda, in both presets, drop no loop
(``encode_graphs(...)["dropped"]``; tests/test_features_graph.py and
``benchmarks/encoding_stats.py`` check it). The template is the union of the loop and buffer
slots seen on a few configs (the first of every sketch and ``n_configs`` seeded random valid
ones) of a few suite tasks of the family (:func:`template_for`, cached per process); slots a
graph lacks stay zero placeholders (mask 0, no edges), and a loop the template does not know
is dropped and counted (a buffer access it does not know is left out of the interval
features). Templates serialise to JSON (:meth:`GraphTemplate.to_dict`), so a trained model
can keep the one it was trained with.

Encoded form (:func:`encode_graphs`), node rows in template order: row 0 is the root, rows
``1..L`` the for nodes of the ``L`` loop slots, rows ``L+1..2L`` their interval nodes:

* ``nodes``: float32 ``batch x n_slots x feat_dim`` (``n_slots = 1 + 2L``);
* ``adjacency``: float32 ``batch x n_slots x n_slots``, ``A[b, src, dst] = 1`` for each directed
  edge of the config's graph (dense rather than an edge list, so every config of a template has
  the same shape, as fixed-shape observations and batching need; symmetrize it for
  undirected message passing);
* ``mask``: float32 ``batch x n_slots``, 1 where the slot holds a node of the config's graph;
* ``dropped``: int64 ``batch``, loops of the config that have no slot.

A config that does not schedule (``space.apply`` or a postproc fails, e.g. most CUDA configs)
encodes as all zeros (mask 0). :func:`to_pyg` turns one encoded graph into a
``torch_geometric.data.Data`` when torch_geometric is installed.

Sizes (templates from :func:`template_for`; loop slots, buffer slots -> nodes x features):
llvm: conv2d_nchw 52, 12 -> 105 x 55; dense 21, 10 -> 43 x 49; batch_matmul 27, 9 -> 55 x 46;
depthwise_conv2d_nchw 49, 12 -> 99 x 55; conv2d_transpose_nchw 68, 15 -> 137 x 64. cuda:
conv2d_nchw 48, 11 -> 97 x 52; dense 26, 11 -> 53 x 52; batch_matmul 33, 11 -> 67 x 52;
depthwise_conv2d_nchw 44, 11 -> 89 x 52; conv2d_transpose_nchw 48, 11 -> 97 x 52. A conv2d
config has 16-25 loops in the compact preset and 27-42 in the full one (33-85 graph nodes);
a dense config 8-11 and 13-18 (``benchmarks/results/encodings``). Building a template takes
0.1-7 s on llvm and 2-10 s on cuda, where most sampled configs are invalid.

Cost (2-core machine shared with a measuring job): per uncached config, walk + encode takes
15.6 ms on resnet18:1 (full preset; 13.5 ms of it ``space.apply``) and 7.4 ms on bert_base:0
(dense, full; 3.4 ms ``space.apply``); encoding an already walked config takes 0.32 ms and
0.16 ms (compact presets: 6.5 / 0.21 ms and 2.9 / 0.11 ms).

Example:
    >>> space = KnobSpace.for_task(Task.parse("resnet18:1"), "full")
    >>> template = template_for(space.task)
    >>> enc = encode_graphs(template, space, space.sample(np.random.default_rng(0), 4))
    >>> enc["nodes"].shape, enc["adjacency"].shape, enc["mask"].shape
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np

from tune_gym.features.loops import ANNOTATIONS, Loop, LoopNest, extract_loops, loop_nest, take_logs
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.targets import TargetSpec
from tune_gym.tasks.task import Task

__all__ = ["ACCESS_FIELDS", "LOOP_FEATURES", "NODE_TYPES", "GraphTemplate", "encode_graphs", "loop_graph",
           "loop_slots", "template_for", "to_pyg"]

#: Node types, in the order of the node-type one-hot that starts every node row.
NODE_TYPES = ("root", "for", "interval")
#: Interval features before the buffer slots: log extent, loop kind one-hot, log add/mul/div
#: counts, log unroll pragma.
LOOP_FEATURES = ("extent", *(f"kind={a}" for a in ANNOTATIONS), "add", "mul", "div", "unroll")
#: Features per buffer slot.
ACCESS_FIELDS = ("stride", "count", "reuse")
#: Version of :meth:`GraphTemplate.to_dict`'s format.
TEMPLATE_FORMAT = 1
_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class _Part:
    """One loop as the graph sees it: its slot key, parent loop index and nest entry."""

    slot: str
    parent: int
    loop: Loop


@functools.lru_cache(maxsize=4096)
def _role(name: str) -> tuple[str, str]:
    """``(axis, role)`` of a loop variable name (see the module docstring)."""
    tokens = name.split("_")
    if tokens[-1] == "init":
        tokens = tokens[:-1]
    axis = tokens[0]
    role = axis + (f"_{tokens[1]}" if len(tokens) > 1 and _DIGITS.fullmatch(tokens[1]) else "")
    if "fused" in tokens:
        tail = tokens[len(tokens) - tokens[::-1].index("fused"):]
        if tail and all(_DIGITS.fullmatch(t) for t in tail):
            role += "_fused_" + "_".join(tail)
    return axis, role


_AXES: dict[str, dict[str, frozenset[str]]] = {}


def _block_axes(space: KnobSpace) -> None:
    """Record ``{block: names of its loops}`` of the space's unscheduled program (once per task)."""
    uri = space.task.uri
    if uri not in _AXES:
        axes: dict[str, set[str]] = {}
        for loop in extract_loops(space.mod["main"]).loops:
            for block in loop.blocks:
                axes.setdefault(block, set()).add(loop.name)
        _AXES[uri] = {block: frozenset(names) for block, names in axes.items()}


@functools.lru_cache(maxsize=65536)
def _owner(uri: str, blocks: tuple[str, ...], axis: str) -> str:
    """The block a loop of task ``uri`` was made for (see the module docstring); ``blocks``: the
    blocks below the loop, in visit order (``_block_axes`` of the task must have run)."""
    axes = _AXES[uri]
    for block in reversed(blocks):
        base = block
        for suffix in ("_init", "_update"):
            if block.endswith(suffix) and block[: -len(suffix)] in axes:
                base = block[: -len(suffix)]
        if axis in axes.get(base, ()):
            return block
    return blocks[0] if blocks else ""


def _parts(space: KnobSpace, nest: LoopNest) -> list[_Part]:
    uri = space.task.uri
    _block_axes(space)
    seen: dict[str, int] = {}
    out = []
    for loop in nest.loops:
        axis, role = _role(loop.name)
        key = f"{_owner(uri, tuple(loop.blocks), axis)}/{role}"
        seen[key] = seen.get(key, 0) + 1
        out.append(_Part(key if seen[key] == 1 else f"{key}#{seen[key]}", loop.parent, loop))
    return out


def loop_slots(space: KnobSpace, config: Config) -> list[str] | None:
    """The slot key of each loop of ``config``'s kernel, in loop order (``None``: no schedule).

    Example: ``["weight_global/ax0", ..., "conv2d_nchw_update/nn_0", "pad_temp/ax0", ...]``.
    """
    nest = loop_nest(space, config)
    return None if nest is None else [p.slot for p in _parts(space, nest)]


def loop_graph(space: KnobSpace, config: Config, nesting: bool = False) -> nx.DiGraph:
    """MetaTune's loop graph of one config (see the module docstring).

    Args:
        space: the config's space.
        config: knob indices.
        nesting: also add ``parent for -> child for`` edges (kind ``nesting``).

    Returns:
        A ``DiGraph`` with node 0 the root, node ``1 + i`` the for node of the i-th loop
        (attributes ``kind="for"``, ``name``, ``slot``, ``nest_level``) and node ``1 + L + i``
        its interval (``kind="interval"``, ``extent``, ``annotation``, ``add``, ``mul``, ``div``,
        ``unroll``, ``access``: ``{"<buffer>_<k>": (stride, count, reuse)}``, raw values); edges carry
        ``kind``. ``graph["valid"]`` is False, and the graph empty, when the config does not
        schedule.
    """
    g = nx.DiGraph(task=space.task.uri, preset=space.preset, config=tuple(config))
    nest = loop_nest(space, config)
    g.graph["valid"] = nest is not None
    if nest is None:
        return g
    parts = _parts(space, nest)
    n = len(parts)
    g.add_node(0, kind="root")
    for i, p in enumerate(parts):
        loop = p.loop
        g.add_node(1 + i, kind="for", name=loop.name, slot=p.slot, nest_level=loop.nest_level)
        g.add_node(1 + n + i, kind="interval", extent=loop.length, annotation=ANNOTATIONS[loop.ann],
                   add=loop.add, mul=loop.mul, div=loop.div, unroll=loop.unroll,
                   access={k: (a.stride, a.count, a.reuse) for k, a in loop.touch.items()})
        g.add_edge(0, 1 + i, kind="control")
        g.add_edge(1 + i, 1 + n + i, kind="metadata")
        if nesting and p.parent >= 0:
            g.add_edge(1 + p.parent, 1 + i, kind="nesting")
    return g


@dataclass(frozen=True)
class GraphTemplate:
    """The node and buffer slots shared by every graph of one op family on one target kind.

    Attributes:
        family: the op (``conv2d_nchw``, ``dense``, ...).
        target: the target kind (``llvm`` or ``cuda``).
        loops: loop slot keys (``<owner block>/<role>``), in a fixed order.
        buffers: buffer access slot keys (``<buffer>_<k>``), sorted.
        nesting: whether encodings carry ``parent -> child`` loop edges.
    """

    family: str
    target: str
    loops: tuple[str, ...]
    buffers: tuple[str, ...]
    nesting: bool = False

    @property
    def n_slots(self) -> int:
        """Node rows: the root, then a for and an interval node per loop slot."""
        return 1 + 2 * len(self.loops)

    @property
    def feature_names(self) -> tuple[str, ...]:
        """Names of the node feature columns."""
        access = tuple(f"{b}.{f}" for b in self.buffers for f in ACCESS_FIELDS)
        return (*(f"type={t}" for t in NODE_TYPES), *LOOP_FEATURES, *access)

    @property
    def feat_dim(self) -> int:
        return len(NODE_TYPES) + len(LOOP_FEATURES) + len(ACCESS_FIELDS) * len(self.buffers)

    # ------------------------------------------------------------------ building
    @classmethod
    def probe(cls, spaces: Sequence[KnobSpace], n_configs: int = 8, seed: int = 0,
              nesting: bool = False) -> GraphTemplate:
        """The union of the slots of a few configs of each space (all of one family and target).

        Per space: the first config of every sketch and ``n_configs`` valid configs drawn with
        ``numpy.random.default_rng(seed)`` (at most ``40 * n_configs`` draws, for CUDA spaces
        where most configs are invalid). Loop slots are ordered by first sight, spaces in the
        order given.

        Raises:
            ValueError: no spaces, or spaces of different op families or target kinds.
        """
        if not spaces:
            raise ValueError("GraphTemplate.probe needs at least one space")
        family, target = spaces[0].task.op, spaces[0].task.target.kind
        for s in spaces:
            if (s.task.op, s.task.target.kind) != (family, target):
                raise ValueError(f"GraphTemplate.probe: {s.task.uri} is {s.task.op} on {s.task.target.kind}, "
                                 f"but the template is for {family} on {target}")
        loops: dict[str, None] = {}
        buffers: set[str] = set()
        for space in spaces:
            for nest in _probe_nests(space, n_configs, seed):
                loops.update(dict.fromkeys(p.slot for p in _parts(space, nest)))
                buffers |= nest.keys
        return cls(family, target, tuple(loops), tuple(sorted(buffers)), nesting)

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (:meth:`from_dict` reads it back)."""
        return {"format": TEMPLATE_FORMAT, "family": self.family, "target": self.target, "loops": list(self.loops),
                "buffers": list(self.buffers), "nesting": self.nesting}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GraphTemplate:
        """The template of :meth:`to_dict` (also accepts its JSON text).

        Raises:
            ValueError: a missing field, a field of the wrong type or an unknown format.
        """
        if isinstance(data, str):
            data = json.loads(data)
        if not isinstance(data, dict):
            raise ValueError(f"a graph template is a dict, got {type(data).__name__}")
        if data.get("format") != TEMPLATE_FORMAT:
            raise ValueError(f"graph template format {data.get('format')!r}; supported: {TEMPLATE_FORMAT}")
        for key, kind in (("family", str), ("target", str), ("loops", list), ("buffers", list), ("nesting", bool)):
            if not isinstance(data.get(key), kind):
                raise ValueError(f"graph template field {key!r} must be a {kind.__name__}, got {data.get(key)!r}")
        for key in ("loops", "buffers"):
            if not all(isinstance(v, str) for v in data[key]) or len(set(data[key])) != len(data[key]):
                raise ValueError(f"graph template field {key!r} must hold distinct strings")
        return cls(data["family"], data["target"], tuple(data["loops"]), tuple(data["buffers"]), data["nesting"])

    # ------------------------------------------------------------------ encoding
    def encode(self, space: KnobSpace, nest: LoopNest | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """One config's ``(nodes, adjacency, mask, dropped)`` (see :func:`encode_graphs`).

        Args:
            space: the space the nest comes from (its blocks name the slots).
            nest: the config's loop nest; ``None`` (no schedule) gives all zeros.
        """
        n, width = self.n_slots, self.feat_dim
        nodes = np.zeros((n, width), dtype=np.float32)
        adj = np.zeros((n, n), dtype=np.float32)
        mask = np.zeros(n, dtype=np.float32)
        if nest is None:
            return nodes, adj, mask, 0
        rows = _index(self.loops)
        cols = self._columns()
        n_loops = len(self.loops)
        parts = _parts(space, nest)
        slot_of = [rows.get(p.slot, -1) for p in parts]
        present = np.array([j for j in slot_of if j >= 0], dtype=np.int64)
        fors, intervals = 1 + present, 1 + n_loops + present
        nodes[0, 0] = mask[0] = 1.0
        nodes[fors, 1] = nodes[intervals, 2] = mask[fors] = mask[intervals] = 1.0
        adj[0, fors] = adj[fors, intervals] = 1.0
        base = len(NODE_TYPES)
        arith = base + 1 + len(ANNOTATIONS)
        at: list[int] = []  # flat indices into nodes of the values to log-transform
        values: list[float] = []
        for p, j in zip(parts, slot_of):
            if j < 0:
                continue
            iv = (1 + n_loops + j) * width
            loop = p.loop
            nodes.flat[iv + base + 1 + loop.ann] = 1.0
            at += (iv + base, iv + arith, iv + arith + 1, iv + arith + 2, iv + arith + 3)
            values += (loop.length, loop.add, loop.mul, loop.div, loop.unroll)
            for key, a in loop.touch.items():
                c = cols.get(key)
                if c is not None:
                    at += (iv + c, iv + c + 1, iv + c + 2)
                    values += (a.stride, a.count, a.reuse)
            if self.nesting and p.parent >= 0 and slot_of[p.parent] >= 0:
                adj[1 + slot_of[p.parent], 1 + j] = 1.0
        x = np.asarray(values, dtype=np.float64)
        nodes.flat[at] = take_logs(x)
        return nodes, adj, mask, slot_of.count(-1)

    def _columns(self) -> dict[str, int]:
        start = len(NODE_TYPES) + len(LOOP_FEATURES)
        return {k: start + len(ACCESS_FIELDS) * i for k, i in _index(self.buffers).items()}


@functools.lru_cache(maxsize=64)
def _index(keys: tuple[str, ...]) -> dict[str, int]:
    return {k: i for i, k in enumerate(keys)}


def _probe_nests(space: KnobSpace, n_configs: int, seed: int) -> list[LoopNest]:
    """The nests of the first config of every sketch and ``n_configs`` seeded valid configs."""
    offsets = np.cumsum((0, *space.sketch_sizes[:-1]))
    out = [nest for o in offsets if (nest := loop_nest(space, space.config(int(o)))) is not None]
    rng = np.random.default_rng(seed)
    found = 0
    for _ in range(40 * n_configs):
        if found >= n_configs:
            break
        nest = loop_nest(space, space.sample(rng, 1)[0])
        if nest is not None:
            out.append(nest)
            found += 1
    return out


def encode_graphs(template: GraphTemplate, space: KnobSpace, configs: Sequence[Config] | np.ndarray
                  ) -> dict[str, np.ndarray]:
    """Encode configs as fixed-size graphs on ``template``'s slots.

    Args:
        template: the family's template (:func:`template_for`, or one stored with a model).
        space: the configs' space; its op and target kind must be the template's.
        configs: ``batch`` configs (knob indices).

    Returns:
        ``nodes`` (float32 ``batch x n_slots x feat_dim``), ``adjacency`` (float32
        ``batch x n_slots x n_slots``, ``[b, src, dst]``), ``mask`` (float32
        ``batch x n_slots``) and ``dropped`` (int64 ``batch``: loops without a slot); a config
        that does not schedule is all zeros.

    Raises:
        ValueError: the space is of another family or target kind than the template.
    """
    if (space.task.op, space.task.target.kind) != (template.family, template.target):
        raise ValueError(f"graph template is for {template.family} on {template.target}, "
                         f"but {space.task.uri} is {space.task.op} on {space.task.target.kind}")
    batch = len(configs)
    n = template.n_slots
    out: dict[str, np.ndarray] = {"nodes": np.zeros((batch, n, template.feat_dim), dtype=np.float32),
                                  "adjacency": np.zeros((batch, n, n), dtype=np.float32),
                                  "mask": np.zeros((batch, n), dtype=np.float32),
                                  "dropped": np.zeros(batch, dtype=np.int64)}
    for b, config in enumerate(configs):
        cfg = tuple(int(v) for v in config)
        nodes, adj, mask, dropped = template.encode(space, loop_nest(space, cfg))
        out["nodes"][b], out["adjacency"][b], out["mask"][b], out["dropped"][b] = nodes, adj, mask, dropped
    return out


def _family_tasks(op: str, target: TargetSpec, n_tasks: int) -> list[Task]:
    """``n_tasks`` distinct suite tasks of ``op`` on ``target``, evenly spread in FLOPs from the
    smallest to the largest (the extremes are where shapes change the loop structure), each in
    every weight layout it supports (packed weights add a buffer and a layout nest)."""
    from tune_gym.tasks.suites import SUITES, get_suite

    tasks = {t.task.uri: t.task for name in SUITES for t in get_suite(name, target).tasks if t.task.op == op}
    ordered = sorted(tasks.values(), key=lambda t: (t.flops, t.uri))
    if not ordered:
        return []
    picks = np.unique(np.linspace(0, len(ordered) - 1, min(n_tasks, len(ordered))).round().astype(int))
    chosen = [ordered[int(i)] for i in picks]
    return chosen + [t.with_weights("given") for t in chosen if t.packed]


@functools.lru_cache(maxsize=32)
def _cached_template(tasks: tuple[Task, ...], presets: tuple[str, ...], n_configs: int, seed: int,
                     nesting: bool) -> GraphTemplate:
    return GraphTemplate.probe([KnobSpace.for_task(t, p) for t in tasks for p in presets], n_configs, seed, nesting)


def template_for(task: Task, presets: Sequence[str] = ("compact", "full"), n_tasks: int = 3, n_configs: int = 8,
                 seed: int = 0, nesting: bool = False) -> GraphTemplate:
    """The template of ``task``'s op family on its target (cached per process).

    Probes ``n_tasks`` suite tasks of the family (from every suite, on the task's target, evenly
    spread in FLOPs from the smallest to the largest; with packed and with given weights where
    the op packs them), each in every preset of ``presets``, on the configs
    :meth:`GraphTemplate.probe` draws with ``seed``; so the template does not depend on which
    task of the family asks for it. An op that no suite holds is probed on ``task`` itself.
    Takes seconds: building the probed spaces dominates.

    Raises:
        ValueError: ``presets`` empty, or ``n_tasks`` or ``n_configs`` below 1.
    """
    presets = tuple(presets)
    if not presets or n_tasks < 1 or n_configs < 1:
        raise ValueError(f"template_for needs presets (got {presets}), n_tasks >= 1 (got {n_tasks}) and "
                         f"n_configs >= 1 (got {n_configs})")
    tasks = tuple(_family_tasks(task.op, task.target, n_tasks)) or (task,)
    return _cached_template(tasks, presets, n_configs, seed, nesting)


def to_pyg(encoded: dict[str, np.ndarray], index: int = 0, undirected: bool = False) -> Any:
    """One graph of :func:`encode_graphs` as a ``torch_geometric.data.Data``.

    Args:
        encoded: the output of :func:`encode_graphs`.
        index: which graph of the batch.
        undirected: also add every edge reversed.

    Returns:
        ``Data(x, edge_index, slot)`` over the present nodes only: ``x`` float32
        ``nodes x feat_dim``, ``edge_index`` int64 ``2 x edges`` (source row first), ``slot``
        int64 ``nodes``, each node's row in the template.

    Raises:
        ImportError: torch_geometric is not installed.
    """
    try:
        from torch_geometric.data import Data
    except ImportError:
        raise ImportError("to_pyg needs torch_geometric, which is not installed: "
                          "pip install torch_geometric") from None
    import torch

    present = np.flatnonzero(encoded["mask"][index] > 0)
    src, dst = np.nonzero(encoded["adjacency"][index][np.ix_(present, present)])
    edges = np.stack([src, dst]).astype(np.int64)
    if undirected:
        edges = np.concatenate([edges, edges[::-1]], axis=1)
    return Data(x=torch.from_numpy(encoded["nodes"][index][present].copy()), edge_index=torch.from_numpy(edges),
                slot=torch.from_numpy(present.astype(np.int64)))
