"""Results files: one JSON line per benchmark run, after a header naming the suite.

The header (first line) holds the format version, the suite (its digest and contents)
and the host; when the suite changes (more tasks, agents, seeds), a ``suite_update`` line
records the new one and the earlier runs stay (runs are named by their spec). Every other
line is one run (:func:`runner.run_one`):
its spec, every config the agent proposed in order with its GFLOPS, error and simulated
clock, the best GFLOPS, the agent's compute seconds and the identity of the data that
answered (dataset file and checksum). Lines are appended with one ``write`` and fsynced,
so a killed benchmark leaves at most a torn last line, which readers skip and the next
writer starts after. ``tune-gym validate`` replays every line against its data.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.leaderboard.suite import Suite

__all__ = ["RESULTS_FORMAT", "RESULTS_VERSION", "ResultsError", "ResultsFile", "read_results"]

RESULTS_FORMAT = "tune_gym-bench-results"
RESULTS_VERSION = 1


class ResultsError(ValueError):
    """A results file that cannot be read or resumed."""


def read_results(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(header, run lines)`` of a results file; a torn line (a killed writer's) is skipped."""
    path = Path(path)
    if not path.exists():
        raise ResultsError(f"results file {path} does not exist")
    lines = path.read_text(encoding="utf-8").split("\n")
    header: dict[str, Any] | None = None
    runs = []
    for i, text in enumerate(lines):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            warnings.warn(f"{path}:{i + 1}: skipping a torn line (a run that was being written)", stacklevel=2)
            continue
        if header is None:
            if obj.get("format") != RESULTS_FORMAT:
                raise ResultsError(f"{path} is not a tune_gym results file (no {RESULTS_FORMAT} header)")
            if obj.get("version") != RESULTS_VERSION:
                raise ResultsError(f"{path}: results format version {obj.get('version')}; "
                                   f"this tune_gym reads {RESULTS_VERSION}")
            header = obj
        elif "suite_update" in obj:  # the suite changed between sessions of this file
            header = {**header, "suite": obj["suite_update"], "suite_digest": obj["suite_digest"]}
        else:
            runs.append(obj)
    if header is None:
        raise ResultsError(f"{path} is empty")
    return header, runs


class ResultsFile:
    """An append-only results file (see the module docstring)."""

    def __init__(self, path: Path, header: dict[str, Any], runs: list[dict[str, Any]]) -> None:
        self.path = path
        self.header = header
        self.runs = runs
        self.done = {r["key"] for r in runs}

    @classmethod
    def open(cls, path: str | Path, suite: Suite) -> ResultsFile:
        """Resume ``path`` (it must hold results of the same suite) or start it with a header."""
        path = Path(path)
        if path.exists() and path.stat().st_size:
            header, runs = read_results(path)
            if header["suite"]["name"] != suite.name:
                raise ResultsError(f"{path} holds results of suite {header['suite']['name']!r}, not {suite.name!r}: "
                                   "write to another file")
            if header["suite_digest"] != suite.digest:  # the suite grew or changed: record it, keep the runs
                update = {"suite_update": _suite_dict(suite), "suite_digest": suite.digest, "time": time.time()}
                _append(path, update)
                header = {**header, "suite": update["suite_update"], "suite_digest": suite.digest}
            return cls(path, header, runs)
        from tune_gym.records import host_fingerprint

        header = {"format": RESULTS_FORMAT, "version": RESULTS_VERSION, "suite_digest": suite.digest,
                  "suite": _suite_dict(suite), "created": time.time(),
                  "host": host_fingerprint()}
        path.parent.mkdir(parents=True, exist_ok=True)
        _append(path, header)
        return cls(path, header, [])

    def append(self, line: dict[str, Any]) -> None:
        if line["key"] in self.done:  # pragma: no cover - the runner never repeats a key
            return
        _append(self.path, line)
        self.runs.append(line)
        self.done.add(line["key"])


def _suite_dict(suite: Suite) -> dict[str, Any]:
    return {k: v for k, v in asdict(suite).items() if k != "path"}


def _append(path: Path, obj: dict[str, Any]) -> None:
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        torn = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
        data = memoryview((("\n" if torn else "") + json.dumps(obj) + "\n").encode())
        while data:
            data = data[os.write(fd, data):]
        os.fsync(fd)
    finally:
        os.close(fd)
