"""One-Shot Tuner's predictor: a Transformer regressor of normalised throughput across tasks.

Ryu, Park & Sung, "One-Shot Tuner for Deep Learning Compilers" (CC 2022). The predictor is
trained once, before any compilation, on (task, config, throughput) triples of many sampled tasks
(:mod:`tune_gym.datasets.pgs`, collected by ``scripts/collect_pgs.py``), and then guides one
search per task with no further measurement or update (agent ``one-shot``).

Input of a config (:class:`OneShotFeaturizer`), three parts as in the paper's Figure 7:

* task features: :func:`tune_gym.features.task.task_features` (op one-hot, log shape slots,
  log FLOPs), the explicit task identity the paper adds so one model tells search spaces apart;
* the raw knob values (:class:`KnobColumns`: log2 of each split factor, log2(1 + value) of the
  others, in the columns of the task's full space), zero-padded to :data:`KNOB_DIM` columns;
* program features: the schedule's primitive sequence (:mod:`tune_gym.features.primitives`,
  TLP's encoding, computed from the knob values without lowering, so the search can score
  tens of thousands of candidates). The paper appended AutoTVM's loop "curve" features, which
  need the lowered program of every candidate: at about 12 ms per config here (see
  :mod:`agents.models.itervar`) one search of 512 x 160 candidates would take a quarter of an
  hour, against seconds for the sequence.

Network (:class:`OneShotNet`): every input column is standardised by the mean and deviation of
the training rows (kept with the weights; the raw values span tile factors of 1 to 512 and
string tokens in the thousands), then each part becomes tokens of width ``d_model`` (one task token,
one knob token, one token per primitive row, each with a learned type / position embedding);
a Transformer encoder (the paper's 3 layers, 4 heads, feed-forward width 1024, dropout 0.25)
runs over them with padding rows masked; the mean of the unmasked outputs goes through a linear
head to the predicted label. ``d_model`` (64 by default) is not given by the paper; it sets the
cost of a prediction, which the one search pays 82k times.

Training (:meth:`OneShotModel.fit`), the paper's settings: MSE between the prediction and the
label (normalised throughput: the task's best cost / cost, 0 for failed configs); Adam, lr
1e-4; batches of 512; each epoch draws its rows with replacement, weighted by the inverse of
their label's frequency in a 100-bin histogram (the paper's ``WeightedRandomSampler``
oversampling of rare fast configs). :func:`ebs_filter` drops the rows more than 20x slower than
their task's best before training, as the paper's exploration-based sampling does.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from agents.models.training import BatchLoss, run_epochs, validation_mse
from agents.pretrained import load_model, write_checkpoint
from tune_gym.features.task import TASK_FEATURE_DIM, task_features
from tune_gym.space import KnobSpace

__all__ = [
    "KNOB_DIM",
    "KnobColumns",
    "OneShotData",
    "OneShotFeaturizer",
    "OneShotModel",
    "OneShotNet",
    "ebs_filter",
    "load_oneshot_data",
    "oversampling_weights",
]

#: Width of the knob-value part (the conv2d / depthwise full spaces use 22-34 columns).
KNOB_DIM = 48


def ebs_filter(label: np.ndarray, factor: float = 20.0) -> np.ndarray:
    """Rows to keep: throughput at least ``1 / factor`` of the task's best (failed rows, label 0,
    are dropped too)."""
    if factor < 1:
        raise ValueError(f"the EBS filter factor must be >= 1, got {factor}")
    return np.asarray(label) >= 1.0 / factor


def oversampling_weights(label: np.ndarray, bins: int = 100) -> np.ndarray:
    """Per-row sampling weights: the inverse of the row's label-bin count (a 100-bin histogram
    over [0, 1]), normalised to sum to 1."""
    label = np.clip(np.asarray(label, dtype=np.float64), 0.0, 1.0)
    which = np.minimum((label * bins).astype(np.int64), bins - 1)
    counts = np.bincount(which, minlength=bins)
    w = 1.0 / counts[which]
    return w / w.sum()


@dataclass
class OneShotData:
    """Rows for the predictor: ``task_x`` (n x TASK_FEATURE_DIM), ``knob_x`` (n x KNOB_DIM),
    ``seq`` (n x max_len x vec_len), ``label`` (n), ``task`` (n URIs), ``cost`` (n seconds)."""

    task_x: np.ndarray
    knob_x: np.ndarray
    seq: np.ndarray
    label: np.ndarray
    task: np.ndarray
    cost: np.ndarray

    def __len__(self) -> int:
        return len(self.label)

    def subset(self, sel: np.ndarray) -> OneShotData:
        return OneShotData(*(getattr(self, f)[sel] for f in ("task_x", "knob_x", "seq", "label", "task", "cost")))


class KnobColumns:
    """Knob values of a space's configs in the column layout of the task's ``full`` space.

    Columns are those of :class:`agents.models.features.KnobFeaturizer` on the full space, so
    one predictor reads both presets alike. A ``compact`` space tiles with fewer levels than the
    full one (MultiLevelTiling ``SRS`` against ``SSRSRS`` on CPUs), so its values are placed by
    what the levels mean: a split ``(outer, ..., inner)`` fills the full split's outermost and
    innermost factors with ones between (``(16, 16)`` reads as ``(16, 1, 1, 16)``), and a loop the
    compact space does not split at all (its reduction loops) reads as the whole extent in the
    outermost factor (``(256, 1)``). Without this placement the compact configs would be mostly
    zero columns, and the predictor's scores there were noise (Spearman 0.0 on ResNet-18's
    exhaustive compact spaces; 0.29-0.58 with it). Other knobs the space lacks are 0.
    """

    def __init__(self, space: KnobSpace) -> None:
        from agents.models.features import KnobFeaturizer, knob_values

        full = space if space.preset == "full" else KnobSpace.for_task(space.task, "full")
        layout = KnobFeaturizer(full)
        if layout.dim > KNOB_DIM:
            raise ValueError(f"{space.task.uri} has {layout.dim} knob-value columns; the predictor takes at most "
                             f"{KNOB_DIM}")
        offsets = dict(zip((k.name for k in full.knobs), np.cumsum([0, *layout.widths[:-1]]).tolist()))
        widths = dict(zip((k.name for k in full.knobs), layout.widths))
        kinds = {k.name: k.kind for k in full.knobs}
        choices = {k.name: k.choices for k in full.knobs}  # a nominal knob's one-hot columns stand for these
        own = {k.name for k in space.knobs}
        self.n_knobs = len(space.knobs)
        self.base = np.zeros(KNOB_DIM, dtype=np.float32)  # the columns of knobs the space lacks
        for knob in full.knobs:
            if knob.name not in own and knob.kind == "split":
                whole = (math.prod(knob.choices[0]), *[1] * (widths[knob.name] - 1))
                self.base[offsets[knob.name]: offsets[knob.name] + widths[knob.name]] = np.log2(whole)
        self.parts: list[tuple[int, int, np.ndarray]] = []  # (knob index, first column, table)
        for j, knob in enumerate(space.knobs):
            if knob.name in offsets:
                width = widths[knob.name]
                values = [_to_levels(v, width) for v in knob.choices] if knob.kind == "split" else knob.choices
                table = np.nan_to_num(knob_values(kinds[knob.name], values, width, choices[knob.name]), nan=0.0)
                self.parts.append((j, offsets[knob.name], table.astype(np.float32)))

    def __call__(self, configs: np.ndarray | list[Any]) -> np.ndarray:
        idx = np.asarray(configs, dtype=np.int64).reshape(-1, self.n_knobs)
        out = np.repeat(self.base[None], len(idx), axis=0)
        for j, first, table in self.parts:
            out[:, first: first + table.shape[1]] = table[idx[:, j]]
        return out


def _to_levels(factors: Any, width: int) -> Any:
    """A split's factors as ``width`` levels: the outermost first, the rest innermost, ones between."""
    factors = tuple(factors)
    if not 1 <= len(factors) < width:
        return factors  # already that many levels (or more: then it does not fit, and reads as 0)
    return (factors[0], *[1] * (width - len(factors)), *factors[1:])


class OneShotFeaturizer:
    """``configs -> (task_x, knob_x, seq)`` of one task's space (see the module docstring)."""

    def __init__(self, space: KnobSpace, shape: tuple[int, int] = (25, 22)) -> None:
        from tune_gym.features.primitives import SequenceEncoder

        self.space = space
        self.knobs = KnobColumns(space)
        self.sequences = SequenceEncoder(space, *shape)
        self.task_x = task_features(space.task).astype(np.float32)

    def __call__(self, configs: np.ndarray | list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        idx = np.asarray(configs, dtype=np.int64).reshape(-1, len(self.space.knobs))
        return (np.repeat(self.task_x[None], len(idx), axis=0), self.knobs(idx),
                self.sequences(idx).astype(np.float32))


def load_oneshot_data(files: Sequence[str | os.PathLike[str]], shape: tuple[int, int] = (25, 22),
                      progress: bool = True) -> OneShotData:
    """The rows of dataset files as predictor inputs (sequences cached as in
    :func:`agents.models.rank_data.load_ranking_data`), labels per (task, platform)."""
    from agents.models.rank_data import load_ranking_data
    from tune_gym.tasks.task import Task

    data = load_ranking_data(files, shape, progress=progress)
    task_x = np.zeros((len(data), TASK_FEATURE_DIM), dtype=np.float32)
    knob_x = np.zeros((len(data), KNOB_DIM), dtype=np.float32)
    for (uri, preset, _), rows in data.groups().items():
        space = KnobSpace.for_task(Task.parse(uri), preset)
        task_x[rows] = task_features(space.task)
        knob_x[rows] = KnobColumns(space)(np.stack(data.config[rows]))
    return OneShotData(task_x, knob_x, data.x.astype(np.float32), data.label.astype(np.float32), data.task,
                       data.cost)


class OneShotNet(nn.Module):
    """Tokens (task, knobs, primitive rows) -> Transformer encoder -> mean pool -> linear."""

    # the input standardisation buffers (register_buffer in __init__)
    task_mu: torch.Tensor
    task_sd: torch.Tensor
    knob_mu: torch.Tensor
    knob_sd: torch.Tensor
    seq_mu: torch.Tensor
    seq_sd: torch.Tensor

    def __init__(self, vec_len: int, max_len: int, d_model: int = 64, heads: int = 4, layers: int = 3,
                 ff: int = 1024, dropout: float = 0.25) -> None:
        super().__init__()
        self.task_proj = nn.Linear(TASK_FEATURE_DIM, d_model)
        self.knob_proj = nn.Linear(KNOB_DIM, d_model)
        self.seq_proj = nn.Linear(vec_len, d_model)
        self.position = nn.Parameter(torch.zeros(max_len + 2, d_model))
        nn.init.normal_(self.position, std=0.02)
        layer = nn.TransformerEncoderLayer(d_model, heads, ff, dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.out = nn.Linear(d_model, 1)
        # input standardisation (set from the training rows by OneShotModel.fit; saved with the weights)
        for name, width in (("task", TASK_FEATURE_DIM), ("knob", KNOB_DIM), ("seq", vec_len)):
            self.register_buffer(f"{name}_mu", torch.zeros(width))
            self.register_buffer(f"{name}_sd", torch.ones(width))

    def forward(self, task_x: torch.Tensor, knob_x: torch.Tensor, seq: torch.Tensor) -> torch.Tensor:
        pad = torch.cat([torch.zeros(len(seq), 2, dtype=torch.bool), (seq == 0).all(-1)], 1)
        task_x = (task_x - self.task_mu) / self.task_sd
        knob_x = (knob_x - self.knob_mu) / self.knob_sd
        seq = ((seq - self.seq_mu) / self.seq_sd).masked_fill(pad[:, 2:, None], 0.0)
        tokens = torch.cat([self.task_proj(task_x)[:, None], self.knob_proj(knob_x)[:, None], self.seq_proj(seq)], 1)
        tokens = tokens + self.position[: tokens.shape[1]]
        h = self.encoder(tokens, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(h.dtype)
        return self.out((h * keep).sum(1) / keep.sum(1)).squeeze(-1)


class OneShotModel:
    """The predictor with fit / predict / save / load.

    Args:
        shape: ``(max_len, vec_len)`` of the primitive sequences.
        seed: seeds the initial weights, the oversampling draws and dropout.
        epochs, batch, lr: training (the paper's 200, 512, 1e-4).
        d_model, heads, layers, ff, dropout: the network (paper: 4 heads, 3 layers, width 1024,
            dropout 0.25; ``d_model`` is this project's choice).
        oversample: draw each epoch's rows by :func:`oversampling_weights` (else a shuffle).
    """

    def __init__(self, shape: tuple[int, int] | list[int] = (25, 22), seed: int = 0, epochs: int = 200,
                 batch: int = 512, lr: float = 1e-4, d_model: int = 64, heads: int = 4, layers: int = 3,
                 ff: int = 1024, dropout: float = 0.25, oversample: bool = True) -> None:
        if epochs < 0 or batch < 1:
            raise ValueError(f"epochs must be >= 0 and batch >= 1, got {epochs}, {batch}")
        self.shape = (int(shape[0]), int(shape[1]))
        self.seed, self.epochs, self.batch, self.lr = seed, epochs, batch, lr
        self.arch: dict[str, Any] = {"d_model": d_model, "heads": heads, "layers": layers, "ff": ff, "dropout": dropout}
        self.oversample = oversample
        self.metadata: dict[str, Any] = {}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.net = OneShotNet(self.shape[1], self.shape[0], **self.arch)
        self._gen = torch.Generator().manual_seed(seed)

    @property
    def _standardised(self) -> bool:
        return bool(self.net.task_sd.ne(1).any() or self.net.task_mu.ne(0).any())

    @torch.no_grad()
    def _standardise(self, tx: torch.Tensor, kx: torch.Tensor, sx: torch.Tensor) -> None:
        """Set the input standardisation from training rows (sequence statistics over real,
        non-padding primitive rows); constant columns keep a scale of 1."""
        rows = sx[(sx != 0).any(-1)]
        for name, x in (("task", tx), ("knob", kx), ("seq", rows)):
            if len(x):
                sd = x.std(0, unbiased=False)
                getattr(self.net, f"{name}_mu").copy_(x.mean(0))
                getattr(self.net, f"{name}_sd").copy_(torch.where(sd > 1e-6, sd, torch.ones_like(sd)))

    @property
    def config(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "seed": self.seed, "epochs": self.epochs, "batch": self.batch,
                "lr": self.lr, "oversample": self.oversample, **self.arch}

    def _tensors(self, data: OneShotData) -> tuple[torch.Tensor, ...]:
        if tuple(data.seq.shape[1:]) != self.shape:
            raise ValueError(f"sequences must be n x {self.shape[0]} x {self.shape[1]}, got {data.seq.shape}")
        return tuple(torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
                     for a in (data.task_x, data.knob_x, data.seq, data.label))

    def fit(self, data: OneShotData, val: OneShotData | None = None, progress: bool = True) -> dict[str, list[float]]:
        """Train for ``epochs`` epochs (each ``len(data)`` rows); returns the per-epoch
        ``train_loss``, ``val_loss`` (MSE) and ``epoch_secs``."""
        if len(data) == 0:
            raise ValueError("no training rows")
        tx, kx, sx, y = self._tensors(data)
        if not self._standardised:
            self._standardise(tx, kx, sx)
        weights = torch.from_numpy(oversampling_weights(data.label) if self.oversample else np.ones(len(data)))
        opt = torch.optim.Adam(self.net.parameters(), lr=self.lr)

        def batches() -> Iterator[BatchLoss]:
            if self.oversample:
                order = torch.multinomial(weights, len(data), replacement=True, generator=self._gen)
            else:
                order = torch.randperm(len(data), generator=self._gen)
            for idx in order.split(self.batch):
                yield BatchLoss(nn.functional.mse_loss(self.net(tx[idx], kx[idx], sx[idx]), y[idx]), len(idx), len(idx))

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(2**31, (1,), generator=self._gen)))  # dropout masks
            return run_epochs(self.net, opt, self.epochs, batches, validation_mse(self.predict_data, val),
                              desc="One-Shot epochs", progress=progress)

    @torch.no_grad()
    def predict(self, task_x: np.ndarray, knob_x: np.ndarray, seq: np.ndarray) -> np.ndarray:
        """Predicted labels (normalised throughput) of featurized configs."""
        self.net.eval()
        parts = [torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)) for a in (task_x, knob_x, seq)]
        if parts[2].ndim != 3 or tuple(parts[2].shape[1:]) != self.shape:
            raise ValueError(f"sequences must be n x {self.shape[0]} x {self.shape[1]}, got {tuple(parts[2].shape)}")
        out = [self.net(*(p[i: i + 4096] for p in parts)) for i in range(0, len(parts[0]), 4096)]
        return torch.cat(out).numpy().astype(np.float64) if out else np.zeros(0)

    @property
    def ops(self) -> list[str]:
        """The ops of the training tasks (empty when the sidecar does not say)."""
        return list(self.metadata.get("ops", []))

    def not_covered(self, op: str) -> str | None:
        """Why this predictor cannot score configs of ``op`` (an op its training tasks lack), or None."""
        if self.ops and op not in self.ops:
            return f"trained on {', '.join(self.ops)} tasks only, not {op}"
        return None

    def predict_data(self, data: OneShotData) -> np.ndarray:
        return self.predict(data.task_x, data.knob_x, data.seq)

    def save(self, path: str | os.PathLike[str], metadata: dict[str, Any] | None = None) -> Path:
        """Weights (a ``torch.save``'d state dict) at ``path``; config and ``metadata`` in the
        JSON sidecar beside it, sealed with their checksums (:func:`agents.pretrained.write_checkpoint`).
        Returns the sidecar's path; raises ValueError (writing nothing) for weights holding NaN or inf."""
        return write_checkpoint(path, self.net.state_dict(), "OneShotModel", self.config,
                                {**self.metadata, **(metadata or {})})

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> OneShotModel:
        """A model from ``path`` and its sidecar (:func:`agents.pretrained.load_model`); reads
        tensors only (``weights_only=True``) and raises ValueError for files that do not match
        their checksums, an unsealed sidecar, or weights holding NaN or inf."""
        return load_model(path, cls)
