"""The leaderboard: metrics of a results file, as a markdown table and PNG plots.

Per (agent, task), over seeds: final best GFLOPS relative to the best known config and to
the recorded PyTorch reference (not where the reference audit marks that reference suspect,
:mod:`tune_gym.datasets.reference_audit`: the tables print "suspect" there, and the "vs
PyTorch" geometric means leave such tasks out and say which); trials to 95% and 100% of the
best known (median and IQR); the random-relative score P on trials and on simulated time
(exhaustively measured tasks only: its random-search baseline is exact there), averaged over
the methodology's budget, or the suite's where that is shorter; the agent's own compute seconds
beside the simulated measurement seconds. Per agent: the weighted geometric means of the
normalised throughputs (weights: task occurrences in the network) and P averaged over tasks,
with a 95% band over seeds, and whether its P is significantly above the next-ranked agent's on
the same runs (and, for the top ranks, every pair: :mod:`benchmarks.leaderboard.significance`).
Metric definitions are in :mod:`benchmarks.leaderboard.metrics`.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.leaderboard import metrics as M
from benchmarks.leaderboard import significance
from benchmarks.leaderboard.results import read_results
from tune_gym.measure.reference import reference_at

__all__ = ["Leaderboard", "compute", "write_leaderboard"]


@dataclass
class TaskData:
    """What the metrics need of a task's dataset."""

    uri: str
    preset: str
    exhaustive: bool
    best_gflops: float
    reference_gflops: float
    costs: np.ndarray | None = None  # every config's mean seconds (exhaustive only)
    eval_secs: np.ndarray | None = None
    nominal_flops: bool = False  # GFLOPS are a nominal FLOP count over time (kt tasks): report times
    reference_suspect: str = ""  # why the reference audit marks the reference suspect ("" when it does not)
    kernel_threads: int | None = None  # CPU threads the dataset's kernels ran on (None: not known, or not a CPU)
    reference_threads: int | None = None  # threads of reference_gflops (differs from kernel_threads without a
    # reference at the kernels' count)
    p_budgets: tuple[int, int] | None = None  # (the methodology's trials budget, the suite's) where P uses the
    # suite's, the shorter


@dataclass
class Cell:
    """One (agent, task) over seeds."""

    agent: str
    task: str
    weight: float
    seeds: int = 0
    vs_best: list[float] = field(default_factory=list)
    vs_reference: list[float] = field(default_factory=list)
    to95: list[int | None] = field(default_factory=list)
    to100: list[int | None] = field(default_factory=list)
    p_trials: list[float] = field(default_factory=list)
    p_run: list[float] = field(default_factory=list)  # P averaged over the run's own budget
    p_time: list[float] = field(default_factory=list)
    agent_secs: list[float] = field(default_factory=list)
    measure_secs: list[float] = field(default_factory=list)
    curves: list[np.ndarray] = field(default_factory=list)  # best-so-far / best known, per trial
    p_curves: list[np.ndarray] = field(default_factory=list)
    p_time_curves: list[np.ndarray] = field(default_factory=list)  # P at equal steps of the time budget
    clocks: list[np.ndarray] = field(default_factory=list)  # simulated seconds after each trial
    seed_ids: list[int] = field(default_factory=list)  # the seed of each run, in the order of the lists
    best_gflops: list[float] = field(default_factory=list)


@dataclass
class Leaderboard:
    header: dict[str, Any]
    cells: dict[tuple[str, str], Cell]
    tasks: dict[str, TaskData]
    rows: list[dict[str, Any]]
    not_applicable: dict[tuple[str, str], str] = field(default_factory=dict)  # (agent, task) -> why
    na_runs: dict[str, int] = field(default_factory=dict)  # agent -> its runs recorded as not applicable
    run_hosts: dict[str, int] = field(default_factory=dict)  # host id -> runs made there (agent s is its compute)


def _task_data(uri: str, preset: str) -> TaskData:
    """The task's dataset: its kind's own data (:attr:`tune_gym.kinds.TaskKind.dataset`, e.g. a
    ``kt`` task's measurement file), else the catalog's."""
    from tune_gym import kinds
    from tune_gym.datasets import load_dataset
    from tune_gym.datasets.catalog import find_dataset
    from tune_gym.tasks import Task

    task = Task.parse(uri)
    kind = kinds.get_kind(task.target.kind)
    nominal = bool(getattr(task, "flops_nominal", False))
    if kind is not None and kind.dataset is not None:
        ds = kinds.load(kind.dataset)(task, preset)
    else:
        entry = find_dataset(task, preset)
        if entry is None:
            return TaskData(uri, preset, False, math.nan, math.nan, nominal_flops=nominal)
        ds = load_dataset(entry.path, verify=False)
    ref = ds.reference
    kernel_threads = getattr(ds, "kernel_threads", None)
    value, ref_threads = reference_at(ref, kernel_threads) if ref is not None else (math.nan, None)
    td = TaskData(uri, preset, ds.exhaustive, ds.best_gflops, value, nominal_flops=nominal,
                  reference_suspect=ref.suspect if ref is not None else "", kernel_threads=kernel_threads,
                  reference_threads=ref_threads)
    if ds.exhaustive:
        td.costs = ds.mean_cost
        td.eval_secs = ds.build_secs + ds.run_secs
    return td


def _run_hosts(hosts: dict[str, int], header_host: dict[str, Any]) -> str:
    """Where the runs were made (their agent seconds are that host's compute), when it is not
    only the benchmark host: runs taken over from other results (``--reuse``) or resumed elsewhere."""
    from tune_gym.host import fingerprint_id

    if not hosts or set(hosts) == {fingerprint_id(header_host)}:
        return ""
    made = ", ".join(f"`{h}` ({n})" for h, n in hosts.items())
    return f"runs made on {made} (**agent s** is each one's compute); "


def compute(results: str | Path) -> Leaderboard:
    """Every metric of a results file (datasets come from the catalog)."""
    from benchmarks.leaderboard.suite import Suite

    header, runs = read_results(results)
    current = {spec.key for spec in Suite.from_dict(header["suite"]).runs()}
    runs = [r for r in runs if r["key"] in current]  # runs of the suite as it is now
    run_hosts = dict(Counter(r["host"] for r in runs).most_common())
    weights = network_weights(header["suite"]["tasks"])
    presets: dict[str, set[str]] = defaultdict(set)
    for t in header["suite"]["tasks"]:
        presets[t["id"]].add(t["preset"])
    tasks: dict[str, TaskData] = {}
    cells: dict[tuple[str, str], Cell] = {}
    scored: dict[tuple[str, int], tuple[int, float]] = {}  # (task, run budget) -> P's (trials, seconds) budgets
    not_applicable: dict[tuple[str, str], str] = {}
    na_runs: dict[str, int] = {}
    for line in runs:
        spec = line["spec"]
        # a task listed with two presets (two spaces) is two rows: "bert_base:0 compact", "bert_base:0 full"
        tid = spec["task"] if len(presets[spec["task"]]) == 1 else f"{spec['task']} {spec['preset']}"
        if tid not in tasks:
            tasks[tid] = _task_data(line["task_uri"], spec["preset"])
        if "not_applicable" in line:
            not_applicable[(spec["agent"], tid)] = line["not_applicable"]
            na_runs[spec["agent"]] = na_runs.get(spec["agent"], 0) + 1
            continue
        td = tasks[tid]
        best_known = max(td.best_gflops, line["best_gflops"]) if not td.exhaustive else td.best_gflops
        cell = cells.setdefault((spec["agent"], tid), Cell(spec["agent"], tid, weights.get((tid, spec["preset"]), 1)))
        gflops = np.asarray(line["gflops"], dtype=float)
        curve = M.best_so_far(gflops) / best_known
        cell.seeds += 1
        cell.seed_ids.append(spec["seed"])
        cell.best_gflops.append(line["best_gflops"])
        cell.curves.append(curve)
        cell.clocks.append(np.asarray(line["clock"], dtype=float))
        cell.vs_best.append(line["best_gflops"] / best_known)
        # the dataset's reference at the kernels' thread count where it has one (the line holds the all-core one)
        reference = td.reference_gflops if math.isfinite(td.reference_gflops) else line["reference_gflops"]
        cell.vs_reference.append(line["best_gflops"] / reference)
        cell.to95.append(M.trials_to_target(curve, 0.95 - 1e-12))
        cell.to100.append(M.trials_to_target(curve, 1.0 - 1e-12))
        cell.agent_secs.append(line["agent_secs"])
        cell.measure_secs.append(line["clock"][-1] if line["clock"] else 0.0)
        if td.exhaustive and td.costs is not None:
            with np.errstate(divide="ignore"):
                times = np.where(gflops > 0, line["flops"] / (gflops * 1e9), np.nan)
            run_budget = min(spec["budget"], int(np.isfinite(td.costs).sum()))
            if (tid, run_budget) not in scored:  # once per task and budget: each sorts the space's costs
                scored[tid, run_budget] = M.scored_budgets(td.costs, td.eval_secs, run_budget)
                if scored[tid, run_budget][0] < (methodology := M.random_budget(td.costs)):
                    td.p_budgets = (methodology, scored[tid, run_budget][0])
            trials_budget, time_budget = scored[tid, run_budget]
            _, p = M.score_curve(times, td.costs, budget=trials_budget)
            cell.p_curves.append(p)
            cell.p_trials.append(float(np.nanmean(p)))
            cell.p_run.append(M.mean_score(times, td.costs, budget=run_budget))
            try:
                _, p_time = M.score_curve(times, td.costs, clocks=line["clock"], eval_seconds=td.eval_secs,
                                          budget=time_budget, max_trials=spec["budget"])
            except ValueError:  # the run's clock never reached one evaluation
                p_time = np.full(100, math.nan)
            cell.p_time_curves.append(p_time)
            cell.p_time.append(float(np.nanmean(p_time)) if np.isfinite(p_time).any() else math.nan)
    lb = Leaderboard(header, cells, tasks, _rows(cells, tasks, not_applicable), not_applicable, na_runs,
                     run_hosts)
    # An agent without every run the suite asks of it comes after the ranked ones: its figures are over
    # fewer tasks or seeds, and its place would move as its runs come in.
    missing = missing_runs(lb)
    for row in lb.rows:
        row["missing"] = missing.get(row["agent"], 0)
    lb.rows.sort(key=lambda r: bool(r["missing"]))  # stable: the order by P stays within each group
    return lb


def network_weights(tasks: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """Each task's weight in the suite's geometric means: its occurrences in its network
    divided by the total of that network's tasks in the suite, so every network counts the
    same however many times its layers repeat (BERT's dense layers occur 48 times, a ResNet
    conv once). A task's network is the suite part of its id (``bert_base:0`` -> ``bert_base``);
    a URI is a network of its own."""
    network = lambda tid: tid.split(":")[0] if "://" not in tid else tid
    totals: dict[str, int] = defaultdict(int)
    for t in tasks:
        totals[network(t["id"])] += t["weight"]
    return {(t["id"], t["preset"]): t["weight"] / totals[network(t["id"])] for t in tasks}


def _rows(cells: dict[tuple[str, str], Cell], tasks: dict[str, TaskData],
          not_applicable: dict[tuple[str, str], str]) -> list[dict[str, Any]]:
    by_agent: dict[str, list[Cell]] = defaultdict(list)
    for cell in cells.values():
        by_agent[cell.agent].append(cell)
    na_tasks: dict[str, set[str]] = defaultdict(set)
    for agent, tid in not_applicable:
        na_tasks[agent].add(tid)
    rows: list[dict[str, Any]] = []
    for agent, cs in by_agent.items():
        w = [c.weight for c in cs]
        exhaustive = [c for c in cs if tasks[c.task].exhaustive and c.p_trials]
        # P over tasks per seed, then a band over seeds
        n_seeds = min((len(c.p_trials) for c in exhaustive), default=0)
        per_seed = np.nanmean([c.p_trials[:n_seeds] for c in exhaustive], axis=0) if n_seeds else np.zeros(0)
        band = M.score_band(per_seed) if n_seeds else {"mean": math.nan, "lower": math.nan, "upper": math.nan}
        per_seed_t = np.nanmean([c.p_time[:n_seeds] for c in exhaustive], axis=0) if n_seeds else np.zeros(0)
        per_seed_r = np.nanmean([c.p_run[:n_seeds] for c in exhaustive], axis=0) if n_seeds else np.zeros(0)
        trusted = [c for c in cs if not tasks[c.task].reference_suspect]  # a suspect reference gives no ratio
        rows.append({
            "agent": agent, "tasks": len(cs), "runs": sum(c.seeds for c in cs),
            "na_tasks": len(na_tasks[agent] - {c.task for c in cs}),
            "vs_best": M.geomean([float(np.median(c.vs_best)) for c in cs], w),
            "vs_reference": M.geomean([float(np.median(c.vs_reference)) for c in trusted],
                                      [c.weight for c in trusted]) if trusted else math.nan,
            "suspect_references": len(cs) - len(trusted),
            "p_trials": band["mean"], "p_lower": band["lower"], "p_upper": band["upper"],
            "p_time": float(np.nanmean(per_seed_t)) if per_seed_t.size else math.nan,
            "p_run": float(np.nanmean(per_seed_r)) if per_seed_r.size else math.nan,
            "to95": float(np.median([M.summarize_trials_to_target(c.to95)["median"] for c in cs])),
            "agent_secs": float(np.mean([np.mean(c.agent_secs) for c in cs])),
            "measure_secs": float(np.mean([np.mean(c.measure_secs) for c in cs])),
        })
    rows.sort(key=lambda r: (-(r["p_trials"] if not math.isnan(r["p_trials"]) else -9), -r["vs_best"]))
    return rows


def shown(path: Path) -> str:
    """``path`` relative to the working directory (where the commands are run) when inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def _trial_marks(lb: Leaderboard) -> list[int]:
    """Powers of two from 8 up to the longest run (and that run's length)."""
    longest = max((len(x) for c in lb.cells.values() for x in c.curves), default=0)
    marks = [k for k in (8, 16, 32, 64, 128, 256, 512) if k < longest]
    return marks + [longest] if longest else []


def _at_trials(lb: Leaderboard, agent: str, ks: list[int]) -> list[float]:
    """Per k: weighted geomean over the agent's tasks of the median over seeds of best-so-far / best
    known after k trials (a shorter run keeps its final value)."""
    cells = [c for (a, _), c in lb.cells.items() if a == agent and c.curves]
    out = []
    for k in ks:
        per_task = [float(np.median([x[min(k, len(x)) - 1] if len(x) else 0.0 for x in c.curves])) for c in cells]
        out.append(M.geomean(per_task, [c.weight for c in cells]) if cells else math.nan)
    return out


def missing_runs(lb: Leaderboard) -> dict[str, int]:
    """Agent -> runs of the current suite that the results file does not hold."""
    from benchmarks.leaderboard.suite import Suite

    expected: dict[str, int] = defaultdict(int)
    for spec in Suite.from_dict(lb.header["suite"]).runs():
        expected[spec.agent] += 1
    done = {r["agent"]: r["runs"] for r in lb.rows}
    for agent, n in lb.na_runs.items():
        done[agent] = done.get(agent, 0) + n
    return {a: n - done.get(a, 0) for a, n in expected.items() if n > done.get(a, 0)}


def fmt(x: float, digits: int = 3) -> str:
    """``x`` with ``digits`` decimals for a table cell: ``-`` for None or NaN, ``never`` for infinity."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "never"
    return f"{x:.{digits}f}"


def _vs_reference(row: dict[str, Any]) -> str:
    """An agent's "vs PyTorch": ``suspect`` when every task's reference is, else the geometric
    mean over the others, saying how many were left out."""
    if row["suspect_references"] and row["suspect_references"] == row["tasks"]:
        return "suspect"
    left_out = f" ({row['suspect_references']} suspect left out)" if row["suspect_references"] else ""
    return fmt(row["vs_reference"]) + left_out


def _threads_differ(td: TaskData) -> bool:
    """Whether the task's reference ran on another thread count than its kernels (both known)."""
    return bool(td.kernel_threads and td.reference_threads and td.kernel_threads != td.reference_threads)


def _thread_note(tasks: dict[str, TaskData]) -> list[str]:
    """The note on tasks whose kernels and reference ran on different thread counts (none: no note)."""
    pairs: dict[tuple[int, int], list[str]] = defaultdict(list)  # (kernel, reference threads) -> tasks
    for tid, td in tasks.items():
        if _threads_differ(td) and not td.reference_suspect:
            pairs[(td.kernel_threads, td.reference_threads)].append(tid)  # type: ignore[index]
    if not pairs:
        return []
    groups = "; ".join(f"kernels on {k} thread{'s' * (k > 1)} against PyTorch on {r}: {', '.join(tids)}"
                       for (k, r), tids in sorted(pairs.items()))
    return ["", "**vs PyTorch** sets a task's best kernel against the reference at the thread count the kernels "
            "ran on where the data has it (`tune_gym.measure.reference.reference_at`). Where it does not, the "
            f"counts differ ({groups}): kernels timed before the live backend sized TVM's thread pool ran on its "
            "default, half the logical CPUs on x86-64 (one on a 2-vCPU host), and their datasets record no "
            "one-thread reference, so the ratio sets one core against all of them and understates the kernels. "
            "The per-task table marks those references `(Rt; kernels Kt)`."]


def _iqr(values: list[int | None]) -> str:
    s = M.summarize_trials_to_target(values)
    med = s["median"]
    if math.isinf(med):
        return f"never ({s['reached']}/{s['runs']})"
    return f"{med:.0f} [{fmt(s['q25'], 0)}, {fmt(s['q75'], 0)}]"


#: Tables of the network track (:mod:`benchmarks.network_track`), shown on the standard leaderboard.
NETWORK_TRACK = Path(__file__).resolve().parents[1] / "results" / "network_track"


def write_leaderboard(results: str | Path, out: str | Path = "LEADERBOARD.md", plots: str | Path | None = None,
                      command: str | None = None) -> Path:
    """Write the markdown leaderboard of ``results`` to ``out`` and its PNG plots to ``plots``
    (default: a folder named after the results file, beside it). A suite of tasks with nominal
    FLOP counts (spaces measured with Kernel Tuner) gets the section of
    :mod:`.external_report` instead; the standard suite's includes that section's file
    (:data:`.external_report.SECTION_FILE`) when there is one."""
    import warnings

    results, out = Path(results), Path(out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lb = compute(results)
    plots = Path(plots) if plots else results.with_suffix("")
    from benchmarks.leaderboard import external_report

    if external_report.applies(lb):  # nominal FLOPs (spaces measured with Kernel Tuner): times and P only
        return external_report.write_section(lb, results, out, plots, command)
    plots.mkdir(parents=True, exist_ok=True)
    png_curves, png_scores = _plot(lb, plots)
    suite = lb.header["suite"]
    host = lb.header["host"]
    rel = lambda p: Path(p).resolve().relative_to(out.resolve().parent) if Path(p).resolve().is_relative_to(
        out.resolve().parent) else Path(p).resolve()
    lines = [
        f"# Leaderboard: suite `{suite['name']}`", "",
        f"{suite['description']}. {len(lb.tasks)} tasks x {len(suite['agents'])} agents x {suite['seeds']} seeds "
        f"(batch {suite['batch']}); results `{shown(results)}` (validate with `tune-gym validate {shown(results)}`).",
        f"Benchmark host: {host.get('cpu')} ({host.get('logical_cores')} cores, LLVM cpu {host.get('llvm_cpu')}); "
        f"{_run_hosts(lb.run_hosts, host)}"
        f"the datasets' hosts are in `benchmarks/datasets/README.md`. Written {time.strftime('%Y-%m-%d')}"
        + (f" by `{command}`." if command else "."), "",
        "Columns: **P** = random-relative score (0 = random search, 1 = optimum; exhaustive tasks only, averaged "
        "over the methodology's budget, or the suite's where that is shorter, mean and 95% band over seeds) on "
        "trials and on simulated time (against random search on the same clock: a draw counts once its seconds "
        "have passed), and on trials "
        "over the run's whole budget (the methodology's budget can end before a model-guided agent's first plan "
        "of random configs does); "
        "**vs best** / **vs PyTorch** = final best GFLOPS over the best known config / the recorded PyTorch "
        "reference, geometric mean over tasks of the median over seeds, weighted by occurrences in the network with "
        "every network weighing the same; **to 95%** = median over tasks "
        "of the median trials to 95% of the best known; **agent s** = the agent's own compute per run (model "
        "fitting, search), apart from **measure s**, the simulated measurement time per run.", "",
        "| rank | agent | P (trials) | P band | > next (trials) | P (time) | > next (time) | P (run budget) | vs best "
        "| vs PyTorch | to 95% | agent s | measure s | runs |",
        "|---:|---|---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ranking = [r["agent"] for r in lb.rows]
    sig = significance.compare_cells(lb.cells.values(), ranking)
    ranked = sum(not r["missing"] for r in lb.rows)
    for i, r in enumerate(lb.rows, 1):
        after = ranking[i] if i < ranked else None
        so_far = f" of {r['runs'] + r['missing']} so far" if r["missing"] else ""
        lines.append(f"| {i if i <= ranked else '-'} | {r['agent']} | {fmt(r['p_trials'])} "
                     f"| [{fmt(r['p_lower'])}, {fmt(r['p_upper'])}] "
                     f"| {significance.next_cell(sig, r['agent'], after, 'trials')} | {fmt(r['p_time'])} "
                     f"| {significance.next_cell(sig, r['agent'], after, 'time')} "
                     f"| {fmt(r['p_run'])} | {fmt(r['vs_best'])} | {_vs_reference(r)} | "
                     f"{fmt(r['to95'], 0)} | {fmt(r['agent_secs'], 1)} | {fmt(r['measure_secs'], 0)} | "
                     f"{r['runs']}{so_far}{' (' + str(r['na_tasks']) + ' tasks n/a)' if r['na_tasks'] else ''} |")
    if ranked < len(lb.rows):
        lines += ["", "Agents without every run the suite asks of them (`-`) follow the ranked ones, with figures over "
                  "the runs they have so far; they are ranked once their runs are in."]
    cut = {tid: td.p_budgets for tid, td in lb.tasks.items() if td.p_budgets}
    if cut:
        lines += ["", "**P** is averaged over the suite's budget, shorter than the methodology's, on "
                  + ", ".join(f"{tid} ({run:,} of {meth:,} trials)" for tid, (meth, run) in cut.items())
                  + ": there random search's expected best keeps improving after the runs end, so a run's "
                  "last best held to the methodology's budget would score below random search's."]
    suspect = {tid: td.reference_suspect for tid, td in lb.tasks.items() if td.reference_suspect}
    if suspect:
        lines += ["", "**vs PyTorch** leaves out the tasks whose recorded PyTorch reference the reference audit "
                  "marks suspect (`benchmarks/datasets/reference_audit.json`; a value timed on a busy host, far below "
                  "what the op runs at): " + "; ".join(f"{tid} ({why})" for tid, why in suspect.items())
                  + ". A row shows `suspect` when every one of its tasks is."]
    lines += _thread_note(lb.tasks)
    partial = sorted({a for a, _ in lb.not_applicable})
    if partial:
        reasons: dict[tuple[str, str], list[str]] = {}  # (agent, reason) -> tasks
        for (a, t), why in lb.not_applicable.items():
            reasons.setdefault((a, why), []).append(t)
        lines += ["", "Not applicable (`n/a` in the per-task table): " + "; ".join(
            f"{a} on {', '.join(tasks)} ({why})" for (a, why), tasks in sorted(reasons.items()))
            + ". Such an agent's aggregates are over the tasks it ran, so they compare with the other rows "
            "only roughly; compare it task by task below."]
    missing = missing_runs(lb)
    if missing:
        lines += ["", "Runs of the suite not in the results yet (`tune-gym bench --suite NAME` adds them): "
                  + ", ".join(f"{a} {n}" for a, n in sorted(missing.items())) + "."]
    lines += ["", significance.explanation(sig), ""] + significance.matrix_lines(sig)
    lines += ["## Best-so-far at fixed trial counts", "",
              "Best GFLOPS found within the first k trials over the best known, median over seeds, geometric mean "
              "over tasks with the same weights as **vs best** (a jump start shows in the first columns; a run that "
              "stopped before k trials counts with its final best).", ""]
    ks = _trial_marks(lb)
    lines.append("| agent | " + " | ".join(f"@{k}" for k in ks) + " |")
    lines.append("|---|" + "---:|" * len(ks))
    for r in lb.rows:
        lines.append(f"| {r['agent']} | " + " | ".join(fmt(v) for v in _at_trials(lb, r["agent"], ks)) + " |")
    lines += ["", "## Per task", "",
              "Median final GFLOPS over the best known, and trials to 100% of it (median [IQR]; `never (k/n)`: "
              "k of n seeds reached it).", ""]
    agents = [r["agent"] for r in lb.rows] + [a for a in partial if a not in {r["agent"] for r in lb.rows}]
    lines.append("| task | space | best known GFLOPS | PyTorch GFLOPS | " + " | ".join(agents) + " |")
    lines.append("|---|---|---:|---:|" + "---|" * len(agents))
    for tid, td in lb.tasks.items():
        kind = "exhaustive" if td.exhaustive else "sampled (surrogate)"
        cellstr = []
        for a in agents:
            c = lb.cells.get((a, tid))
            cellstr.append(f"{np.median(c.vs_best):.3f}, {_iqr(c.to100)}" if c
                           else "n/a" if (a, tid) in lb.not_applicable else "-")
        torch = fmt(td.reference_gflops, 2) + (" (suspect)" if td.reference_suspect else "")
        if _threads_differ(td) and not td.reference_suspect:
            torch += f" ({td.reference_threads}t; kernels {td.kernel_threads}t)"
        lines.append(f"| {tid} | {td.preset}, {kind} | {fmt(td.best_gflops, 2)} | {torch} | "
                     + " | ".join(cellstr) + " |")
    lines += ["", f"![best-so-far]({rel(png_curves)})", "",
              f"![best-so-far against simulated time]({rel(png_curves.with_name('best_so_far_time.png'))})", ""]
    if png_scores is not None:
        lines += [f"![random-relative score]({rel(png_scores)})", ""]
    tracks = sorted(NETWORK_TRACK.glob("*/*.md")) if suite["name"] == "standard" else []
    if tracks:
        lines += ["## Network track", "",
                  "Agents ranked by a whole network's latency at a fixed trial budget, every kernel tuned under one "
                  "budget on the surrogate of the network's kernel datasets (`python -m benchmarks.network_track`; "
                  "README, \"Leaderboard\"). Lower is better.", ""]
        for path in tracks:
            lines += [path.read_text(encoding="utf-8").strip(), ""]
    if suite["name"] == "standard" and external_report.SECTION_FILE.is_file():
        lines += external_report.included_section(external_report.SECTION_FILE, out)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def _plot(lb: Leaderboard, folder: Path) -> tuple[Path, Path | None]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agents = [r["agent"] for r in lb.rows]
    colors = {a: plt.cm.tab10(i % 10) for i, a in enumerate(agents)}
    tids = list(lb.tasks)
    curves = folder / "best_so_far.png"

    def by_trials(c: Cell) -> tuple[np.ndarray, np.ndarray]:
        n = max(len(x) for x in c.curves)
        return np.arange(1, n + 1), np.array([np.pad(x, (0, n - len(x)), mode="edge") for x in c.curves])

    def by_time(c: Cell) -> tuple[np.ndarray, np.ndarray]:  # recorded build + run seconds of the trials
        grid = np.linspace(0, max(x[-1] for x in c.clocks if len(x)), 200)
        arr = [M.best_so_far_at(curve, clock, grid) for curve, clock in zip(c.curves, c.clocks)]
        return grid, np.nan_to_num(np.array(arr), nan=0.0)

    _task_grid(plt, lb, agents, colors, by_trials, "trials", "against trials", curves)
    _task_grid(plt, lb, agents, colors, by_time, "simulated tuning seconds", "against simulated measurement time",
               folder / "best_so_far_time.png")

    exhaustive = [t for t in tids if lb.tasks[t].exhaustive]
    if not exhaustive:
        return curves, None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for a in agents:
        per_task = []
        for tid in exhaustive:
            c = lb.cells.get((a, tid))
            if c and c.p_curves:
                # every task's budget on a common 0..1 fraction-of-budget axis (50 points)
                x = np.linspace(0, 1, 50)
                per_task.append([np.interp(x, np.linspace(0, 1, len(p)), p) for p in c.p_curves])
        if not per_task:
            continue
        n = min(len(p) for p in per_task)
        per_seed = np.nanmean([np.array(p[:n]) for p in per_task], axis=0)  # seeds x 50
        band = M.score_band(per_seed)
        x = np.linspace(0, 1, per_seed.shape[1])
        ax.plot(x, band["mean"], color=colors[a], label=a)
        ax.fill_between(x, band["lower"], band["upper"], color=colors[a], alpha=0.12)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xlabel("fraction of the random-search budget (trials)")
    ax.set_ylabel("P(t), mean over exhaustive tasks")
    ax.set_title("Random-relative score (95% band over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    scores = folder / "random_relative_score.png"
    fig.savefig(scores, dpi=110)
    plt.close(fig)
    return curves, scores


def _task_grid(plt: Any, lb: Leaderboard, agents: list[str], colors: dict[str, Any], series: Any, xlabel: str,
               title: str, path: Path) -> None:
    """One panel per task: each agent's median best-so-far (over the best known) with its IQR band;
    ``series(cell) -> (x, runs x len(x) array)``."""
    tids = list(lb.tasks)
    ncols = min(3, len(tids))
    nrows = math.ceil(len(tids) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5 * ncols, 3.6 * nrows), squeeze=False)
    for ax, tid in zip(axes.flat, tids):
        for a in agents:
            c = lb.cells.get((a, tid))
            if c is None or not c.curves:
                continue
            x, arr = series(c)
            q25, med, q75 = np.percentile(arr, [25, 50, 75], axis=0)
            ax.plot(x, med, color=colors[a], label=a, lw=1.4)
            ax.fill_between(x, q25, q75, color=colors[a], alpha=0.15)
        ax.set_title(f"{tid} ({lb.tasks[tid].preset})", fontsize=9)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("best-so-far / best known")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(tids):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"Best-so-far throughput {title} (median and IQR over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
