"""The leaderboard section of a suite on spaces measured with Kernel Tuner (suite ``external``).

Such tasks (``kt``) state a nominal FLOP count (:attr:`tune_gym.external.task.KTTask.flops_nominal`):
their "GFLOPS" are a constant over the kernel's time, not its work, so this section shows times
(ms) and the random-relative score P, never GFLOPS.
:func:`benchmarks.leaderboard.report.write_leaderboard` writes it for every suite whose tasks
all state nominal FLOPs: ``tune-gym leaderboard benchmarks/results/leaderboard/external.parquet``
writes ``external.md`` (:data:`SECTION_FILE`) and its plot into ``external/`` beside it, and the
standard leaderboard (``LEADERBOARD.md``) includes that file as a section of its own
(:func:`included_section`), its plot's link made relative to ``LEADERBOARD.md``.

What it shows (metrics: :mod:`benchmarks.leaderboard.metrics`):

* one row per entry, a tune_gym agent or a Kernel Tuner strategy (``kt:NAME``,
  :mod:`benchmarks.leaderboard.kt_entries`), marked as such: P on the trials axis and on the
  simulated-time axis, each averaged over each task's budget from the methodology
  (:func:`~benchmarks.leaderboard.metrics.random_budget`,
  :func:`~benchmarks.leaderboard.metrics.random_time_budget`), then over the tasks per seed, with
  the mean and 95% Student-t band over seeds; whether the entry's P is significantly above the
  next-ranked entry's on the runs both have (paired by task and seed, so a seed only one of them
  ran on a task does not count), and a matrix of every pair among the top ranks
  (:mod:`benchmarks.leaderboard.significance`); per device, P averaged over the kernels measured
  on it and over seeds (trials / time); the entry's own compute seconds per run;
* per task: the space (configurations that ran, best and median time, both budgets), and per
  entry the median over seeds of the best time its runs found (ms);
* the P(t) plot: P at equal steps of each task's trials and time budgets, mean over tasks;
  tune_gym's agents drawn solid, Kernel Tuner's strategies dashed, and a 95% band over seeds
  around the best of each (by P on trials).
"""

from __future__ import annotations

import math
import os
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.leaderboard import kt_entries, significance
from benchmarks.leaderboard import metrics as M
from benchmarks.leaderboard.report import Cell, Leaderboard, fmt, missing_runs, shown

__all__ = ["DEVICES", "SECTION_FILE", "applies", "entry_rows", "included_section", "write_section"]

#: Device columns in this order (the FAIR Benchmark Hub's GPUs); other devices follow, sorted.
DEVICES = ("A100", "A4000", "A6000", "MI250X", "W6600", "W7800")
#: Where the external suite's section is written by default (``tune-gym leaderboard`` of
#: ``benchmarks/results/leaderboard/external.parquet``), and read from by the standard leaderboard.
SECTION_FILE = Path(__file__).resolve().parents[1] / "results" / "leaderboard" / "external.md"
_FRACTIONS = np.linspace(0.0, 1.0, 50)  # the plot's common axis: fraction of each task's budget
_Y_FLOOR = -1.0  # the plot's lowest P


def applies(lb: Leaderboard) -> bool:
    """True when every task of the leaderboard states a nominal FLOP count (report times, not GFLOPS)."""
    return bool(lb.tasks) and all(td.nominal_flops for td in lb.tasks.values())


def _task_labels(lb: Leaderboard) -> dict[str, tuple[str, str]]:
    """Task id -> (kernel, device): a ``kt`` task's labels, else the id twice."""
    from tune_gym.tasks import Task

    out = {}
    for tid, td in lb.tasks.items():
        task = Task.parse(td.uri)
        out[tid] = (getattr(task, "kernel", tid), getattr(task, "device", tid))
    return out


def _devices(labels: dict[str, tuple[str, str]]) -> list[str]:
    found = {device for _, device in labels.values()}
    return [d for d in DEVICES if d in found] + sorted(found - set(DEVICES))


def _per_seed(cells: list[Cell], attr: str) -> np.ndarray:
    """Per seed that every cell has: the mean over the cells (tasks) of ``attr``'s value."""
    maps = [dict(zip(c.seed_ids, getattr(c, attr))) for c in cells]
    if not maps:
        return np.zeros(0)
    seeds = sorted(set.intersection(*(set(m) for m in maps)))
    with np.errstate(all="ignore"):
        return np.array([np.nanmean([m[s] for m in maps]) for s in seeds], dtype=float)


def _mean(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return float(np.mean(finite)) if finite else math.nan


def entry_rows(lb: Leaderboard) -> list[dict[str, Any]]:
    """One row per entry that ran a task, best P on the trials axis first (see the module docstring)."""
    labels = _task_labels(lb)
    by_entry: dict[str, list[Cell]] = defaultdict(list)
    for (entry, _), cell in lb.cells.items():
        if cell.p_trials:
            by_entry[entry].append(cell)
    na_tasks: dict[str, set[str]] = defaultdict(set)
    for entry, tid in lb.not_applicable:
        na_tasks[entry].add(tid)
    missing = {r["agent"]: r["missing"] for r in lb.rows}  # set by compute()
    rows: list[dict[str, Any]] = []
    for entry, cells in by_entry.items():
        trials, secs = M.score_band(_per_seed(cells, "p_trials")), M.score_band(_per_seed(cells, "p_time"))
        devices = {}
        for device in _devices(labels):
            mine = [c for c in cells if labels[c.task][1] == device]
            devices[device] = (_mean([v for c in mine for v in c.p_trials]), _mean([v for c in mine for v in c.p_time]))
        rows.append({"entry": entry, "kernel_tuner": kt_entries.is_entry(entry), "trials": trials, "time": secs,
                     "devices": devices, "runs": sum(c.seeds for c in cells),
                     "na_tasks": len(na_tasks[entry] - {c.task for c in cells}),
                     "tasks": len(cells), "missing": missing.get(entry, 0),
                     "agent_secs": float(np.mean([s for c in cells for s in c.agent_secs]))})
        rows[-1]["ranked"] = not rows[-1]["missing"] and not math.isnan(trials["lower"])
    # An entry without every run the suite asks of it is listed after the ranked ones: its P is over
    # other tasks or fewer seeds than its band will have, and its place would move as runs come in.
    rows.sort(key=lambda r: (not r["ranked"],
                             -r["trials"]["mean"] if not math.isnan(r["trials"]["mean"]) else math.inf))
    return rows


def progress_line(lb: Leaderboard) -> list[str]:
    """A paragraph saying how far the results are through the suite (none when they hold it all)."""
    from benchmarks.leaderboard.suite import Suite

    missing = sum(missing_runs(lb).values())
    if not missing:
        return []
    total = sum(1 for _ in Suite.from_dict(lb.header["suite"]).runs())
    return [f"**In progress: {total - missing:,} of the suite's {total:,} runs.** The runs still to come are "
            "listed below the table. An entry is ranked once it has every run the suite asks of it; until then it "
            "is listed after the ranked ones, with P over the runs it has.", ""]


def write_section(lb: Leaderboard, results: Path, out: Path, plots: Path, command: str | None = None) -> Path:
    """Write the section of ``lb`` (computed from ``results``) to ``out``, its plot into ``plots``."""
    rows = entry_rows(lb)
    labels = _task_labels(lb)
    devices = _devices(labels)
    plots.mkdir(parents=True, exist_ok=True)
    png = _plot(lb, rows, plots / "random_relative_score.png")
    suite = lb.header["suite"]
    n_kt = sum(kt_entries.is_entry(a) for a in suite["agents"])
    kernels = sorted({k for k, _ in labels.values()})
    lines = [
        "## External spaces: GPU kernels measured with Kernel Tuner, tune_gym's agents and Kernel Tuner's "
        "optimizers", "",
        *progress_line(lb),
        f"Suite `{suite['name']}`: " + (f"{suite['description']}. " if suite["description"] else "")
        + f"{len(lb.tasks)} spaces ({', '.join(kernels)} on "
        f"{', '.join(devices)}) x {len(suite['agents'])} entries ({len(suite['agents']) - n_kt} tune_gym agents, "
        f"{n_kt} Kernel Tuner strategies) x {suite['seeds']} seeds; results `{shown(results)}` (validate with "
        f"`tune-gym validate {shown(results)}`). Written {time.strftime('%Y-%m-%d')}"
        + (f" by `{command}`." if command else "."), "",
        "Columns: **P** = random-relative score (0 = random search, 1 = the optimum, negative = worse than random), "
        "averaged over each task's budget from the methodology (random search's expected draws to get 95% of the way "
        "from the median configuration to the optimum, +10%; on the time axis, those draws x the median evaluation "
        "seconds, +10%, against random search on the same clock: a draw counts once its seconds have passed), then "
        "over tasks; mean and 95% band over seeds. **trials** counts configurations evaluated "
        "(a configuration outside the restrictions is never one; Kernel Tuner's repeats are free and not counted); "
        "**time** is the simulated tuning time, each evaluation charged its recorded compile + verification + "
        "benchmark + framework seconds. **Device** columns: P on trials / on time, averaged over the kernels "
        "measured on that device and over seeds. **source**: a tune_gym agent, or a Kernel Tuner "
        "strategy run in simulation mode with Kernel Tuner's default hyperparameters and `max_fevals` = the "
        "trials budget; `+restarts`: the same strategy run again with new seeds each time it stops by itself "
        "before the budget, sharing one cache, until the budget is spent. **agent s**: the entry's own compute "
        "per run (a Kernel Tuner strategy: its whole simulated run).", "",
        "| rank | entry | source | P (trials) | 95% band | > next (trials) | P (time) | 95% band | > next (time) | "
        + " | ".join(devices) + " | runs | agent s |",
        "|---:|---|---|---:|---|---|---:|---|---|" + "---:|" * len(devices) + "---:|---:|",
    ]
    ranking = [r["entry"] for r in rows]
    ranked = sum(r["ranked"] for r in rows)
    sig = significance.compare_cells(lb.cells.values(), ranking)
    for i, r in enumerate(rows, 1):
        t, s = r["trials"], r["time"]
        after = ranking[i] if i < ranked else None
        cells = [f"{fmt(r['devices'][d][0], 2)} / {fmt(r['devices'][d][1], 2)}" for d in devices]
        na = f" ({r['na_tasks']} tasks n/a)" if r["na_tasks"] else ""
        marks = [significance.next_cell(sig, r["entry"], after, axis) for axis in ("trials", "time")]
        if r["missing"]:
            na += f" ({r['runs']} of {r['runs'] + r['missing']} so far, on {r['tasks']} of {len(lb.tasks)} tasks)"
        elif not r["ranked"]:
            na += " (one seed: no band)"
        rank, source = i if r["ranked"] else "-", "Kernel Tuner" if r["kernel_tuner"] else "tune_gym"
        lines.append(f"| {rank} | {r['entry']} | {source} | "
                     f"{fmt(t['mean'])} | [{fmt(t['lower'])}, {fmt(t['upper'])}] | {marks[0]} | {fmt(s['mean'])} | "
                     f"[{fmt(s['lower'])}, {fmt(s['upper'])}] | {marks[1]} | " + " | ".join(cells)
                     + f" | {r['runs']}{na} | {fmt(r['agent_secs'], 2)} |")
    lines += _notes(lb, rows)
    lines += ["", significance.explanation(sig)]
    lines += ["", f"![random-relative score P(t)]({_relative(png, out.parent)})", ""]
    lines += significance.matrix_lines(sig, heading="###")
    lines += _task_tables(lb, rows, labels)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def _notes(lb: Leaderboard, rows: list[dict[str, Any]]) -> list[str]:
    """Entries that declined tasks, and runs of the suite the results lack."""
    lines = []
    reasons: dict[tuple[str, str], list[str]] = defaultdict(list)
    for (entry, tid), why in lb.not_applicable.items():
        reasons[(entry, why)].append(tid)
    ran = {r["entry"] for r in rows}
    if reasons:
        lines += ["", "Not applicable (the entry declines the task, recorded as such): " + "; ".join(
            f"{entry} on {'every task' if entry not in ran else f'{len(tids)} tasks'} ({why})"
            for (entry, why), tids in sorted(reasons.items())) + "."]
    missing = missing_runs(lb)
    if missing:
        lines += ["", "Runs of the suite not in the results yet (`tune-gym bench --suite NAME` adds them): "
                  + ", ".join(f"{a} {n}" for a, n in sorted(missing.items())) + "."]
    return lines


def _task_tables(lb: Leaderboard, rows: list[dict[str, Any]], labels: dict[str, tuple[str, str]]) -> list[str]:
    """The spaces, and the best time each entry found per task (median over seeds, ms)."""
    tids = list(lb.tasks)
    short = {tid: f"{labels[tid][0].split('_')[0]} {labels[tid][1]}" for tid in tids}
    lines = ["### Spaces and best times found", "",
             "Each space: configurations that ran (of those in the restricted space), the best and the median "
             "configuration's time, and the budgets P is averaged over.", "",
             "| task | kernel | device | ran / configs | best ms | median ms | budget (trials) | budget (s) |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for tid in tids:
        td = lb.tasks[tid]
        if td.costs is None or td.eval_secs is None:
            continue
        ran = td.costs[np.isfinite(td.costs)]
        lines.append(f"| {short[tid]} | {labels[tid][0]} | {labels[tid][1]} | {ran.size} / {td.costs.size} | "
                     f"{ran.min() * 1e3:.4f} | {np.median(ran) * 1e3:.4f} | {M.random_budget(td.costs)} | "
                     f"{M.random_time_budget(td.costs, td.eval_secs):.0f} |")
    lines += ["", "Best time found in a run (ms), median over seeds (the best known in the first row):", "",
              "| entry | " + " | ".join(short[t] for t in tids) + " |", "|---|" + "---:|" * len(tids),
              "| best known | " + " | ".join(_best_known_ms(lb, t) for t in tids) + " |"]
    for r in rows:
        cells = []
        for tid in tids:
            cell = lb.cells.get((r["entry"], tid))
            cells.append(fmt(_median_best_ms(lb, cell), 4) if cell else
                         "n/a" if (r["entry"], tid) in lb.not_applicable else "-")
        lines.append(f"| {r['entry']} | " + " | ".join(cells) + " |")
    return lines + _per_task_p(lb, rows, tids, short) + _budget_used(lb, rows, tids, short) + [""]


def _per_task_p(lb: Leaderboard, rows: list[dict[str, Any]], tids: list[str], short: dict[str, str]) -> list[str]:
    """P on the trials axis per task (mean over seeds), the highest of each task in bold: which methods win
    on which space, which the device columns (a mean over both kernels) hide."""
    means = {(r["entry"], tid): _mean(cell.p_trials) for r in rows for tid in tids
             if (cell := lb.cells.get((r["entry"], tid))) is not None and cell.p_trials}
    top = {tid: max((v for (_, t), v in means.items() if t == tid and not math.isnan(v)), default=math.nan)
           for tid in tids}
    lines = ["", "P on the trials axis per task, mean over seeds (the highest of each task in bold; entries "
             "without every run count the runs they have):", "",
             "| entry | " + " | ".join(short[t] for t in tids) + " |", "|---|" + "---:|" * len(tids)]
    for r in rows:
        cells = []
        for tid in tids:
            v = means.get((r["entry"], tid))
            text = fmt(v, 2) if v is not None else "n/a" if (r["entry"], tid) in lb.not_applicable else "-"
            cells.append(f"**{text}**" if v is not None and v == top[tid] else text)
        lines.append(f"| {r['entry']} | " + " | ".join(cells) + " |")
    return lines


def _budget_used(lb: Leaderboard, rows: list[dict[str, Any]], tids: list[str], short: dict[str, str]) -> list[str]:
    """For entries that end runs before the budget (a strategy's own stopping rule): the trials a run
    evaluated as a share of the task's P budget, mean over seeds. P holds the best found after the end."""
    budgets = {tid: td.p_budgets[1] if td.p_budgets else M.random_budget(td.costs)  # once per task: it sorts
               for tid in tids if (td := lb.tasks[tid]).costs is not None}
    used: dict[str, dict[str, float]] = {}
    for r in rows:
        shares = {}
        for tid, budget in budgets.items():
            cell = lb.cells.get((r["entry"], tid))
            if cell is None:
                continue
            shares[tid] = float(np.mean([min(len(c), budget) / budget for c in cell.clocks]))
        if shares and min(shares.values()) < 0.995:
            used[r["entry"]] = shares
    if not used:
        return []
    lines = ["", "Entries that end runs before the budget (their own stopping rule): trials evaluated per run as "
             "a share of the task's budget, mean over seeds; after its end, a run's best found stands for the "
             "rest of the budget:", "",
             "| entry | " + " | ".join(short[t] for t in tids) + " |", "|---|" + "---:|" * len(tids)]
    for entry, shares in used.items():
        lines.append(f"| {entry} | " + " | ".join(f"{shares[t]:.2f}" if t in shares else "-" for t in tids) + " |")
    return lines


def _ms(lb: Leaderboard, tid: str, gflops: float) -> float:
    """Milliseconds per call of a nominal GFLOPS value on task ``tid`` (``nan`` for a failure)."""
    from tune_gym.tasks import Task

    flops = Task.parse(lb.tasks[tid].uri).flops
    return flops / (gflops * 1e9) * 1e3 if gflops > 0 else math.nan


def _best_known_ms(lb: Leaderboard, tid: str) -> str:
    return fmt(_ms(lb, tid, lb.tasks[tid].best_gflops), 4)


def _median_best_ms(lb: Leaderboard, cell: Cell) -> float:
    return float(np.median([_ms(lb, cell.task, g) for g in cell.best_gflops]))


def _curve_per_seed(cells: list[Cell], attr: str) -> np.ndarray:
    """``(seeds, fractions)``: per seed every cell has, the mean over cells (tasks) of its P curve
    interpolated onto :data:`_FRACTIONS` of the task's budget."""
    maps = [dict(zip(c.seed_ids, getattr(c, attr))) for c in cells]
    seeds = sorted(set.intersection(*(set(m) for m in maps))) if maps else []
    out = []
    for s in seeds:
        curves = [np.interp(_FRACTIONS, np.linspace(0, 1, len(m[s])), m[s]) for m in maps]
        with np.errstate(all="ignore"):
            out.append(np.nanmean(curves, axis=0))
    return np.array(out).reshape(len(out), _FRACTIONS.size)


def _plot(lb: Leaderboard, rows: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    # tune_gym's agents: tab10, solid; Kernel Tuner's strategies: tab20b (5 hues x 4 shades), dashed
    counts = {True: 0, False: 0}
    banded = {next((r["entry"] for r in rows if r["kernel_tuner"] == kt), None) for kt in (True, False)}
    for r in rows:
        kt, k = r["kernel_tuner"], counts[r["kernel_tuner"]]
        color = plt.get_cmap("tab20b")((4 * k + k // 5) % 20) if kt else plt.get_cmap("tab10")(k % 10)
        counts[kt] += 1
        cells = [c for (a, _), c in lb.cells.items() if a == r["entry"] and c.p_curves]
        for ax, attr in ((axes[0], "p_curves"), (axes[1], "p_time_curves")):
            per_seed = _curve_per_seed(cells, attr)
            if not per_seed.size:
                continue
            band = M.score_band(per_seed)
            ax.plot(_FRACTIONS, band["mean"], color=color, ls="--" if kt else "-", lw=1.3, label=r["entry"])
            if r["entry"] in banded:  # the best of each source (rows are ranked)
                ax.fill_between(_FRACTIONS, band["lower"], band["upper"], color=color, alpha=0.15)
    for ax, what in zip(axes, ("trials budget", "simulated-time budget")):
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xlabel(f"fraction of each task's {what}")
        ax.grid(alpha=0.3)
    axes[0].set_ylim(_Y_FLOOR, 1.05)  # far below random search (grid order, a stopped local search) is cut off
    axes[0].set_ylabel(f"P, mean over tasks (axis cut at {_Y_FLOOR})")
    axes[0].set_title("P against trials (95% band over seeds: the best agent, the best strategy)", fontsize=10)
    axes[1].set_title("P against simulated tuning time", fontsize=10)
    axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5),
                   title="solid: tune_gym, dashed: Kernel Tuner", title_fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _relative(path: Path, folder: Path) -> str:
    """``path`` relative to ``folder`` (as a markdown link from a file in ``folder``)."""
    return Path(os.path.relpath(Path(path).resolve(), Path(folder).resolve())).as_posix()


_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")


def included_section(section: Path, out: Path) -> list[str]:
    """The lines of the section file ``section`` for a document at ``out``: every relative image
    link rebased from ``section``'s folder to ``out``'s."""
    def rebase(m: re.Match[str]) -> str:
        target = m[2]
        if "://" in target or Path(target).is_absolute():
            return m[0]
        return f"![{m[1]}]({_relative(section.parent / target, out.parent)})"

    return _IMAGE.sub(rebase, section.read_text(encoding="utf-8")).rstrip("\n").split("\n") + [""]
