"""tune_gym's agents against MetaSchedule's ``tune_tir`` over tasks, seeds and hosts.

The study behind the README's "Against TVM's own tuner" tables, as one resumable command on the
host at hand: for each seed and task, a comparison (:mod:`benchmarks.vs_metaschedule`, in a
process of its own) into ``ROOT/<LLVM cpu>/<task>-s<seed>``, then, once a seed's tasks are all
done, their kernels re-timed together (``--top``, ``--rounds``) into
``ROOT/<LLVM cpu>/retimed-s<seed>-top<K>.json``. Finished comparisons and re-timings are skipped,
and a comparison killed midway resumes at its next tuner, so the command can be run again after
a kill, or on another day of the same host::

    python -m benchmarks.vs_metaschedule_study --seeds 0 1 2

Run it on an otherwise idle machine: each comparison measures PyTorch's reference first (refused
on a busy host) and the tuners one after another. ``--table`` runs nothing: it prints, from every
comparison folder under ``ROOT`` (any host, any layout ``ROOT/<folder>/<run>/summary.json``), the
best tune_gym agent against ``tune_tir`` at each budget, the re-timed ratio (each tuner's
confirmed kernel where the run was re-timed with ``--top`` > 1, its during-run best re-timed
otherwise) and the seconds per trial, with, per host, how many runs meet the goals (1.15x at the
first budget, 1.05x at the last, 1.05x re-timed; runs whose kernels were timed on one thread,
:data:`ONE_THREAD`, are listed but not counted)::

    python -m benchmarks.vs_metaschedule_study --table

``--only AGENT ...`` counts just those agents as tune_gym's (and lists only the runs that have
them), to set one agent against ``tune_tir`` in the runs that have it, e.g. ``--only meta-bo-evo``
against ``--only meta-bo`` over the same runs.

tune_gym's agents are every tuner of a run but ``tune_tir`` and ``metaschedule`` (the agent that
re-states TVM's search, compared with it for fidelity, not as a rival).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from benchmarks.vs_metaschedule import TUNE_TIR, best_at

ROOT = Path("benchmarks/results/vs_metaschedule")
TASKS = ("resnet18:1", "bert_base:1", "mobilenet_v2:12")  # a convolution, a dense layer, a depthwise convolution
AGENTS = ("meta-bo", "xgb-sa-transfer")
#: Tuners that are not tune_gym's own rivals of ``tune_tir``: TVM's search itself, and its re-statement.
NOT_OURS = frozenset({TUNE_TIR, "metaschedule"})
#: Folders of comparisons made before the live backend ran kernels on the target's cores: their
#: kernels were timed on one thread (MetaSchedule's and the agents' alike), so they are listed
#: marked and left out of the per-host tallies.
ONE_THREAD = frozenset({"ahead", "fidelity"})
#: The goals of the comparison: the best agent over ``tune_tir`` at the first budget, the last, re-timed.
GOALS = {"first": 1.15, "last": 1.05, "retimed": 1.05}


def run_dir(root: Path, cpu: str, task: str, seed: int) -> Path:
    """Where the comparison of ``task`` with ``seed`` on a host of LLVM cpu ``cpu`` is kept."""
    return root / cpu / f"{task.replace(':', '-')}-s{seed}"


def retimed_file(root: Path, cpu: str, seed: int, top: int) -> Path:
    """Where a seed's comparisons on that host, re-timed together with ``--top top``, are written."""
    return root / cpu / f"retimed-s{seed}-top{top}.json"


def plan(root: Path, cpu: str, tasks: Sequence[str], seeds: Sequence[int], top: int) -> list[tuple[str, Any]]:
    """The steps not done yet, in order: ``("compare", (task, seed))`` for each comparison without
    its ``summary.json``, and ``("retime", seed)`` after a seed's comparisons for each seed whose
    re-timing file is missing."""
    steps: list[tuple[str, Any]] = []
    for seed in seeds:
        steps += [("compare", (task, seed)) for task in tasks
                  if not (run_dir(root, cpu, task, seed) / "summary.json").exists()]
        if not retimed_file(root, cpu, seed, top).exists():
            steps.append(("retime", seed))
    return steps


def _command(*args: Any) -> list[str]:
    return [sys.executable, "-m", "benchmarks.vs_metaschedule", *map(str, args)]


def run_study(root: Path, cpu: str, tasks: Sequence[str], seeds: Sequence[int], agents: Sequence[str],
              trials: Sequence[int], top: int, rounds: int,
              call: Callable[[list[str]], int] = subprocess.call) -> None:
    """Carry out :func:`plan`'s steps, each comparison and re-timing a process of its own (``call``
    runs it and returns its exit status); a step that fails stops the study, naming it."""
    for kind, what in plan(root, cpu, tasks, seeds, top):
        if kind == "compare":
            task, seed = what
            cmd = _command("--task", task, "--trials", *trials, "--seed", seed, "--agents", *agents,
                           "--out", run_dir(root, cpu, task, seed))
        else:
            seed = what
            cmd = _command("--retime", *(run_dir(root, cpu, task, seed) for task in tasks), "--rounds", rounds,
                           "--top", top, "--retime-out", retimed_file(root, cpu, seed, top))
        print("$ " + " ".join(cmd[1:]), flush=True)
        status = call(cmd)
        if status != 0:
            raise SystemExit(f"{kind} {what}: exited {status}; run the study again to resume")


def _retimed_rows(root: Path) -> dict[tuple[Path, str], dict[str, dict[str, Any]]]:
    """Per (host folder, run name), the re-timed figure of each tuner from the fullest re-timing
    that covers it (most candidates, then most rounds)."""
    best: dict[tuple[Path, str], tuple[tuple[int, int], dict[str, dict[str, Any]]]] = {}
    for path in sorted(root.glob("*/retimed*.json")):
        data = json.loads(path.read_text())
        rank = (int(data.get("top") or 1), int(data.get("rounds", 0)))
        runs: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
        for row in data["rows"]:
            runs[row["run"]][row["tuner"]] = row
        for run, tuners in runs.items():
            key = (path.parent, run)
            if key not in best or rank > best[key][0]:
                best[key] = (rank, tuners)
    return {key: tuners for key, (_, tuners) in best.items()}


def collect(root: Path, budgets: tuple[int, int] = (128, 512),
            only: Collection[str] | None = None) -> list[dict[str, Any]]:
    """One row per comparison folder under ``root`` with ``tune_tir`` and at least one tune_gym
    agent: host, task, seed, the best agent and ``tune_tir`` at the first and the last of
    ``budgets``, their re-timed figures (``None`` where not re-timed) and seconds per trial.
    ``only``: count just these agents as tune_gym's (a folder without any of them has no row), to
    set one agent, or a few, against ``tune_tir`` in the runs that have them."""
    retimed = _retimed_rows(root)
    rows = []
    for summary_path in sorted(root.glob("*/*/summary.json")):
        summary = json.loads(summary_path.read_text())
        runs = summary["runs"]
        ours = [name for name in runs if name not in NOT_OURS and (only is None or name in only)]
        if TUNE_TIR not in runs or not ours:
            continue
        row: dict[str, Any] = {"folder": f"{summary_path.parent.parent.name}/{summary_path.parent.name}",
                               "one_thread": summary_path.parent.parent.name in ONE_THREAD,
                               "cpu": summary["host"]["llvm_cpu"], "task": summary["task"],
                               "seed": summary["seed"], "budgets": budgets}
        for label, n in zip(("first", "last"), budgets):
            best = {name: best_at(runs[name], n) for name in ours}
            agent = max(ours, key=best.__getitem__)
            row[label] = {"agent": agent, "gflops": best[agent], "tune_tir": best_at(runs[TUNE_TIR], n)}
        tuners = retimed.get((summary_path.parent.parent, summary_path.parent.name))
        if tuners and TUNE_TIR in tuners and any(a in tuners for a in ours):
            figure = {name: float(r.get("confirmed", r["retimed"])) for name, r in tuners.items()}
            agent = max((a for a in ours if a in figure), key=figure.__getitem__)
            row["retimed"] = {"agent": agent, "gflops": figure[agent], "tune_tir": figure[TUNE_TIR],
                              "confirmed": "confirmed" in tuners[TUNE_TIR]}
        else:
            row["retimed"] = None
        row["s_per_trial"] = {name: run["seconds"] / max(run["trials"], 1) for name, run in runs.items()
                              if name in ours or name == TUNE_TIR}
        rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table, and per host how many runs meet each goal (:data:`GOALS`)."""
    first_n, last_n = rows[0]["budgets"] if rows else (128, 512)
    at = f"@{first_n} / @{last_n}"
    lines = [f"| host (LLVM cpu) | folder | seed | best agent {at} | `tune_tir` {at} "
             f"| x `tune_tir` {at} | re-timed x `tune_tir` | s / trial (agents / `tune_tir`) |",
             "|---|---|---:|---|---|---|---|---|"]
    met: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for row in sorted(rows, key=lambda r: (r["cpu"], r["folder"].split("/")[1].rsplit("-s", 1)[0], r["seed"])):
        first, last, again = row["first"], row["last"], row["retimed"]
        ratio = {"first": first["gflops"] / max(first["tune_tir"], 1e-9),
                 "last": last["gflops"] / max(last["tune_tir"], 1e-9)}
        names = [first["agent"]] if first["agent"] == last["agent"] else [first["agent"], last["agent"]]
        cells = [row["cpu"], f"`{row['folder']}`" + (" (one thread)" if row["one_thread"] else ""), str(row["seed"]),
                 f"{first['gflops']:.2f} / {last['gflops']:.2f} ({' / '.join(f'`{n}`' for n in names)})",
                 f"{first['tune_tir']:.2f} / {last['tune_tir']:.2f}", f"{ratio['first']:.2f} / {ratio['last']:.2f}"]
        if again is not None:
            ratio["retimed"] = again["gflops"] / max(again["tune_tir"], 1e-9)
            cells.append(f"{ratio['retimed']:.2f} ({'confirmed, ' if again['confirmed'] else ''}`{again['agent']}`)")
        else:
            cells.append("not re-timed")
        ours = sorted({f"{s:.2f}" for name, s in row["s_per_trial"].items() if name not in NOT_OURS}, key=float)
        cells.append(f"{ours[0]}{'-' + ours[-1] if len(ours) > 1 else ''} / {row['s_per_trial'][TUNE_TIR]:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
        for goal, value in ratio.items():
            if not row["one_thread"]:
                met[row["cpu"]][goal].append(value >= GOALS[goal])
    lines.append("")
    for cpu, goals in sorted(met.items()):
        lines.append(f"{cpu}: " + "; ".join(
            f"{sum(hits)} of {len(hits)} runs >= {GOALS[goal]}x {label}"
            for goal, label in (("first", f"at {first_n} trials"), ("last", f"at {last_n}"), ("retimed", "re-timed"))
            if (hits := goals[goal])))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--agents", nargs="+", default=list(AGENTS))
    parser.add_argument("--trials", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--top", type=int, default=8, help="kernels per tuner re-timed to confirm its pick")
    parser.add_argument("--rounds", type=int, default=30, help="re-timing rounds (median)")
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--table", action="store_true",
                        help="print the table of every comparison under --root and stop")
    parser.add_argument("--only", nargs="+", default=None, metavar="AGENT",
                        help="with --table: count just these agents as tune_gym's (runs without them are left out)")
    parser.add_argument("--plan", action="store_true", help="print the steps not done yet on this host and stop")
    args = parser.parse_args(argv)
    if args.only is not None and not args.table:
        parser.error("--only selects agents of --table; to run the study with some agents, use --agents")
    if args.table:
        print(table(collect(args.root, (min(args.trials), max(args.trials)), args.only)), end="")
        return 0
    from tune_gym.host import host_cpu

    cpu = host_cpu()
    if args.plan:
        for kind, what in plan(args.root, cpu, args.tasks, args.seeds, args.top):
            print(kind, *what) if kind == "compare" else print(kind, "seed", what)
        return 0
    run_study(args.root, cpu, args.tasks, args.seeds, args.agents, args.trials, args.top, args.rounds)
    rows = collect(args.root, (min(args.trials), max(args.trials)))
    print(table([r for r in rows if r["cpu"] == cpu]), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
