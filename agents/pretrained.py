"""Committed checkpoints of pretrained cost models: which one an agent loads, and how one is
written, sealed and read back.

Every checkpoint in ``agents/checkpoints/`` is ``NAME.pt`` plus a JSON sidecar ``NAME.json``
naming the model class (``"model"``), its config and metadata; the metadata lists the tasks it
was trained on (``train_tasks``) and its training rows (``rows.train``). A pretrained agent with
``checkpoint="auto"`` must never tune a task with a model fitted on that task's data, so
:func:`pick_checkpoint` returns the checkpoint of one model class trained on the most rows among
those trained on none of the given tasks. :func:`checkpoint_path` resolves an agent's
``checkpoint`` option: ``"auto"``, a path, or the name of a file in ``agents/checkpoints/``.

A sidecar is sealed: its ``checksums`` field holds the SHA-256 of the weights file and of the
sidecar's own content (its canonical JSON without ``checksums``). :func:`write_checkpoint` seals
what it writes, :func:`seal_checkpoint` seals a checkpoint one trusts, and every reader
(:func:`read_sidecar`, :func:`read_checkpoint`, :func:`load_model`) refuses a checkpoint whose
files do not match their checksums, a sidecar without them, and weights holding NaN or inf. The
checksums detect corruption and edits made without re-sealing; they are not a signature.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import io
import json
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    import torch

__all__ = ["CHECKPOINT_DIR", "CHECKPOINT_FORMAT", "MODEL_MODULES", "RESEAL", "CheckpointError", "cached_model",
           "check_finite", "checkpoint_path", "load_model", "pick_checkpoint", "read_checkpoint", "read_sidecar",
           "seal_checkpoint", "sha256", "sidecar_digest", "write_checkpoint"]

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
        CheckpointError: a ``model`` sidecar that is not sealed or does not match its checksum.
    """
    avoid = {task_uri} if isinstance(task_uri, str) else set(task_uri)
    best: tuple[int, str] | None = None
    seen = []
    for sidecar in sorted(directory.glob("*.json")):
        doc = read_sidecar(sidecar, verify=False)
        if doc.get("model") != model:
            continue
        _check_sidecar(doc, sidecar)  # its train_tasks decide what it may tune
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
        CheckpointError: its sidecar is not sealed or does not match its checksum.
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
        trained_on = read_sidecar(sidecar).get("metadata", {}).get("train_tasks", ())
        if task_uri in trained_on:
            import warnings

            warnings.warn(f"{kind} checkpoint {path.name} was trained on {task_uri}: results on it are not "
                          "transfer results", stacklevel=3)
    return path


#: The module of each checkpointed model class (a sidecar's ``"model"``), imported on first load.
MODEL_MODULES = {"TLPModel": "agents.models.tlp", "OneShotModel": "agents.models.oneshot",
                 "MetaTuneModel": "agents.models.metatune"}


@functools.lru_cache(maxsize=12)
def cached_model(model: str, path: str) -> Any:
    """``model.load(path)`` (``model`` a key of :data:`MODEL_MODULES`), kept for later calls: an
    agent resets once per task, and a suite tunes many tasks with the same checkpoint. Callers
    share the object, so one that changes its model (fine-tuning) works on a copy."""
    return getattr(importlib.import_module(MODEL_MODULES[model]), model).load(path)


def sha256(path: str) -> str:
    """SHA-256 of a checkpoint file, for run provenance."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


#: Version of the sidecar layout shared by every checkpoint.
CHECKPOINT_FORMAT = 1

#: How to seal (or re-seal) a checkpoint one trusts, for the error messages.
RESEAL = "python scripts/seal_checkpoints.py"

_DIGEST = re.compile(r"[0-9a-f]{64}")


class CheckpointError(ValueError):
    """A checkpoint that must not be loaded (or saved): unreadable, unsealed, changed since it was
    sealed, or holding non-finite weights. The message is one line naming the file."""


class Restorable(Protocol):
    """What :func:`load_model` fills in: a torch module ``net`` and the sidecar's ``metadata``."""

    metadata: dict[str, Any]

    @property
    def net(self) -> torch.nn.Module: ...


M = TypeVar("M", bound=Restorable)


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


def _canonical(doc: dict[str, Any]) -> bytes:
    """The sidecar's content as checksummed: compact JSON with sorted keys, without ``checksums``."""
    body = {k: v for k, v in doc.items() if k != "checksums"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sidecar_digest(doc: dict[str, Any]) -> str:
    """SHA-256 of a sidecar document's canonical JSON (every field except ``checksums``)."""
    return hashlib.sha256(_canonical(doc)).hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _sidecar_text(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def check_finite(state: dict[str, Any], where: str) -> None:
    """Raise :class:`CheckpointError` when a floating tensor of ``state`` holds NaN or inf
    (``where`` starts the message: the file, or what was refused)."""
    import torch

    for name, tensor in state.items():
        if (tensor.is_floating_point() or tensor.is_complex()) and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise CheckpointError(f"{where}: tensor {name!r} holds {bad} non-finite value(s) (NaN or inf) of "
                                  f"{tensor.numel()}; the training diverged: retrain the model")


def read_sidecar(sidecar: str | os.PathLike[str], verify: bool = True) -> dict[str, Any]:
    """A checkpoint's sidecar document; with ``verify``, only a sealed one whose content matches
    its ``checksums.sidecar`` (the weights are checked by :func:`read_checkpoint`).

    Raises:
        CheckpointError: not a JSON object, or (``verify``) unsealed or changed since it was sealed.
    """
    sidecar = Path(sidecar)
    try:
        doc = json.loads(sidecar.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise CheckpointError(f"sidecar {sidecar} is not UTF-8 text ({err.reason} at byte {err.start}); "
                              "restore it from git or retrain") from None
    except json.JSONDecodeError as err:
        raise CheckpointError(f"sidecar {sidecar} is not valid JSON (line {err.lineno}, column {err.colno}: "
                              f"{err.msg}); restore it from git or retrain") from None
    if not isinstance(doc, dict):
        raise CheckpointError(f"sidecar {sidecar} must hold a JSON object, not {type(doc).__name__}; "
                              "restore it from git or retrain")
    if verify:
        _check_sidecar(doc, sidecar)
    return doc


def _check_sidecar(doc: dict[str, Any], sidecar: Path) -> None:
    """Raise unless ``doc`` carries well-formed checksums and its content matches ``checksums.sidecar``."""
    sums = doc.get("checksums")
    reseal = f"`{RESEAL} {sidecar.with_suffix('.pt')}`"
    if sums is None:
        raise CheckpointError(f"sidecar {sidecar} carries no checksums of its weights and content; if you trust "
                              f"{sidecar.with_suffix('.pt').name} and {sidecar.name}, seal them with {reseal}, "
                              "else retrain")
    if (not isinstance(sums, dict) or set(sums) != {"weights", "sidecar"}
            or not all(isinstance(v, str) and _DIGEST.fullmatch(v) for v in sums.values())):
        raise CheckpointError(f"sidecar {sidecar}: field 'checksums' must be {{\"weights\": SHA-256, \"sidecar\": "
                              f"SHA-256}} (64 lowercase hex digits each), got {json.dumps(sums)[:120]}; restore it "
                              f"from git, or re-seal a checkpoint you trust with {reseal}")
    if sums["sidecar"] != sidecar_digest(doc):
        raise CheckpointError(f"sidecar {sidecar} does not match its checksum (edited or corrupted since it was "
                              f"sealed); restore it from git or retrain (re-seal with {reseal} only a file you "
                              "trust)")


def _check_format(doc: dict[str, Any], sidecar: Path, model: str | None) -> None:
    fmt = doc.get("format")
    if isinstance(fmt, bool) or fmt != CHECKPOINT_FORMAT or (model is not None and doc.get("model") != model):
        what = f"a {model} checkpoint" if model is not None else "a checkpoint"
        raise CheckpointError(f"{sidecar} is not {what} of format {CHECKPOINT_FORMAT} "
                              f"(format {doc.get('format')!r}, model {doc.get('model')!r})")
    for field in ("config", "metadata"):
        if not isinstance(doc.get(field, {}), dict):
            raise CheckpointError(f"sidecar {sidecar}: field {field!r} must be a JSON object, "
                                  f"not {type(doc[field]).__name__}")


def _load_state(data: bytes, path: Path) -> dict[str, Any]:
    """The state dict in ``data`` (the bytes of ``path``): tensors only, every one finite."""
    import torch

    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises RuntimeError, UnpicklingError, EOFError, ... on a broken file
        raise CheckpointError(f"weights {path} cannot be read as a state dict ({type(err).__name__}: "
                              f"{_one_line(err)[:200]}); restore it from git or retrain") from None
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in state.items()):
        raise CheckpointError(f"weights {path} are not a state dict (names to tensors) but a "
                              f"{type(state).__name__}; restore it from git or retrain")
    check_finite(state, f"weights {path}")
    return state


def write_checkpoint(path: str | os.PathLike[str], state_dict: dict[str, Any], model: str, config: dict[str, Any],
                     metadata: dict[str, Any], **extra: Any) -> Path:
    """Write ``state_dict`` to ``path`` (``torch.save``) and the sealed sidecar ``path`` with suffix
    ``.json``: format, ``model`` (the class name), weights file, ``config`` (the constructor's
    arguments), ``metadata``, any ``extra`` JSON fields and ``checksums``. Returns the sidecar's path.

    Raises:
        CheckpointError: a tensor of ``state_dict`` holds NaN or inf (nothing is written).
    """
    import torch

    path = Path(path)
    check_finite(state_dict, f"refusing to save {path}")
    buffer = io.BytesIO()
    torch.save(state_dict, buffer)
    weights = buffer.getvalue()
    doc = {"format": CHECKPOINT_FORMAT, "model": model, "weights": path.name, "config": config, **extra,
           "metadata": metadata}
    doc = json.loads(json.dumps(doc))  # as it will read back (tuples as lists, keys as strings)
    doc["checksums"] = {"weights": hashlib.sha256(weights).hexdigest(), "sidecar": sidecar_digest(doc)}
    path.parent.mkdir(parents=True, exist_ok=True)
    sidecar = path.with_suffix(".json")
    _write_atomic(path, weights)
    _write_atomic(sidecar, _sidecar_text(doc).encode())
    return sidecar


def seal_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Write into the sidecar of the checkpoint at ``path`` the checksums of its weights and its
    content as they are now; returns the sealed document. Seal only files you trust: sealing
    vouches for whatever they hold.

    Raises:
        CheckpointError: no sidecar, one that is not a checkpoint's, or weights that do not read
            as a finite state dict (nothing is written).
    """
    path = Path(path)
    sidecar, doc = _open_sidecar(path, None)
    weights = _read_weights(path)
    _load_state(weights, path)
    doc.pop("checksums", None)
    doc["checksums"] = {"weights": hashlib.sha256(weights).hexdigest(), "sidecar": sidecar_digest(doc)}
    _write_atomic(sidecar, _sidecar_text(doc).encode())
    return doc


def _open_sidecar(path: Path, model: str | None) -> tuple[Path, dict[str, Any]]:
    """``(sidecar path, its document)`` of the checkpoint ``path``, of format and (if given) model
    checked, its checksums not yet."""
    sidecar = path.with_suffix(".json")
    if not sidecar.exists():
        raise CheckpointError(f"checkpoint {path} has no sidecar {sidecar.name} (its config)")
    doc = read_sidecar(sidecar, verify=False)
    _check_format(doc, sidecar, model)
    return sidecar, doc


def _read_weights(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise CheckpointError(f"weights {path} cannot be read ({err.strerror}); restore it from git or "
                              "retrain") from None


def read_checkpoint(path: str | os.PathLike[str], model: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The sidecar document and the state dict of a sealed ``model`` checkpoint; only tensors are
    read (``torch.load(weights_only=True)``), never pickled objects, and only from the bytes
    whose checksum was checked.

    Raises:
        CheckpointError: a missing sidecar, one of another format or model, one not sealed or
            changed since, weights that do not match their checksum, or weights holding NaN or inf.
    """
    path = Path(path)
    sidecar, doc = _open_sidecar(path, model)
    _check_sidecar(doc, sidecar)
    weights = _read_weights(path)
    if hashlib.sha256(weights).hexdigest() != doc["checksums"]["weights"]:
        raise CheckpointError(f"weights {path} do not match the SHA-256 in {sidecar.name} (corrupted or "
                              "replaced since it was sealed); restore it from git or retrain")
    return doc, _load_state(weights, path)


def load_model(path: str | os.PathLike[str], cls: type[M], build: Callable[[dict[str, Any]], M] | None = None) -> M:
    """A ``cls`` model from the sealed checkpoint at ``path`` (:func:`read_checkpoint`): built by
    ``build(sidecar document)`` (default ``cls(**config)``), its ``net`` given the weights and put
    in eval mode, its ``metadata`` the sidecar's.

    Raises:
        CheckpointError: what :func:`read_checkpoint` refuses, a config that does not build a
            ``cls``, or weights that do not fit it.
    """
    doc, state = read_checkpoint(path, cls.__name__)
    sidecar = Path(path).with_suffix(".json")
    try:
        model = build(doc) if build is not None else cls(**doc.get("config", {}))
    except (TypeError, ValueError, KeyError) as err:
        raise CheckpointError(f"sidecar {sidecar}: its config does not build a {cls.__name__} "
                              f"({_one_line(err)[:300]}); retrain") from None
    try:
        model.net.load_state_dict(state)
    except RuntimeError as err:
        raise CheckpointError(f"weights {path} do not fit the config of {sidecar.name}: "
                              f"{_one_line(err)[:300]}; retrain") from None
    model.net.eval()
    model.metadata = dict(doc.get("metadata", {}))
    return model
