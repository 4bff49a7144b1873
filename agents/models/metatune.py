"""MetaTune's cost model: a GCN over the loop graph, meta-learned with MAML.

Ryu & Sung, "MetaTune: Meta-Learning Based Cost Model for Fast and Efficient Auto-tuning
Frameworks". A config's kernel is the loop graph of :mod:`tune_gym.features.graph` (a root, a
``for`` node per loop, an ``interval`` node per loop with its context features) on the node
slots of its op family's super-graph template. The network (:class:`MetaTuneNet`):

* GCN layers (``gcn``, default three of width 64; torch_geometric's ``DenseGCNConv``: the
  adjacency symmetrised, self-loops added, ``D^-1/2 (A + I) D^-1/2`` normalised, absent nodes
  masked), each followed by a ReLU;
* readout: a weighted sum of the node embeddings, each node weighted by a learned gate
  ``sigmoid(w . h + b)``, concatenated with their element-wise max (DGL-LifeSci's
  "weighted sum and max" readout), over the graph's nodes only -- the fixed-length embedding;
* the regressor: three fully connected layers (``2 * width -> 64 -> 64 -> 1``, ReLU between)
  predicting the normalised throughput ``label = task's best cost / cost`` (in [0, 1], 0 for
  a failed config).

Training (:meth:`MetaTuneModel.fit`):

1. supervised pre-training of the whole network (GCN embedding and regressor), MSE on the
   labels, Adam, mini-batches of one op family each (``epochs``, ``batch``, ``lr``);
2. MAML (Finn et al. 2017) of the regressor on the frozen GCN's embeddings (the GCN is not
   trained further, as in the paper): a meta-task draws ``ways`` (3) distinct kernels (a task,
   i.e. an op and shape, in one preset on one machine) uniformly from the training kernels of
   every op type, and ``shots`` (5) support and ``query`` (5) query rows of each; the fast
   weights take ``inner_steps`` (1) plain gradient steps of size ``inner_lr`` (2e-3) on the
   support MSE (``torch.func.functional_call``, second order unless ``first_order``); the
   meta-parameters move by Adam (``meta_lr`` 1e-3) on the query MSE averaged over
   ``meta_batch`` (16) tasks, for ``meta_steps`` steps. Only the regressor has fast weights:
   the GCN and the readout gate never change in this stage;
3. :meth:`MetaTuneModel.fine_tune` adapts to the task being tuned from the meta-learned weights
   (every call starts from them again): the regressor only by default, ``part="all"`` also the
   GCN.

Choices (what the paper leaves open, decided here):
    * One model for every op family: the node features of all families share one column
      layout (:func:`canonical_buffer`): the loop features, then three access features per
      buffer slot, buffers named by role where the families differ only in names (the output
      ``<op>_<k>`` and its cache ``<op>_global_<k>`` become ``out_<k>`` / ``out_global_<k>``;
      ``pad_temp``, ``PaddedInput`` and ``data_pad`` become ``pad``; batch_matmul's ``A`` and
      ``B`` become ``data`` and ``weight``). Buffers of a family the model was not trained on
      that have no column are left out.
    * Super-graph augmentation (``augment=True``): every config of a family gets the whole
      template graph -- the root, every loop slot's ``for`` and ``interval`` node and their
      edges; slots the kernel lacks are placeholders with only their node-type one-hot, as in
      the paper's figure 2, so all configs of a family share one structure. ``augment=False``
      gives each config its own graph (only its loops' nodes and edges). The GCN and the
      readout do not depend on node order, so a config's own graph on the family's slots is
      the same input as on a template of its own task padded to a common size; both settings
      therefore read one on-disk encoding. A config that does not schedule has no graph in
      either setting (an empty graph: zero embedding).
    * Inputs are scaled per column by their root mean square over the training rows' nodes
      (zeros stay zeros, so placeholders stay empty); the scales are part of the weights.
    * The same training rows serve both stages (the paper uses one small labelled set for
      pre-training and another for meta-training; the datasets here are too few to split).
    * Online fine-tuning: ``fine_tune_steps`` (50) full-batch Adam steps (``fine_tune_lr``
      1e-3) on the task's measurements.

Encoded dataset rows are cached (:func:`load_graph_data`): encoding a config walks its kernel,
so encoding the 22,464 catalog rows took 12 minutes (2-core machine, shared with a measuring
job); reading them back takes about a minute, mostly probing the five family templates.

Example:
    >>> data = load_graph_data()  # every dataset of the catalog (cached after the first time)
    >>> model = MetaTuneModel(data.templates, seed=0)
    >>> history = model.fit(data.subset(data.task != held_out_uri))
    >>> rows = GraphRows.encode(model.template_for(space.task), space, measured_configs)
    >>> model.fine_tune(rows, throughputs / throughputs.max())  # online, from the meta-learned weights
    >>> model.predict(GraphRows.encode(model.template_for(space.task), space, candidates))
"""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import inspect
import itertools
import json
import os
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F
from torch_geometric.nn import DenseGCNConv

from agents.models import metrics
from agents.models.training import BatchLoss, run_epochs, validation_mse
from agents.pretrained import load_model, write_checkpoint
from tune_gym.features.graph import LOOP_FEATURES, NODE_TYPES, GraphTemplate, encode_graphs
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["GraphData", "GraphRows", "MetaTuneModel", "MetaTuneNet", "canonical_buffer", "default_cache_dir",
           "load_graph_data"]

#: Bump when the compact row encoding (:class:`GraphRows`) changes meaning.
ROW_FORMAT = 1
#: Access features per buffer slot (stride, count, reuse).
_ACCESS = 3
#: Buffers that play one role under different names in different op families.
_ALIASES = {"pad_temp": "pad", "PaddedInput": "pad", "data_pad": "pad", "A": "data", "B": "weight"}
#: Rows encoded per step of the progress bar.
_CHUNK = 128


def canonical_buffer(name: str, template: GraphTemplate) -> str:
    """The model's column name of a template's buffer slot ``<buffer>_<k>``.

    The op's output (the block that owns the template's ``<block>_update`` loops) becomes
    ``out``, its cache-write copy ``<block>_global`` ``out_global``; :data:`_ALIASES` renames
    padding and batch_matmul's inputs; any other buffer keeps its name.

    Example: ``canonical_buffer("DepthwiseConv2d_global_1", t) == "out_global_1"``.
    """
    base, _, k = name.rpartition("_")
    if not base or not k.isdigit():
        return name
    owners = {slot.partition("/")[0] for slot in template.loops}
    outputs = {o[: -len("_update")] for o in owners if o.endswith("_update")}
    if base in outputs:
        return f"out_{k}"
    if base.endswith("_global") and base[: -len("_global")] in outputs:
        return f"out_global_{k}"
    return f"{_ALIASES.get(base, base)}_{k}"


def _canonical_buffers(template: GraphTemplate) -> list[str]:
    """The canonical name of each buffer slot; a name two slots would share keeps its original."""
    names = [canonical_buffer(b, template) for b in template.buffers]
    counts: dict[str, int] = defaultdict(int)
    for n in names:
        counts[n] += 1
    return [n if counts[n] == 1 else b for n, b in zip(names, template.buffers)]


# ---------------------------------------------------------------------- encoded graphs
@dataclass(frozen=True, eq=False)
class GraphRows:
    """Loop graphs of configs on one template's slots, in compact form.

    With the template's ``nesting`` off, an encoded graph (:func:`encode_graphs`) is fully
    described by which loop slots it fills and the features of their interval nodes: the root
    and for nodes carry only their node type, the edges are ``root -> for`` and
    ``for -> interval`` of every filled slot.

    Attributes:
        template: the template (family super-graph) the rows were encoded on.
        feat: float32 ``n x L x F``: interval features of the ``L`` loop slots, the template's
            feature columns without the node-type one-hot (``F = len(LOOP_FEATURES) + 3 * buffers``).
        present: bool ``n x L``: the slots the config's kernel fills.
        valid: bool ``n``: whether the config schedules (else its graph is empty).
    """

    template: GraphTemplate
    feat: np.ndarray
    present: np.ndarray
    valid: np.ndarray

    def __post_init__(self) -> None:
        n_loops, width = len(self.template.loops), len(LOOP_FEATURES) + _ACCESS * len(self.template.buffers)
        if self.feat.ndim != 3 or self.feat.shape[1:] != (n_loops, width):
            raise ValueError(f"feat must be n x {n_loops} x {width} for this template, got {self.feat.shape}")
        if self.present.shape != self.feat.shape[:2] or self.valid.shape != self.feat.shape[:1]:
            raise ValueError(f"present {self.present.shape} / valid {self.valid.shape} do not match feat "
                             f"{self.feat.shape}")

    def __len__(self) -> int:
        return len(self.feat)

    @classmethod
    def from_encoded(cls, template: GraphTemplate, encoded: dict[str, np.ndarray]) -> GraphRows:
        """The compact form of :func:`encode_graphs`'s output.

        Raises:
            ValueError: a template with ``nesting`` (its edges vary with the config), or arrays
                of another template's size.
        """
        if template.nesting:
            raise ValueError("MetaTune reads templates without nesting edges (the paper's graph); "
                             "build the template with nesting=False")
        n_loops = len(template.loops)
        if encoded["nodes"].shape[1:] != (template.n_slots, template.feat_dim):
            raise ValueError(f"encoded nodes are {encoded['nodes'].shape[1:]}, the template needs "
                             f"{(template.n_slots, template.feat_dim)}")
        types = len(NODE_TYPES)
        return cls(template, np.ascontiguousarray(encoded["nodes"][:, 1 + n_loops:, types:], dtype=np.float32),
                   encoded["mask"][:, 1:1 + n_loops] > 0, encoded["mask"][:, 0] > 0)

    @classmethod
    def encode(cls, template: GraphTemplate, space: KnobSpace, configs: Sequence[Config] | np.ndarray) -> GraphRows:
        """Encode ``configs`` of ``space`` on ``template`` (see :func:`encode_graphs`)."""
        return cls.from_encoded(template, encode_graphs(template, space, configs))

    def subset(self, index: np.ndarray | Sequence[int]) -> GraphRows:
        """The rows at ``index`` (indices or a boolean mask)."""
        sel = np.asarray(index)
        return GraphRows(self.template, self.feat[sel], self.present[sel], self.valid[sel])

    @staticmethod
    def concat(parts: Sequence[GraphRows]) -> GraphRows:
        """Rows of several blocks of one template, in order.

        Raises:
            ValueError: no blocks, or blocks of different templates.
        """
        if not parts:
            raise ValueError("GraphRows.concat needs at least one block")
        if any(p.template != parts[0].template for p in parts):
            raise ValueError("GraphRows.concat: blocks of different templates")
        return GraphRows(parts[0].template, np.concatenate([p.feat for p in parts]),
                         np.concatenate([p.present for p in parts]), np.concatenate([p.valid for p in parts]))


@dataclass(frozen=True, eq=False)
class GraphData:
    """Measured configs of many tasks as loop graphs, one :class:`GraphRows` block per template.

    Rows are ordered block by block; per-row arrays have one entry per row of all blocks.

    Attributes:
        blocks: the encoded graphs, one block per op family template.
        block: ``n`` ints: the row's block.
        label: ``n`` float32: the task's min cost on the row's platform / cost; 0 for failures.
        cost: ``n`` mean seconds per call (``inf`` for failures).
        task, preset, platform: ``n`` task URIs, space presets, measuring host ids (object).
    """

    blocks: tuple[GraphRows, ...]
    block: np.ndarray
    label: np.ndarray
    cost: np.ndarray
    task: np.ndarray
    preset: np.ndarray
    platform: np.ndarray

    def __post_init__(self) -> None:
        n = sum(len(b) for b in self.blocks)
        for f in fields(self):
            if f.name != "blocks" and len(getattr(self, f.name)) != n:
                raise ValueError(f"{f.name} has {len(getattr(self, f.name))} rows, the blocks hold {n}")
        if n and np.any(np.diff(self.block) < 0):
            raise ValueError("rows must be ordered block by block")

    def __len__(self) -> int:
        return len(self.label)

    @property
    def templates(self) -> list[GraphTemplate]:
        return [b.template for b in self.blocks]

    def offsets(self) -> np.ndarray:
        """Each row's index within its block."""
        starts = np.concatenate([[0], np.cumsum([len(b) for b in self.blocks])])
        return np.arange(len(self)) - starts[self.block]

    def subset(self, mask_or_index: np.ndarray | Sequence[int]) -> GraphData:
        """The selected rows (a boolean mask of length ``n`` or indices), kept in data order;
        blocks left without rows are dropped."""
        sel = np.asarray(mask_or_index)
        if sel.dtype == bool:
            if len(sel) != len(self):
                raise ValueError(f"a boolean mask must have {len(self)} entries, got {len(sel)}")
            sel = np.flatnonzero(sel)
        sel = np.unique(sel.astype(np.int64))
        offsets = self.offsets()
        blocks: list[GraphRows] = []
        block = np.zeros(len(sel), dtype=np.int64)
        for k, rows in enumerate(self.blocks):
            mine = self.block[sel] == k
            if mine.any():
                block[mine] = len(blocks)
                blocks.append(rows.subset(offsets[sel[mine]]))
        return GraphData(tuple(blocks), block, self.label[sel], self.cost[sel], self.task[sel], self.preset[sel],
                         self.platform[sel])

    def groups(self) -> dict[tuple[str, str, str], np.ndarray]:
        """Row indices of each kernel ``(task, preset, platform)``, in order of first appearance."""
        out: dict[tuple[str, str, str], list[int]] = defaultdict(list)
        for i, key in enumerate(zip(self.task.tolist(), self.preset.tolist(), self.platform.tolist())):
            out[key].append(i)
        return {k: np.asarray(v, dtype=np.int64) for k, v in out.items()}


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/tune_gym/metatune``, or ``~/.cache/tune_gym/metatune``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tune_gym" / "metatune"


def _encoder_version() -> str:
    """A hash of what an encoding depends on besides the data: the graph and loop code, TVM."""
    from tune_gym.features import graph, loops

    src = inspect.getsource(graph) + inspect.getsource(loops)
    return hashlib.sha256(f"{ROW_FORMAT}\0{src}\0{importlib.metadata.version('apache-tvm')}".encode()).hexdigest()


def load_graph_data(files: Sequence[str | os.PathLike[str]] | None = None,
                    templates: Sequence[GraphTemplate] = (), cache_dir: str | os.PathLike[str] | None = None,
                    progress: bool = True) -> GraphData:
    """Read dataset files into one :class:`GraphData`, encoding (or reusing cached) graphs.

    Args:
        files: dataset files (``.parquet`` or ``.jsonl`` records); default every file of
            :func:`tune_gym.datasets.catalog.catalog`. Each is checked by
            :func:`tune_gym.datasets.load_dataset`.
        templates: templates to encode on, one per op family and target kind; a family without
            one gets :func:`tune_gym.features.graph.template_for` of its first task.
        cache_dir: where encodings are cached (default :func:`default_cache_dir`), one ``.npz``
            per file, keyed by the file's row checksum, the space fingerprint, the template and
            the encoder's source and TVM version. Record files carry no checksum and are always
            encoded.
        progress: show a progress bar over the rows (tqdm).

    Returns:
        The rows of every file, grouped by template (files in order within a template); labels
        normalised per (task, platform) over every loaded row, whatever the preset.

    Raises:
        ValueError: no files, or two templates for one family.
        tune_gym.datasets.DatasetError: a file that cannot be trusted.
    """
    from tqdm.auto import tqdm

    from tune_gym.datasets import load_dataset, space_fingerprint
    from tune_gym.datasets.catalog import catalog
    from tune_gym.features.graph import template_for

    paths = [Path(f) for f in files] if files is not None else [e.path for e in catalog()]
    if not paths:
        raise ValueError("no dataset files to load (the catalog is empty; see tune_gym.datasets.catalog)")
    by_family: dict[tuple[str, str], GraphTemplate] = {}
    for t in templates:
        if by_family.setdefault((t.family, t.target), t) is not t:
            raise ValueError(f"two templates for {t.family} on {t.target}")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    encoder = _encoder_version()
    datasets = [load_dataset(p) for p in paths]
    parts: dict[tuple[str, str], list[tuple[GraphRows, dict[str, np.ndarray]]]] = defaultdict(list)
    with tqdm(total=sum(len(ds) for ds in datasets), unit="row", desc="MetaTune graphs", disable=not progress) as bar:
        for ds in datasets:
            bar.set_postfix_str(Path(ds.source).name)
            family = (ds.task.op, ds.task.target.kind)
            if family not in by_family:
                by_family[family] = template_for(ds.task)
            template = by_family[family]
            configs = [tuple(int(v) for v in c) for c in ds.configs]
            path = None
            if ds.meta.get("checksum"):
                key = json.dumps({"checksum": ds.meta["checksum"], "space": space_fingerprint(ds.space),
                                  "template": template.to_dict(), "encoder": encoder}, sort_keys=True)
                path = cache / f"{Path(ds.source).stem}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.npz"
            rows = _read_cache(path, template, len(configs))
            if rows is None:
                chunks = []
                for start in range(0, len(configs), _CHUNK):
                    chunk = configs[start:start + _CHUNK]
                    chunks.append(GraphRows.encode(template, ds.space, chunk))
                    bar.update(len(chunk))
                rows = GraphRows.concat(chunks) if chunks else GraphRows.encode(template, ds.space, [])
                if path is not None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    tmp = path.with_name(path.stem + ".tmp.npz")
                    np.savez_compressed(tmp, feat=rows.feat, present=rows.present, valid=rows.valid)
                    os.replace(tmp, path)
            else:
                bar.update(len(configs))
            parts[family].append((rows, {
                "cost": np.asarray(ds.mean_cost, dtype=np.float64), "task": np.full(len(ds), ds.task.uri, dtype=object),
                "preset": np.full(len(ds), ds.preset, dtype=object), "platform": np.asarray(ds.host, dtype=object)}))
    blocks, columns = [], defaultdict(list)
    for k, family in enumerate(parts):
        blocks.append(GraphRows.concat([rows for rows, _ in parts[family]]))
        for _, cols in parts[family]:
            for name, values in cols.items():
                columns[name].append(values)
            columns["block"].append(np.full(len(cols["cost"]), k, dtype=np.int64))
    arrays = {k: np.concatenate(v) for k, v in columns.items()}
    return GraphData(tuple(blocks), label=_labels(arrays["cost"], arrays["task"], arrays["platform"]), **arrays)


def _read_cache(path: Path | None, template: GraphTemplate, n: int) -> GraphRows | None:
    if path is None or not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            rows = GraphRows(template, z["feat"], z["present"], z["valid"])
    except (OSError, ValueError, KeyError):
        return None  # unreadable or of another shape: encode again
    return rows if len(rows) == n else None


def _labels(cost: np.ndarray, task: np.ndarray, platform: np.ndarray) -> np.ndarray:
    """``min cost of (task, platform) / cost`` (:func:`agents.models.metrics.labels`); 0 for failures."""
    label = np.zeros(len(cost), dtype=np.float32)
    keys = np.array([f"{t}\0{p}" for t, p in zip(task, platform)], dtype=object)
    for key in np.unique(keys):
        rows = keys == key
        label[rows] = metrics.labels(cost[rows])
    return label


# ---------------------------------------------------------------------- the network
def _mlp(sizes: Sequence[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class MetaTuneNet(nn.Module):
    """GCN layers -> ReLU -> weighted-sum and max readout -> three FC layers (see the module docstring).

    Args:
        in_dim: node feature columns.
        gcn: width of each GCN layer.
        fc: widths of the regressor's hidden layers (two hidden layers: three FC layers).
    """

    scale: torch.Tensor  # a buffer (register_buffer in __init__)

    def __init__(self, in_dim: int, gcn: Sequence[int] = (64, 64, 64), fc: Sequence[int] = (64, 64)) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(in_dim))  # per-column input scale, set from training data
        self.convs = nn.ModuleList(DenseGCNConv(a, b) for a, b in itertools.pairwise((in_dim, *gcn)))
        self.gate = nn.Linear(gcn[-1], 1)
        self.regressor = _mlp((2 * gcn[-1], *fc, 1))

    @property
    def embed_dim(self) -> int:
        return 2 * self.gate.in_features

    def embed(self, x: torch.Tensor, adj: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``b x embed_dim`` graph embeddings of ``x`` (``b x N x in_dim``), ``adj`` (``b x N x N``,
        symmetric, no self-loops) and ``mask`` (bool ``b x N``, the graph's nodes)."""
        h = x / self.scale
        for conv in self.convs:
            h = F.relu(conv(h, adj, mask))  # masked nodes are 0 after each layer
        keep = mask.unsqueeze(-1).to(h.dtype)
        weighted = (torch.sigmoid(self.gate(h)) * keep * h).sum(dim=1)
        return torch.cat([weighted, h.max(dim=1).values], dim=-1)  # h >= 0: the max ignores masked zeros

    def forward(self, x: torch.Tensor, adj: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``b`` predicted normalised throughputs."""
        return self.regressor(self.embed(x, adj, mask)).squeeze(-1)


# ---------------------------------------------------------------------- the model
class MetaTuneModel:
    """MetaTune's cost model with fit (pre-training + MAML) / predict / fine-tune / save / load.

    Args:
        templates: the op family templates the model reads (their buffer slots define the
            feature columns, see :func:`canonical_buffer`); others can be read too, without
            the buffer columns it lacks.
        gcn: GCN layer widths (64, 64, 64).
        fc: the regressor's hidden widths (64, 64): three FC layers.
        augment: super-graph augmentation (see the module docstring).
        meta: run the MAML stage after pre-training (``False``: plain pre-training).
        seed: seeds the initial weights, the shuffling and the meta-task sampling.
        epochs, batch, lr, weight_decay: supervised pre-training (Adam; 30, 128, 1e-3, 0).
        meta_steps: MAML meta-updates (2000).
        ways, shots, query: kernels per meta-task, support and query rows per kernel (3, 5, 5).
        inner_steps, inner_lr: fast-weight gradient steps and their size (1, 2e-3).
        meta_lr, meta_batch: Adam step of the meta-update and meta-tasks per update (1e-3, 16).
        first_order: first-order MAML (drop the second derivatives).
        fine_tune_steps, fine_tune_lr: online fine-tuning (full-batch Adam; 50, 1e-3).
    """

    def __init__(self, templates: Sequence[GraphTemplate], gcn: Sequence[int] = (64, 64, 64),
                 fc: Sequence[int] = (64, 64), augment: bool = True, meta: bool = True, seed: int = 0,
                 epochs: int = 30, batch: int = 128, lr: float = 1e-3, weight_decay: float = 0.0,
                 meta_steps: int = 2000, ways: int = 3, shots: int = 5, query: int = 5, inner_steps: int = 1,
                 inner_lr: float = 2e-3, meta_lr: float = 1e-3, meta_batch: int = 16, first_order: bool = False,
                 fine_tune_steps: int = 50, fine_tune_lr: float = 1e-3) -> None:
        templates = list(templates)
        if not templates:
            raise ValueError("MetaTuneModel needs at least one graph template (the families it reads)")
        keys = [(t.family, t.target) for t in templates]
        if len(set(keys)) != len(keys):
            raise ValueError(f"one template per op family and target, got {keys}")
        if not gcn or not fc or min(*gcn, *fc) < 1:
            raise ValueError(f"gcn and fc must be non-empty lists of positive widths, got {gcn!r}, {fc!r}")
        for name, value, low in [("epochs", epochs, 0), ("batch", batch, 1), ("meta_steps", meta_steps, 0),
                                 ("ways", ways, 1), ("shots", shots, 1), ("query", query, 1),
                                 ("inner_steps", inner_steps, 1), ("meta_batch", meta_batch, 1),
                                 ("fine_tune_steps", fine_tune_steps, 0)]:
            if not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        for name, rate in [("lr", lr), ("inner_lr", inner_lr), ("meta_lr", meta_lr), ("fine_tune_lr", fine_tune_lr)]:
            if not rate > 0:
                raise ValueError(f"{name} must be > 0, got {rate!r}")
        for t in templates:
            if t.nesting:
                raise ValueError(f"template of {t.family} has nesting edges; MetaTune reads templates without them")
        self.templates = templates
        self.gcn, self.fc = [int(v) for v in gcn], [int(v) for v in fc]
        self.augment, self.meta, self.seed = bool(augment), bool(meta), int(seed)
        self.epochs, self.batch, self.lr, self.weight_decay = int(epochs), int(batch), float(lr), float(weight_decay)
        self.meta_steps, self.ways, self.shots, self.query = int(meta_steps), int(ways), int(shots), int(query)
        self.inner_steps, self.inner_lr, self.meta_lr = int(inner_steps), float(inner_lr), float(meta_lr)
        self.meta_batch, self.first_order = int(meta_batch), bool(first_order)
        self.fine_tune_steps, self.fine_tune_lr = int(fine_tune_steps), float(fine_tune_lr)
        self.buffers = sorted({b for t in templates for b in _canonical_buffers(t)})
        self.columns = [*(f"type={t}" for t in NODE_TYPES), *LOOP_FEATURES,
                        *(f"{b}.{f}" for b in self.buffers for f in ("stride", "count", "reuse"))]
        self.metadata: dict[str, Any] = {}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.net = MetaTuneNet(len(self.columns), self.gcn, self.fc)
        self.net.eval()
        self._gen = torch.Generator().manual_seed(self.seed)
        self._base = copy.deepcopy(self.net.state_dict())  # what fine_tune starts from
        self._trained = False  # the input scale is set by the first fit
        self._maps: dict[GraphTemplate, tuple[np.ndarray, np.ndarray]] = {}

    # ------------------------------------------------------------------ configuration
    @property
    def config(self) -> dict[str, Any]:
        """The constructor's arguments except the templates (what :meth:`load` rebuilds from)."""
        return {"gcn": self.gcn, "fc": self.fc, "augment": self.augment, "meta": self.meta, "seed": self.seed,
                "epochs": self.epochs, "batch": self.batch, "lr": self.lr, "weight_decay": self.weight_decay,
                "meta_steps": self.meta_steps, "ways": self.ways, "shots": self.shots, "query": self.query,
                "inner_steps": self.inner_steps, "inner_lr": self.inner_lr, "meta_lr": self.meta_lr,
                "meta_batch": self.meta_batch, "first_order": self.first_order,
                "fine_tune_steps": self.fine_tune_steps, "fine_tune_lr": self.fine_tune_lr}

    def template_for(self, task: Task) -> GraphTemplate:
        """The template of ``task``'s family the model was built with, else
        :func:`tune_gym.features.graph.template_for` (takes seconds)."""
        for t in self.templates:
            if (t.family, t.target) == (task.op, task.target.kind):
                return t
        from tune_gym.features.graph import template_for

        return template_for(task)

    # ------------------------------------------------------------------ input tensors
    def _column_map(self, template: GraphTemplate) -> tuple[np.ndarray, np.ndarray]:
        """``(source, target)``: which of the template's interval columns go to which model column."""
        if template not in self._maps:
            where = {c: i for i, c in enumerate(self.columns)}
            names = [*LOOP_FEATURES, *(f"{b}.{f}" for b in _canonical_buffers(template)
                                       for f in ("stride", "count", "reuse"))]
            pairs = [(i, where[n]) for i, n in enumerate(names) if n in where]
            self._maps[template] = (np.array([p[0] for p in pairs], dtype=np.int64),
                                    np.array([p[1] for p in pairs], dtype=np.int64))
        return self._maps[template]

    def tensors(self, rows: GraphRows, index: np.ndarray | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The network's input ``(x, adj, mask)`` of ``rows`` (all, or those at ``index``).

        ``x``: float32 ``b x N x in_dim`` (``N = 1 + 2L``: root, for nodes, interval nodes in
        template order); ``adj``: float32 ``b x N x N``, symmetric; ``mask``: bool ``b x N``.
        """
        idx = slice(None) if index is None else np.asarray(index)
        feat = torch.from_numpy(np.ascontiguousarray(rows.feat[idx]))
        valid = torch.from_numpy(np.asarray(rows.valid[idx]))
        present = torch.from_numpy(np.asarray(rows.present[idx]))
        b, n_loops = present.shape
        exists = (valid.unsqueeze(1).expand(b, n_loops) if self.augment else present) & valid.unsqueeze(1)
        n = 1 + 2 * n_loops
        x = torch.zeros(b, n, len(self.columns))
        src, dst = self._column_map(rows.template)
        x[:, 1 + n_loops:, torch.from_numpy(dst)] = feat[:, :, torch.from_numpy(src)] * \
            present.unsqueeze(-1).to(feat.dtype)
        x[:, 0, 0] = valid.float()
        x[:, 1:1 + n_loops, 1] = exists.float()
        x[:, 1 + n_loops:, 2] = exists.float()
        mask = torch.cat([valid.unsqueeze(1), exists, exists], dim=1)
        adj = torch.zeros(b, n, n)
        fors = torch.arange(1, 1 + n_loops)
        e = exists.float()
        adj[:, 0, fors] = e
        adj[:, fors, 0] = e
        adj[:, fors, fors + n_loops] = e
        adj[:, fors + n_loops, fors] = e
        return x, adj, mask

    def _batches(self, rows: GraphRows, size: int) -> list[np.ndarray]:
        return [np.arange(s, min(s + size, len(rows))) for s in range(0, len(rows), size)]

    # ------------------------------------------------------------------ training
    def fit(self, data: GraphData, val: GraphData | None = None, progress: bool = True) -> dict[str, Any]:
        """Pre-train, then (with ``meta``) meta-train, from the current weights.

        Args:
            data: training rows.
            val: validation rows: MSE after every epoch; MAML's query MSE on seeded meta-tasks of
                its kernels.
            progress: show progress bars (tqdm).

        Returns:
            History: ``pretrain`` (``train_loss``, ``val_loss``, ``epoch_secs`` per epoch) and
            ``meta`` (every ``eval_every`` steps: ``step``, ``train_loss`` -- the mean query MSE since
            the last entry --, ``val_loss`` and ``val_loss_unadapted``; ``secs``).

        Raises:
            ValueError: no training rows, or (with ``meta``) no kernel with enough rows for a task.
        """
        if not len(data):
            raise ValueError("no training rows")
        if not self._trained:
            self._set_scale(data)
        history: dict[str, Any] = {"pretrain": self._pretrain(data, val, progress)}
        if self.meta and self.meta_steps:
            history["meta"] = self._meta_train(data, val, progress)
        self.net.zero_grad(set_to_none=True)
        self.net.eval()
        self._base = copy.deepcopy(self.net.state_dict())
        self._trained = True
        return history

    @torch.no_grad()
    def _set_scale(self, data: GraphData) -> None:
        """Scale each input column by its root mean square over the nodes of ``data`` that hold a
        value (the node-type columns keep scale 1), so that every feature starts on a similar
        scale; zeros stay zeros, so placeholders stay empty."""
        total = torch.zeros(len(self.columns), dtype=torch.float64)
        count = torch.zeros(len(self.columns), dtype=torch.float64)
        for rows in data.blocks:
            for idx in self._batches(rows, 4 * self.batch):
                x, _, _ = self.tensors(rows, idx)
                x = x.reshape(-1, x.shape[-1]).double()
                total += (x**2).sum(dim=0)
                count += (x != 0).sum(dim=0)
        rms = torch.where(count > 0, (total / count.clamp(min=1)).sqrt(), torch.ones_like(total))
        rms[: len(NODE_TYPES)] = 1.0
        self.net.scale.copy_(rms.clamp(min=1e-3).float())

    def _pretrain(self, data: GraphData, val: GraphData | None, progress: bool) -> dict[str, list[float]]:
        """Supervised pre-training of the whole network: each epoch, every op family's rows in
        shuffled batches of ``batch``, the batches of all families in a shuffled order."""
        opt = torch.optim.Adam(self.net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        labels = [torch.from_numpy(data.label[data.block == k].astype(np.float32)) for k in range(len(data.blocks))]

        def batches() -> Iterator[BatchLoss]:
            blocks = [(k, idx) for k, rows in enumerate(data.blocks)
                      for idx in torch.randperm(len(rows), generator=self._gen).split(self.batch)]
            for j in torch.randperm(len(blocks), generator=self._gen).tolist():
                k, idx = blocks[j]
                pred = self.net(*self.tensors(data.blocks[k], idx.numpy()))
                yield BatchLoss(F.mse_loss(pred, labels[k][idx]), len(idx), len(idx))

        return run_epochs(self.net, opt, self.epochs, batches, validation_mse(self.predict_data, val),
                          desc="MetaTune pre-training", progress=progress)

    def _kernels(self, data: GraphData) -> list[np.ndarray]:
        """Row indices of each kernel with enough rows for a support and a query set."""
        need = self.shots + self.query
        return [rows for rows in data.groups().values() if len(rows) >= need]

    def _sample_tasks(self, kernels: list[np.ndarray], count: int, rng: np.random.Generator
                      ) -> list[tuple[np.ndarray, np.ndarray]]:
        """``count`` meta-tasks: ``(support rows, query rows)``, ``ways`` kernels each."""
        tasks = []
        ways = min(self.ways, len(kernels))
        for _ in range(count):
            support, query = [], []
            for k in rng.choice(len(kernels), size=ways, replace=False):
                rows = rng.choice(kernels[k], size=self.shots + self.query, replace=False)
                support.append(rows[: self.shots])
                query.append(rows[self.shots:])
            tasks.append((np.concatenate(support), np.concatenate(query)))
        return tasks

    def _adapt(self, params: dict[str, torch.Tensor], h: torch.Tensor, y: torch.Tensor,
               create_graph: bool) -> dict[str, torch.Tensor]:
        """The fast weights after ``inner_steps`` gradient steps on ``(h, y)``."""
        for _ in range(self.inner_steps):
            loss = F.mse_loss(functional_call(self.net.regressor, params, (h,)).squeeze(-1), y)
            grads = torch.autograd.grad(loss, list(params.values()), create_graph=create_graph)
            params = {name: p - self.inner_lr * g for (name, p), g in zip(params.items(), grads)}
        return params

    def meta_loss(self, h: torch.Tensor, y: torch.Tensor, tasks: Sequence[tuple[np.ndarray, np.ndarray]],
                  create_graph: bool = True) -> torch.Tensor:
        """Mean query MSE over ``tasks`` after adapting the regressor's fast weights on each support set.

        Args:
            h: ``n x embed_dim`` graph embeddings (the frozen GCN's).
            y: ``n`` labels.
            tasks: ``(support rows, query rows)`` index arrays into ``h``.
            create_graph: keep the inner gradients differentiable (second-order MAML).
        """
        params: dict[str, torch.Tensor] = dict(self.net.regressor.named_parameters())
        losses = []
        for support, query in tasks:
            s, q = torch.from_numpy(support), torch.from_numpy(query)
            fast = self._adapt(params, h[s], y[s], create_graph)
            losses.append(F.mse_loss(functional_call(self.net.regressor, fast, (h[q],)).squeeze(-1), y[q]))
        return torch.stack(losses).mean()

    def _meta_train(self, data: GraphData, val: GraphData | None, progress: bool,
                    eval_every: int = 100) -> dict[str, list[float]]:
        from tqdm.auto import tqdm

        kernels = self._kernels(data)
        if not kernels:
            raise ValueError(f"no training kernel has {self.shots + self.query} rows (shots + query) for a meta-task")
        tic = time.perf_counter()
        rng = np.random.default_rng(self.seed)
        h = torch.from_numpy(self.embed_data(data))
        y = torch.from_numpy(data.label.astype(np.float32))
        val_eval = None
        if val is not None and len(val) and self._kernels(val):
            val_kernels = self._kernels(val)
            val_eval = (torch.from_numpy(self.embed_data(val)), torch.from_numpy(val.label.astype(np.float32)),
                        self._sample_tasks(val_kernels, 256, np.random.default_rng(self.seed + 1)))
        opt = torch.optim.Adam(self.net.regressor.parameters(), lr=self.meta_lr)
        history: dict[str, list[float]] = {"step": [], "train_loss": [], "val_loss": [], "val_loss_unadapted": []}
        window: list[float] = []
        bar = tqdm(range(1, self.meta_steps + 1), desc="MetaTune MAML", unit="step", disable=not progress)
        for step in bar:
            loss = self.meta_loss(h, y, self._sample_tasks(kernels, self.meta_batch, rng), not self.first_order)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            window.append(loss.item())
            if step % eval_every == 0 or step == self.meta_steps:
                history["step"].append(step)
                history["train_loss"].append(float(np.mean(window)))
                window = []
                if val_eval is not None:
                    vh, vy, vtasks = val_eval
                    history["val_loss"].append(float(self.meta_loss(vh, vy, vtasks, create_graph=False).detach()))
                    with torch.no_grad():
                        pred = self.net.regressor(vh).squeeze(-1)
                    q = torch.from_numpy(np.concatenate([t[1] for t in vtasks]))
                    history["val_loss_unadapted"].append(float(F.mse_loss(pred[q], vy[q])))
                bar.set_postfix(query=f"{history['train_loss'][-1]:.4f}",
                                val=f"{history['val_loss'][-1]:.4f}" if history["val_loss"] else "-")
        history["secs"] = [time.perf_counter() - tic]
        return history

    # ------------------------------------------------------------------ inference
    @torch.no_grad()
    def embed(self, rows: GraphRows) -> np.ndarray:
        """``n x embed_dim`` float32 graph embeddings (the regressor's input)."""
        self.net.eval()
        out = [self.net.embed(*self.tensors(rows, idx)) for idx in self._batches(rows, 4 * self.batch)]
        return torch.cat(out).numpy() if out else np.zeros((0, self.net.embed_dim), dtype=np.float32)

    @torch.no_grad()
    def predict_embeddings(self, h: np.ndarray) -> np.ndarray:
        """Predicted normalised throughputs (float64 ``n``) of ``n x embed_dim`` embeddings."""
        x = self._check_embeddings(h)
        self.net.eval()
        return self.net.regressor(x).squeeze(-1).double().numpy()

    def predict(self, rows: GraphRows) -> np.ndarray:
        """Predicted normalised throughputs (float64 ``n``) of encoded configs."""
        return self.predict_embeddings(self.embed(rows))

    def embed_data(self, data: GraphData) -> np.ndarray:
        """Embeddings of every row of ``data``, in its row order."""
        return np.concatenate([self.embed(rows) for rows in data.blocks]) if data.blocks else \
            np.zeros((0, self.net.embed_dim), dtype=np.float32)

    def predict_data(self, data: GraphData) -> np.ndarray:
        """Predictions of every row of ``data``, in its row order."""
        return self.predict_embeddings(self.embed_data(data))

    def _check_embeddings(self, h: np.ndarray) -> torch.Tensor:
        h = np.asarray(h, dtype=np.float32)
        if h.ndim != 2 or h.shape[1] != self.net.embed_dim:
            raise ValueError(f"embeddings must have shape (n, {self.net.embed_dim}), got {h.shape}")
        return torch.from_numpy(np.ascontiguousarray(h))

    # ------------------------------------------------------------------ fine-tuning
    def reset(self) -> None:
        """Back to the trained (meta-learned) weights, undoing any fine-tuning."""
        self.net.load_state_dict(self._base)
        self.net.eval()

    def fine_tune(self, rows: GraphRows, label: np.ndarray, part: str = "regressor",
                  steps: int | None = None, lr: float | None = None) -> None:
        """Fine-tune on one task's measurements, starting from the trained weights every time.

        Args:
            rows: the measured configs' graphs.
            label: ``n`` labels in [0, 1]: the task's best throughput so far / throughput (0 for
                failures).
            part: ``"regressor"`` (the GCN stays as trained) or ``"all"``.
            steps, lr: Adam steps and step size (default ``fine_tune_steps``, ``fine_tune_lr``).

        Raises:
            ValueError: a label count that does not match, or an unknown part.
        """
        if part not in ("regressor", "all"):
            raise ValueError(f"part must be 'regressor' or 'all', not {part!r}")
        y = self._check_labels(label, len(rows))
        if part == "regressor":
            self.reset()
            self.fine_tune_embeddings(self.embed(rows), y.numpy(), steps, lr)
            return
        self.reset()
        opt = torch.optim.Adam(self.net.parameters(), lr=self.fine_tune_lr if lr is None else lr)
        self.net.train()
        for _ in range(self.fine_tune_steps if steps is None else steps):
            for idx in torch.randperm(len(rows), generator=self._gen).split(self.batch):
                loss = F.mse_loss(self.net(*self.tensors(rows, idx.numpy())), y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        self.net.zero_grad(set_to_none=True)
        self.net.eval()

    def fine_tune_embeddings(self, h: np.ndarray, label: np.ndarray, steps: int | None = None,
                             lr: float | None = None) -> None:
        """Fine-tune the regressor on embeddings (:meth:`embed`) and labels, starting from the
        trained regressor (the GCN is left as it is). Full-batch Adam, deterministic.

        Raises:
            ValueError: bad shapes.
        """
        ht = self._check_embeddings(h)
        y = self._check_labels(label, len(ht))
        self.net.regressor.load_state_dict({k[len("regressor."):]: v for k, v in self._base.items()
                                            if k.startswith("regressor.")})
        opt = torch.optim.Adam(self.net.regressor.parameters(), lr=self.fine_tune_lr if lr is None else lr)
        for _ in range(self.fine_tune_steps if steps is None else steps):
            loss = F.mse_loss(self.net.regressor(ht).squeeze(-1), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        self.net.zero_grad(set_to_none=True)
        self.net.eval()

    @staticmethod
    def _check_labels(label: np.ndarray, n: int) -> torch.Tensor:
        y = np.asarray(label, dtype=np.float32)
        if y.shape != (n,):
            raise ValueError(f"label must have shape ({n},), got {y.shape}")
        if not np.isfinite(y).all():
            raise ValueError("labels must be finite (0 for failed configs)")
        return torch.from_numpy(y)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike[str], metadata: dict[str, Any] | None = None) -> Path:
        """Write the trained weights to ``path`` (a ``torch.save``'d state dict) and the config,
        templates and ``metadata`` (JSON-serializable) to the sidecar ``path`` with suffix ``.json``,
        sealed with their checksums (:func:`agents.pretrained.write_checkpoint`).

        Returns:
            The sidecar's path.

        Raises:
            ValueError: weights holding NaN or inf (nothing is written).
        """
        return write_checkpoint(path, self._base, "MetaTuneModel", self.config, {**self.metadata, **(metadata or {})},
                                templates=[t.to_dict() for t in self.templates], columns=self.columns)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> MetaTuneModel:
        """A model from the weights at ``path`` and its JSON sidecar (:func:`agents.pretrained.load_model`);
        only tensors are read (``torch.load(weights_only=True)``).

        Raises:
            ValueError: a missing sidecar, one of another format or model, files that do not match
                their checksums, an unsealed sidecar, feature columns that differ from what its
                templates give, or weights holding NaN or inf or not fitting its config.
        """
        def build(doc: dict[str, Any]) -> MetaTuneModel:
            model = cls([GraphTemplate.from_dict(t) for t in doc["templates"]], **doc["config"])
            if doc.get("columns") != model.columns:
                raise ValueError("its feature columns differ from what its templates give")
            return model

        model = load_model(path, cls, build)
        model._base = copy.deepcopy(model.net.state_dict())
        model._trained = True
        return model
