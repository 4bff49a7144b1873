"""Where Kernel Tuner's files are found: the search path, and what each file on it holds.

The files are located, never copied. The search path (:func:`data_dirs`) is the directories of
``TUNE_GYM_DATA`` (``os.pathsep``-separated), then those :func:`add_data_dir` added in this
process. Each is searched down to :data:`MAX_DEPTH` levels (hidden folders skipped) for
``*.json`` and ``*.json.gz`` files, and each such file is known by the SHA-256 of its bytes
(the compressed bytes of a ``.gz``), so a task names its data by content, not by path.

What a file is comes from its first :data:`HEAD_BYTES` (decompressed), read as the start of a
JSON object, key by key (nothing is evaluated):

* a **Kernel Tuner cache** when ``tune_params_keys`` comes before ``cache`` (Kernel Tuner
  writes that header first); its ``kernel_name``, ``device_name`` and ``problem_size`` are
  read from the header;
* a **T1 problem** when the object (a small file, read whole) holds ``ConfigurationSpace`` and
  ``KernelSpecification``; its kernel name, problem size and ``General.BenchmarkName``;
* **T4 results** when ``results`` comes first among those keys;
* anything else is some other JSON: it is listed (so a task naming its digest gets a clear
  error) but used for nothing.

Which files pair up: a cache and a T1 problem with the same kernel name (and the same problem
size where both state one), see :func:`pairs`. The files themselves are read and checked by
:mod:`tune_gym.external.kernel_tuner_io` when a task needs them.

A scan is cheap: directories are walked each time, and a file is hashed and classified again
only when its size or modification time changed. Files of tasks made from paths
(:func:`register`, which :func:`tune_gym.external.task.kt_task` calls) are found before the
search path, in this process only.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tune_gym.errors import TaskError

__all__ = ["DOI", "HEAD_BYTES", "MAX_DEPTH", "FileInfo", "add_data_dir", "data_dirs", "file_info", "find", "label",
           "missing", "pairs", "register", "scan"]

#: Where the FAIR Benchmark Hub's brute-forced Kernel Tuner spaces can be downloaded.
DOI = "10.5281/zenodo.15364124"
#: How deep below a search directory files are looked for.
MAX_DEPTH = 4
#: How much of a file (decompressed) its kind is read from (a whole T1 problem must fit).
HEAD_BYTES = 1 << 20
_LABEL = re.compile(r"[A-Za-z0-9_.-]{1,64}", re.ASCII)

_lock = threading.RLock()
_added: list[Path] = []
_infos: dict[tuple[str, int, int], FileInfo] = {}  # (path, size, mtime_ns) -> what the file is
_registered: dict[str, FileInfo] = {}  # 16-hex digest -> a file given by path in this process


@dataclass(frozen=True)
class FileInfo:
    """One ``.json`` / ``.json.gz`` file and what it holds.

    Attributes:
        path: where it is.
        sha256: the SHA-256 of its bytes (a URI's ``digest`` / ``spec`` are its first 16 digits).
        format: ``"cache"`` (Kernel Tuner's cache), ``"t1"`` (a T1 problem), ``"t4"`` (T4
            results) or ``""`` (not a Kernel Tuner file; ``note`` says why).
        kernel: the kernel name it states (``kernel_name``, T1 ``KernelSpecification.KernelName``).
        device: a cache's ``device_name`` (may be empty).
        problem_size: the problem size it states, if any.
        name: a T1 problem's ``General.BenchmarkName`` (else its file stem).
        note: why a file is not a Kernel Tuner file.
    """

    path: Path
    sha256: str
    format: str
    kernel: str = ""
    device: str = ""
    problem_size: tuple[Any, ...] | None = None
    name: str = ""
    note: str = ""

    @property
    def digest(self) -> str:
        """The first 16 hex digits of :attr:`sha256`, as URIs name the file."""
        return self.sha256[:16]

    @property
    def stem(self) -> str:
        """The file name without ``.json`` / ``.json.gz``."""
        name = self.path.name
        return name[: -len(".json.gz")] if name.endswith(".json.gz") else name.removesuffix(".json")


# ---------------------------------------------------------------------------------- the search path
def data_dirs() -> list[Path]:
    """The search path, in order: ``TUNE_GYM_DATA``'s directories, then those added with
    :func:`add_data_dir` (each once)."""
    env = [Path(p) for p in os.environ.get("TUNE_GYM_DATA", "").split(os.pathsep) if p]
    with _lock:
        return list(dict.fromkeys([*env, *_added]))


def add_data_dir(path: str | os.PathLike[str]) -> Path:
    """Add a directory of Kernel Tuner files to the search path of this process (worker
    processes see ``TUNE_GYM_DATA`` only); :class:`TaskError` when it is not a directory."""
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise TaskError(f"Kernel Tuner data directory {directory} is not a directory")
    directory = directory.resolve()
    with _lock:
        if directory not in _added:
            _added.append(directory)
    from tune_gym.tasks.suites import clear_kind_suites

    clear_kind_suites()  # the external suite lists what the search path holds
    return directory


def register(info: FileInfo) -> None:
    """Make ``info``'s file findable by its digest in this process (a file given by path)."""
    with _lock:
        _registered.setdefault(info.digest, info)


# ---------------------------------------------------------------------------------- scanning
def _candidates(root: Path) -> Iterator[Path]:
    """``*.json`` and ``*.json.gz`` files below ``root``, at most :data:`MAX_DEPTH` deep, sorted."""
    if not root.is_dir():
        return
    base = len(root.parts)
    for folder, subdirs, files in os.walk(root):
        depth = len(Path(folder).parts) - base
        subdirs[:] = sorted(d for d in subdirs if not d.startswith(".")) if depth < MAX_DEPTH else []
        for name in sorted(files):
            if name.endswith((".json", ".json.gz")) and not name.startswith("."):
                yield Path(folder) / name


def scan(dirs: list[Path] | None = None) -> list[FileInfo]:
    """Every ``.json`` / ``.json.gz`` file of ``dirs`` (default :func:`data_dirs`), in search order."""
    out = []
    for root in dirs if dirs is not None else data_dirs():
        for path in _candidates(root):
            try:
                out.append(file_info(path))
            except OSError:
                continue  # vanished or unreadable while scanning: not there
    return out


def file_info(path: Path) -> FileInfo:
    """What ``path`` holds (cached while its size and modification time stay the same)."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _lock:
        found = _infos.get(key)
    if found is None:
        found = _classify(path, path.read_bytes())
        with _lock:
            _infos[key] = found
    return found


def _classify(path: Path, raw: bytes) -> FileInfo:
    sha = hashlib.sha256(raw).hexdigest()
    try:
        head = _head(raw)
    except (OSError, EOFError, zlib.error) as err:
        return FileInfo(path, sha, "", note=f"not a readable gzip stream ({err})")
    keys = _top_level(head, stop=("cache", "results"))
    if keys is None:
        return FileInfo(path, sha, "", note="does not start as a JSON object")
    if "tune_params_keys" in keys and keys.get("cache") is _STOPPED:
        return FileInfo(path, sha, "cache", kernel=_text(keys.get("kernel_name")),
                        device=_text(keys.get("device_name")), problem_size=_size(keys.get("problem_size")))
    if keys.get("results") is _STOPPED:
        return FileInfo(path, sha, "t4")
    spec, general = keys.get("KernelSpecification"), keys.get("General")
    if "ConfigurationSpace" in keys and isinstance(spec, dict):
        name = _text(general.get("BenchmarkName")) if isinstance(general, dict) else ""
        return FileInfo(path, sha, "t1", kernel=_text(spec.get("KernelName")),
                        problem_size=_size(spec.get("ProblemSize")), name=name or FileInfo(path, sha, "").stem)
    return FileInfo(path, sha, "", note="not a Kernel Tuner cache, T1 problem or T4 results file (or its header "
                                        f"is not within the first {HEAD_BYTES} bytes)")


def _head(raw: bytes) -> str:
    """The first :data:`HEAD_BYTES` of the file's text (decompressed), for classifying it only
    (undecodable bytes are dropped; the readers check the whole file)."""
    if raw[:2] == b"\x1f\x8b":
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as fh:
            raw = fh.read(HEAD_BYTES)
    return raw[:HEAD_BYTES].decode("utf-8", errors="ignore")


_STOPPED = object()  # the value of a stop key: its value was not read
_DECODER = json.JSONDecoder()
_WS = re.compile(r"\s*")


def _top_level(text: str, stop: tuple[str, ...]) -> dict[str, Any] | None:
    """The top-level keys of the JSON object ``text`` starts with, each with its value, up to
    the first key in ``stop`` (whose value is :data:`_STOPPED`) or the end of what parses;
    ``None`` when ``text`` does not start with an object."""
    pos = _WS.match(text, 0).end()  # type: ignore[union-attr]
    if text[pos:pos + 1] != "{":
        return None
    pos += 1
    out: dict[str, Any] = {}
    while True:
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
        if text[pos:pos + 1] != '"':
            return out  # the end of the object, or of the head
        try:
            key, pos = _DECODER.raw_decode(text, pos)
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
            if text[pos:pos + 1] != ":":
                return out
            if key in stop:
                out[key] = _STOPPED
                return out
            value, pos = _DECODER.raw_decode(text, _WS.match(text, pos + 1).end())  # type: ignore[union-attr]
        except (json.JSONDecodeError, RecursionError):
            return out  # the head ends inside this value
        out[key] = value
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
        if text[pos:pos + 1] != ",":
            return out
        pos += 1


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _size(value: Any) -> tuple[Any, ...] | None:
    """A stated problem size as a (hashable) tuple, ``None`` when there is none."""
    if value is None or isinstance(value, dict):
        return None
    frozen = _frozen(value)
    return frozen if isinstance(frozen, tuple) else (frozen,)


def _frozen(value: Any) -> Any:
    """JSON lists as tuples (objects as their sorted items), so a value can be hashed."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


# ---------------------------------------------------------------------------------- lookups
def find(digest: str) -> FileInfo | None:
    """The file with this 16-hex-digit digest: one given by path in this process, else the first
    on the search path (``None``: none)."""
    with _lock:
        if digest in _registered:
            return _registered[digest]
    return next((info for info in scan() if info.digest == digest), None)


def pairs(infos: list[FileInfo] | None = None) -> list[tuple[FileInfo, FileInfo]]:
    """``(measurement file, T1 problem)`` for every Kernel Tuner cache and every T1 problem of the
    same kernel (and problem size, where both state one) among ``infos`` (default: the search
    path), in search order; a file found twice (the same content) counts once."""
    infos = scan() if infos is None else infos
    problems = list({i.sha256: i for i in infos if i.format == "t1"}.values())
    caches = list({i.sha256: i for i in infos if i.format == "cache"}.values())
    return [(cache, problem) for cache in caches for problem in problems
            if cache.kernel == problem.kernel and (cache.problem_size is None or problem.problem_size is None
                                                   or cache.problem_size == problem.problem_size)]


def label(text: str, fallback: str) -> str:
    """``text`` as a URI label: characters other than ``A-Z a-z 0-9 _ . -`` become ``_``, at most 64
    (``fallback`` when nothing is left)."""
    out = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:64]
    return out if _LABEL.fullmatch(out) else fallback


def missing(what: str, digest: str) -> TaskError:
    """The error of a file that is nowhere to be found, naming where it was looked for."""
    dirs = ", ".join(map(str, data_dirs())) or "(none: TUNE_GYM_DATA is not set)"
    return TaskError(f"{what}: no file with sha256 digest {digest} in {dirs} (searched down to {MAX_DEPTH} levels; "
                     f"add the directory holding it to TUNE_GYM_DATA or call tune_gym.external.add_data_dir; the "
                     f"FAIR Benchmark Hub's files are at https://doi.org/{DOI})")
