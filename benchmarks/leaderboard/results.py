"""Results files: one JSON line per benchmark run, after a header naming the suite.

The header (first line) holds the format version, the suite (its digest and contents)
and the host; when the suite changes (more tasks, agents, seeds), a ``suite_update`` line
records the new one and the earlier runs stay (runs are named by their spec). Every other
line is one run (:func:`runner.run_one`):
its spec, every config the agent proposed in order with its GFLOPS, error and simulated
clock, the best GFLOPS, why the run ended (``ended``: the budget, the space, or the agent
stopping), the agent's compute seconds and the identity of the data that answered (dataset
file and checksum). Lines are appended with one ``write`` and fsynced under the file's lock
(:mod:`tune_gym.jsonl`), so a killed benchmark leaves at most a torn last line, which readers
skip and the next writer cuts off before it appends.
``tune-gym validate`` (:mod:`.validate`) replays every line against its data; to it, a torn
line is a failure (the file is not what its runs wrote): resume the benchmark, which cuts it
off and runs that run again.
"""

from __future__ import annotations

import functools
import json
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.leaderboard.suite import Suite, SuiteError
from tune_gym.jsonl import JsonlAppender, scan_jsonl

__all__ = ["RESULTS_FORMAT", "RESULTS_VERSION", "ResultsError", "ResultsFile", "ResultsScan", "RunLine", "SuiteVersion",
           "read_results", "scan_results"]

RESULTS_FORMAT = "tune_gym-bench-results"
RESULTS_VERSION = 1


class ResultsError(ValueError):
    """A results file that cannot be read or resumed."""


@dataclass
class RunLine:
    """A run line of a results file: its 1-based line number, its text and its object."""

    lineno: int
    text: str
    obj: dict[str, Any]


@dataclass
class SuiteVersion:
    """A suite recorded in a results file (the header's, or a later ``suite_update`` line's)."""

    lineno: int
    suite: dict[str, Any]
    digest: str


@dataclass
class ResultsScan:
    """Everything a results file holds, line by line (:func:`scan_results`).

    ``header`` carries the suite as it is now (the last version); ``bad`` lists the lines
    that are not a run line (``(line number, why, torn)``, ``torn`` when the text is not JSON
    at all, as a killed writer leaves it)."""

    path: Path
    header: dict[str, Any]
    versions: list[SuiteVersion]
    runs: list[RunLine]
    bad: list[tuple[int, str, bool]] = field(default_factory=list)


def scan_results(path: str | Path) -> ResultsScan:
    """Read every line of a results file; ResultsError names a missing or malformed header.

    A line that is not JSON, or JSON but not an object, is listed in :attr:`ResultsScan.bad`
    rather than raised, so a reader decides what it tolerates."""
    path = Path(path)
    if not path.is_file():
        raise ResultsError(f"results file {path} does not exist")
    scan: ResultsScan | None = None
    bad: list[tuple[int, str, bool]] = []
    for i, obj, why, torn in scan_jsonl(path, error=ResultsError):
        if why is not None:
            bad.append((i, f"{why}: {'a torn line (a killed writer)' if torn else 'a corrupt line'}", torn))
            continue
        if not isinstance(obj, dict):
            bad.append((i, f"a JSON {type(obj).__name__}, not an object", False))
        elif scan is None:
            scan = ResultsScan(path, _header(obj, path, i), [], [], bad)
            scan.versions.append(SuiteVersion(i, scan.header["suite"], scan.header["suite_digest"]))
        elif "suite_update" in obj:  # the suite changed between sessions of this file
            version = _suite_update(obj, scan.header, path, i)
            scan.versions.append(version)
            scan.header = {**scan.header, "suite": version.suite, "suite_digest": version.digest}
        elif isinstance(obj.get("key"), str) and isinstance(obj.get("spec"), dict):
            scan.runs.append(RunLine(i, json.dumps(obj), obj))
        else:
            bad.append((i, "a JSON object without a string 'key' and an object 'spec': not a run line", False))
    if scan is None:
        raise ResultsError(f"{path} is empty" if not bad else f"{path}:{bad[0][0]}: no header line: {bad[0][1]}")
    return scan


def read_results(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(header, run lines)`` of a results file; a torn line (a killed writer's) is skipped
    with a warning, any other line that is not a run is a ResultsError naming it."""
    scan = scan_results(path)
    for lineno, why, torn in scan.bad:
        if not torn:
            raise ResultsError(f"{scan.path}:{lineno}: {why}")
        warnings.warn(f"{scan.path}:{lineno}: skipping a torn line (a run that was being written)", stacklevel=2)
    return scan.header, [r.obj for r in scan.runs]


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
    return SuiteVersion(lineno, obj["suite_update"], obj["suite_digest"])


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


class ResultsFile:
    """An append-only results file (see the module docstring), open for appending under its
    lock (:class:`tune_gym.jsonl.JsonlAppender`) until :meth:`close`: a second benchmark
    writing the same file stops at once with an error naming it."""

    def __init__(self, path: Path, header: dict[str, Any], runs: list[dict[str, Any]],
                 appender: JsonlAppender) -> None:
        self.path = path
        self.header = header
        self.runs = runs
        self.done = {r["key"] for r in runs}
        self._appender = appender

    @classmethod
    def open(cls, path: str | Path, suite: Suite) -> ResultsFile:
        """Resume ``path`` (it must hold results of the same suite) or start it with a header."""
        path = Path(path)
        appender = JsonlAppender(path, accept=functools.partial(_accept, path), error=ResultsError,
                                 what="results file", allow_nan=True)
        try:
            if path.stat().st_size:
                header, runs = read_results(path)
                if header["suite"]["name"] != suite.name:
                    raise ResultsError(f"{path} holds results of suite {header['suite']['name']!r}, not "
                                       f"{suite.name!r}: write to another file")
                if header["suite_digest"] != suite.digest:  # the suite grew or changed: record it, keep the runs
                    update = {"suite_update": _suite_dict(suite), "suite_digest": suite.digest, "time": time.time()}
                    appender.append([update])
                    header = {**header, "suite": update["suite_update"], "suite_digest": suite.digest}
                return cls(path, header, runs, appender)
            from tune_gym.records import host_fingerprint

            header = {"format": RESULTS_FORMAT, "version": RESULTS_VERSION, "suite_digest": suite.digest,
                      "suite": _suite_dict(suite), "created": time.time(), "host": host_fingerprint()}
            appender.append([header])
            return cls(path, header, [], appender)
        except BaseException:
            appender.close()
            raise

    def append(self, line: dict[str, Any]) -> None:
        if line["key"] in self.done:  # pragma: no cover - the runner never repeats a key
            return
        self._appender.append([line])
        self.runs.append(line)
        self.done.add(line["key"])

    def close(self) -> None:
        """Release the file (idempotent); the runs stay readable on this object."""
        self._appender.close()

    def __enter__(self) -> ResultsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _accept(path: Path, first: tuple[int, Any] | None) -> None:
    """Refuse to append to a file whose first line is not a results header."""
    if first is not None and (not isinstance(first[1], dict) or first[1].get("format") != RESULTS_FORMAT):
        raise ResultsError(f"{path} is not a tune_gym results file (line {first[0]} is not a {RESULTS_FORMAT} "
                           "header): write to another file")


def _suite_dict(suite: Suite) -> dict[str, Any]:
    return {k: v for k, v in asdict(suite).items() if k != "path"}
