"""Measurement datasets as ranking data: TLP sequences, costs and per-task labels.

:func:`load_ranking_data` reads dataset files (:mod:`tune_gym.datasets`) into one
:class:`RankingData`: every row's config encoded as a TLP primitive sequence
(:func:`tune_gym.features.primitives.encode_configs`), its mean cost, and its label.

Label (TLP, Zhai et al., "TLP: A Deep Learning-based Cost Model for Tensor Program Tuning",
ASPLOS 2023): ``min cost of the task on that platform / cost``, in (0, 1]; 0 for a failed
config. The minimum is taken over every loaded row of the task on the platform, whatever the
space preset: the same task on the same machine has comparable latencies, so a compact and a
full dataset of one task share one scale. A platform is a measuring host
(:func:`tune_gym.host.host_id`, the ``host`` column).

Encoding builds a trace per row: ~750 (full preset) to ~2,500 (compact) rows per second on
one core, ~600 overall for the committed datasets with building each space once. The encoded
arrays are cached in ``cache_dir`` (default ``$XDG_CACHE_HOME/tune_gym/tlp``, else
``~/.cache/tune_gym/tlp``), one ``.npz`` per file, keyed by the file's row checksum, the
space fingerprint, the shape, the encoder's source and the TVM version, so any change to one
of them encodes again.

Example:
    >>> data = load_ranking_data()  # every dataset of the catalog
    >>> in_resnet18 = [uri for uri, nets in task_networks().items() if "resnet18" in nets]
    >>> train = data.subset(~np.isin(data.task, in_resnet18))
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from tune_gym.datasets import Dataset

__all__ = ["RankingData", "default_cache_dir", "held_out_mask", "load_ranking_data", "task_networks", "thin_platform"]

#: Rows encoded per step of the progress bar.
_CHUNK = 256


@dataclass(frozen=True, eq=False)
class RankingData:
    """Rows of measured configs, ready for a ranking model. Arrays have one entry per row.

    Attributes:
        x: ``n x max_len x vec_len`` float32 TLP sequences.
        cost: ``n`` mean seconds per call; ``inf`` for failed configs.
        label: ``n`` float32: the task's min cost on the row's platform / cost, in (0, 1];
            0 for failed configs.
        task: ``n`` task URIs (object).
        preset: ``n`` space presets (object).
        platform: ``n`` host ids of the measuring machines (object).
        config: ``n`` configs (object: each a :data:`tune_gym.space.Config` tuple of knob indices).
    """

    x: np.ndarray
    cost: np.ndarray
    label: np.ndarray
    task: np.ndarray
    preset: np.ndarray
    platform: np.ndarray
    config: np.ndarray

    def __post_init__(self) -> None:
        if self.x.ndim != 3:
            raise ValueError(f"x must be n x max_len x vec_len, got shape {self.x.shape}")
        n = len(self.x)
        for f in fields(self):
            if len(getattr(self, f.name)) != n:
                raise ValueError(f"{f.name} has {len(getattr(self, f.name))} rows, x has {n}")

    def __len__(self) -> int:
        return len(self.x)

    @property
    def shape(self) -> tuple[int, int]:
        """``(max_len, vec_len)`` of the sequences."""
        return int(self.x.shape[1]), int(self.x.shape[2])

    @property
    def platforms(self) -> list[str]:
        """The distinct platforms, sorted."""
        return sorted(set(self.platform.tolist()))

    def subset(self, mask_or_index: np.ndarray | Sequence[int]) -> RankingData:
        """The rows selected by a boolean mask (length ``n``) or an index array."""
        sel = np.asarray(mask_or_index)
        if sel.dtype == bool and len(sel) != len(self):
            raise ValueError(f"a boolean mask must have {len(self)} entries, got {len(sel)}")
        return RankingData(**{f.name: getattr(self, f.name)[sel] for f in fields(self)})

    def groups(self) -> dict[tuple[str, str, str], np.ndarray]:
        """Row indices of each ``(task, preset, platform)``, in order of first appearance."""
        out: dict[tuple[str, str, str], list[int]] = defaultdict(list)
        for i, key in enumerate(zip(self.task.tolist(), self.preset.tolist(), self.platform.tolist())):
            out[key].append(i)
        return {k: np.asarray(v, dtype=np.int64) for k, v in out.items()}


def task_networks(target: str = "llvm") -> dict[str, dict[str, int]]:
    """Task URI -> ``{network name: occurrences}`` over every suite of
    :mod:`tune_gym.tasks.suites`, with the tasks on ``target`` (as in a URI)."""
    from tune_gym.tasks.suites import SUITES, get_suite

    out: dict[str, dict[str, int]] = defaultdict(dict)
    for name in SUITES:
        for st in get_suite(name, target).tasks:
            out[st.task.uri][name] = out[st.task.uri].get(name, 0) + st.weight
    return dict(out)


def held_out_mask(data: RankingData, networks: Sequence[str]) -> tuple[np.ndarray, dict[str, dict[str, int]]]:
    """Rows of the tasks that occur in any of ``networks``, and each network's task weights.

    A task shared by a held-out network and another network is held out too, so training rows
    never include a held-out task (whatever network it was collected for).

    Raises:
        ValueError: an unknown network name.
    """
    from tune_gym.tasks.suites import SUITES

    unknown = [n for n in networks if n not in SUITES]
    if unknown:
        raise ValueError(f"unknown network(s) {unknown}; known: {', '.join(SUITES)}")
    occurs = task_networks()
    weights = {n: {uri: nets[n] for uri, nets in occurs.items() if n in nets} for n in networks}
    held = {uri for w in weights.values() for uri in w}
    return np.array([t in held for t in data.task.tolist()], dtype=bool), weights


def thin_platform(data: RankingData, platform: str, fraction: float, rng: np.random.Generator) -> RankingData:
    """Keep a random ``fraction`` of ``platform``'s rows (rounded) and every other row
    (MTL-TLP's setting: little data on the target machine, all of it on the others)."""
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    rows = np.flatnonzero(data.platform == platform)
    keep = np.ones(len(data), dtype=bool)
    keep[rng.choice(rows, size=len(rows) - round(fraction * len(rows)), replace=False)] = False
    return data.subset(keep)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/tune_gym/tlp``, or ``~/.cache/tune_gym/tlp``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tune_gym" / "tlp"


def _encoder_version() -> str:
    """A hash of what the encoding depends on besides the data: the encoder's source and TVM."""
    from tune_gym.features import primitives

    src = inspect.getsource(primitives)
    return hashlib.sha256(f"{src}\0{importlib.metadata.version('apache-tvm')}".encode()).hexdigest()


def _cache_path(cache_dir: Path, ds: Dataset, shape: tuple[int, int], encoder: str) -> Path:
    """The cache file of a dataset's sequences (see the module docstring for the key)."""
    from tune_gym.datasets import space_fingerprint

    key = json.dumps({"checksum": ds.meta.get("checksum"), "space": space_fingerprint(ds.space),
                      "shape": list(shape), "encoder": encoder}, sort_keys=True)
    return cache_dir / f"{Path(ds.source).stem}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.npz"


def load_ranking_data(files: Sequence[str | os.PathLike[str]] | None = None, shape: tuple[int, int] = (25, 22),
                      cache_dir: str | os.PathLike[str] | None = None, progress: bool = True) -> RankingData:
    """Read dataset files into one :class:`RankingData`, encoding (or reusing cached) sequences.

    Args:
        files: dataset files (``.parquet``, or ``.jsonl`` record files); default every file of
            :func:`tune_gym.datasets.catalog.catalog`. Each is checked by
            :func:`tune_gym.datasets.load_dataset` (checksum, space fingerprint).
        shape: ``(max_len, vec_len)`` of the sequences (TLP's CPU default 25 x 22).
        cache_dir: where encoded arrays are cached (default :func:`default_cache_dir`).
            Record files carry no checksum and are always encoded.
        progress: show a progress bar over the rows (tqdm).

    Returns:
        The rows of every file in order, labels normalized per (task, platform) over all of them.

    Raises:
        ValueError: no files, or a bad ``shape``.
        tune_gym.datasets.DatasetError: a file that cannot be trusted (see ``load_dataset``).
    """
    from tqdm.auto import tqdm

    from tune_gym.datasets import load_dataset
    from tune_gym.datasets.catalog import catalog
    from tune_gym.features.primitives import encode_configs

    max_len, vec_len = (int(v) for v in shape)
    if max_len < 1 or vec_len < 1:
        raise ValueError(f"shape must be two positive ints (max_len, vec_len), got {shape!r}")
    paths = [Path(f) for f in files] if files is not None else [e.path for e in catalog()]
    if not paths:
        raise ValueError("no dataset files to load (the catalog is empty; see tune_gym.datasets.catalog)")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    encoder = _encoder_version()
    datasets = [load_dataset(p) for p in paths]
    parts: dict[str, list[np.ndarray]] = defaultdict(list)
    with tqdm(total=sum(len(ds) for ds in datasets), unit="row", desc="TLP sequences", disable=not progress) as bar:
        for ds in datasets:
            bar.set_postfix_str(Path(ds.source).name)
            configs = [tuple(int(v) for v in c) for c in ds.configs]
            checksum = ds.meta.get("checksum")
            path = _cache_path(cache, ds, (max_len, vec_len), encoder) if checksum else None
            if path is not None and path.exists():
                with np.load(path, allow_pickle=False) as z:
                    x = z["x"]
                bar.update(len(ds))
            else:
                x = np.zeros((len(ds), max_len, vec_len), dtype=np.float32)
                for start in range(0, len(ds), _CHUNK):
                    chunk = configs[start:start + _CHUNK]
                    x[start:start + len(chunk)] = encode_configs(ds.space, chunk, max_len, vec_len)
                    bar.update(len(chunk))
                if path is not None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    tmp = path.with_name(path.stem + ".tmp.npz")
                    np.savez_compressed(tmp, x=x)
                    os.replace(tmp, path)
            config = np.empty(len(ds), dtype=object)
            config[:] = configs
            parts["x"].append(x)
            parts["cost"].append(np.asarray(ds.mean_cost, dtype=np.float64))
            parts["task"].append(np.full(len(ds), ds.task.uri, dtype=object))
            parts["preset"].append(np.full(len(ds), ds.preset, dtype=object))
            parts["platform"].append(np.asarray(ds.host, dtype=object))
            parts["config"].append(config)
    arrays = {k: np.concatenate(v) for k, v in parts.items()}
    return RankingData(label=_labels(arrays["cost"], arrays["task"], arrays["platform"]), **arrays)


def _labels(cost: np.ndarray, task: np.ndarray, platform: np.ndarray) -> np.ndarray:
    """``min cost of (task, platform) / cost``; 0 where the cost is not finite."""
    label = np.zeros(len(cost), dtype=np.float32)
    keys = np.array([f"{t}\0{p}" for t, p in zip(task, platform)], dtype=object)
    ok = np.isfinite(cost)
    for key in np.unique(keys):
        rows = (keys == key) & ok
        if rows.any():
            label[rows] = cost[rows].min() / cost[rows]
    return label
