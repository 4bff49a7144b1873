"""What the training scripts (``train_tlp.py``, ``train_oneshot.py``, ``train_metatune.py``) share:
the start of a run (torch's threads; the catalog's files by default), the exact command and the
dataset files with their checksums for the checkpoint's sidecar, a load that refuses files a
running collection changed underneath it, the split into training, validation and held-out rows,
each held-out network's top-k scores, the save of the sealed checkpoint with its loss plot, and
the closing report of what was written."""

from __future__ import annotations

import argparse
import hashlib
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

REPO = Path(__file__).resolve().parents[1]

__all__ = ["REPO", "catalog_files", "command_line", "display", "draw_losses", "file_checksums", "holdout_parser",
           "load_unchanged", "network_scores", "plot_losses", "print_scores", "save_checkpoint", "split_holdout",
           "split_validation", "start", "write_outputs", "wrote"]


class Rows(Protocol):
    """Training rows as the scripts split them (:class:`~agents.models.rank_data.RankingData`,
    :class:`~agents.models.metatune.GraphData`)."""

    @property
    def task(self) -> np.ndarray: ...

    def __len__(self) -> int: ...

    def subset(self, mask_or_index: np.ndarray) -> Any: ...


D = TypeVar("D", bound=Rows)


def command_line(script: str, argv: Sequence[str] | None) -> str:
    """The command that ran ``script`` (``python scripts/NAME.py ARGS``), for the sidecar."""
    return shlex.join(["python", *(sys.argv if argv is None else [f"scripts/{script}", *argv])])


def holdout_parser(doc: str, cache: str) -> argparse.ArgumentParser:
    """The command-line parser of a script that trains on the catalog's datasets with held-out
    networks (described by the first paragraph of ``doc``), with the options all of them take:
    ``--files``, ``--holdout``, ``--val-fraction`` (in (0, 1)), ``--seed``, ``--out``,
    ``--name``, ``--threads``, ``--cache-dir`` (``cache``: what it caches, and where by default)
    and ``--quiet``. The script adds its own."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", nargs="+", type=Path, help="dataset files (default: every file of the catalog)")
    p.add_argument("--holdout", action="append", default=[], metavar="NETWORK",
                   help="leave out every task of this network (tune_gym.tasks.suites); repeatable")
    p.add_argument("--val-fraction", type=_open_fraction, default=0.1,
                   help="validation share of the training rows (0.1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=REPO / "agents" / "checkpoints", help="output directory")
    p.add_argument("--name", help="file stem of the outputs (default from the options)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    p.add_argument("--cache-dir", type=Path, help=f"cache of {cache}")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def _open_fraction(text: str) -> float:
    """A number in (0, 1) (argparse's ``type``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {value}")
    return value


def start(script: str, argv: Sequence[str] | None, threads: int | None) -> str:
    """The command that ran ``script`` (:func:`command_line`), once torch is given ``threads``
    CPU threads (when set; else torch's default)."""
    if threads:
        import torch

        torch.set_num_threads(threads)
    return command_line(script, argv)


def catalog_files(files: Sequence[Path] | None) -> list[Path]:
    """``files`` when given, else every dataset file of the catalog (:func:`tune_gym.datasets.catalog.catalog`)."""
    from tune_gym.datasets.catalog import catalog

    return list(files) if files else [e.path for e in catalog()]


def display(path: Path) -> str:
    """``path`` relative to the repository when it is inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def file_checksums(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """Each file with its checksum: the row checksum of a Parquet dataset, else the file's SHA-256."""
    from tune_gym.datasets.catalog import read_entry

    out = []
    for path in map(Path, paths):
        if path.suffix == ".parquet":
            entry = read_entry(path)
            out.append({"path": display(path), "checksum": entry.meta["checksum"], "checksum_of": "rows",
                        "task": entry.task, "preset": entry.preset, "rows": entry.rows})
        else:
            out.append({"path": display(path), "checksum": hashlib.sha256(path.read_bytes()).hexdigest(),
                        "checksum_of": "file"})
    return out


def load_unchanged(files: Sequence[Path], load: Callable[[], Any]) -> tuple[Any, list[dict[str, Any]], float]:
    """``(load(), the files' checksums, seconds to load)``; exits if a file changed while it was
    read (a collection appending to it), since the sidecar would then name other data."""
    checksums = file_checksums(files)
    tic = time.perf_counter()
    data = load()
    secs = time.perf_counter() - tic
    changed = [a["path"] for a, b in zip(checksums, file_checksums(files)) if a != b]
    if changed:
        raise SystemExit(f"dataset file(s) {changed} changed while they were read (is a collection writing them?); "
                         "run again, or leave them out with --files")
    return data, checksums, secs


def split_holdout(data: D, holdout: Sequence[str]) -> tuple[D, D, dict[str, dict[str, int]]]:
    """``(training pool, held-out rows, each held-out network's task weights)``: the rows of every
    task of a ``holdout`` network are held out (:func:`agents.models.rank_data.held_out_mask`);
    exits for an unknown network or when no training rows are left."""
    from agents.models.rank_data import held_out_mask

    try:
        held, weights = held_out_mask(data, holdout)  # type: ignore[arg-type]  # it reads only the task URIs
    except ValueError as err:
        raise SystemExit(str(err)) from None
    pool, test = data.subset(~held), data.subset(held)
    if not len(pool):
        raise SystemExit(f"no training rows left after holding out {list(holdout)}")
    return pool, test, weights


def split_validation(pool: D, fraction: float, rng: np.random.Generator) -> tuple[D, D]:
    """``(training rows, validation rows)``: a random ``fraction`` of ``pool`` (rounded) validates."""
    n = len(pool)
    is_val = np.zeros(n, dtype=bool)
    is_val[rng.permutation(n)[:round(fraction * n)]] = True
    return pool.subset(~is_val), pool.subset(is_val)


def network_scores(pred: np.ndarray, task: np.ndarray, cost: np.ndarray, weights: dict[str, dict[str, int]],
                   seed: int) -> dict[str, Any]:
    """TLP's top-1 and top-5 scores (:func:`agents.models.metrics.top_k_score`) of each held-out
    network, over its tasks with a measured (finite, positive) cost among the rows.

    Args:
        pred: the model's score of each held-out row (higher: predicted faster).
        task, cost: each row's task URI and measured cost.
        weights: per network, its tasks' occurrences (:func:`split_holdout`).
        seed: the tie-breaking seed.
    """
    from agents.models import metrics

    out: dict[str, Any] = {}
    for net, w in weights.items():
        present = {uri: n for uri, n in w.items()
                   if (np.isfinite(cost[task == uri]) & (cost[task == uri] > 0)).any()}
        if present:
            ranked = [(pred[task == uri], cost[task == uri]) for uri in present]
            out[net] = {"tasks_with_data": len(present), "tasks": len(w),
                        **{f"top{k}": metrics.top_k_score(ranked, list(present.values()), k, seed) for k in (1, 5)}}
    return out


def save_checkpoint(model: Any, path: Path, metadata: dict[str, Any]) -> None:
    """``model.save(path, metadata)``: the weights and their sidecar, sealed with their checksums;
    exits with the model's reason when it refuses (weights holding NaN or inf: the training diverged)."""
    try:
        model.save(path, metadata)
    except ValueError as err:
        raise SystemExit(f"no checkpoint written: {err}") from None


def draw_losses(ax: Any, history: dict[str, list[float]], ylabel: str, title: str) -> None:
    """Training (and validation, when there is any) loss per epoch on a matplotlib axis."""
    epochs = np.arange(1, len(history["train_loss"]) + 1)
    ax.plot(epochs, history["train_loss"], label="training")
    if history["val_loss"]:
        ax.plot(epochs, history["val_loss"], label="validation")
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend()


def plot_losses(history: dict[str, list[float]], title: str, path: Path, ylabel: str) -> None:
    """Training (and validation, when there is any) loss per epoch, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    draw_losses(ax, history, ylabel, title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_outputs(model: Any, out: Path, name: str, metadata: dict[str, Any], plot: Callable[[Path], None]) -> None:
    """Into ``out``: the sealed checkpoint ``NAME.pt`` with its sidecar (:func:`save_checkpoint`),
    then ``plot(out / "NAME.png")``; prints what was written."""
    out.mkdir(parents=True, exist_ok=True)
    save_checkpoint(model, out / f"{name}.pt", metadata)
    plot(out / f"{name}.png")
    wrote(out, name)


def print_scores(scores: dict[str, Any], prefix: str = "") -> None:
    """One indented line per score (``kernels``, the per-kernel detail, is left to the sidecar)."""
    for key, value in scores.items():
        if key != "kernels":
            print(f"  {prefix}{key}: {value}")


def wrote(out: Path, name: str) -> None:
    """Print the checkpoint, sidecar and plot that were written."""
    print(f"wrote {display(out / f'{name}.pt')}, {display(out / f'{name}.json')}, {display(out / f'{name}.png')}")
