"""What the training scripts (``train_tlp.py``, ``train_oneshot.py``, ``train_metatune.py``) share:
the exact command and the dataset files with their checksums for the checkpoint's sidecar, a
load that refuses files a running collection changed underneath it, the save of the sealed
checkpoint, the loss plot, and the closing report of what was written."""

from __future__ import annotations

import hashlib
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]

__all__ = ["REPO", "command_line", "display", "file_checksums", "load_unchanged", "plot_losses", "save_checkpoint",
           "wrote"]


def command_line(script: str, argv: Sequence[str] | None) -> str:
    """The command that ran ``script`` (``python scripts/NAME.py ARGS``), for the sidecar."""
    return shlex.join(["python", *(sys.argv if argv is None else [f"scripts/{script}", *argv])])


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


def save_checkpoint(model: Any, path: Path, metadata: dict[str, Any]) -> None:
    """``model.save(path, metadata)``: the weights and their sidecar, sealed with their checksums;
    exits with the model's reason when it refuses (weights holding NaN or inf: the training diverged)."""
    try:
        model.save(path, metadata)
    except ValueError as err:
        raise SystemExit(f"no checkpoint written: {err}") from None


def plot_losses(history: dict[str, list[float]], title: str, path: Path, ylabel: str) -> None:
    """Training (and validation, when there is any) loss per epoch, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    epochs = np.arange(1, len(history["train_loss"]) + 1)
    ax.plot(epochs, history["train_loss"], label="training")
    if history["val_loss"]:
        ax.plot(epochs, history["val_loss"], label="validation")
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def wrote(out: Path, name: str) -> None:
    """Print the checkpoint, sidecar and plot that were written."""
    print(f"wrote {display(out / f'{name}.pt')}, {display(out / f'{name}.json')}, {display(out / f'{name}.png')}")
