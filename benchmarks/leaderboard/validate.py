"""``tune-gym validate RESULTS``: confirm that a results file is exactly what its runs produce.

Every problem found is one line naming the run, its line of the file and the field. Checked:

* **The file.** Every journal line is JSON (a torn or corrupt line is a problem, by line
  number); the rows of each packed file (the first and its segments) match their checksum,
  its footer its seal, and each segment links to the file before it (else the results are not
  read: ResultsError); the suite of the header, and of each ``suite_update`` line,
  has the digest recorded with it; a suite of the same name shipped in ``benchmarks/suites/``
  is that suite.
* **The set of runs.** Every run of the suite is in the file exactly once: none missing, none
  repeated, none extra. A run of an earlier version of the suite (one that changed since) is
  not shown on the leaderboard and not checked further; the report counts it.
* **Each run's identity.** Its key is its spec's; its task URI, FLOP count and space size are
  the task's and the space's (not what the line says); its data (dataset files and checksums)
  and reference throughput are those that answer it now; its configs are configs of the space.
* **Its length.** A run ends at min(budget, space size), or earlier when its agent proposes
  nothing more (:func:`agents.run`); a shorter run is always re-run from its seed to confirm
  it, and ``ended`` (when the line has it) must say why it ended.
* **Its agent.** The agent is made with the run's options and reset with its seed, which
  re-derives cheaply (no measurement) whether it refuses the task (a run recorded as not
  applicable must be refused again, with the same reason, and one with trials must not be),
  what it runs with (``agent_info``: a pretrained agent's checkpoint and its checksum) and its
  first batch of configs, which must open the run.
* **Its numbers.** Its configs, replayed through a fresh :class:`tune_gym.session.TuningSession`
  on that data, give exactly its GFLOPS, errors and simulated clock; its best follows; and
  what the leaderboard derives from it is within bounds: GFLOPS finite and >= 0, the clock
  non-decreasing, and on a replayed, exhaustively measured space no trial above the best known
  config and the random-relative score P at most 1 (with the line's own FLOP count, as the
  leaderboard computes it).
* **Re-runs.** ``rerun`` runs, drawn with the SHA-256 of the file's run lines as seed (so whoever
  writes the file does not choose which runs are checked), are re-run from their seeds: the
  agent must propose exactly the recorded configs.
* **Kernel Tuner strategies** (entries ``kt:NAME``, :mod:`.kt_entries`) are checked as agents:
  identity (``agent_info``: the strategy, Kernel Tuner's default options with the run's budget,
  the Kernel Tuner version), data, every trial replayed, bounds. A strategy has no first batch
  short of running it, so its configs are checked by the re-runs (those that stopped early are
  always re-run; the strategy is deterministic).

Live runs cannot be replayed or re-run; every other check applies to them.

**Resumed** (``log``, ``tune-gym validate --log FILE``): each re-run's answer is appended to
``FILE`` as it comes (one JSON line: the SHA-256 of the run's line, its key, what the answer
depends on besides the line, :func:`rerun_identity`, and the problem or null). Given the same
``FILE`` again, a validation takes the answers of runs whose line is unchanged and that were
re-run on this host, with these numerics and this code, instead of re-running them; a killed
validation of a large file thus goes on where it stopped. The report counts them
(:attr:`Validation.resumed`). The log is the validating user's own record: a validation meant to
convince someone else runs without it.

**In parallel** (``jobs`` > 1, ``tune-gym validate --jobs N``): the checks of each run (its
identity, agent, length and numbers) and the re-runs go to ``jobs`` worker processes, set up as
the bench's (:mod:`.runner`: one thread each, and they die with the validation that started
them), in chunks of runs of one (task, preset), so a worker loads each space and its data once.
The file, the set of runs and the choice of re-runs stay in this process, and the report is the
one a single process gives: the same counts, re-runs and problems, in the order of the file. A
worker that dies (killed, out of memory) ends the validation with an error naming the runs the
workers held, its own among them (:class:`WorkerDied`); each holds one chunk at a time.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from benchmarks.leaderboard import metrics as M
from benchmarks.leaderboard.results import ResultsScan, RunLine, scan_results
from benchmarks.leaderboard.suite import RunSpec, Suite, SuiteError, base_agent

__all__ = ["FLOAT_RTOL", "Validation", "WorkerDied", "rerun_identity", "validate"]

#: Relative tolerance of a replayed float against the recorded one. Replay reproduces every bit,
#: but the surrogate's XGBoost sums its trees with the host's SIMD width, so the same prediction
#: differs in the last bit or two between CPUs (seen: Zen 3 against Zen 5, about 2e-16 relative).
#: Anything a tampered or mis-replayed file shows is many orders above this.
FLOAT_RTOL = 1e-9
#: Slack of the bounds (P <= 1, GFLOPS <= best known): the run's kernel seconds are recomputed
#: from its GFLOPS and FLOP count, which rounds in the last bits.
BOUND_RTOL = 1e-6
#: How many examples a problem about many runs names.
EXAMPLES = 3
#: Most runs in one chunk of work sent to a worker process (``jobs`` > 1): chunks are of one
#: (task, preset), and small enough that the last ones keep every worker busy.
CHUNK = 32


@dataclass
class Validation:
    """What :func:`validate` found: runs checked and re-run, and one line per problem."""

    checked: int = 0
    rerun: int = 0
    stale: int = 0  # runs of an earlier version of the suite, not checked
    rerun_keys: list[str] = field(default_factory=list)  # the runs re-run from their seeds, in order
    resumed: int = 0  # of the re-runs, those whose answer came from the log (``log``)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class WorkerDied(RuntimeError):
    """A worker process of a parallel validation died (killed, out of memory): the runs it held are
    not checked, so the file is not confirmed."""


def validate(results: str | Path, rerun: int = 3, jobs: int = 1, log: str | Path | None = None) -> Validation:
    """Check every line of ``results`` (see the module docstring); ``rerun`` sampled runs are re-executed.

    ``jobs`` > 1 checks the runs and re-runs them in that many worker processes; the report is
    the same as with one. ``log``: a file of re-run answers to take and to append to (module
    docstring, *Resumed*).

    Raises:
        ResultsError: the file is missing or its header is not a results header.
        WorkerDied: a worker process died (``jobs`` > 1).
    """
    if isinstance(rerun, bool) or not isinstance(rerun, int) or rerun < 0:
        raise ValueError(f"rerun: {rerun!r} is not a number of runs (an int, 0 or more)")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs: {jobs!r} is not a number of worker processes (an int, 1 or more)")
    import torch

    torch.set_num_threads(1)  # as run_one: models give the same numbers as when the file was written
    checker = _Checker(scan_results(results, verify=True), None if log is None else _RerunLog(Path(log)))
    if jobs == 1:
        return checker.run(rerun, _Serial(checker.checks))
    with _Workers(jobs, checker) as workers:
        return checker.run(rerun, workers)


# ------------------------------------------------------------------------------------------ line shape

_SPEC_FIELDS = {f.name for f in fields(RunSpec)}
_NUMBER = (int, float)
#: Every field of a run line: its check. Optional: ``ended`` (files written before it), ``not_applicable``
#: and ``reused_from`` (a run taken over from other results, :func:`.runner.reusable_runs`).
_LINE_FIELDS: dict[str, Any] = {
    "key": str, "spec": dict, "task_uri": str, "space_size": int, "flops": _NUMBER, "reference_gflops": _NUMBER,
    "data": dict, "configs": list, "gflops": list, "errors": list, "clock": list, "best_gflops": _NUMBER,
    "agent_info": dict, "agent_secs": _NUMBER, "wall_secs": _NUMBER, "host": str, "time": _NUMBER,
}
_OPTIONAL = {"ended": str, "not_applicable": str, "reused_from": str}
_ENDS = ("budget", "space", "agent")


def _is(value: Any, kind: Any) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)


def _shape_problem(obj: dict[str, Any]) -> str | None:
    """What makes ``obj`` not a run line as :func:`runner.run_one` writes it (fields and their types)."""
    if missing := [k for k in _LINE_FIELDS if k not in obj]:
        return f"lacks the field(s) {', '.join(missing)}"
    if unknown := sorted(set(obj) - set(_LINE_FIELDS) - set(_OPTIONAL)):
        return f"has unknown field(s) {', '.join(unknown)}"
    for name, kind in {**_LINE_FIELDS, **_OPTIONAL}.items():
        if name in obj and not _is(obj[name], kind):
            return f"field {name!r} is {obj[name]!r}, not a {getattr(kind, '__name__', 'number')}"
    if obj.get("ended", "budget") not in _ENDS:
        return f"field 'ended' is {obj['ended']!r}, not one of {', '.join(_ENDS)}"
    return _spec_problem(obj["spec"]) or _trials_shape_problem(obj)


def _spec_problem(spec: dict[str, Any]) -> str | None:
    if set(spec) != _SPEC_FIELDS:
        return f"spec has the fields {sorted(spec)}, not {sorted(_SPEC_FIELDS)}"
    for name in ("agent", "task", "preset", "backend"):
        if not isinstance(spec[name], str):
            return f"spec.{name} is {spec[name]!r}, not a string"
    for name, low in (("seed", 0), ("budget", 1), ("batch", 1)):
        if not _is(spec[name], int) or spec[name] < low:
            return f"spec.{name} is {spec[name]!r}, not an int >= {low}"
    if not isinstance(spec["options"], dict):
        return f"spec.options is {spec['options']!r}, not an object"
    return None


def _trials_shape_problem(obj: dict[str, Any]) -> str | None:
    n = len(obj["configs"])
    if any(len(obj[k]) != n for k in ("gflops", "errors", "clock")):
        return (f"configs, gflops, errors and clock differ in length ({n}, {len(obj['gflops'])}, "
                f"{len(obj['errors'])}, {len(obj['clock'])})")
    for i, cfg in enumerate(obj["configs"]):
        if not isinstance(cfg, list) or not all(_is(v, int) for v in cfg):
            return f"config of trial {i + 1} is {cfg!r}, not a list of knob indices"
    for name, kind in (("gflops", _NUMBER), ("clock", _NUMBER)):
        if (bad := next((i for i, v in enumerate(obj[name]) if not _is(v, kind)), None)) is not None:
            return f"{name} of trial {bad + 1} is {obj[name][bad]!r}, not a number"
    if (bad := next((i for i, e in enumerate(obj["errors"]) if e is not None and not isinstance(e, str)), None)) \
            is not None:
        return f"error of trial {bad + 1} is {obj['errors'][bad]!r}, not a string or null"
    return None


# ------------------------------------------------------------------------------------------ the checker


@dataclass
class _Data:
    """What the bounds need of a (task, preset)'s data: the best known GFLOPS and, when the data
    is exhaustive, every config's kernel seconds."""

    best_gflops: float
    costs: np.ndarray | None


#: A run whose own checks are due: its line, its spec, and how its problems name it (``FILE:LINE: run KEY``).
_Due = tuple[RunLine, RunSpec, str]


@dataclass(frozen=True)
class _Outcome:
    """What the checks of one run found (:meth:`_RunChecks.check`): its problems, whether it is
    re-run for sure (``forced``: its agent ended it early) and whether the sample of re-runs may
    draw it (``pooled``: a replayed run whose numbers were checked)."""

    problems: tuple[str, ...] = ()
    forced: bool = False
    pooled: bool = False


class _Checker:
    """One validation of one file: the file, the set of runs and the choice of re-runs, here; each
    run's own checks and its re-run by a :class:`_RunChecks`, in this process or in workers."""

    def __init__(self, scan: ResultsScan, log: _RerunLog | None = None) -> None:
        self.scan = scan
        self.log = log
        self.report = Validation()
        self.suite = Suite.from_dict(scan.header["suite"])
        self.current = {spec.key for spec in self.suite.runs()}
        self.earlier = {spec.key for v in scan.versions[:-1] for spec in Suite.from_dict(v.suite).runs()}
        self.seen: dict[str, RunLine] = {}  # key -> its first line
        self.checks = _RunChecks()  # the runs' checks in this process (one job)

    def problem(self, text: str) -> None:
        self.report.problems.append(text)

    def run(self, rerun: int, jobs: _Jobs) -> Validation:
        self._file()
        due: list[_Due] = []
        at: list[int] = []  # where each due run's problems go among the problems (the order of the file)
        for run in self.scan.runs:
            if (item := self._line(run)) is not None:
                at.append(len(self.report.problems))
                due.append(item)
        outcomes = jobs.check(due)
        self._place(at, outcomes)
        missing = [k for k in (s.key for s in self.suite.runs()) if k not in self.seen]
        if missing:
            self.problem(f"{self.scan.path}: {len(missing)} of the {len(self.current)} runs of suite "
                         f"{self.suite.name!r} are not in the file (e.g. {'; '.join(missing[:EXAMPLES])})")
        self._reruns(rerun, due, outcomes, jobs)
        return self.report

    def _place(self, at: list[int], outcomes: list[_Outcome]) -> None:
        """Put each run's problems where its line is among the file's problems (``at``)."""
        problems, done = self.report.problems, 0
        placed: list[str] = []
        for where, outcome in zip(at, outcomes):
            placed += [*problems[done:where], *outcome.problems]
            done = where
        self.report.problems = placed + problems[done:]

    # -------------------------------------------------------------------------------- the file
    def _file(self) -> None:
        for lineno, why, _ in self.scan.bad:
            self.problem(f"{self.scan.journal}:{lineno}: {why}")
        for version in self.scan.versions:
            digest = Suite.from_dict(version.suite).digest
            if digest != version.digest:
                self.problem(f"{version.where}: suite_digest {version.digest} is not the digest of the "
                             f"suite recorded with it ({digest})")
        self._shipped()

    def _shipped(self) -> None:
        """The header's suite against the suite file of the same name shipped with the project."""
        from benchmarks.leaderboard.suite import SUITE_DIR, list_suites, load_suite

        name = self.suite.name
        if name not in list_suites():
            return
        try:
            shipped = load_suite(name)
        except SuiteError as err:
            self.problem(f"{self.scan.path}: the shipped suite {name!r} cannot be loaded: {err}")
            return
        if shipped.digest != self.suite.digest:
            header, ours = _plain(asdict(self.suite)), _plain(asdict(shipped))
            diff = [f"{k} {header[k]!r} in the file, {ours[k]!r} in the suite file" for k in
                    ("agents", "seeds", "batch", "tasks", "agent_options") if header[k] != ours[k]]
            self.problem(f"{self.scan.path}: its suite {name!r} is not {SUITE_DIR / (name + '.toml')}: "
                         + "; ".join(diff))

    # -------------------------------------------------------------------------------- one line
    def _line(self, run: RunLine) -> _Due | None:
        """The checks of the line that need no data (its shape, key, whether it repeats or belongs
        to the suite); the run when its own checks are due (:meth:`_RunChecks.check`)."""
        line = run.obj
        where = f"{run.where}: run {line['key']}"
        if problem := _shape_problem(line):
            self.problem(f"{where}: {problem}")
            return None
        spec = RunSpec(**line["spec"])
        if spec.key != line["key"]:
            self.problem(f"{where}: key is not its spec's ({spec.key})")
            return None
        if first := self.seen.get(spec.key):
            self.problem(f"{where}: repeats the run of line {first.lineno}"
                         + (f" of {first.source}" if first.source != run.source else ""))
            return None
        self.seen[spec.key] = run
        if spec.key not in self.current:
            if spec.key in self.earlier:
                self.report.stale += 1
            else:
                self.problem(f"{where}: not a run of suite {self.suite.name!r} (nor of an earlier version of it "
                             "recorded in this file)")
            return None
        self.report.checked += 1
        return run, spec, where

    # -------------------------------------------------------------------------------- re-runs
    def _reruns(self, rerun: int, due: list[_Due], outcomes: list[_Outcome], jobs: _Jobs) -> None:
        """Re-run the runs their agent ended early, and ``rerun`` more drawn with the file's content as seed."""
        to_rerun = [(r, s) for (r, s, _), o in zip(due, outcomes) if o.forced]
        forced = {r.where for r, _ in to_rerun}
        pool = [(r, s) for (r, s, _), o in zip(due, outcomes) if o.pooled and r.where not in forced]
        digest = hashlib.sha256("\n".join(r.text for r in self.scan.runs).encode()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "big"))
        picked = sorted(rng.choice(len(pool), size=min(rerun, len(pool)), replace=False).tolist()) if pool else []
        chosen = [*to_rerun, *(pool[i] for i in picked)]
        answers = self.log.answers(chosen) if self.log is not None else {}
        self.report.resumed = len(answers)
        todo = [i for i in range(len(chosen)) if i not in answers]
        log = self.log

        def done(j: int, problem: str | None) -> None:
            answers[todo[j]] = problem
            if log is not None:
                log.write(*chosen[todo[j]], problem)

        jobs.rerun([chosen[i] for i in todo], done)
        for i, (_, spec) in enumerate(chosen):
            self.report.rerun += 1
            self.report.rerun_keys.append(spec.key)
            if (problem := answers[i]) is not None:
                self.problem(problem)


class _RunChecks:
    """The checks of one run after another (identity, agent, length, numbers, bounds) and their
    re-runs, with caches of tasks, spaces, backends and data across runs. The validating process
    holds one (one job), and so does each worker process."""

    def __init__(self) -> None:
        self.problems: list[str] = []  # of the run being checked
        self.forced = False
        self.pooled = False
        self._spaces: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._backends: dict[str, Any] = {}
        self._data: dict[tuple[str, str, str], _Data] = {}

    def problem(self, text: str) -> None:
        self.problems.append(text)

    def check(self, run: RunLine, spec: RunSpec, where: str) -> _Outcome:
        """Every check of one run of the suite that needs its task, space or data."""
        self.problems, self.forced, self.pooled = [], False, False
        try:
            self._run(run, spec, where)
        except Exception as err:  # a line this host cannot check (a task it cannot build, data it lacks)
            self.problem(f"{where}: cannot be checked here: {type(err).__name__}: {err}")
        return _Outcome(tuple(self.problems), self.forced, self.pooled)

    def _run(self, run: RunLine, spec: RunSpec, where: str) -> None:
        line = run.obj
        task, space = self._space(spec.task, spec.preset)
        for name, got, truth in (("task_uri", line["task_uri"], task.uri), ("flops", line["flops"], task.flops),
                                 ("space_size", line["space_size"], space.size)):
            if got != truth:
                self.problem(f"{where}: {name} is {got!r}, but the task's is {truth!r}")
                return
        refused, opening, info = _opening(spec, task, space)
        if "not_applicable" in line:
            self._not_applicable(line, refused, where)
            return
        if refused is not None:
            self.problem(f"{where}: has {len(line['configs'])} trials, but agent {spec.agent} refuses the task "
                         f"({refused})")
            return
        if info != line["agent_info"]:
            self.problem(f"{where}: agent_info is {line['agent_info']}, but the agent runs with {info}")
            return
        if not self._trials(run, spec, space, opening, where):
            return
        if spec.backend != "live":
            self.pooled = True
            if self._numbers(line, spec, task, space, where):
                self._bounds(line, spec, task, space, where)
        elif line["data"] != {"backend": "live"}:
            self.problem(f"{where}: data is {line['data']!r}, but a live run's is {{'backend': 'live'}}")

    def _not_applicable(self, line: dict[str, Any], refused: str | None, where: str) -> None:
        left = {"configs": len(line["configs"]), "best_gflops": line["best_gflops"], "agent_info": line["agent_info"],
                "ended": line.get("ended")}
        if left_over := [f"{k} {v!r}" for k, v in left.items() if v]:
            self.problem(f"{where}: marked not applicable, but has {', '.join(left_over)} (a refused run has no "
                         "trials, best_gflops 0, no agent_info and no ended)")
        elif refused is None:
            self.problem(f"{where}: marked not applicable ({line['not_applicable']}), but agent "
                         f"{line['spec']['agent']} takes the task")
        elif refused != line["not_applicable"]:
            self.problem(f"{where}: marked not applicable ({line['not_applicable']}), but the agent refuses the "
                         f"task because {refused}")

    def _trials(self, run: RunLine, spec: RunSpec, space: Any, opening: list[tuple[int, ...]],
                where: str) -> bool:
        """Configs in the space and distinct, as many as the run gives, opened by the agent's first batch."""
        from benchmarks.leaderboard.runner import run_end

        line = run.obj
        configs = line["configs"]
        for i, cfg in enumerate(configs):
            try:
                canonical = space.check(cfg)
            except ValueError as err:
                self.problem(f"{where}: config {cfg} of trial {i + 1} is not a config of the space: {err}")
                return False
            if list(canonical) != cfg:
                self.problem(f"{where}: config {cfg} of trial {i + 1} is not canonical ({list(canonical)})")
                return False
        if len({tuple(c) for c in configs}) != len(configs):
            self.problem(f"{where}: configs repeat")
            return False
        n, most = len(configs), min(spec.budget, space.size)
        ended = run_end(n, spec.budget, space.size)
        if n > most:
            self.problem(f"{where}: {n} trials, more than min(budget {spec.budget}, space size {space.size})")
            return False
        if line.get("ended", ended) != ended:
            self.problem(f"{where}: ended is {line['ended']!r}, but a run of {n} trials (budget {spec.budget}, "
                         f"space {space.size}) ended by {ended!r}")
            return False
        if ended == "agent" and spec.backend != "live":
            self.forced = True  # only a re-run shows the agent stopped there
        first = [list(c) for c in opening[:most]]
        if configs[: len(first)] != first:
            i = next((j for j, (a, b) in enumerate(zip(configs, first)) if a != b), min(len(configs), len(first)))
            self.problem(f"{where}: trial {i + 1} is not the agent's: its first batch from seed {spec.seed} is "
                         f"{first[:EXAMPLES]}{'...' if len(first) > EXAMPLES else ''}, the file has "
                         f"{configs[:EXAMPLES]}{'...' if len(configs) > EXAMPLES else ''}")
            return False
        if line["best_gflops"] != max(line["gflops"], default=0.0):
            self.problem(f"{where}: best_gflops {line['best_gflops']} is not the best trial "
                         f"{max(line['gflops'], default=0.0)}")
            return False
        return True

    def _numbers(self, line: dict[str, Any], spec: RunSpec, task: Any, space: Any, where: str) -> bool:
        """Data identity, reference and the replay of every trial; False at the first mismatch."""
        from benchmarks.leaderboard.runner import data_identity
        from tune_gym.session import TuningSession

        backend = self._backend(spec.backend)
        data = data_identity(backend, task, spec.preset)
        if data != line["data"]:
            self.problem(f"{where}: the data answering it changed: recorded {line['data']}, now {data}")
            return False
        reference = backend.reference(task, spec.preset)
        if reference is not None and not _same(float(reference.gflops), float(line["reference_gflops"])):
            self.problem(f"{where}: reference_gflops {line['reference_gflops']} is not the data's {reference.gflops}")
            return False
        session = TuningSession(task, space, backend, budget=spec.budget)
        trials = session.evaluate([tuple(c) for c in line["configs"]]).new
        replayed: dict[str, list[Any]] = {"gflops": [t.result.gflops for t in trials],
                                          "errors": [t.result.error for t in trials],
                                          "clock": [t.clock for t in trials]}
        for name, got in replayed.items():
            recorded = line[name]
            if len(got) != len(recorded) or any(not _same(a, b) for a, b in zip(got, recorded)):
                i = next((i for i, (a, b) in enumerate(zip(got, recorded)) if not _same(a, b)),
                         min(len(got), len(recorded)))
                in_file = recorded[i] if i < len(recorded) else "-"
                again = got[i] if i < len(got) else "-"
                self.problem(f"{where}: {name} of trial {i + 1} is {in_file} in the file but {again} on replay")
                return False
        return True

    def _bounds(self, line: dict[str, Any], spec: RunSpec, task: Any, space: Any, where: str) -> None:
        """What the leaderboard derives from the run is within its bounds (module docstring)."""
        gflops, clock = np.asarray(line["gflops"], dtype=float), np.asarray(line["clock"], dtype=float)
        if not (np.all(np.isfinite(gflops)) and np.all(gflops >= 0)):
            self.problem(f"{where}: gflops must be finite and >= 0")
            return
        if not (np.all(np.isfinite(clock)) and np.all(clock >= 0) and np.all(np.diff(clock) >= 0)):
            self.problem(f"{where}: clock must be finite, >= 0 and non-decreasing")
            return
        if not (math.isfinite(line["agent_secs"]) and line["agent_secs"] >= 0):
            self.problem(f"{where}: agent_secs {line['agent_secs']} is not finite and >= 0")
            return
        data = self._data_of(spec, task, space)
        if data.costs is None or spec.backend != "replay" or not gflops.size:
            return  # bounds hold on replayed, exhaustively measured spaces only (a surrogate may predict more)
        if line["best_gflops"] > data.best_gflops * (1 + BOUND_RTOL):
            self.problem(f"{where}: best_gflops {line['best_gflops']} is above the best known "
                         f"{data.best_gflops} of the exhaustively measured space")
            return
        with np.errstate(divide="ignore"):
            times = np.where(gflops > 0, line["flops"] / (gflops * 1e9), np.nan)
        valid = int(np.isfinite(data.costs).sum())
        for budget in (None, min(spec.budget, valid)):  # the leaderboard's P over the method's budget and the run's
            _, p = M.score_curve(times, data.costs, budget=budget)
            if np.nanmax(p, initial=-math.inf) > 1 + BOUND_RTOL:
                self.problem(f"{where}: its random-relative score P reaches {np.nanmax(p):.3f} (at most 1: the "
                             f"optimum) with flops {line['flops']}")
                return

    # -------------------------------------------------------------------------------- re-runs
    def rerun(self, run: RunLine, spec: RunSpec) -> str | None:
        """The problem with ``run`` re-run from its seed (it fails, or proposes other configs), or None."""
        from benchmarks.leaderboard.runner import run_one

        line, where = run.obj, f"{run.where}: run {spec.key}"
        try:
            again = run_one(spec)
        except Exception as err:
            return f"{where}: re-run from its seed fails: {type(err).__name__}: {err}"
        if again.get("not_applicable") != line.get("not_applicable"):
            return (f"{where}: recorded as not applicable ({line.get('not_applicable')}), "
                    f"but re-run gives {again.get('not_applicable') or 'a run'}")
        if again["configs"] != line["configs"]:
            first = next((j for j, (a, b) in enumerate(zip(again["configs"], line["configs"])) if a != b),
                         min(len(again["configs"]), len(line["configs"])))
            why = ""
            if again.get("agent_info", {}) != line.get("agent_info", {}):
                why = f" (the agent now runs with {again.get('agent_info')}, recorded {line.get('agent_info', {})})"
            elif again.get("host") != line.get("host"):
                why = (f" (recorded on host {line.get('host')}, re-run on {again.get('host')}: if the run was "
                       f"written without pinned numerics, see tune_gym.numerics)")
            return (f"{where}: re-run from its seed proposes other configs from trial {first + 1} "
                    f"({len(again['configs'])} trials, the file has {len(line['configs'])}){why}")
        return None

    # -------------------------------------------------------------------------------- caches
    def _space(self, task_id: str, preset: str) -> tuple[Any, Any]:
        from tune_gym.space import KnobSpace
        from tune_gym.tasks import Task

        key = (task_id, preset)
        if key not in self._spaces:
            task = Task.parse(task_id)
            self._spaces[key] = (task, KnobSpace.for_task(task, preset))
        return self._spaces[key]

    def _backend(self, name: str) -> Any:
        from tune_gym.measure import make_backend

        if name not in self._backends:
            self._backends[name] = make_backend(name)
        return self._backends[name]

    def _data_of(self, spec: RunSpec, task: Any, space: Any) -> _Data:
        key = (spec.backend, task.uri, spec.preset)
        if key not in self._data:
            backend = self._backend(spec.backend)
            datasets: list[Any] = backend.datasets(task, spec.preset)
            exhaustive = next((d for d in datasets if d.exhaustive), None)
            self._data[key] = _Data(max((d.best_gflops for d in datasets), default=math.nan),
                                    None if exhaustive is None else exhaustive.mean_cost)
        return self._data[key]


def _opening(spec: RunSpec, task: Any, space: Any) -> tuple[str | None, list[tuple[int, ...]], dict[str, Any]]:
    """``(why the agent refuses the task, [], {})``, or ``(None, its first batch, what it runs with)``:
    the agent made with the run's options, reset with its seed and asked for one batch, as
    :class:`agents.EnvRunner` does before any measurement. A Kernel Tuner strategy
    (:mod:`.kt_entries`) has no first batch short of running it: ``[]`` (its re-run checks it)."""
    from agents import NotApplicable, make_agent
    from benchmarks.leaderboard import kt_entries

    if kt_entries.is_entry(spec.agent):
        refused = kt_entries.refusal(task)
        return (refused, [], {}) if refused is not None else (None, [], kt_entries.entry_info(spec.agent, spec.budget))
    agent = make_agent(base_agent(spec.agent), **spec.options)
    try:
        agent.reset(space, task, spec.seed)
    except NotApplicable as exc:
        return str(exc), [], {}
    proposed = agent.propose(spec.batch)[: spec.batch]
    return None, list(dict.fromkeys(space.canonical(c) for c in proposed)), agent.describe()


def _plain(value: Any) -> Any:
    """Tuples as lists (a suite as JSON shows it)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return [_plain(v) for v in value] if isinstance(value, (list, tuple)) else value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=FLOAT_RTOL, abs_tol=0.0) or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


# ------------------------------------------------------------------------------------------ the re-run log

#: The packages whose code a re-run runs (agents, harness, Kernel Tuner entries, the core).
_CODE_PACKAGES = ("tune_gym", "agents", "benchmarks")
#: The distributions whose arithmetic or choices a re-run goes through.
_CODE_DISTRIBUTIONS = ("numpy", "scipy", "torch", "xgboost", "scikit-learn", "botorch", "gpytorch",
                       "stable-baselines3", "kernel_tuner", "apache-tvm")


def rerun_identity() -> dict[str, str]:
    """What a re-run's answer depends on besides the run's line: this host (:func:`tune_gym.host.host_id`),
    the numerics pin's variables (:mod:`tune_gym.numerics`) and the code: a SHA-256 of the
    project's Python sources and the versions of the libraries its agents compute with."""
    import importlib
    from importlib.metadata import PackageNotFoundError, version

    from tune_gym.host import host_id
    from tune_gym.numerics import OPT_OUT, pinned_environ

    code = hashlib.sha256()
    for package in _CODE_PACKAGES:
        root = Path(importlib.import_module(package).__file__ or "").parent
        for source in sorted(root.rglob("*.py")):
            code.update(f"{package}/{source.relative_to(root).as_posix()}\0".encode())
            code.update(source.read_bytes())
    for dist in _CODE_DISTRIBUTIONS:
        try:
            code.update(f"{dist}=={version(dist)}\0".encode())
        except PackageNotFoundError:
            code.update(f"{dist} absent\0".encode())
    numerics = {name: os.environ.get(name, "") for name in (*pinned_environ(), OPT_OUT)}
    return {"host": host_id(), "numerics": json.dumps(numerics, sort_keys=True), "code": code.hexdigest()}


class _RerunLog:
    """The re-runs' answers of earlier validations (module docstring, *Resumed*): a JSON Lines file,
    appended to one answer at a time (a torn last line, from a kill, is skipped and left alone)."""

    def __init__(self, path: Path) -> None:
        """Open (or create) the log at ``path``, with its folder: a bad path fails here, before any re-run.

        Raises:
            ValueError: ``path`` is a folder, or the file or its folder cannot be made or written.
        """
        if path.is_dir():
            raise ValueError(f"log: {path} is a folder, not a file")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a+b") as f:  # made if missing; its last byte read
                size = f.seek(0, os.SEEK_END)
                f.seek(max(size - 1, 0))
                torn = size > 0 and f.read(1) != b"\n"
        except OSError as err:
            raise ValueError(f"log: cannot write {path} ({err.strerror or err})") from err
        self.path = path
        self.identity = rerun_identity()
        self._torn = torn  # the last line was cut by a kill: the next answer starts a line of its own

    @staticmethod
    def _where(run: RunLine, spec: RunSpec) -> str:
        return f"{run.where}: run {spec.key}"  # how a re-run's problem names the run (_RunChecks.rerun)

    @staticmethod
    def _digest(run: RunLine) -> str:
        return hashlib.sha256(run.text.encode()).hexdigest()

    def answers(self, chosen: list[tuple[RunLine, RunSpec]]) -> dict[int, str | None]:
        """The answers the log holds for ``chosen`` (by index): same line, host, numerics and code."""
        known: dict[str, str | None] = {}
        for text in self.path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(text)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict) and entry.get("identity") == self.identity and isinstance(entry.get("run"), str):
                known[entry["run"]] = entry.get("problem")
        found: dict[int, str | None] = {}
        for i, (run, spec) in enumerate(chosen):
            if (digest := self._digest(run)) in known:
                problem = known[digest]
                found[i] = None if problem is None else f"{self._where(run, spec)}: {problem}"
        return found

    def write(self, run: RunLine, spec: RunSpec, problem: str | None) -> None:
        where = self._where(run, spec)
        if problem is not None and problem.startswith(where + ": "):
            problem = problem[len(where) + 2:]  # the place is the file's, not the answer's
        entry = {"run": self._digest(run), "key": spec.key, "identity": self.identity, "problem": problem}
        with self.path.open("a", encoding="utf-8") as out:
            out.write(("\n" if self._torn else "") + json.dumps(entry, sort_keys=True) + "\n")  # torn line: left alone
            out.flush()
            os.fsync(out.fileno())
        self._torn = False


# ------------------------------------------------------------------------------------------ jobs


#: Told each re-run's answer as it comes: its index among those asked, and its problem or None.
_Done = Callable[[int, "str | None"], None]


class _Jobs(Protocol):
    """Who runs the runs' own checks and the re-runs: the results come back in the order given."""

    def check(self, due: list[_Due]) -> list[_Outcome]: ...

    def rerun(self, chosen: list[tuple[RunLine, RunSpec]], done: _Done) -> None:
        """Re-run ``chosen``; ``done(i, problem)`` as the answer of ``chosen[i]`` comes."""


class _Serial:
    """One job: every run's checks and re-run in this process, one after the other."""

    def __init__(self, checks: _RunChecks) -> None:
        self.checks = checks

    def check(self, due: list[_Due]) -> list[_Outcome]:
        return [self.checks.check(*item) for item in due]

    def rerun(self, chosen: list[tuple[RunLine, RunSpec]], done: _Done) -> None:
        for i, (run, spec) in enumerate(chosen):
            done(i, self.checks.rerun(run, spec))


class _Workers:
    """``jobs`` worker processes (a context manager), set up as the bench's (:mod:`.runner`): the
    runs' checks go to them in chunks of one (task, preset) (:func:`_chunks`), the re-runs one by
    one. At most one chunk per worker is out at a time, so when a worker dies the runs named are
    those the workers held."""

    def __init__(self, jobs: int, checker: _Checker) -> None:
        _check_kinds(checker.suite, jobs)
        self.jobs = jobs
        self.path = checker.scan.path
        self.modules = _agent_modules(checker.suite)
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> _Workers:
        import multiprocessing

        # "spawn", as the bench: TVM's runtime and thread pools do not survive fork.
        self._pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_worker_start, initargs=(os.getpid(), self.modules))
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._pool is not None
        self._pool.shutdown(wait=True, cancel_futures=True)

    def check(self, due: list[_Due]) -> list[_Outcome]:
        chunks = _chunks([(spec.task, spec.preset) for _, spec, _ in due], self.jobs)
        return self._map(_check_chunk, due, chunks)

    def rerun(self, chosen: list[tuple[RunLine, RunSpec]], done: _Done) -> None:
        self._map(_rerun_chunk, chosen, [[i] for i in range(len(chosen))], done)

    def _map(self, fn: Callable[[list[Any]], list[Any]], items: Sequence[tuple[Any, ...]],
             chunks: list[list[int]], done: _Done | None = None) -> list[Any]:
        """``fn`` of each chunk of ``items`` (lists of indices) in the workers; its results by index
        (and ``done(index, result)`` as each chunk's come back)."""
        assert self._pool is not None
        pool, results = self._pool, [None] * len(items)
        todo: Iterator[list[int]] = iter(chunks)
        out: dict[Future[list[Any]], list[int]] = {}

        def send() -> None:
            if (chunk := next(todo, None)) is not None:
                out[pool.submit(fn, [items[i] for i in chunk])] = chunk

        for _ in range(self.jobs):
            send()
        while out:
            finished, _ = wait(out, return_when=FIRST_COMPLETED)
            for fut in finished:
                chunk = out.pop(fut)
                try:
                    answers = fut.result()
                except BrokenProcessPool as err:
                    held = [items[i] for c in (chunk, *out.values()) for i in c]
                    raise WorkerDied(f"validate {self.path}: a worker process died (killed, or out of memory) while "
                                     f"the workers held these {len(held)} runs, which are not checked: "
                                     + "; ".join(f"{run.where}: run {spec.key}" for run, spec, *_ in held)) from err
                for i, answer in zip(chunk, answers):
                    results[i] = answer
                    if done is not None:
                        done(i, answer)
                send()
        return results


def _chunks(groups: list[tuple[str, str]], jobs: int) -> list[list[int]]:
    """The indices of ``groups`` (each run's (task, preset)) in chunks of one group, of at most
    :data:`CHUNK` and small enough that each of the ``jobs`` workers gets several (the last
    chunks then end close together)."""
    by_group: dict[tuple[str, str], list[int]] = {}
    for i, group in enumerate(groups):
        by_group.setdefault(group, []).append(i)
    size = max(1, min(CHUNK, math.ceil(len(groups) / (4 * jobs))))
    return [ids[j: j + size] for ids in by_group.values() for j in range(0, len(ids), size)]


def _check_kinds(suite: Suite, jobs: int) -> None:
    """Worker processes must find each task's target kind (a core, builtin or entry-point kind), or
    their report would differ from this process's. A task that cannot be made is no error here:
    its runs' checks say so, in a worker as in this process."""
    from benchmarks.leaderboard.runner import local_only_kinds

    if local := local_only_kinds(suite):
        task_id, kind = local[0]
        raise ValueError(f"jobs: {jobs}: task {task_id}: target kind {kind!r} is registered in this process only; "
                         "declare it in the tune_gym.kinds entry-point group to validate in worker processes "
                         "(or validate with one job)")


def _agent_modules(suite: Suite) -> list[str]:
    """The modules that define the suite's agents, for the workers to import: an agent registered
    by a module this process imported (neither built in nor an entry point) is then known there
    too. An agent that cannot be made is left out: its runs' checks say so."""
    from agents.base import agent_class
    from benchmarks.leaderboard import kt_entries

    modules = set()
    for name in {base_agent(a) for a in suite.agents}:
        if not kt_entries.is_entry(name):
            try:
                modules.add(agent_class(name).__module__)
            except Exception:
                continue
    return sorted(modules)


#: A worker process's checks, made on its first chunk (caches kept across its chunks).
_WORKER: dict[str, Any] = {}


def _worker_start(parent: int, modules: list[str]) -> None:
    """A worker's setup: the bench's (one thread; it dies with ``parent``), then the modules to import."""
    from benchmarks.leaderboard.runner import worker_init

    worker_init(parent)
    _WORKER["modules"] = modules


def _worker_checks() -> _RunChecks:
    if "checks" not in _WORKER:
        import importlib

        import torch

        torch.set_num_threads(1)  # as validate() in the parent
        for module in _WORKER.get("modules", ()):
            importlib.import_module(module)
        _WORKER["checks"] = _RunChecks()
    checks: _RunChecks = _WORKER["checks"]
    return checks


def _check_chunk(due: list[_Due]) -> list[_Outcome]:
    checks = _worker_checks()
    return [checks.check(*item) for item in due]


def _rerun_chunk(chosen: list[tuple[RunLine, RunSpec]]) -> list[str | None]:
    checks = _worker_checks()
    return [checks.rerun(run, spec) for run, spec in chosen]
