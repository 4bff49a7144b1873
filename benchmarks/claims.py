"""The papers' headline comparisons, measured on the committed leaderboard results.

``python -m benchmarks.claims [--standard FILE] [--standard-v1 FILE] [--vta FILE] [--external FILE]``

Reads only results files (``benchmarks/results/leaderboard/*.parquet``) and prints one markdown row
per figure: the claim it tests, the suite, the hosts that ran the runs, and the figure. Every
comparison pairs two agents on the same task and seed, so both were answered by the same recorded
measurements. Three kinds of figure:

* **time to the baseline's quality** (AdaTune's "1.3-3.9x faster than AutoTVM to find the best plan",
  Chameleon's "4.45x faster optimization"): per seed, the target is the throughput the baseline
  (``xgb-sa``, AutoTVM) has at the end of its run; the time is the tuning time until the best-so-far
  first reaches it (:func:`benchmarks.leaderboard.metrics.time_to_target`: the simulated measuring
  clock plus the agent's own compute seconds pro rata). Per task the speed-up is the baseline's median
  time over the agent's median time. A seed where the agent never reaches the target counts with its
  whole run, so the speed-up is an upper bound there; the rows say how many seeds reached it.
* **throughput at equal time** (AdaTune's "up to 115% higher GFLOPS under the same time budget"): per
  task the horizon is the shorter of the two agents' median run times; at fractions of it the gain is
  the agent's median best-so-far over the baseline's, minus 1
  (:func:`benchmarks.leaderboard.metrics.best_so_far_at` on the tuning time).
* **final throughput** (MetaTune's "+8% over AutoTVM, +13% over RL search", Chameleon's "5.6% faster
  inference", One-Shot's "comparable inference time"): per task the agent's median final best over the
  baseline's, then the weighted geometric mean over tasks with the leaderboard's weights (each network
  weighs the same).

What the times cover: on replay the measuring clock is the recorded build + run seconds of each
config, identical for every agent, and the agent's seconds are its compute on the host that ran the
suite. Savings from measuring each config faster (AdaTune's adaptive evaluator) or from building
fewer programs are not in them.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.leaderboard import metrics as M
from benchmarks.leaderboard.report import network_weights
from benchmarks.leaderboard.results import read_results

__all__ = ["COMPARISONS", "SuiteRuns", "TaskFigure", "equal_time_gain", "final_gain", "load", "rows",
           "summary_rows", "time_to_quality"]

RESULTS = Path(__file__).parent / "results" / "leaderboard"
#: Spaces at least this large count as "large" for AdaTune's equal-time claim.
LARGE_SPACE = 10_000
#: Fractions of the common horizon at which throughput is compared at equal time.
FRACTIONS = (0.25, 0.5, 1.0)


@dataclass
class SuiteRuns:
    """One results file's runs by ``(task, preset)``, agent and seed (declined runs left out), with each
    task's weight in the leaderboard's geometric means and the hosts that ran each agent."""

    name: str
    runs: dict[tuple[str, str], dict[str, dict[int, dict[str, Any]]]]
    weights: dict[tuple[str, str], float]

    def hosts(self, agents: Iterable[str]) -> str:
        """The host ids that ran ``agents``' runs, comma-separated."""
        wanted = set(agents)
        found = {run.get("host", "?") for by_agent in self.runs.values() for a, seeds in by_agent.items()
                 if a in wanted for run in seeds.values()}
        return ", ".join(sorted(found))

    def pairs(self, agent: str, baseline: str, min_space: int = 0) -> list[tuple[tuple[str, str], list[int]]]:
        """Tasks (of at least ``min_space`` configs) where both agents ran, with the seeds both ran."""
        out = []
        for task, by_agent in sorted(self.runs.items()):
            if agent in by_agent and baseline in by_agent:
                seeds = sorted(set(by_agent[agent]) & set(by_agent[baseline]))
                if seeds and by_agent[agent][seeds[0]].get("space_size", 0) >= min_space:
                    out.append((task, seeds))
        return out


def load(path: str | Path) -> SuiteRuns:
    """The runs of the results named ``path`` (a ``.parquet`` or ``.jsonl`` name, see
    :func:`benchmarks.leaderboard.results.read_results`)."""
    header, lines = read_results(path)
    runs: dict[tuple[str, str], dict[str, dict[int, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    for line in lines:
        if "not_applicable" not in line:
            spec = line["spec"]
            runs[(spec["task"], spec["preset"])][spec["agent"]][int(spec["seed"])] = line
    return SuiteRuns(header["suite"]["name"], runs, network_weights(header["suite"]["tasks"]))


@dataclass
class TaskFigure:
    """One task's figure: ``value`` (a speed-up, a ratio or a gain), the seeds compared, and for time to
    quality the seeds where the agent reached the baseline's final throughput."""

    task: tuple[str, str]
    value: float
    seeds: int
    reached: int | None = None


def _final(run: dict[str, Any]) -> float:
    curve = M.best_so_far(run["gflops"])
    return float(curve[-1]) if curve.size else 0.0


def _seconds(run: dict[str, Any]) -> np.ndarray:
    return M.tuning_clock(run["clock"], run["agent_secs"])


def time_to_quality(suite: SuiteRuns, agent: str, baseline: str = "xgb-sa", min_space: int = 0) -> list[TaskFigure]:
    """Per task: the baseline's median time to its own final best over the agent's median time to
    the same throughput (see the module docstring). Seeds where the baseline found nothing valid are
    left out."""
    out = []
    for task, seeds in suite.pairs(agent, baseline, min_space):
        ours, theirs, reached = [], [], 0
        for seed in seeds:
            a, b = suite.runs[task][agent][seed], suite.runs[task][baseline][seed]
            target = _final(b)
            if target <= 0:
                continue
            theirs.append(M.time_to_target(b["gflops"], b["clock"], b["agent_secs"], target)[0])
            secs, n = M.time_to_target(a["gflops"], a["clock"], a["agent_secs"], target)
            ours.append(secs)
            reached += n is not None
        if ours:
            out.append(TaskFigure(task, float(np.median(theirs) / np.median(ours)), len(ours), reached))
    return out


def equal_time_gain(suite: SuiteRuns, agent: str, baseline: str = "xgb-sa", min_space: int = 0,
                    fractions: Sequence[float] = FRACTIONS) -> dict[float, list[TaskFigure]]:
    """Per fraction of the horizon and task: the agent's median best-so-far over the baseline's at
    equal tuning time, minus 1 (see the module docstring). A task where the baseline has found
    nothing valid at that time is left out of that fraction."""
    out: dict[float, list[TaskFigure]] = {f: [] for f in fractions}
    for task, seeds in suite.pairs(agent, baseline, min_space):
        a = [suite.runs[task][agent][s] for s in seeds]
        b = [suite.runs[task][baseline][s] for s in seeds]
        horizon = min(float(np.median([_seconds(r)[-1] for r in runs])) for runs in (a, b))
        for f in fractions:
            at = [float(np.median([M.best_so_far_at(r["gflops"], _seconds(r), [f * horizon])[0] for r in runs]))
                  for runs in (a, b)]
            if at[1] > 0:
                out[f].append(TaskFigure(task, at[0] / at[1] - 1, len(seeds)))
    return out


def final_gain(suite: SuiteRuns, agent: str, baseline: str = "xgb-sa") -> list[TaskFigure]:
    """Per task: the agent's median final best over the baseline's (a ratio; 1 = equal)."""
    out = []
    for task, seeds in suite.pairs(agent, baseline):
        mine = float(np.median([_final(suite.runs[task][agent][s]) for s in seeds]))
        theirs = float(np.median([_final(suite.runs[task][baseline][s]) for s in seeds]))
        if theirs > 0:
            out.append(TaskFigure(task, mine / theirs, len(seeds)))
    return out


def _span(figures: Sequence[TaskFigure], fmt: str) -> str:
    values = [f.value for f in figures]
    return f"{fmt.format(min(values))} to {fmt.format(max(values))}"


def _weighted(suite: SuiteRuns, figures: Sequence[TaskFigure]) -> float:
    return M.geomean([f.value for f in figures], [suite.weights.get(f.task, 1.0) for f in figures])


def _seeds(figures: Sequence[TaskFigure]) -> str:
    counts = sorted({f.seeds for f in figures})
    return f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"


def _name(task: tuple[str, str]) -> str:
    return task[0].split("?")[0]


#: The figures :func:`summary_rows` can print.
KINDS = ("time", "equal_time", "final")


def summary_rows(suite: SuiteRuns, claim: str, agent: str, baseline: str = "xgb-sa",
                 kinds: Sequence[str] = KINDS) -> list[str]:
    """The markdown rows of one (agent, baseline) pair on one suite, of the ``kinds`` asked for: time to
    the baseline's quality on every task (``time``), throughput at equal time on the large spaces
    (``equal_time``, :data:`LARGE_SPACE`), final throughput (``final``)."""
    if unknown := sorted(set(kinds) - set(KINDS)):
        raise ValueError(f"kinds: {unknown} are not among {list(KINDS)}")
    where = f"`{suite.name}` ({suite.hosts([agent, baseline])})"
    out = []
    if "time" in kinds and (ttq := time_to_quality(suite, agent, baseline)):
        reached = sum(f.reached or 0 for f in ttq)
        total = sum(f.seeds for f in ttq)
        out.append(f"| {claim} | {where} | time to `{baseline}`'s final best, `{baseline}` time / `{agent}` time: "
                   f"{_span(ttq, '{:.2f}x')} over {len(ttq)} tasks (median {np.median([f.value for f in ttq]):.2f}x, "
                   f"{_seeds(ttq)} seeds; >= 1.3x on {sum(f.value >= 1.3 for f in ttq)}); `{agent}` reached the "
                   f"target in {reached} of {total} runs |")
    gains = equal_time_gain(suite, agent, baseline, LARGE_SPACE) if "equal_time" in kinds else {}
    if full := gains.get(1.0):
        best = max((f for figs in gains.values() for f in figs), key=lambda f: f.value)
        frac = next(k for k, figs in gains.items() if best in figs)
        out.append(f"| {claim} | {where} | GFLOPS at equal time on {len(full)} spaces of >= {LARGE_SPACE:,} configs, "
                   f"`{agent}` / `{baseline}` - 1: {_span(full, '{:+.0%}')} at the common horizon "
                   f"(median {np.median([f.value for f in full]):+.0%}); largest {best.value:+.0%} "
                   f"({_name(best.task)}, at {frac:g} of it) |")
    if "final" in kinds and (fg := final_gain(suite, agent, baseline)):
        out.append(f"| {claim} | {where} | final best, `{agent}` / `{baseline}`: weighted geomean "
                   f"{_weighted(suite, fg):.3f} over {len(fg)} tasks ({_span(fg, '{:.3f}')}; {_seeds(fg)} seeds) |")
    return out


#: The standard suite and its earlier version, where every comparison is printed.
STANDARD = ("standard", "standard-v1")
#: (claim, agent, baseline, suites, figures) of every printed comparison.
COMPARISONS: tuple[tuple[str, str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("AdaTune", "contextual-sa", "xgb-sa", (*STANDARD, "vta", "external"), ("time", "equal_time")),
    ("MetaTune", "meta-bo", "xgb-sa", STANDARD, ("final",)),
    ("MetaTune", "meta-bo", "rl-ppo", STANDARD, ("final",)),
    ("One-Shot", "one-shot", "xgb-sa", STANDARD, ("final",)),
    ("Chameleon", "rl-ppo", "xgb-sa", STANDARD, ("time", "final")),
)
#: The suites whose results are read, each from ``RESULTS/NAME.parquet`` unless given.
SUITES = (*STANDARD, "vta", "external")


def rows(suites: dict[str, SuiteRuns]) -> list[str]:
    """The table: a header, then every comparison of :data:`COMPARISONS` on the suites given."""
    out = ["| claim | results (hosts) | our figure |", "|---|---|---|"]
    for claim, agent, baseline, names, kinds in COMPARISONS:
        for name in names:
            if name in suites:
                out += summary_rows(suites[name], claim, agent, baseline, kinds)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in SUITES:
        parser.add_argument(f"--{name}", type=Path, default=RESULTS / f"{name}.parquet",
                            help=f"results of the {name} suite (default: %(default)s)")
    args = parser.parse_args(argv)
    suites = {name: load(getattr(args, name.replace("-", "_"))) for name in SUITES}
    print("\n".join(rows(suites)))


if __name__ == "__main__":
    main()
