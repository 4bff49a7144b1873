"""One-Shot Tuner's two headline numbers, from a leaderboard results file.

``python -m benchmarks.oneshot_report benchmarks/results/leaderboard/standard-v1.parquet [--against xgb-sa]``

Per task of the file that has ``one-shot`` runs:

* **quality**: the best throughput ``one-shot`` found with its 64 measurements, as a fraction of the
  best throughput measured in the task's dataset (the paper's target: >= 95%), mean over seeds;
* **compile-time saving at equal quality**: for each seed, the tuning time ``one-shot`` took
  (its agent seconds, i.e. the one search, plus the simulated measuring clock of its 64 configs)
  against the time the other agent (``xgb-sa`` by default) took until its best-so-far first
  reached the same throughput (its measuring clock at that trial plus its agent seconds up to
  it, pro rata). A seed where the other agent never reaches it within its budget counts as its
  whole run and the saving is reported as a lower bound (``>``).

Times are those the leaderboard records: measuring seconds are the replayed/surrogate clock of the
recorded build + run seconds, agent seconds are wall time of the agent's own code on the machine
that ran the leaderboard.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.leaderboard.metrics import time_to_target
from benchmarks.leaderboard.results import read_results

__all__ = ["report"]


def _runs(path: Path) -> dict[tuple[str, str], dict[str, dict[int, dict[str, Any]]]]:
    """The file's runs by ``(task, preset)``, agent and seed (runs an agent declined left out)."""
    out: dict[tuple[str, str], dict[str, dict[int, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    for doc in read_results(path)[1]:
        if "not_applicable" in doc:
            continue
        spec = doc["spec"]
        out[(spec["task"], spec["preset"])][spec["agent"]][int(spec["seed"])] = doc
    return out


def _best_known(task: str, preset: str) -> float | None:
    from tune_gym.datasets.catalog import find_dataset

    entry = find_dataset(task, preset)
    if entry is None:
        return None
    from tune_gym.datasets import load_dataset

    cost = np.asarray(load_dataset(entry.path).mean_cost, dtype=np.float64)
    cost = cost[np.isfinite(cost)]
    return float(entry.meta["flops"] / cost.min() / 1e9) if cost.size else None


def report(path: Path, against: str = "xgb-sa") -> list[dict[str, Any]]:
    """One row per task with ``one-shot`` runs (see the module docstring)."""
    rows = []
    for (task, preset), agents in sorted(_runs(path).items()):
        if "one-shot" not in agents:
            continue
        best = _best_known(task, preset)
        quality, ours, theirs, trials, lower = [], [], [], [], False
        for seed, doc in sorted(agents["one-shot"].items()):
            if best:
                quality.append(doc["best_gflops"] / best)
            ours.append(doc["agent_secs"] + (doc["clock"][-1] if doc["clock"] else 0.0))
            other = agents.get(against, {}).get(seed)
            if other is not None:
                secs, n = time_to_target(other["gflops"], other["clock"], other["agent_secs"], doc["best_gflops"])
                theirs.append(secs)
                trials.append(n if n is not None else len(other["gflops"]))
                lower |= n is None
        rows.append({
            "task": task, "preset": preset, "seeds": len(agents["one-shot"]),
            "quality": float(np.mean(quality)) if quality else None,
            "one_shot_secs": float(np.mean(ours)), "against": against,
            "against_secs": float(np.mean(theirs)) if theirs else None,
            "against_trials": float(np.median(trials)) if trials else None,
            "saving": float(np.mean(theirs) / np.mean(ours)) if theirs else None, "saving_is_lower_bound": lower,
        })
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    against = rows[0]["against"] if rows else "xgb-sa"
    lines = [f"| task | preset | one-shot best / best known | one-shot s | {against} s to the same best | "
             f"{against} trials (median) | saving |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        q = f"{r['quality']:.3f}" if r["quality"] is not None else "n/a"
        a = f"{r['against_secs']:.0f}" if r["against_secs"] is not None else "n/a"
        t = f"{r['against_trials']:.0f}" if r["against_trials"] is not None else "n/a"
        s = (f"{'>' if r['saving_is_lower_bound'] else ''}{r['saving']:.1f}x" if r["saving"] is not None else "n/a")
        lines.append(f"| {r['task']} | {r['preset']} | {q} | {r['one_shot_secs']:.0f} | {a} | {t} | {s} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--against", default="xgb-sa")
    args = parser.parse_args(argv)
    print(markdown(report(args.results, args.against)), end="")


if __name__ == "__main__":
    main()
