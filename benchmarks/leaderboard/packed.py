"""Packed results: a results file's runs as Parquet tables, one row per run, lossless.

A results file (:mod:`.results`) in JSON Lines form holds every trial of every run as JSON
text, tens of kilobytes a run; packed, the same runs take about a tenth of that or less, and read
back as exactly the objects the lines held: the same fields in the same order, the same
types, every float bit for bit (NaN and infinities included). The file follows the layout of
the measurement datasets (:mod:`tune_gym.datasets.parquet_io`): one Arrow table, zstd, and a
JSON footer under the schema-metadata key ``tune_gym_results`` with the layout version
(``schema``), the row count, the rows ``checksum`` and a ``seal`` over both and the lines
that are not runs.

Columns (a field a run line lacks is null; :data:`COLUMNS` in file order):

==============================  ==============================================================
``fields``                      the line's field names in their order (JSON)
``key``                         the run's key
``spec_agent`` ... ``spec_batch``  the spec's fields; ``spec_options`` as JSON
``task_uri``, ``space_size``,   the run's scalars, as the line has them
``flops``, ``reference_gflops``,
``best_gflops``, ``agent_secs``,
``wall_secs``, ``host``,
``time``, ``ended``,
``not_applicable``
``data``, ``agent_info``        JSON objects, as JSON text
``configs``                     per trial, the config's knob indices (``list<list<int32>>``)
``gflops``                      per trial, the throughput
``errors``                      per trial, the error kind or null (dictionary-encoded)
``clock``                       per trial, the step of the simulated clock: ``clock[0]``, then
                                ``clock[i] - clock[i-1]``; :func:`numpy.cumsum` adds them back
                                to the clock bit for bit (a clock they do not give back
                                exactly is kept verbatim instead)
``verbatim``                    a JSON object of the fields no column above holds exactly
                                (a field of another type, or one the runner does not write)
==============================  ==============================================================

Strings that repeat (agents, tasks, hosts, the data identity, ``agent_info``) are
dictionary-encoded; the clock's steps and the GFLOPS repeat per config and compress well.
:func:`encode` checks its own work: it decodes every row it encoded and compares it with the
run as JSON text (:func:`line_text`); a row that differs is kept whole in ``verbatim``, so
packing never changes a run. The footer keeps the results file's header and ``suite_update``
lines as their JSON text (key order included) and where each update stood among the runs.

**Segments.** Results grow a session at a time, and the first packed file ``X.parquet`` is
never rewritten to add runs: each pack writes only the runs it moves, as the next **segment**,
``X.parquet.d/0001.parquet``, ``0002.parquet``, ... (:func:`segment_path`). So a commit after
a session adds only that session's runs to the history, and a pack reads only the earlier
files' footers and ``key`` column. A folder beside the first file, not more ``X.N.parquet``
files beside it, because results are named by their ``.parquet`` file: a ``*.parquet`` glob
over the results folder still finds each results once, ``X.parquet.d/*.parquet`` finds a
results' segments, and their numbers (zero-padded, so they also sort by name) give the order.
A segment is a packed file like the first (same columns and encoder; its footer has the
results' header and its own rows checksum, suite updates and seal) whose footer also links it
into a chain (``segment``, covered by its seal): its ``index``, the ``first_line`` it holds
(its first line's number in the results as one JSON Lines file) and the ``previous`` file's
seal. :func:`read_parts` reads the first file and its segments in order and checks every link,
so a segment that is missing before another, renamed, reordered, replaced or copied from other
results is an error naming it (a missing *last* segment looks like one never written: the
repository's history shows it).

**Compaction** (:func:`merge_segments`, for a release) writes every row as one new first file
and then removes the segment files. The new file's footer lists the seals of the segments it
holds (``merged``); a reader skips those, so a compaction killed before it removed them loses
and repeats nothing, and the next pack or compaction removes them (:func:`drop_merged`). A
reader lists the segments before it reads the first file and reads again if one vanishes
meanwhile, so a compaction finishing under it does not hide a run either.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from tune_gym.datasets import parquet_io
from tune_gym.errors import TuneGymError

__all__ = ["COLUMNS", "META_KEY", "PACKED_SCHEMA", "Packed", "PackedError", "concat", "decode", "drop_merged", "encode",
           "line_text", "merge_segments", "read_packed", "read_parts", "segment_path", "segment_paths", "segments_dir",
           "write_packed", "write_segment"]

#: Version of the packed layout; bump it when columns or the footer change meaning.
PACKED_SCHEMA = 1
#: Schema metadata key of the footer.
META_KEY = b"tune_gym_results"
#: The fields of a run's spec, in the order the runner writes them (:class:`.suite.RunSpec`).
SPEC_FIELDS = ("agent", "task", "preset", "backend", "seed", "budget", "batch", "options")
#: Runs encoded (and checked) at a time.
CHUNK = 256
#: The footer fields the seal covers with the rows checksum...
SEALED_FIELDS = ("schema", "rows", "header", "updates")
#: ... and those it covers when the footer has them (a segment's link, a compaction's merged segments).
OPTIONAL_SEALED_FIELDS = ("segment", "merged")
#: Digits of a segment's number in its file name (more when there are more segments).
SEGMENT_DIGITS = 4
_WHAT = "packed results"

# How each field of a run line is stored: its column and the kind of value that column holds
# exactly (``text``: a string; ``word``: a string that repeats, dictionary-encoded; ``json``:
# any value, as JSON text, dictionary-encoded). ``spec`` is spread over the ``spec_*`` columns;
# the trials' lists have their own codecs (:data:`_TRIAL_CODECS`); ``verbatim`` takes the rest.
_SCALARS = {"key": "text", "task_uri": "word", "space_size": "int", "flops": "int", "reference_gflops": "float",
            "data": "json", "best_gflops": "float", "agent_info": "json", "agent_secs": "float",
            "wall_secs": "float", "host": "word", "time": "float", "ended": "word", "not_applicable": "word"}
_SPEC = {"agent": "word", "task": "word", "preset": "word", "backend": "word", "seed": "int", "budget": "int",
         "batch": "int", "options": "json"}
_TRIALS = ("configs", "gflops", "errors", "clock")
#: The columns, in file order.
COLUMNS = ("fields", "key", *(f"spec_{f}" for f in SPEC_FIELDS), "task_uri", "space_size", "flops",
           "reference_gflops", "data", *_TRIALS, "best_gflops", "agent_info", "agent_secs", "wall_secs", "host",
           "time", "ended", "not_applicable", "verbatim")
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)


class PackedError(TuneGymError):
    """A packed results file that cannot be read or written."""


def line_text(obj: Any) -> str:
    """A run (or any line) as the JSON text the results journal holds for it."""
    return json.dumps(obj, allow_nan=True)


# ------------------------------------------------------------------------------------------ encoding


def _fits(kind: str, value: Any) -> bool:
    """Whether a column of ``kind`` holds ``value`` exactly (type and value)."""
    if kind in ("text", "word"):
        return type(value) is str and _utf8(value)
    if kind == "int":
        return type(value) is int and _INT64[0] <= value <= _INT64[1]
    if kind == "float":
        return type(value) is float
    return kind == "json"


def _utf8(text: str) -> bool:
    """False for a string Arrow cannot store (lone surrogates, which JSON escapes can carry)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _configs(value: Any) -> list[list[int]] | None:
    """``value`` if it is a list of lists of int32 knob indices, else None."""
    if type(value) is not list or not _only(value, list):
        return None
    flat = list(itertools.chain.from_iterable(value))
    if not _only(flat, int) or (flat and not _INT32[0] <= min(flat) <= max(flat) <= _INT32[1]):
        return None
    return value


def _only(values: list[Any], *kinds: type) -> bool:
    """Every item of ``values`` is of exactly one of ``kinds`` (not a subclass: a bool is no int)."""
    return set(map(type, values)) <= set(kinds)


def _floats(value: Any) -> list[float] | None:
    return value if type(value) is list and _only(value, float) else None


def _errors(value: Any) -> list[str | None] | None:
    ok = type(value) is list and _only(value, str, type(None)) and all(_utf8(x) for x in value if x is not None)
    return value if ok else None


def _clock_steps(value: Any) -> list[float] | None:
    """The clock's steps (see the module docstring), or None when they do not add back to it bit for bit."""
    if _floats(value) is None:
        return None
    clock = np.asarray(value, dtype=np.float64)
    steps = clock.copy()
    steps[1:] = clock[1:] - clock[:-1]
    return steps.tolist() if np.array_equal(np.cumsum(steps).view(np.int64), clock.view(np.int64)) else None


_TRIAL_CODECS = {"configs": _configs, "gflops": _floats, "errors": _errors, "clock": _clock_steps}


def _split(run: dict[str, Any]) -> dict[str, Any]:
    """One run line as column values (see the module docstring): ``{column: value}``."""
    row: dict[str, Any] = {"fields": json.dumps(list(run)), "verbatim": {}}
    for name, value in run.items():
        if name in _SCALARS and _fits(_SCALARS[name], value):
            row[name] = json.dumps(value) if _SCALARS[name] == "json" else value
        elif name == "spec" and type(value) is dict and tuple(value) == SPEC_FIELDS \
                and all(_fits(_SPEC[f], value[f]) for f in SPEC_FIELDS):
            row.update({f"spec_{f}": json.dumps(v) if _SPEC[f] == "json" else v for f, v in value.items()})
        elif name in _TRIAL_CODECS and (column := _TRIAL_CODECS[name](value)) is not None:
            row[name] = column
        else:
            row["verbatim"][name] = value
    row["verbatim"] = json.dumps(row["verbatim"], allow_nan=True) if row["verbatim"] else None
    return row


def _whole(run: dict[str, Any]) -> dict[str, Any]:
    """A run kept whole in ``verbatim`` (the row :func:`encode` falls back to)."""
    return {"fields": json.dumps(list(run)), "verbatim": json.dumps(run, allow_nan=True)}


def _schema() -> Any:
    pa, _ = parquet_io.arrow(PackedError)
    text, words = pa.string(), pa.dictionary(pa.int32(), pa.string())
    kinds = {"text": text, "word": words, "json": words, "int": pa.int64(), "float": pa.float64()}
    types = {"fields": words, "verbatim": text, **{n: kinds[k] for n, k in _SCALARS.items()},
             **{f"spec_{n}": kinds[k] for n, k in _SPEC.items()},
             "configs": pa.list_(pa.list_(pa.int32())), "gflops": pa.list_(pa.float64()),
             "errors": pa.list_(words), "clock": pa.list_(pa.float64())}
    return pa.schema([(name, types[name]) for name in COLUMNS])


def _table(rows: Sequence[dict[str, Any]]) -> Any:
    pa, _ = parquet_io.arrow(PackedError)
    schema = _schema()
    plain = {"errors": pa.list_(pa.string())}
    arrays = [pa.array([row.get(f.name) for row in rows], plain.get(f.name, _undictionary(pa, f.type))).cast(f.type)
              for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def _undictionary(pa: Any, kind: Any) -> Any:
    """The value type of a dictionary type (what a Python list converts to before the cast)."""
    return kind.value_type if pa.types.is_dictionary(kind) else kind


def encode(runs: Sequence[dict[str, Any]]) -> Any:
    """The rows of ``runs`` (run lines as JSON gives them) as a ``pyarrow.Table``.

    Every row is decoded again and compared with its run's JSON text (:func:`line_text`); a
    row that differs is stored whole in ``verbatim``, so :func:`decode` always gives back
    ``runs``. Runs go :data:`CHUNK` at a time, so the copies made to compare stay small.
    """
    pa, _ = parquet_io.arrow(PackedError)
    chunks = [_encode_chunk(runs[i:i + CHUNK]) for i in range(0, len(runs), CHUNK)]
    return pa.concat_tables(chunks) if chunks else _table([])


def _encode_chunk(runs: Sequence[dict[str, Any]]) -> Any:
    texts = [line_text(run) for run in runs]
    rows = [_split(run) for run in runs]
    table = _table(rows)
    wrong = [i for i, (text, back) in enumerate(zip(texts, decode(table))) if line_text(back) != text]
    if not wrong:
        return table
    for i in wrong:
        rows[i] = _whole(runs[i])
    table = _table(rows)
    for i in wrong:  # pragma: no cover - JSON text always decodes to itself
        if line_text(decode(table.slice(i, 1))[0]) != texts[i]:
            raise PackedError(f"run {runs[i].get('key')!r} does not pack losslessly")
    return table


def concat(tables: Sequence[Any]) -> Any:
    """The rows of packed tables, one after the other."""
    pa, _ = parquet_io.arrow(PackedError)
    schema = _schema()
    return pa.concat_tables([table.cast(schema) for table in tables])


# ------------------------------------------------------------------------------------------ decoding


def _lists(col: Any, dtype: Any) -> list[list[Any] | None]:
    """A ``list<number>`` column as Python lists (through numpy: floats keep every bit)."""
    col = col.combine_chunks() if hasattr(col, "combine_chunks") else col
    values = np.asarray(col.flatten().to_numpy(zero_copy_only=False), dtype=dtype)
    offsets = np.asarray(col.offsets)
    nulls = col.is_null().to_pylist()
    return [None if null else values[offsets[i]:offsets[i + 1]].tolist() for i, null in enumerate(nulls)]


def _word_lists(col: Any) -> list[list[str | None] | None]:
    """A ``list<dictionary<string>>`` column as Python lists (looked up through numpy)."""
    col = col.combine_chunks()
    words = col.flatten()
    lookup = np.array([*words.dictionary.to_pylist(), None], dtype=object)
    index = np.asarray(words.indices.fill_null(len(lookup) - 1).to_numpy(zero_copy_only=False), dtype=np.int64)
    values, offsets = lookup[index], np.asarray(col.offsets)
    nulls = col.is_null().to_pylist()
    return [None if null else values[offsets[i]:offsets[i + 1]].tolist() for i, null in enumerate(nulls)]


def _config_lists(col: Any) -> list[list[list[int]] | None]:
    """A ``list<list<int32>>`` column as Python lists of configs (a run's configs of one
    length go through one 2-D array)."""
    col = col.combine_chunks()
    configs = col.flatten()
    values = np.asarray(configs.flatten().to_numpy(zero_copy_only=False), dtype=np.int64)
    bounds, rows = np.asarray(configs.offsets), np.asarray(col.offsets)
    out: list[list[list[int]] | None] = []
    for i, null in enumerate(col.is_null().to_pylist()):
        starts = bounds[rows[i]:rows[i + 1] + 1]
        lengths = np.diff(starts)
        if null:
            out.append(None)
        elif lengths.size and (lengths == lengths[0]).all():
            out.append(values[starts[0]:starts[-1]].reshape(lengths.size, int(lengths[0])).tolist())
        else:
            out.append([values[a:b].tolist() for a, b in itertools.pairwise(starts)])
    return out


def decode(table: Any) -> list[dict[str, Any]]:
    """The run lines of a packed table, each exactly as it was encoded."""
    n = table.num_rows
    cols: dict[str, list[Any]] = {}
    for name in COLUMNS:
        col = table.column(name)
        if name == "configs":
            cols[name] = _config_lists(col)
        elif name in ("gflops", "clock"):
            cols[name] = _lists(col.combine_chunks(), np.float64)
        elif name == "errors":
            cols[name] = _word_lists(col)
        else:
            cols[name] = col.to_pylist()
    for i, steps in enumerate(cols["clock"]):
        if steps is not None:
            cols["clock"][i] = np.cumsum(np.asarray(steps, dtype=np.float64)).tolist()
    runs = []
    for i in range(n):
        verbatim = json.loads(cols["verbatim"][i]) if cols["verbatim"][i] is not None else {}
        run = {}
        for name in json.loads(cols["fields"][i]):
            if name in verbatim:
                run[name] = verbatim[name]
            elif name == "spec":
                run[name] = {f: _value(_SPEC[f], cols[f"spec_{f}"][i]) for f in SPEC_FIELDS}
            elif name in cols:
                run[name] = _value(_SCALARS.get(name, ""), cols[name][i])
            else:
                raise PackedError(f"row {i}: its field {name!r} is neither a column nor kept verbatim")
        runs.append(run)
    return runs


def _value(kind: str, stored: Any) -> Any:
    return json.loads(stored) if kind == "json" else stored


# ------------------------------------------------------------------------------------------ the file


@dataclass
class Packed:
    """One packed file, the results' first file or a segment (see the module docstring).

    ``header`` and ``updates``: the results' header and this file's ``suite_update`` lines
    (objects, with where each update stood: after how many of this file's runs). ``table``:
    its rows (a ``pyarrow.Table`` of the columns read, :func:`decode` them), None when only the
    footer was read. ``segment``: for a segment, its ``index``, the ``first_line`` it holds
    and the seal of the ``previous`` file. ``merged``: the seals of the segments a compaction
    merged into this (first) file."""

    path: Path
    header: dict[str, Any]
    updates: list[tuple[int, dict[str, Any]]]
    table: Any
    rows: int
    checksum: str
    seal: str
    segment: dict[str, Any] | None = None
    merged: tuple[str, ...] = ()

    @property
    def lines(self) -> int:
        """The results lines it holds besides the header: its suite updates and runs."""
        return self.rows + len(self.updates)


def _sealed(footer: dict[str, Any]) -> tuple[str, ...]:
    """The footer fields its seal covers: :data:`SEALED_FIELDS`, and the optional ones it has."""
    return (*SEALED_FIELDS, *(f for f in OPTIONAL_SEALED_FIELDS if f in footer))


def write_packed(path: str | os.PathLike[str], header: dict[str, Any], updates: Sequence[tuple[int, dict[str, Any]]],
                 table: Any, *, segment: dict[str, Any] | None = None, merged: Sequence[str] = ()) -> Path:
    """Write a packed file atomically (a temp file, fsynced, then renamed over ``path``);
    ``segment`` and ``merged`` go into its footer (see :class:`Packed`)."""
    footer: dict[str, Any] = {"schema": PACKED_SCHEMA, "rows": table.num_rows, "header": line_text(header),
                              "updates": [{"at": at, "line": line_text(u)} for at, u in updates],
                              "checksum": parquet_io.rows_checksum(table)}
    if segment is not None:
        footer["segment"] = segment
    if merged:
        footer["merged"] = list(merged)
    footer["seal"] = parquet_io.seal_of(footer, _sealed(footer))
    return parquet_io.write_table(table.cast(_schema()), META_KEY, footer, path, PackedError)


def read_packed(path: str | os.PathLike[str], verify: bool = True,
                columns: Sequence[str] | None = COLUMNS) -> Packed:
    """Read one packed file: its footer, and the rows of ``columns`` (None: no rows, ``table``
    is None); with ``verify`` (every column read), the rows must match their checksum.

    Raises:
        PackedError: naming the file: missing, unreadable, not packed results, another layout
            version, a footer whose fields are missing or mistyped, a seal or checksum mismatch.
    """
    return _with_rows(_read_footer(Path(path)), verify, columns)


def _read_footer(path: Path) -> Packed:
    """A packed file's footer, checked against its seal; no rows."""
    footer = parquet_io.read_footer(path, META_KEY, _WHAT, PackedError)
    parquet_io.check_schema(footer, PACKED_SCHEMA, path, _WHAT, PackedError,
                            "Use the tune_gym release that wrote it")
    try:
        header = json.loads(footer["header"])
        updates = [(int(u["at"]), json.loads(u["line"])) for u in footer["updates"]]
        rows, checksum = int(footer["rows"]), str(footer["checksum"])
        link = footer.get("segment")
        segment = None if link is None else {"index": int(link["index"]), "first_line": int(link["first_line"]),
                                             "previous": str(link["previous"])}
        merged = tuple(str(seal) for seal in footer.get("merged", ()))
    except (KeyError, TypeError, ValueError) as err:
        raise PackedError(f"{_WHAT} {path}: its footer lacks or mistypes a field ({type(err).__name__}: {err})") \
            from None
    if footer.get("seal") != parquet_io.seal_of(footer, _sealed(footer)):
        raise PackedError(f"{_WHAT} {path}: seal mismatch: its header, suite updates or row count are not what it "
                          "was written with (the file was edited or corrupted); restore it (e.g. `git checkout -- "
                          "FILE`)")
    if not isinstance(header, dict) or any(not isinstance(u, dict) or not 0 <= at <= rows for at, u in updates):
        raise PackedError(f"{_WHAT} {path}: its footer's header or suite updates are not results lines")
    return Packed(path, header, updates, None, rows, checksum, str(footer["seal"]), segment, merged)


def _with_rows(packed: Packed, verify: bool, columns: Sequence[str] | None) -> Packed:
    """``packed`` with the rows of ``columns`` read (see :func:`read_packed`)."""
    if columns is None:
        return packed
    if verify and tuple(columns) != COLUMNS:
        raise ValueError("read_packed: verify reads every column")
    table = parquet_io.read_rows(packed.path, columns, _WHAT, PackedError, only=tuple(columns) != COLUMNS)
    if table.num_rows != packed.rows or (verify and parquet_io.rows_checksum(table) != packed.checksum):
        raise PackedError(f"{_WHAT} {packed.path}: checksum mismatch: its rows are not the rows it was written with "
                          "(the file was edited or corrupted); restore it (e.g. `git checkout -- FILE`)")
    return replace(packed, table=table)


# ------------------------------------------------------------------------------------------ segments


def segments_dir(path: str | os.PathLike[str]) -> Path:
    """The folder of the segments of the packed file ``path``: ``X.parquet.d`` for ``X.parquet``."""
    path = Path(path)
    return path.with_name(path.name + ".d")


def segment_path(path: str | os.PathLike[str], index: int) -> Path:
    """The file of segment ``index`` (1, 2, ...) of the packed file ``path``: ``X.parquet.d/0001.parquet``."""
    return segments_dir(path) / f"{index:0{SEGMENT_DIGITS}d}.parquet"


def segment_paths(path: str | os.PathLike[str]) -> list[Path]:
    """The segment files of the packed file ``path``, by number (a killed writer's temp files
    left out). PackedError for any other file in their folder (naming it)."""
    folder = segments_dir(path)
    if not folder.is_dir():
        return []
    found: dict[int, Path] = {}
    for file in folder.iterdir():
        if file.name.endswith(".tmp"):
            continue
        match = re.fullmatch(r"([0-9]+)\.parquet", file.name)
        if match is None or int(match[1]) < 1 or file.name != segment_path(path, int(match[1])).name:
            raise PackedError(f"{file}: not a segment of {path} (they are named {segment_path(path, 1).name}, "
                              f"{segment_path(path, 2).name}, ... once each): move it out of {folder}")
        found[int(match[1])] = file
    return [found[n] for n in sorted(found)]


class _Vanished(Exception):
    """A segment file removed while it was being read (a compaction finishing meanwhile)."""


def read_parts(path: str | os.PathLike[str], verify: bool = False,
               columns: Sequence[str] | None = COLUMNS) -> list[Packed]:
    """The packed file ``path`` and its segments, in line order, each read as
    :func:`read_packed` reads it, the chain of their footers checked (see the module docstring).
    Segments a compaction merged into ``path`` already are left out.

    Raises:
        PackedError: what :func:`read_packed` raises, naming the file; a segment that is
            missing, renamed, reordered, replaced or of other results.
    """
    path = Path(path)
    for _ in range(3):
        files = segment_paths(path)  # listed before the first file is read: see the module docstring
        try:
            return _read_parts(path, files, verify, columns)
        except _Vanished:
            continue
    raise PackedError(f"{_WHAT} {path}: its segments kept changing while they were read; read them again")


def _read_parts(path: Path, files: list[Path], verify: bool, columns: Sequence[str] | None) -> list[Packed]:
    first = read_packed(path, verify, columns)
    if first.segment is not None:
        raise PackedError(f"{_WHAT} {path}: it is segment {first.segment['index']} of other results, not a "
                          "results' first file")
    parts = [first]
    for file in files:
        segment = _vanishing(_read_footer, file)
        if segment.seal in first.merged:  # merged by a compaction that did not get to remove it
            continue
        _check_link(parts, segment, file)
        parts.append(_vanishing(_with_rows, segment, verify, columns))
    return parts


def _vanishing(read: Any, file: Path | Packed, *args: Any) -> Packed:
    """``read(file, *args)``, a file that is gone meanwhile raising :class:`_Vanished`."""
    try:
        return read(file, *args)  # type: ignore[no-any-return]
    except PackedError:
        if not (file.path if isinstance(file, Packed) else file).exists():
            raise _Vanished from None
        raise


def _check_link(parts: list[Packed], segment: Packed, file: Path) -> None:
    """Segment ``file`` must be the one that follows ``parts`` (see the module docstring)."""
    index, previous, first = len(parts), parts[-1], parts[0]
    restore = "restore the segments as they were written (e.g. `git checkout -- FOLDER`)"
    if int(file.stem) != index:
        raise PackedError(f"{_WHAT} {file}: segment {index}, {segment_path(first.path, index)}, is missing before it; "
                          + restore)
    link = segment.segment
    if link is None:
        raise PackedError(f"{_WHAT} {file}: not a segment (its footer has no segment link); {restore}")
    if link["index"] != index:
        raise PackedError(f"{_WHAT} {file}: holds segment {link['index']}, not {index}: segment files were renamed "
                          f"or swapped; {restore}")
    line = 2 + sum(p.lines for p in parts)
    if link["previous"] != previous.seal or line_text(segment.header) != line_text(first.header) \
            or link["first_line"] != line:
        raise PackedError(f"{_WHAT} {file}: does not follow {previous.path} (its link to it differs): a segment "
                          f"was replaced, or comes from other results; {restore}")


def write_segment(path: str | os.PathLike[str], parts: Sequence[Packed], updates: Sequence[tuple[int, dict[str, Any]]],
                  table: Any) -> Path:
    """Write the rows ``table`` (and ``updates``, placed among them) as the segment that follows
    ``parts`` (:func:`read_parts` of ``path``); returns its file. Segments a killed compaction
    left are removed first (:func:`drop_merged`): the new one takes the first free number."""
    drop_merged(path)
    folder = segments_dir(path)
    if not folder.is_dir():
        folder.mkdir()
        parquet_io.fsync(folder.parent)
    index = len(parts)
    link = {"index": index, "first_line": 2 + sum(p.lines for p in parts), "previous": parts[-1].seal}
    return write_packed(segment_path(path, index), parts[0].header, updates, table, segment=link)


def drop_merged(path: str | os.PathLike[str]) -> int:
    """Remove the segment files of ``path`` that a compaction merged into it and did not get to
    remove (it was killed); returns how many."""
    first = _read_footer(Path(path))
    gone = [file for file in segment_paths(path) if _read_footer(file).seal in first.merged]
    _remove(path, gone)
    return len(gone)


def merge_segments(path: str | os.PathLike[str]) -> int:
    """Compact ``path``: write its rows and every segment's as one new first file (verified
    rows only), then remove the segment files; returns how many segments were merged.

    The new file lists the seals of the segments it holds (``merged``), so a reader skips a
    merged segment that a killed compaction left (:func:`drop_merged` removes it later)."""
    drop_merged(path)
    parts = read_parts(path, verify=True)
    if len(parts) == 1:
        return 0
    updates, before = [], 0
    for part in parts:
        updates += [(before + at, update) for at, update in part.updates]
        before += part.rows
    write_packed(path, parts[0].header, updates, concat([p.table for p in parts]),
                 merged=[p.seal for p in parts[1:]])
    _remove(path, [p.path for p in parts[1:]])
    return len(parts) - 1


def _remove(path: str | os.PathLike[str], files: Sequence[Path]) -> None:
    """Delete segment ``files`` of ``path`` (and their folder once it is empty), durably."""
    if not files:
        return
    for file in files:
        file.unlink()
    folder = segments_dir(path)
    parquet_io.fsync(folder)
    if not any(folder.iterdir()):
        folder.rmdir()
        parquet_io.fsync(folder.parent)
