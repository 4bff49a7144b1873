"""Committed checkpoints of pretrained cost models: which one an agent loads, and its digest.

Every checkpoint in ``agents/checkpoints/`` is ``NAME.pt`` plus a JSON sidecar ``NAME.json``
naming the model class (``"model"``), its config and metadata; the metadata lists the tasks it
was trained on (``train_tasks``) and its training rows (``rows.train``). A pretrained agent with
``checkpoint="auto"`` must never tune a task with a model fitted on that task's data, so
:func:`pick_checkpoint` returns the checkpoint of one model class trained on the most rows among
those trained on none of the given tasks. :func:`checkpoint_path` resolves an agent's
``checkpoint`` option: ``"auto"``, a path, or the name of a file in ``agents/checkpoints/``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["CHECKPOINT_DIR", "CHECKPOINT_FORMAT", "checkpoint_path", "pick_checkpoint", "read_checkpoint", "sha256",
           "write_checkpoint"]

CHECKPOINT_DIR = Path(__file__).resolve().parent / "checkpoints"


def pick_checkpoint(model: str, task_uri: str | Iterable[str], directory: Path = CHECKPOINT_DIR,
                    accept: Callable[[dict[str, Any]], bool] | None = None, train_hint: str = "") -> Path:
    """The ``model`` checkpoint in ``directory`` with the most training rows, trained on none of
    ``task_uri`` (one task URI or several).

    Args:
        model: the sidecar's ``"model"`` (``TLPModel``, ``OneShotModel``, ``MetaTuneModel``).
        task_uri: the task(s) the checkpoint must not have been trained on.
        directory: where to look.
        accept: an extra filter on the sidecar document (e.g. no ablation checkpoints).
        train_hint: how to train one, for the error message.

    Raises:
        FileNotFoundError: no such checkpoint.
    """
    avoid = {task_uri} if isinstance(task_uri, str) else set(task_uri)
    best: tuple[int, str] | None = None
    seen = []
    for sidecar in sorted(directory.glob("*.json")):
        doc = json.loads(sidecar.read_text())
        if doc.get("model") != model:
            continue
        seen.append(sidecar.name)
        meta = doc.get("metadata", {})
        if (accept is not None and not accept(doc)) or "train_tasks" not in meta or avoid & set(meta["train_tasks"]):
            continue
        rows = int(meta.get("rows", {}).get("train", 0))
        if best is None or rows > best[0]:
            best = (rows, doc["weights"])
    if best is None:
        raise FileNotFoundError(
            f"no {model} checkpoint in {directory} was trained without {', '.join(sorted(avoid))} "
            f"(checked: {', '.join(seen) or 'none'}); " + (f"train one with {train_hint}, " if train_hint else "")
            + "or pass checkpoint=PATH")
    return directory / best[1]


@functools.lru_cache(maxsize=16)
def checkpoint_path(value: str, task_uri: str, auto: Callable[[str], Path], kind: str) -> Path:
    """The checkpoint file an agent's ``checkpoint`` option names for tuning ``task_uri``.

    ``"auto"`` is ``auto(task_uri)`` (a checkpoint that never saw the task); otherwise a path, or
    a checkpoint's name or file name in :data:`CHECKPOINT_DIR` (``tlp_holdout-resnet18_seed0``).
    A named checkpoint whose sidecar lists the task among its training tasks still loads (an
    explicit choice), with a warning that the run is not a transfer result.

    Raises:
        FileNotFoundError: nothing of that name (``kind`` names the model in the message).
    """
    if value == "auto":
        return auto(task_uri)
    path = Path(value)
    if not path.exists():
        for candidate in (CHECKPOINT_DIR / value, CHECKPOINT_DIR / f"{value}.pt"):
            if candidate.exists() and "/" not in value:
                path = candidate
                break
        else:
            raise FileNotFoundError(f"{kind} checkpoint {value!r} does not exist (neither a file nor a checkpoint "
                                    f"in {CHECKPOINT_DIR})")
    sidecar = path.with_suffix(".json")
    if sidecar.exists():
        trained_on = json.loads(sidecar.read_text()).get("metadata", {}).get("train_tasks", ())
        if task_uri in trained_on:
            import warnings

            warnings.warn(f"{kind} checkpoint {path.name} was trained on {task_uri}: results on it are not "
                          "transfer results", stacklevel=3)
    return path


def sha256(path: str) -> str:
    """SHA-256 of a checkpoint file (cached per path), for run provenance."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


#: Version of the sidecar layout shared by every checkpoint.
CHECKPOINT_FORMAT = 1


def write_checkpoint(path: str | os.PathLike[str], state_dict: dict[str, Any], model: str, config: dict[str, Any],
                     metadata: dict[str, Any], **extra: Any) -> Path:
    """Write ``state_dict`` to ``path`` (``torch.save``) and the sidecar ``path`` with suffix
    ``.json``: format, ``model`` (the class name), weights file, ``config`` (the constructor's
    arguments), ``metadata`` and any ``extra`` JSON fields. Returns the sidecar's path."""
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state_dict, path)
    sidecar = path.with_suffix(".json")
    doc = {"format": CHECKPOINT_FORMAT, "model": model, "weights": path.name, "config": config, **extra,
           "metadata": metadata}
    sidecar.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return sidecar


def read_checkpoint(path: str | os.PathLike[str], model: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The sidecar document and the state dict of a ``model`` checkpoint; only tensors are read
    (``torch.load(weights_only=True)``), never pickled objects.

    Raises:
        ValueError: a missing sidecar, or one of another format or model.
    """
    import torch

    path = Path(path)
    sidecar = path.with_suffix(".json")
    if not sidecar.exists():
        raise ValueError(f"checkpoint {path} has no sidecar {sidecar.name} (its config)")
    doc = json.loads(sidecar.read_text())
    if doc.get("format") != CHECKPOINT_FORMAT or doc.get("model") != model:
        raise ValueError(f"{sidecar} is not a {model} checkpoint of format {CHECKPOINT_FORMAT} "
                         f"(format {doc.get('format')!r}, model {doc.get('model')!r})")
    return doc, torch.load(path, map_location="cpu", weights_only=True)
