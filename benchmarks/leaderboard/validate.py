"""``tune-gym validate RESULTS``: replay a results file and confirm every number in it.

For each run line: the data that answers it now must be the data it was run on (dataset
checksums); its configs, replayed through a fresh :class:`tune_gym.session.TuningSession`
on that data, must give exactly its GFLOPS, errors and simulated clock; its best and
reference must follow. A sample of runs is also re-run from its seed, and the agent must
propose exactly the recorded configs (so a file whose configs were swapped for better ones
fails too). Live runs cannot be replayed; their lines are checked for consistency only.
Runs of an earlier version of the suite (a suite that changed since) are not shown on the
leaderboard and not checked; the report counts them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.leaderboard.results import read_results
from benchmarks.leaderboard.suite import RunSpec

__all__ = ["Validation", "validate"]


@dataclass
class Validation:
    checked: int = 0
    rerun: int = 0
    stale: int = 0  # runs of an earlier version of the suite, not checked
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def validate(results: str | Path, rerun: int = 3, seed: int = 0) -> Validation:
    """Check every run of ``results`` (see the module docstring); ``rerun`` runs are re-executed."""
    from benchmarks.leaderboard.runner import _data_identity, run_one
    from benchmarks.leaderboard.suite import Suite
    from tune_gym.measure import make_backend
    from tune_gym.session import TuningSession
    from tune_gym.space import KnobSpace
    from tune_gym.tasks import Task

    header, runs = read_results(results)
    current = {spec.key for spec in Suite.from_dict(header["suite"]).runs()}
    report = Validation(stale=sum(r["key"] not in current for r in runs))
    runs = [r for r in runs if r["key"] in current]  # what the leaderboard shows
    backends: dict[str, Any] = {}
    for line in runs:
        spec = RunSpec(**line["spec"])
        where = f"run {spec.key}"
        report.checked += 1
        if "not_applicable" in line:  # no trials to replay; a re-run must refuse the task again
            if line["configs"]:
                report.problems.append(f"{where}: marked not applicable but has {len(line['configs'])} trials")
            continue
        gflops = line["gflops"]
        if line["best_gflops"] != max(gflops, default=0.0):
            report.problems.append(f"{where}: best_gflops {line['best_gflops']} is not the best trial {max(gflops)}")
        if len({tuple(c) for c in line["configs"]}) != len(line["configs"]) or len(line["configs"]) > spec.budget:
            report.problems.append(f"{where}: configs repeat or exceed the budget {spec.budget}")
        if spec.backend == "live":
            continue
        task = Task.from_uri(line["task_uri"])
        space = KnobSpace.for_task(task, spec.preset)
        backend = backends.setdefault(spec.backend, make_backend(spec.backend))
        if _data_identity(backend, task, spec.preset) != line["data"]:
            report.problems.append(f"{where}: the data answering it changed: recorded {line['data']}, now "
                                   f"{_data_identity(backend, task, spec.preset)}")
            continue
        reference = backend.reference(task, spec.preset)
        if reference is not None and not math.isclose(reference.gflops, line["reference_gflops"]):
            report.problems.append(f"{where}: reference {line['reference_gflops']} is not the recorded "
                                   f"{reference.gflops}")
        session = TuningSession(task, space, backend, budget=spec.budget)
        trials = session.evaluate([space.check(c) for c in line["configs"]]).new
        for name, got in (("gflops", [t.result.gflops for t in trials]), ("errors", [t.result.error for t in trials]),
                          ("clock", [t.clock for t in trials])):
            recorded = line[name]
            if len(got) != len(recorded) or any(not _same(a, b) for a, b in zip(got, recorded)):
                i = next((i for i, (a, b) in enumerate(zip(got, recorded)) if not _same(a, b)),
                         min(len(got), len(recorded)))
                in_file = recorded[i] if i < len(recorded) else "-"
                replayed = got[i] if i < len(got) else "-"
                report.problems.append(f"{where}: {name} of trial {i + 1} is {in_file} in the file but {replayed} "
                                       "on replay")
                break
    replayable = [r for r in runs if r["spec"]["backend"] != "live"]
    rng = np.random.default_rng(seed)
    for i in rng.choice(len(replayable), size=min(rerun, len(replayable)), replace=False) if replayable else []:
        line = replayable[int(i)]
        spec = RunSpec(**line["spec"])
        again = run_one(spec)
        report.rerun += 1
        if again.get("not_applicable") != line.get("not_applicable"):
            report.problems.append(f"run {spec.key}: recorded as not applicable ({line.get('not_applicable')}), "
                                   f"but re-run gives {again.get('not_applicable') or 'a run'}")
        elif again["configs"] != line["configs"]:
            first = next((j for j, (a, b) in enumerate(zip(again["configs"], line["configs"])) if a != b),
                         min(len(again["configs"]), len(line["configs"])))
            why = ""
            if again.get("agent_info", {}) != line.get("agent_info", {}):
                why = f" (the agent now runs with {again.get('agent_info')}, recorded {line.get('agent_info', {})})"
            report.problems.append(f"run {spec.key}: re-run from its seed proposes other configs from trial "
                                   f"{first + 1}{why}")
    return report


#: Relative tolerance of a replayed float against the recorded one. Replay reproduces every bit,
#: but the surrogate's XGBoost sums its trees with the host's SIMD width, so the same prediction
#: differs in the last bit or two between CPUs (seen: Zen 3 against Zen 5, about 2e-16 relative).
#: Anything a tampered or mis-replayed file shows is many orders above this.
FLOAT_RTOL = 1e-9


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=FLOAT_RTOL, abs_tol=0.0) or (math.isnan(a) and math.isnan(b))
    return a == b
