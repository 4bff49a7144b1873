"""Parquet files with a JSON footer: the code measurement datasets and validity label files share.

Both kinds (:mod:`tune_gym.datasets.dataset`, :mod:`tune_gym.datasets.validity`) are one
Arrow table written with zstd, whose metadata is a JSON object under one schema-metadata key
(``tune_gym``, ``tune_gym_validity``). This module reads and writes them:

* :func:`arrow` imports pyarrow;
* :func:`read_footer` reads a file's metadata without its rows, with a one-line error for a
  missing or unreadable file, a missing key, or a footer that is not UTF-8 JSON or not a JSON
  object; :func:`check_schema` checks its layout version;
* :func:`read_rows` reads the rows (or only the named columns) and checks that the named
  columns are there;
* :func:`rows_checksum` is the SHA-256 of the rows in a canonical text form: each column's
  name and values as JSON, in column order, a dictionary-encoded column hashed as its values
  (so the encoding does not change the checksum);
* :func:`seal_of` is the SHA-256 of the rows checksum together with chosen metadata fields
  (canonical JSON), so the metadata that changes numbers cannot be edited unseen either;
* :func:`config_array` reads a ``config`` column as an ``n x n_knobs`` integer array and
  checks each index against the knob space's choice counts;
* :func:`write_table` writes a table with its footer atomically (a temp file, fsynced, then
  renamed); :func:`fsync` flushes a file, or a folder's entries, to disk.

Every function raises the error class it is given (a :class:`DatasetError
<tune_gym.datasets.dataset.DatasetError>` or a subclass), with a message naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from tune_gym.errors import TuneGymError

__all__ = ["arrow", "check_schema", "config_array", "fsync", "read_footer", "read_rows", "rows_checksum",
           "seal_of", "write_table"]

Error = type[TuneGymError]


def arrow(error: Error) -> tuple[Any, Any]:
    """``(pyarrow, pyarrow.parquet)``; ``error`` when pyarrow is not installed."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as err:  # pragma: no cover - a declared dependency
        raise error("Parquet files need pyarrow: pip install pyarrow") from err
    return pa, pq


def read_footer(path: str | os.PathLike[str], key: bytes, what: str, error: Error, other: str = "") -> dict[str, Any]:
    """The JSON object stored under ``key`` in the file's schema metadata (reads no rows).

    Args:
        path: the Parquet file.
        key: its metadata key (``b"tune_gym"``, ``b"tune_gym_validity"``).
        what: what the file should be, for messages (``"dataset"``).
        error: the exception class to raise.
        other: appended to the message for a Parquet file without ``key`` (what else it may be).
    """
    _, pq = arrow(error)
    path = Path(path)
    if not path.exists():
        raise error(f"{what} {path} does not exist")
    try:
        raw = (pq.read_schema(path).metadata or {}).get(key)
    except Exception as err:
        raise error(f"{what} {path} is not a readable Parquet file ({type(err).__name__}: {_line(err)})") from None
    if raw is None:
        raise error(f"{what} {path} is a Parquet file without {key.decode()!r} metadata: not a {what}{other}")
    try:
        footer = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise error(f"{what} {path}: its {key.decode()!r} metadata is not UTF-8 JSON ({_line(err)})") from None
    if not isinstance(footer, dict):
        raise error(f"{what} {path}: its {key.decode()!r} metadata is a JSON {type(footer).__name__}, "
                    "not an object")
    return footer


def check_schema(footer: dict[str, Any], version: int, path: str | os.PathLike[str], what: str, error: Error,
                 hint: str) -> None:
    """Refuse a footer whose ``schema`` is not ``version`` (``hint``: what to do instead)."""
    got = footer.get("schema")
    if got != version or isinstance(got, bool):
        raise error(f"{what} {path} has schema version {got!r}; this tune_gym reads version {version}. {hint}")


def read_rows(path: str | os.PathLike[str], columns: Iterable[str], what: str, error: Error,
              only: bool = False) -> Any:
    """The file's rows as a ``pyarrow.Table``; ``error`` when unreadable or a column is missing.
    ``only``: read just ``columns`` (a columnar file reads no other column's bytes)."""
    _, pq = arrow(error)
    columns = list(columns)
    try:
        names = pq.read_schema(path).names if only else None
        table = pq.read_table(path, columns=[c for c in columns if c in names] if names is not None else None)
    except Exception as err:
        raise error(f"{what} {path} is not a readable Parquet file ({type(err).__name__}: {_line(err)})") from None
    have = names if names is not None else table.column_names
    missing = [c for c in columns if c not in have]
    if missing:
        raise error(f"{what} {path} lacks the column(s) {', '.join(missing)} (it has {', '.join(have)})")
    return table


def rows_checksum(table: Any) -> str:
    """SHA-256 of the rows: every column's name and values (JSON), in column order; a
    dictionary-encoded column counts as its values. The schema metadata is not part of it."""
    h = hashlib.sha256()
    for name in table.column_names:
        col = table.column(name)
        if str(col.type).startswith("dictionary"):
            col = col.cast(col.type.value_type)
        h.update(name.encode())
        h.update(json.dumps(col.to_pylist(), allow_nan=True).encode())
    return h.hexdigest()


def seal_of(footer: dict[str, Any], fields: Iterable[str]) -> str:
    """SHA-256 of the footer's rows ``checksum`` and its ``fields`` (a missing one counts as
    ``null``), as canonical JSON (sorted keys, no spaces)."""
    body = {"checksum": footer.get("checksum"), **{f: footer.get(f) for f in fields}}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def config_array(table: Any, dims: np.ndarray, names: list[str], where: str, error: Error) -> np.ndarray:
    """The ``config`` column as an ``n x len(dims)`` int32 array, each index checked.

    Args:
        table: the rows (a ``config`` column of integer lists).
        dims: the choice count of each knob (:attr:`KnobSpace.dims`).
        names: the knob names, for messages.
        where: the file, for messages.
        error: the exception class to raise.

    Raises:
        error: the column is not a list of integers, a row is missing or has another number of
            knobs, or ``row i: knob 'name': index v out of range [0, d]`` for the first bad index.
    """
    pa, _ = arrow(error)
    col = table.column("config").combine_chunks()
    n, k = table.num_rows, len(dims)
    if not (pa.types.is_list(col.type) or pa.types.is_fixed_size_list(col.type)) \
            or not pa.types.is_integer(col.type.value_type):
        raise error(f"{where}: column config holds {col.type}, not lists of integer knob indices")
    if col.null_count:
        raise error(f"{where}: row {_first(col.is_null())}: config is missing")
    lengths = np.full(n, col.type.list_size) if pa.types.is_fixed_size_list(col.type) \
        else np.diff(np.asarray(col.offsets)) if n else np.zeros(0, dtype=np.int64)
    if (lengths != k).any():
        row = int(np.flatnonzero(lengths != k)[0])
        raise error(f"{where}: row {row}: config of {int(lengths[row])} knobs; the space has {k} ({', '.join(names)})")
    flat = col.flatten()
    if flat.null_count:
        raise error(f"{where}: row {_first(flat.is_null()) // max(k, 1)}: config has a missing knob index")
    configs = np.asarray(flat.to_numpy(zero_copy_only=False), dtype=np.int64).reshape(n, k)
    bad = (configs < 0) | (configs >= dims)
    if bad.any():
        row, knob = (int(i) for i in np.argwhere(bad)[0])
        raise error(f"{where}: row {row}: knob {names[knob]!r}: index {int(configs[row, knob])} out of range "
                    f"[0, {int(dims[knob]) - 1}]")
    return configs.astype(np.int32)


def write_table(table: Any, key: bytes, footer: dict[str, Any], path: str | os.PathLike[str], error: Error) -> Path:
    """Write ``table`` with ``footer`` (JSON, sorted keys) under ``key``, zstd, atomically: to a
    temp file beside ``path`` (``NAME.tmp``), flushed to disk, renamed over ``path``, and the
    rename flushed too (the folder), so a crash leaves the old file or the new one, never a part."""
    _, pq = arrow(error)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = table.replace_schema_metadata({key: json.dumps(footer, sort_keys=True).encode()})
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp, compression="zstd", compression_level=9)
    fsync(tmp)
    os.replace(tmp, path)
    fsync(path.parent)
    return path


def fsync(path: str | os.PathLike[str]) -> None:
    """Flush a file's (or a folder's entries') data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _first(mask: Any) -> int:
    """Index of the first true value of a pyarrow boolean array."""
    return int(np.flatnonzero(np.asarray(mask.to_numpy(zero_copy_only=False)))[0])


def _line(err: BaseException) -> str:
    """An exception's message on one line (at most 200 characters)."""
    text = " ".join(str(err).split())
    return text[:200] + ("..." if len(text) > 200 else "")
