"""Results files: every run of a benchmark suite, as a JSON Lines journal and packed Parquet files.

Results are named by a path ``X.parquet`` (``X.jsonl`` names the same results) and held in two kinds of file:

* ``X.jsonl``, the **journal**, where a running benchmark appends each run as it ends. One
  JSON object per line: the header (first line) holds the format version, the suite (its
  digest and contents) and the host; when the suite changes (more tasks, agents, seeds), a
  ``suite_update`` line records the new one and the earlier runs stay (runs are named by
  their spec). Every other line is one run (:func:`runner.run_one`): its spec, every config
  the agent proposed in order with its GFLOPS, error and simulated clock, the best GFLOPS,
  why the run ended (``ended``: the budget, the space, or the agent stopping), the agent's
  compute seconds and the identity of the data that answered (dataset file and checksum).
  Lines are appended with one ``write`` and fsynced under the journal's lock
  (:mod:`tune_gym.jsonl`), so a killed benchmark leaves at most a torn last line, which
  readers skip and the next writer cuts off before it appends.
* ``X.parquet`` and its segments ``X.parquet.d/0001.parquet``, ..., the **packed** runs
  (:mod:`.packed`): the same lines, one row per run, columnar and compressed (about a tenth of
  the journal's size or less), given back exactly as the journal held them. These are the
  files the repository keeps; readers see them, then the journal, as one file.

**Packing** (:func:`pack_results`, ``tune-gym results pack X``; ``tune-gym bench`` packs when
its runs are done) moves the journal's lines into the packed files, holding the journal's
lock: the first pack writes ``X.parquet``, each later one only the journal's runs not packed
yet, as the next segment (a temp file, fsynced, renamed into place), and then empties the
journal. It reads just the footers and the keys of the runs packed before (the earlier files
are never rewritten). A reader reads the journal first, then the packed files, and drops a
journal line the packed files already hold (the same text), so a pack killed at any point
loses nothing and counts nothing twice: until the rename the journal holds the new runs,
after it both do until the journal is emptied. The next benchmark to append writes the
packed file's header as the journal's first line again. Packing refuses a journal with a
corrupt line (it would be lost). :func:`compact_results` (``tune-gym results pack --compact
X``, for a release) then merges every segment into one new ``X.parquet``.
:func:`results_lines` gives every line in order, as ``tune-gym results unpack X OUT.jsonl``
writes them.

Line numbers: a journal line is named by its line in the journal; a packed one by the line
it has in the results as one JSON Lines file (the header is line 1, then the suite updates
and runs in their order, as ``unpack`` writes them; a segment's continue its predecessor's),
so a converted file keeps its numbers.

``tune-gym validate`` (:mod:`.validate`) replays every run against its data; to it, a torn
line is a failure (the journal is not what its runs wrote): resume the benchmark, which cuts
it off and runs that run again.
"""

from __future__ import annotations

import functools
import json
import os
import time
import warnings
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.leaderboard import packed as P
from benchmarks.leaderboard.suite import Suite, SuiteError
from tune_gym.jsonl import JsonlAppender, scan_jsonl

__all__ = ["RESULTS_FORMAT", "RESULTS_VERSION", "ResultsError", "ResultsFile", "ResultsScan", "RunLine", "SuiteVersion",
           "compact_results", "drop_runs", "pack_results", "read_results", "results_lines", "results_paths",
           "scan_results", "unpack_results"]

RESULTS_FORMAT = "tune_gym-bench-results"
RESULTS_VERSION = 1


class ResultsError(ValueError):
    """Results that cannot be read, resumed or packed."""


@dataclass
class RunLine:
    """A run of a results file: its line number in ``source`` (the journal or the packed file,
    see the module docstring) and its object; ``text`` is the object as the journal's JSON."""

    lineno: int
    obj: dict[str, Any]
    source: Path

    @functools.cached_property
    def text(self) -> str:
        return P.line_text(self.obj)

    @property
    def where(self) -> str:
        return f"{self.source}:{self.lineno}"


@dataclass
class SuiteVersion:
    """A suite recorded in a results file (the header's, or a later ``suite_update`` line's),
    with the line that records it and where that line is."""

    lineno: int
    suite: dict[str, Any]
    digest: str
    source: Path
    line: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{self.source}:{self.lineno}"


@dataclass
class ResultsScan:
    """Everything a results file holds, its packed lines then its journal's (:func:`scan_results`).

    ``header`` carries the suite as it is now (the last version); ``versions[0].line`` is the
    header line as written. ``bad`` lists the journal's lines that are not a run line
    (``(line number, why, torn)``, ``torn`` when the text is not JSON at all, as a killed
    writer leaves it). ``parts`` are the packed files as read: the first, then its segments."""

    path: Path
    journal: Path
    header: dict[str, Any]
    versions: list[SuiteVersion]
    runs: list[RunLine]
    bad: list[tuple[int, str, bool]] = field(default_factory=list)
    parts: list[P.Packed] = field(default_factory=list)


def results_paths(path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """``(packed file, journal)`` of the results named ``path``: ``X.parquet`` and ``X.jsonl``
    for either name. ResultsError for another suffix."""
    path = Path(path)
    if path.suffix not in (".parquet", ".jsonl"):
        raise ResultsError(f"results {path}: name them by their packed file (.parquet) or their journal (.jsonl)")
    return path.with_suffix(".parquet"), path.with_suffix(".jsonl")


def scan_results(path: str | os.PathLike[str], verify: bool = False) -> ResultsScan:
    """Read every line of the results named ``path``: the packed files' (the first, then its
    segments), then the journal's (a journal line already packed is dropped, see the module
    docstring).

    A journal line that is not JSON, or JSON but not an object, is listed in
    :attr:`ResultsScan.bad` rather than raised, so a reader decides what it tolerates.
    ``verify``: check the packed rows against their checksums (it reads every row once more).

    Raises:
        ResultsError: no such results, a missing or malformed header, a packed file that
            cannot be read (or fails its seal, its link to the file before it, or ``verify``),
            or a journal of other results than the packed files' (another header).
    """
    return _scan(path, verify, whole=True)


#: The columns a pack reads of the runs packed already: their keys (a run kept whole has its
#: key in ``verbatim``).
_KEY_COLUMNS = ("key", "verbatim")


def _scan(path: str | os.PathLike[str], verify: bool, whole: bool) -> ResultsScan:
    """:func:`scan_results`; not ``whole``, as a pack reads them: the packed files' footers and
    keys only, so ``runs`` holds just the journal's runs not packed yet."""
    packed_path, journal = results_paths(path)
    # the journal first: a pack that runs meanwhile moves its lines to the packed files read next
    lines = list(scan_jsonl(journal, error=ResultsError)) if journal.is_file() else []
    parts = _read_parts(packed_path, verify, P.COLUMNS if whole else _KEY_COLUMNS)
    if not parts and not journal.is_file():
        raise ResultsError(f"results file {path} does not exist")
    scan, decoded = _scan_packed(Path(path), journal, parts, whole) if parts else (None, None)
    packed = _PackedRuns(parts, decoded)
    updates = {P.line_text(v.line) for v in scan.versions[1:]} if scan is not None else set()
    expect_header = bool(parts)  # a journal beside a packed file starts with that file's header
    bad: list[tuple[int, str, bool]] = []
    for i, obj, why, torn in lines:
        if why is not None:
            bad.append((i, f"{why}: {'a torn line (a killed writer)' if torn else 'a corrupt line'}", torn))
        elif not isinstance(obj, dict):
            bad.append((i, f"a JSON {type(obj).__name__}, not an object", False))
        elif scan is None:
            scan = ResultsScan(Path(path), journal, _header(obj, journal, i), [], [], bad)
            scan.versions.append(SuiteVersion(i, obj["suite"], obj["suite_digest"], journal, obj))
        elif expect_header:
            expect_header = False
            if P.line_text(obj) != P.line_text(scan.versions[0].line):
                raise ResultsError(f"{journal}:{i}: not the header of {packed_path}: the journal holds other "
                                   "results than the packed file; move one of them away")
        elif "suite_update" in obj:  # the suite changed between sessions of this file
            if P.line_text(obj) not in updates:  # else packed already
                version = _suite_update(obj, scan.header, journal, i)
                scan.versions.append(version)
                scan.header = {**scan.header, "suite": version.suite, "suite_digest": version.digest}
        elif isinstance(obj.get("key"), str) and isinstance(obj.get("spec"), dict):
            run = RunLine(i, obj, journal)
            if not packed.holds(run):
                scan.runs.append(run)
        else:
            bad.append((i, "a JSON object without a string 'key' and an object 'spec': not a run line", False))
    if scan is None:
        raise ResultsError(f"{journal} is empty" if not bad else f"{journal}:{bad[0][0]}: no header line: {bad[0][1]}")
    scan.bad = bad
    return scan


def _read_parts(path: Path, verify: bool, columns: tuple[str, ...]) -> list[P.Packed]:
    """The packed files of the results (none when there are none yet)."""
    try:
        if not path.is_file() and not P.segment_paths(path):
            return []
        return P.read_parts(path, verify, columns)
    except P.PackedError as err:
        raise ResultsError(str(err)) from None


def _scan_packed(path: Path, journal: Path, parts: list[P.Packed],
                 whole: bool) -> tuple[ResultsScan, list[list[dict[str, Any]]] | None]:
    """The lines of the packed files, numbered as in their JSON Lines form (see the module
    docstring), and each file's runs; not ``whole``: the suite versions only (runs not read)."""
    first = parts[0]
    header = _header(first.header, first.path, 1)
    scan = ResultsScan(path, journal, header, [SuiteVersion(1, header["suite"], header["suite_digest"], first.path,
                                                            header)], [], parts=parts)
    decoded = [P.decode(part.table) for part in parts] if whole else None
    lineno = 1
    for i, part in enumerate(parts):
        lineno = _scan_part(scan, part, decoded[i] if decoded is not None else None, lineno)
    return scan, decoded


def _scan_part(scan: ResultsScan, part: P.Packed, runs: list[dict[str, Any]] | None, lineno: int) -> int:
    """Add one packed file's suite updates (and its ``runs``, when read) to ``scan``, numbered
    after line ``lineno``; returns the number of its last line."""
    source = part.path
    updates = sorted(part.updates, key=lambda u: u[0])
    u = 0
    for i in range(part.rows + 1):
        while u < len(updates) and updates[u][0] <= i:
            lineno += 1
            version = _suite_update(updates[u][1], scan.header, source, lineno)
            scan.versions.append(version)
            scan.header = {**scan.header, "suite": version.suite, "suite_digest": version.digest}
            u += 1
        if i == part.rows:
            break
        lineno += 1
        if runs is not None:
            run = runs[i]
            if not (isinstance(run.get("key"), str) and isinstance(run.get("spec"), dict)):
                raise ResultsError(f"{source}:{lineno}: a packed run without a string 'key' and an object 'spec'")
            scan.runs.append(RunLine(lineno, run, source))
    return lineno


class _PackedRuns:
    """The runs the packed files hold, by key: a journal line is packed already when a packed
    run has its key and its text. Given only the keys (a pack), the runs of a file are
    decoded when a journal line has one of its keys (after a pack killed before it emptied the
    journal: then only the last segment is)."""

    def __init__(self, parts: list[P.Packed], decoded: list[list[dict[str, Any]]] | None) -> None:
        self._parts = parts
        self._decoded = dict(enumerate(decoded)) if decoded is not None else {}
        self._where: dict[Any, list[tuple[int, int]]] = {}
        for p, part in enumerate(parts):
            keys = [r["key"] for r in decoded[p]] if decoded is not None else _keys(part.table)
            for row, key in enumerate(keys):
                self._where.setdefault(key, []).append((p, row))

    def holds(self, run: RunLine) -> bool:
        return any(P.line_text(self._runs(p)[row]) == run.text for p, row in self._where.get(run.obj["key"], ()))

    def _runs(self, p: int) -> list[dict[str, Any]]:
        if p not in self._decoded:
            try:
                self._decoded[p] = P.decode(P.read_packed(self._parts[p].path, verify=False).table)
            except P.PackedError as err:
                raise ResultsError(str(err)) from None
        return self._decoded[p]


def _keys(table: Any) -> list[Any]:
    """The run keys of packed rows read as :data:`_KEY_COLUMNS`."""
    keys, verbatim = table.column("key").to_pylist(), table.column("verbatim")
    return [key if key is not None else json.loads(verbatim[i].as_py() or "{}").get("key")
            for i, key in enumerate(keys)]


def read_results(path: str | os.PathLike[str], verify: bool = False) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(header, run lines)`` of the results named ``path`` (see :func:`scan_results`); a torn
    journal line (a killed writer's) is skipped with a warning, any other line that is not a
    run is a ResultsError naming it."""
    scan = _tolerant(scan_results(path, verify))
    return scan.header, [r.obj for r in scan.runs]


def _tolerant(scan: ResultsScan) -> ResultsScan:
    """``scan``, once its torn journal lines are warned of; any other bad line is a ResultsError."""
    for lineno, why, torn in scan.bad:
        if not torn:
            raise ResultsError(f"{scan.journal}:{lineno}: {why}")
        warnings.warn(f"{scan.journal}:{lineno}: skipping a torn line (a run that was being written)", stacklevel=3)
    return scan


def results_lines(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every line of the results named ``path`` in order, as one JSON Lines file holds them:
    the header, then the suite updates and runs, the packed ones first. A torn journal line
    is skipped with a warning; any other bad line is a ResultsError."""
    scan = _tolerant(scan_results(path))
    order = {scan.journal: 1}
    lines = sorted([(order.get(v.source, 0), v.lineno, v.line) for v in scan.versions]
                   + [(order.get(r.source, 0), r.lineno, r.obj) for r in scan.runs], key=lambda t: t[:2])
    return [obj for _, _, obj in lines]


def unpack_results(path: str | os.PathLike[str], out: str | os.PathLike[str]) -> int:
    """Write every line of the results named ``path`` (:func:`results_lines`) to the new JSON
    Lines file ``out`` (fsynced); returns the number of runs. ``out`` must not exist, nor be
    the journal of a packed file."""
    out = Path(out)
    if out.exists():
        raise ResultsError(f"{out} exists: unpack into a new file")
    if out.suffix == ".jsonl" and out.with_suffix(".parquet").exists():
        raise ResultsError(f"{out} would be the journal of {out.with_suffix('.parquet')}: unpack into another file")
    lines = results_lines(path)
    with JsonlAppender(out, error=ResultsError, what="results file", allow_nan=True) as appender:
        appender.append(lines)
    return len(lines) - sum(1 for line in lines if "suite_update" in line) - 1


def _header(obj: dict[str, Any], path: Path, lineno: int) -> dict[str, Any]:
    """The header line, checked: format, version, suite and its digest."""
    if obj.get("format") != RESULTS_FORMAT:
        raise ResultsError(f"{path} is not a tune_gym results file (no {RESULTS_FORMAT} header)")
    if obj.get("version") != RESULTS_VERSION:
        raise ResultsError(f"{path}: results format version {obj.get('version')}; "
                           f"this tune_gym reads {RESULTS_VERSION}")
    _check_suite(obj, "suite", path, lineno)
    return obj


def _suite_update(obj: dict[str, Any], header: dict[str, Any], path: Path, lineno: int) -> SuiteVersion:
    _check_suite(obj, "suite_update", path, lineno)
    if obj["suite_update"]["name"] != header["suite"]["name"]:
        raise ResultsError(f"{path}:{lineno}: suite_update names suite {obj['suite_update']['name']!r}, but the "
                           f"file holds results of suite {header['suite']['name']!r}")
    return SuiteVersion(lineno, obj["suite_update"], obj["suite_digest"], path, obj)


def _check_suite(obj: dict[str, Any], name: str, path: Path, lineno: int) -> None:
    if name not in obj:
        raise ResultsError(f"{path}:{lineno}: the {'header' if name == 'suite' else 'suite_update line'} "
                           f"has no {name!r} field")
    try:
        Suite.from_dict(obj[name])
    except SuiteError as err:
        raise ResultsError(f"{path}:{lineno}: field {name!r}: {err}") from None
    if not isinstance(obj.get("suite_digest"), str):
        raise ResultsError(f"{path}:{lineno}: field 'suite_digest' must be a string, got {obj.get('suite_digest')!r}")


# ------------------------------------------------------------------------------------------ writing


class ResultsFile:
    """Results open for appending (see the module docstring): runs go to the journal, under its
    lock (:class:`tune_gym.jsonl.JsonlAppender`) until :meth:`close`, so a second benchmark
    writing the same results stops at once with an error naming the journal. :meth:`pack`
    moves them to the packed file."""

    def __init__(self, path: Path, header: dict[str, Any], runs: list[dict[str, Any]], appender: JsonlAppender,
                 header_line: dict[str, Any]) -> None:
        self.path = path
        self.header = header
        self.runs = runs
        self.done = {r["key"] for r in runs}
        self._appender = appender
        self._header_line = header_line

    @classmethod
    def open(cls, path: str | os.PathLike[str], suite: Suite) -> ResultsFile:
        """Resume the results named ``path`` (they must be of the same suite) or start them with a header."""
        path = Path(path)
        packed, journal = results_paths(path)
        appender = _lock(journal)
        try:
            if journal.stat().st_size or packed.is_file():
                scan = _tolerant(scan_results(path))
                header, runs = scan.header, [r.obj for r in scan.runs]
                if header["suite"]["name"] != suite.name:
                    raise ResultsError(f"{path} holds results of suite {header['suite']['name']!r}, not "
                                       f"{suite.name!r}: write to another file")
                if not journal.stat().st_size:  # packed, the journal emptied: it starts with the header again
                    appender.append([scan.versions[0].line])
                if header["suite_digest"] != suite.digest:  # the suite grew or changed: record it, keep the runs
                    update = {"suite_update": _suite_dict(suite), "suite_digest": suite.digest, "time": time.time()}
                    appender.append([update])
                    header = {**header, "suite": update["suite_update"], "suite_digest": suite.digest}
                return cls(path, header, runs, appender, scan.versions[0].line)
            from tune_gym.host import host_fingerprint

            header = {"format": RESULTS_FORMAT, "version": RESULTS_VERSION, "suite_digest": suite.digest,
                      "suite": _suite_dict(suite), "created": time.time(), "host": host_fingerprint()}
            appender.append([header])
            return cls(path, header, [], appender, header)
        except BaseException:
            appender.close()
            raise

    def append(self, line: dict[str, Any]) -> None:
        if line["key"] in self.done:  # pragma: no cover - the runner never repeats a key
            return
        if not self._appender.path.stat().st_size:  # emptied by a pack: the header first
            self._appender.append([self._header_line])
        self._appender.append([line])
        self.runs.append(line)
        self.done.add(line["key"])

    def pack(self) -> int:
        """Move the journal's lines into the packed file (:func:`pack_results`); returns the runs moved."""
        return _pack(self.path, self._appender)

    def close(self) -> None:
        """Release the journal (idempotent); the runs stay readable on this object."""
        self._appender.close()

    def __enter__(self) -> ResultsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def pack_results(path: str | os.PathLike[str]) -> int:
    """Move the journal's lines of the results named ``path`` into their packed files (the next
    segment, see the module docstring), under the journal's lock; returns the number of runs moved.

    Raises:
        ResultsError: no such results, a benchmark is appending to them (it holds the lock),
            a corrupt journal line (it would be lost), or what :func:`scan_results` raises.
    """
    _, journal = results_paths(path)
    _exists(path)
    if not journal.is_file():
        return 0
    with _lock(journal) as appender:
        return _pack(Path(path), appender)


def compact_results(path: str | os.PathLike[str]) -> int:
    """Pack the results named ``path`` (:func:`pack_results`), then merge their segments into one
    new packed file (for a release: :func:`.packed.merge_segments`, which checks every row);
    returns the number of segments merged. Raises what :func:`pack_results` raises."""
    _, journal = results_paths(path)
    _exists(path)
    with _lock(journal) as appender:
        _pack(Path(path), appender)
        try:
            return P.merge_segments(results_paths(path)[0])
        except P.PackedError as err:
            raise ResultsError(str(err)) from None


def drop_runs(path: str | os.PathLike[str], keys: Iterable[str]) -> int:
    """Remove the runs named by ``keys`` from the results named ``path``, so that the next
    ``tune-gym bench`` runs them again (for runs ``validate`` cannot confirm on the host that
    will check the file: recorded elsewhere with other floating-point code, see
    :mod:`tune_gym.numerics`); returns the number of lines removed.

    Under the journal's lock: the journal is packed, then every other run (and the suite
    updates, in their places) is written as one new packed file that lists the segments it
    replaces, as a compaction does, so a drop killed at any point leaves either the old runs or
    the new ones, never both (:func:`.packed.drop_merged` removes the replaced segments).

    Raises:
        ResultsError: a key names no run of the results (nothing is changed), a benchmark is
            appending to them, or what :func:`pack_results` raises.
    """
    wanted = set(keys)
    _, journal = results_paths(path)
    _exists(path)
    with _lock(journal) as appender:
        _pack(Path(path), appender)
        packed = results_paths(path)[0]
        P.drop_merged(packed)
        scan = _scan(path, verify=True, whole=True)
        if missing := sorted(wanted - {r.obj.get("key") for r in scan.runs}):
            raise ResultsError(f"{path}: no run with key {missing[0]!r}"
                               + (f" (and {len(missing) - 1} more keys)" if len(missing) > 1 else ""))
        kept = [r for r in scan.runs if r.obj.get("key") not in wanted]
        updates = [(sum(1 for r in kept if r.lineno < v.lineno), v.line) for v in scan.versions[1:]]
        P.write_packed(packed, scan.versions[0].line, updates, P.encode([r.obj for r in kept]),
                       merged=[part.seal for part in scan.parts[1:]])
        P.drop_merged(packed)
    return len(scan.runs) - len(kept)


def _exists(path: str | os.PathLike[str]) -> None:
    packed, journal = results_paths(path)
    if not journal.is_file() and not packed.is_file():
        raise ResultsError(f"results file {path} does not exist")


def _lock(journal: Path) -> JsonlAppender:
    """The journal, opened (and locked) for appending."""
    return JsonlAppender(journal, accept=functools.partial(_accept, journal), error=ResultsError,
                         what="results file", allow_nan=True)


def _pack(path: Path, appender: JsonlAppender) -> int:
    """The pack of :func:`pack_results`, the journal's lock held by ``appender``: the journal's
    runs not packed yet go into the first packed file when there is none, else into the next
    segment; the packed runs are not read, only their keys."""
    packed_path, journal = results_paths(path)
    if not journal.stat().st_size:
        return 0
    scan = _scan(path, verify=False, whole=False)
    if scan.bad:  # the appender cut off a torn last line: any other would be dropped
        lineno, why, _ = scan.bad[0]
        raise ResultsError(f"{journal}:{lineno}: {why}: packing would drop it; repair or remove the line first")
    runs = scan.runs
    updates = [(sum(1 for r in runs if r.lineno < v.lineno), v.line) for v in scan.versions[1:]
               if v.source == journal]  # each after the runs before it
    if not scan.parts:
        P.write_packed(packed_path, scan.versions[0].line, updates, P.encode([r.obj for r in runs]))
    elif runs or updates:
        P.write_segment(packed_path, scan.parts, updates, P.encode([r.obj for r in runs]))
    appender.clear()
    return len(runs)


def _accept(path: Path, first: tuple[int, Any] | None) -> None:
    """Refuse to append to a file whose first line is not a results header."""
    if first is not None and (not isinstance(first[1], dict) or first[1].get("format") != RESULTS_FORMAT):
        raise ResultsError(f"{path} is not a tune_gym results file (line {first[0]} is not a {RESULTS_FORMAT} "
                           "header): write to another file")


def _suite_dict(suite: Suite) -> dict[str, Any]:
    return {k: v for k, v in asdict(suite).items() if k != "path"}
