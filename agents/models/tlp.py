"""TLP and MTL-TLP: a cost model that reads the schedule as a sentence of primitives.

Zhai et al., "TLP: A Deep Learning-based Cost Model for Tensor Program Tuning" (ASPLOS 2023).
A config's trace is a ``max_len x vec_len`` sequence of primitive vectors
(:mod:`tune_gym.features.primitives`); the network scores it, higher = faster:

* per primitive, an MLP ``vec_len -> 64 -> 128 -> 256 -> 256`` (ReLU after each layer);
* one 8-head self-attention layer over the sequence, added to its input (residual);
* two residual blocks ``h + ReLU(Linear(h))``, width 256;
* per primitive, a decoder ``256 -> 256 -> 128 -> 64 -> 1`` (ReLU between), summed over the
  primitives.

The first three parts are the shared *backbone*, the decoder is a *head*. MTL-TLP has one head
per platform (measuring host) on one backbone; plain TLP is the single head ``"default"``, which
takes the rows of every platform.

Choices (what the paper leaves open, decided here):
    * Padding: an all-zero primitive vector is padding (a real one always has its one-hot
      kind set). Padded primitives are masked out of the attention's keys and out of the sum,
      so a score does not depend on how far the sequence is padded. (The authors' code masks
      neither.) A sequence that is all padding is scored unmasked.
    * Lists of the LambdaRank loss: TLP's code treats the whole batch as one list, so it also
      ranks rows of different tasks against each other. A label only says how far a config is
      from its own task's best on its platform, and a search only ever ranks candidates of one
      task, so those cross-task pairs train an order nothing uses and take weight from the
      pairs that matter. Here each list is one task's rows on one platform within the batch
      (1024 shuffled rows over a few dozen tasks still give tens of rows per list); a batch's
      loss is the sum over its lists, as TLP's is a sum over pairs.
    * MTL masking: a row carries the label of its own platform only, so head ``k`` runs on,
      and its loss sees, only the rows of platform ``k``; the rows of the other platforms give
      head ``k`` no gradient, and a batch without rows of platform ``k`` leaves its weights as
      they are (no gradient at all, so Adam's weight decay does not move them either). The
      total loss is the sum over heads (over all lists).
    * Training as the authors' code: Adam (lr 7e-4, weight decay 1e-6), 50 epochs, batches of
      1024 shuffled rows, gradient norm clipped at 0.5, no learning-rate decay.

Example:
    >>> model = TLPModel(epochs=50, seed=0)
    >>> history = model.fit(train, val)
    >>> scores = model.predict(candidates_x)  # higher = predicted faster
"""

from __future__ import annotations

import functools
import itertools
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from agents.models.rank_data import RankingData
from agents.models.training import BatchLoss, run_epochs
from agents.pretrained import load_model, write_checkpoint

__all__ = ["DEFAULT_PLATFORM", "TLPModel", "TLPNet", "lambdarank_loss"]

#: The single head of plain TLP; it takes the rows of every platform.
DEFAULT_PLATFORM = "default"
_ENCODER = (64, 128, 256, 256)
_DECODER = (256, 128, 64)


def _mlp(sizes: Sequence[int], last_relu: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        if last_relu or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class TLPNet(nn.Module):
    """TLP's network with ``n_heads`` decoders (see the module docstring).

    Args:
        vec_len: values per primitive vector.
        n_heads: decoders (one per platform).
        attention_heads: heads of the self-attention layer (8).
        res_blocks: residual blocks after the attention (2).
    """

    def __init__(self, vec_len: int, n_heads: int = 1, attention_heads: int = 8, res_blocks: int = 2) -> None:
        super().__init__()
        width = _ENCODER[-1]
        self.encoder = _mlp((vec_len, *_ENCODER), last_relu=True)
        self.attention = nn.MultiheadAttention(width, attention_heads, batch_first=True)
        self.res_blocks = nn.ModuleList(_mlp((width, width), last_relu=True) for _ in range(res_blocks))
        self.heads = nn.ModuleList(_mlp((width, *_DECODER, 1), last_relu=False) for _ in range(n_heads))

    def backbone(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(h, pad)``: ``b x L x 256`` primitive embeddings and the ``b x L`` padding mask."""
        pad = ~(x != 0).any(dim=-1)
        pad = pad & ~pad.all(dim=1, keepdim=True)  # an all-padding sequence: score it unmasked
        h = self.encoder(x)
        h = h + self.attention(h, h, h, key_padding_mask=pad, need_weights=False)[0]
        for block in self.res_blocks:
            h = h + block(h)
        return h, pad

    def forward(self, x: torch.Tensor, head: torch.Tensor | None = None) -> torch.Tensor:
        """Scores of ``x`` (``b x L x vec_len``).

        Args:
            x: the sequences.
            head: ``b`` head indices: score each row by its own head only (a head runs on its
                rows alone, so it gets no gradient from the others'); ``None``: every head.

        Returns:
            ``b`` scores with ``head``, else ``b x n_heads``.
        """
        return self.decode(*self.backbone(x), head)

    def decode(self, h: torch.Tensor, pad: torch.Tensor, head: torch.Tensor | None = None) -> torch.Tensor:
        """The heads' scores of :meth:`backbone`'s output (``head`` as in :meth:`forward`)."""
        keep = (~pad).unsqueeze(-1).to(h.dtype)
        if head is None:
            return torch.cat([(dec(h) * keep).sum(dim=1) for dec in self.heads], dim=1)
        out = h.new_zeros(len(h))
        for k in torch.unique(head).tolist():
            rows = head == k
            out[rows] = (self.heads[k](h[rows]) * keep[rows]).sum(dim=(1, 2))
        return out


def lambdarank_loss(scores: torch.Tensor, labels: torch.Tensor, groups: torch.Tensor, sigma: float = 1.0,
                    eps: float = 1e-10) -> torch.Tensor:
    """TLP's LambdaRank loss, summed over lists (rows of one group id form one list).

    Within a list, ranks come from sorting by score (1 = highest), gains are ``2 ** y - 1``
    divided by the list's ideal DCG, discounts are ``log2(1 + rank)``. Each pair ``i, j`` with
    ``y_i > y_j`` costs ``-w_ij * log2(sigmoid(sigma * (s_i - s_j)))`` with
    ``w_ij = |G_i - G_j| * |1 / D_i - 1 / D_j|`` (clamped at ``log2(eps)`` as in the authors'
    code); pairs across lists cost nothing.

    Args:
        scores: ``n`` predicted scores (higher = better).
        labels: ``n`` labels in [0, 1] (higher = better).
        groups: ``n`` integer list ids.
        sigma: slope of the pairwise sigmoid.
        eps: floor of the ideal DCG and of each pair's probability term.

    Returns:
        The scalar loss (0 for a list without two different labels).
    """
    n = scores.shape[0]
    labels = labels.to(scores.dtype)
    same = groups[:, None] == groups[None, :]
    earlier = torch.arange(n, device=scores.device)
    earlier = earlier[None, :] < earlier[:, None]  # [i, j]: j comes before i (breaks ties)

    def rank(values: torch.Tensor) -> torch.Tensor:  # 1-based rank of each row within its list
        above = (values[None, :] > values[:, None]) | ((values[None, :] == values[:, None]) & earlier)
        return 1 + (above & same).sum(dim=1)

    gain = torch.pow(2.0, labels) - 1
    max_dcg = (same * (gain / torch.log2(1.0 + rank(labels)))[None, :]).sum(dim=1).clamp(min=eps)
    g = gain / max_dcg
    inv_d = 1.0 / torch.log2(1.0 + rank(scores.detach()).to(scores.dtype))
    weight = (g[:, None] - g[None, :]).abs() * (inv_d[:, None] - inv_d[None, :]).abs()
    pairs = same & (labels[:, None] > labels[None, :])
    log_p = F.logsigmoid(sigma * (scores[:, None] - scores[None, :])) / math.log(2.0)
    return -(weight * log_p).clamp(min=math.log2(eps))[pairs].sum()


class TLPModel:
    """TLP (one head) or MTL-TLP (one head per platform) with fit / fine-tune / predict / save.

    Args:
        platforms: the heads' platforms (host ids). ``("default",)``: plain TLP, one head for
            the rows of every platform. Otherwise each row trains the head of its platform.
        shape: ``(max_len, vec_len)`` of the input sequences.
        seed: seeds the initial weights and the shuffling (deterministic for a seed).
        epochs, batch, lr, weight_decay, clip: training settings (TLP's: 50, 1024, 7e-4,
            1e-6, 0.5).
        attention_heads, res_blocks: architecture (TLP's: 8, 2).
        lists: the LambdaRank lists of a training batch: ``"task"`` (each task's rows on one
            platform, the default; see the module docstring) or ``"batch"`` (the whole batch,
            as TLP's code).
    """

    def __init__(self, platforms: Sequence[str] = (DEFAULT_PLATFORM,), shape: Sequence[int] = (25, 22), seed: int = 0,
                 epochs: int = 50, batch: int = 1024, lr: float = 7e-4, weight_decay: float = 1e-6, clip: float = 0.5,
                 attention_heads: int = 8, res_blocks: int = 2, lists: str = "task") -> None:
        platforms = [str(p) for p in platforms]
        if not platforms or len(set(platforms)) != len(platforms):
            raise ValueError(f"platforms must be distinct and non-empty, got {platforms!r}")
        if DEFAULT_PLATFORM in platforms and len(platforms) > 1:
            raise ValueError(f"{DEFAULT_PLATFORM!r} is plain TLP's only head; it cannot be one of {platforms!r}")
        if len(shape) != 2 or min(shape) < 1:
            raise ValueError(f"shape must be (max_len, vec_len), got {tuple(shape)!r}")
        if lists not in ("task", "batch"):
            raise ValueError(f"lists must be 'task' or 'batch', not {lists!r}")
        if epochs < 0 or batch < 1:
            raise ValueError(f"epochs must be >= 0 and batch >= 1, got {epochs}, {batch}")
        self.platforms = platforms
        self.shape = (int(shape[0]), int(shape[1]))
        self.seed = seed
        self.epochs, self.batch, self.lr, self.weight_decay, self.clip = epochs, batch, lr, weight_decay, clip
        self.attention_heads, self.res_blocks = attention_heads, res_blocks
        self.lists = lists
        self.metadata: dict[str, Any] = {}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.net = TLPNet(self.shape[1], len(platforms), attention_heads, res_blocks)
        self._gen = torch.Generator().manual_seed(seed)

    # ------------------------------------------------------------------ configuration
    @property
    def config(self) -> dict[str, Any]:
        """The constructor's arguments (what :meth:`load` rebuilds the model from)."""
        return {"platforms": self.platforms, "shape": list(self.shape), "seed": self.seed, "epochs": self.epochs,
                "batch": self.batch, "lr": self.lr, "weight_decay": self.weight_decay, "clip": self.clip,
                "attention_heads": self.attention_heads, "res_blocks": self.res_blocks, "lists": self.lists}

    def reseed(self, seed: int) -> None:
        """Restart the stream that orders training batches (:meth:`fit`, :meth:`fine_tune`) at
        ``seed``: a copy of a model then shuffles independently of the original."""
        self._gen = torch.Generator().manual_seed(seed)

    def head_of(self, platform: str | None) -> int:
        """The head index of a platform; ``None`` or any platform for plain TLP's one head.

        Raises:
            ValueError: an unknown platform, or ``None`` with several heads.
        """
        if self.platforms == [DEFAULT_PLATFORM]:
            return 0
        if platform is None:
            raise ValueError(f"this model has one head per platform; name one of {self.platforms}")
        if platform not in self.platforms:
            raise ValueError(f"unknown platform {platform!r}; this model's platforms: {self.platforms}")
        return self.platforms.index(platform)

    def _check_x(self, x: np.ndarray) -> torch.Tensor:
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 3 or tuple(x.shape[1:]) != self.shape:
            raise ValueError(f"x must have shape (n, {self.shape[0]}, {self.shape[1]}), got {x.shape}")
        return torch.from_numpy(x)

    # ------------------------------------------------------------------ training
    def _lists(self, data: RankingData) -> tuple[torch.Tensor, torch.Tensor]:
        """Per row: its head, and its list id (one per task and platform; with ``lists="batch"``
        one per platform, so each head ranks its whole share of the batch)."""
        heads = torch.tensor([self.head_of(p) for p in data.platform.tolist()], dtype=torch.long)
        if self.lists == "batch":
            return heads, heads.clone()
        keys = np.array([f"{t}\0{p}" for t, p in zip(data.task, data.platform)], dtype=object)
        return heads, torch.from_numpy(np.unique(keys, return_inverse=True)[1].astype(np.int64))

    def _batch_loss(self, x: torch.Tensor, label: torch.Tensor, head: torch.Tensor,
                    group: torch.Tensor) -> torch.Tensor:
        return lambdarank_loss(self.net(x, head), label, group)

    def batch_loss(self, data: RankingData) -> torch.Tensor:
        """The loss of ``data`` as one batch (what one training step minimizes): LambdaRank
        summed over the lists (one per task and platform), each row scored by its platform's
        head only. Differentiable; the network stays in its current mode."""
        self._check_data(data, "data")
        head, group = self._lists(data)
        return self._batch_loss(torch.from_numpy(np.ascontiguousarray(data.x)),
                                torch.from_numpy(data.label.astype(np.float32)), head, group)

    def _check_data(self, data: RankingData, what: str) -> None:
        if data.shape != self.shape:
            raise ValueError(f"{what} sequences are {data.shape}, this model reads {self.shape}")
        if self.platforms != [DEFAULT_PLATFORM]:
            unknown = sorted(set(data.platforms) - set(self.platforms))
            if unknown:
                raise ValueError(f"{what} has rows of platforms {unknown} that are not this model's {self.platforms}; "
                                 "add them to platforms or subset the data")

    def fit(self, data: RankingData, val: RankingData | None = None, progress: bool = True) -> dict[str, list[float]]:
        """Train from the current weights for ``epochs`` epochs on ``data``.

        Args:
            data: training rows (every platform must be one of the model's, unless plain TLP).
            val: validation rows, scored after every epoch (in one fixed shuffled order).
            progress: show a progress bar over the epochs (tqdm).

        Returns:
            History: ``train_loss`` and ``val_loss`` (per epoch: the summed loss divided by the
            number of lists it summed over), ``epoch_secs`` (training seconds per epoch).
        """
        self._check_data(data, "data")
        if val is not None:
            self._check_data(val, "val")
        x, label = torch.from_numpy(np.ascontiguousarray(data.x)), torch.from_numpy(data.label.astype(np.float32))
        head, group = self._lists(data)
        opt = torch.optim.Adam(self.net.parameters(), lr=self.lr, weight_decay=self.weight_decay)

        def batches() -> Iterator[BatchLoss]:
            for idx in torch.randperm(len(data), generator=self._gen).split(self.batch):
                loss = self._batch_loss(x[idx], label[idx], head[idx], group[idx])
                yield BatchLoss(loss, 1, len(torch.unique(group[idx])))

        return run_epochs(self.net, opt, self.epochs, batches,
                          None if val is None else functools.partial(self.evaluate_loss, val), clip=self.clip,
                          desc="TLP epochs", progress=progress)

    @torch.no_grad()
    def evaluate_loss(self, data: RankingData) -> float:
        """The loss per list of ``data`` in batches of ``batch`` rows, in a fixed shuffled order
        (seeded by the model's seed, so batches mix tasks as in training)."""
        self._check_data(data, "data")
        self.net.eval()
        x, label = torch.from_numpy(np.ascontiguousarray(data.x)), torch.from_numpy(data.label.astype(np.float32))
        head, group = self._lists(data)
        order = torch.randperm(len(data), generator=torch.Generator().manual_seed(self.seed))
        total = lists = 0.0
        for idx in order.split(self.batch):
            total += float(self._batch_loss(x[idx], label[idx], head[idx], group[idx]))
            lists += len(torch.unique(group[idx]))
        return total / max(lists, 1.0)

    def fine_tune(self, x: np.ndarray, label: np.ndarray, epochs: int = 20, head: str | None = None,
                  part: str = "decoder") -> None:
        """Fine-tune on one task's measurements (one list), e.g. online during a search.

        Args:
            x: ``n x max_len x vec_len`` sequences of the measured configs.
            label: ``n`` labels in [0, 1]: the task's best cost / cost (0 for failures).
            epochs: passes over the rows (in batches of ``batch`` rows, shuffled).
            head: the platform whose head is tuned (``None`` for plain TLP's one head).
            part: ``"decoder"``: only that head's decoder learns, the shared backbone is frozen
                (cheap, and the other heads and the backbone stay as trained offline);
                ``"all"``: the backbone and that head learn (other heads' decoders do not, but
                they see the changed backbone).

        Raises:
            ValueError: a bad shape, a label count that does not match, an unknown platform
                or part.
        """
        xt = self._check_x(x)
        y = torch.as_tensor(np.asarray(label, dtype=np.float32))
        if y.shape != (len(xt),):
            raise ValueError(f"label must have shape ({len(xt)},), got {tuple(y.shape)}")
        if part not in ("decoder", "all"):
            raise ValueError(f"part must be 'decoder' or 'all', not {part!r}")
        k = self.head_of(head)
        params = list(self.net.heads[k].parameters())
        if part == "all":
            params += [p for name, p in self.net.named_parameters() if not name.startswith("heads.")]
        opt = torch.optim.Adam(params, lr=self.lr, weight_decay=self.weight_decay)
        heads = torch.full((len(xt),), k, dtype=torch.long)
        group = torch.zeros(len(xt), dtype=torch.long)
        self.net.train()
        if part == "decoder":  # the frozen backbone's output is computed once
            with torch.no_grad():
                h, pad = self.net.backbone(xt)

        def scores(idx: torch.Tensor) -> torch.Tensor:
            if part == "decoder":
                return self.net.decode(h[idx], pad[idx], heads[idx])
            return self.net(xt[idx], heads[idx])

        for _ in range(epochs):
            for idx in torch.randperm(len(xt), generator=self._gen).split(self.batch):
                loss = lambdarank_loss(scores(idx), y[idx], group[idx])
                self.net.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(params, self.clip)
                opt.step()
        self.net.eval()

    # ------------------------------------------------------------------ inference
    @torch.no_grad()
    def predict(self, x: np.ndarray, platform: str | None = None) -> np.ndarray:
        """Scores of ``n x max_len x vec_len`` sequences by a platform's head (higher = faster).

        Raises:
            ValueError: a bad shape, an unknown platform, or no platform with several heads.
        """
        k = self.head_of(platform)
        xt = self._check_x(x)
        self.net.eval()
        h = [self.net(xb, torch.full((len(xb),), k)) for xb in xt.split(self.batch)]
        return torch.cat(h).numpy().astype(np.float64) if h else np.zeros(0)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike[str], metadata: dict[str, Any] | None = None) -> Path:
        """Write the weights to ``path`` (a ``torch.save``'d state dict) and the config and
        ``metadata`` (JSON-serializable) to the sidecar ``path`` with suffix ``.json``, sealed with
        their checksums (:func:`agents.pretrained.write_checkpoint`).

        Returns:
            The sidecar's path.

        Raises:
            ValueError: weights holding NaN or inf (nothing is written).
        """
        return write_checkpoint(path, self.net.state_dict(), "TLPModel", self.config,
                                {**self.metadata, **(metadata or {})})

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TLPModel:
        """A model from the weights at ``path`` and its JSON sidecar (:func:`agents.pretrained.load_model`);
        only tensors are read (``torch.load(weights_only=True)``), never pickled objects.

        Raises:
            ValueError: a missing sidecar, one of another format or model, files that do not match
                their checksums, an unsealed sidecar, or weights holding NaN or inf or not fitting
                the config.
        """
        return load_model(path, cls)
