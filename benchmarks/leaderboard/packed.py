"""Packed results: a results file's runs as one Parquet table, one row per run, lossless.

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
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tune_gym.datasets import parquet_io
from tune_gym.errors import TuneGymError

__all__ = ["COLUMNS", "META_KEY", "PACKED_SCHEMA", "Packed", "PackedError", "concat", "decode", "encode", "line_text",
           "read_packed", "write_packed"]

#: Version of the packed layout; bump it when columns or the footer change meaning.
PACKED_SCHEMA = 1
#: Schema metadata key of the footer.
META_KEY = b"tune_gym_results"
#: The fields of a run's spec, in the order the runner writes them (:class:`.suite.RunSpec`).
SPEC_FIELDS = ("agent", "task", "preset", "backend", "seed", "budget", "batch", "options")
#: Runs encoded (and checked) at a time.
CHUNK = 256
#: The footer fields the seal covers with the rows checksum.
SEALED_FIELDS = ("schema", "rows", "header", "updates")

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


def concat(first: Any, second: Any) -> Any:
    """The rows of two packed tables, one after the other."""
    pa, _ = parquet_io.arrow(PackedError)
    schema = _schema()
    return pa.concat_tables([first.cast(schema), second.cast(schema)])


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
    """A packed results file: its header and ``suite_update`` lines (objects, with where each
    update stood: after how many runs) and its rows (a ``pyarrow.Table``, :func:`decode` them)."""

    path: Path
    header: dict[str, Any]
    updates: list[tuple[int, dict[str, Any]]]
    table: Any

    @property
    def rows(self) -> int:
        return int(self.table.num_rows)


def write_packed(path: str | os.PathLike[str], header: dict[str, Any], updates: Sequence[tuple[int, dict[str, Any]]],
                 table: Any) -> Path:
    """Write a packed results file atomically (a temp file, fsynced, then renamed over ``path``)."""
    footer = {"schema": PACKED_SCHEMA, "rows": table.num_rows, "header": line_text(header),
              "updates": [{"at": at, "line": line_text(u)} for at, u in updates],
              "checksum": parquet_io.rows_checksum(table)}
    footer["seal"] = parquet_io.seal_of(footer, SEALED_FIELDS)
    return parquet_io.write_table(table.cast(_schema()), META_KEY, footer, path, PackedError)


def read_packed(path: str | os.PathLike[str], verify: bool = True) -> Packed:
    """Read a packed results file; with ``verify``, its rows must match the checksum it was written with.

    Raises:
        PackedError: naming the file: missing, unreadable, not packed results, another layout
            version, a footer whose fields are missing or mistyped, a seal or checksum mismatch.
    """
    path = Path(path)
    what = "packed results"
    footer = parquet_io.read_footer(path, META_KEY, what, PackedError)
    parquet_io.check_schema(footer, PACKED_SCHEMA, path, what, PackedError,
                            "Use the tune_gym release that wrote it")
    try:
        header = json.loads(footer["header"])
        updates = [(int(u["at"]), json.loads(u["line"])) for u in footer["updates"]]
        rows, checksum = int(footer["rows"]), str(footer["checksum"])
    except (KeyError, TypeError, ValueError) as err:
        raise PackedError(f"{what} {path}: its footer lacks or mistypes a field ({type(err).__name__}: {err})") \
            from None
    if footer.get("seal") != parquet_io.seal_of(footer, SEALED_FIELDS):
        raise PackedError(f"{what} {path}: seal mismatch: its header, suite updates or row count are not what it was "
                          "written with (the file was edited or corrupted); restore it (e.g. `git checkout -- FILE`)")
    table = parquet_io.read_rows(path, COLUMNS, what, PackedError)
    if table.num_rows != rows or (verify and parquet_io.rows_checksum(table) != checksum):
        raise PackedError(f"{what} {path}: checksum mismatch: its rows are not the rows it was written with (the "
                          "file was edited or corrupted); restore it (e.g. `git checkout -- FILE`)")
    if not isinstance(header, dict) or any(not isinstance(u, dict) or not 0 <= at <= rows for at, u in updates):
        raise PackedError(f"{what} {path}: its footer's header or suite updates are not results lines")
    return Packed(path, header, updates, table)
