"""Rieber et al.'s HW-aware study on the simulated VTA: trials to the best config, and the cost model
against the valid share of its training data (METHODS.md section 5).

Usage::

    tune-gym bench --suite vta --jobs 1 [--seeds 20] [--agents random,xgb-sa,presample]
    python -m benchmarks.hwaware_study [--results benchmarks/results/leaderboard/vta.parquet]
        [--out benchmarks/results/vta] [--part all|tuning|model] [--repeats 10] [--train 50]

**Part 1, tuning** (the paper's Section V-B, Figure 5), from a results file of the ``vta`` suite
(:mod:`benchmarks.leaderboard`): per workload and agent, the trials until a run first measures a
best config of the space (the optimum of the workload's exhaustive ``vta-sim`` dataset; several
configs may tie at it, e.g. loop orders the model times alike: any of them counts), median and IQR
(numpy's linear quantiles) over seeds. A run that never finds it counts as its budget (750), and
the tables say how many did not. Ratios ``presample / xgb-sa`` of the medians and of the IQRs per
workload, then averaged over workloads as the paper does: its "0.416x as many trials" is "a mean"
of per-layer ratios (it sets layer 59's 0.111x and layer 107's 0.735x against it), so the
arithmetic mean of per-workload ratios is the headline, the geometric mean beside it. A workload
whose baseline IQR is 0 has no IQR ratio and is left out of that mean (counted).

**Part 2, the cost model** (Section III-C, Figure 2): AutoTVM's XGBoost model exactly as ``xgb-sa``
builds it (:class:`agents.models.xgb.XGBModel`: ``rank:pairwise``, AutoTVM's parameters, early
stopping on the training recall@50, knob features of :class:`agents.models.features.KnobFeaturizer`,
invalid configs as throughput 0), trained on ``n`` = 50 configs of one workload of which a set share
is valid (drawn at random from the exhaustive dataset's valid and invalid configs), and tested on
every other config of the space. Metrics on the test configs:

* pairwise accuracy, the paper's equation (1): over every pair except invalid-invalid pairs (and
  valid pairs of equal throughput), the share the model orders like the throughput (invalid = 0;
  equal scores count half); split into valid-invalid pairs (the valid one scored higher: Figure 2c)
  and valid-valid pairs (:func:`agents.models.metrics.pairwise_accuracy`, sampled above 200,000
  pairs);
* precision@n (share of valid configs among the model's top n,
  :func:`agents.models.metrics.precision_valid_at_k`) and nDCG@n (gains ``2^(best cost / cost) - 1``,
  0 for invalid, :func:`agents.models.metrics.ndcg_at_k`), for n = 10 and 50 (the batch).

With no valid training config the labels are all 0: AutoTVM does not fit then (``xgb-sa`` neither),
so the scores are constant and the metrics those of a random ranking (seeded tie-breaks). A share
needing more valid configs than the workload has (layer 3: 36) is left out for that workload; the
means over workloads use only the workloads that have every share, and say which are left out.

Outputs in ``--out``: ``hwaware_study.json`` (every number, per run and per repeat) and
``hwaware_study.md`` (the tables, beside the paper's numbers). Every VTA number is simulated.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["PAPER", "model_metrics", "model_study", "spread", "trials_to_best", "tuning_study"]

RESULTS = Path("benchmarks/results/leaderboard/vta.parquet")
OUT = Path(__file__).parent / "results" / "vta"
#: The paper's headline numbers (Section V-B): presample / AutoTVM, mean over the 13 layers, and
#: the two per-layer ratios it quotes.
PAPER = {"median_ratio": 0.416, "iqr_ratio": 0.424, "median_ratio_59": 0.111, "median_ratio_107": 1 / 1.36}
#: Valid shares of the training configs (Figure 2's x axis spans 0..1).
RATIOS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
KS = (10, 50)


# --------------------------------------------------------------------------------------------- part 1
def trials_to_best(gflops: Sequence[float], optimum: float, rtol: float = 1e-9) -> int | None:
    """1-based trial at which a run first measures a config within ``rtol`` of ``optimum``; None if never."""
    hits = np.flatnonzero(np.asarray(gflops, dtype=float) >= optimum * (1.0 - rtol))
    return int(hits[0]) + 1 if hits.size else None


def spread(values: Sequence[int | None], budget: int) -> dict[str, Any]:
    """Median, quartiles and IQR of trials-to-best over seeds; a run that never found the best
    counts as ``budget`` (``never`` says how many)."""
    v = np.array([budget if x is None else x for x in values], dtype=float)
    q25, med, q75 = np.percentile(v, [25, 50, 75])
    return {"median": float(med), "q25": float(q25), "q75": float(q75), "iqr": float(q75 - q25),
            "mean": float(v.mean()), "never": sum(x is None for x in values), "runs": len(values)}


def _optimum(uri: str, preset: str) -> tuple[float, int, int, int]:
    """``(best GFLOPS, configs at it, space size, valid configs)`` of a task's exhaustive dataset."""
    from tune_gym.datasets import load_dataset
    from tune_gym.datasets.catalog import find_dataset

    entry = find_dataset(uri, preset)
    if entry is None or not entry.exhaustive:
        raise SystemExit(f"hwaware_study: {uri} ({preset}) has no exhaustive dataset; collect it with "
                         f"`tune-gym collect TASK --preset {preset} --plan exhaustive --backend vta-sim "
                         "--out-dir benchmarks/datasets/vta`")
    ds = load_dataset(entry.path, verify=False)
    g = ds.gflops
    best = float(g.max())
    return best, int((g >= best * (1 - 1e-9)).sum()), len(ds), int(ds.ok.sum())


def tuning_study(results: str | Path, method: str = "presample", baseline: str = "xgb-sa",
                 agents: Sequence[str] = ("presample", "xgb-sa", "random")) -> dict[str, Any]:
    """Part 1 from a results file (see the module docstring)."""
    from benchmarks.leaderboard.results import read_results

    header, runs = read_results(results)
    found: dict[str, dict[str, list[tuple[int, int | None]]]] = defaultdict(lambda: defaultdict(list))
    info: dict[str, dict[str, Any]] = {}
    budgets: dict[str, int] = {}
    secs: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # agent -> [run wall s, agent s]
    for line in runs:
        spec = line["spec"]
        if spec["agent"] not in agents or "not_applicable" in line:
            continue
        secs[spec["agent"]][0] += line.get("wall_secs", 0.0)
        secs[spec["agent"]][1] += line.get("agent_secs", 0.0)
        tid = spec["task"]
        if tid not in info:
            best, n_best, size, valid = _optimum(line["task_uri"], spec["preset"])
            info[tid] = {"uri": line["task_uri"], "preset": spec["preset"], "optimum_gflops": best,
                         "optimal_configs": n_best, "space": size, "valid": valid}
        budgets[tid] = spec["budget"]
        found[tid][spec["agent"]].append((spec["seed"], trials_to_best(line["gflops"], info[tid]["optimum_gflops"])))
    order = [t["id"] for t in header["suite"]["tasks"] if t["id"] in info]  # the suite's order
    rows = []
    for tid in order:
        row: dict[str, Any] = {"task": tid, **info[tid], "budget": budgets[tid], "agents": {}}
        for agent in agents:
            seeds = sorted(found[tid].get(agent, []))
            if seeds:
                row["agents"][agent] = {**spread([t for _, t in seeds], budgets[tid]),
                                        "trials": {s: t for s, t in seeds}}
        m, b = row["agents"].get(method), row["agents"].get(baseline)
        if m and b:
            row["median_ratio"] = m["median"] / b["median"]
            row["iqr_ratio"] = m["iqr"] / b["iqr"] if b["iqr"] > 0 else math.nan
        r = row["agents"].get("random")
        if m and r:
            row["median_ratio_vs_random"] = m["median"] / r["median"]
        rows.append(row)
    return {"results": str(results), "suite": header["suite"]["name"], "method": method, "baseline": baseline,
            "agents": list(agents), "workloads": rows, "summary": _summary(rows, method, baseline),
            "seconds": {a: {"run_wall": w, "agent": g} for a, (w, g) in secs.items()}}


def _mean(values: list[float]) -> dict[str, Any]:
    ok = [v for v in values if math.isfinite(v)]
    return {"mean": float(np.mean(ok)) if ok else math.nan,
            "geomean": float(np.exp(np.mean(np.log(ok)))) if ok and min(ok) > 0 else math.nan,
            "workloads": len(ok), "left_out": len(values) - len(ok), "better": sum(v < 1 for v in ok)}


def _summary(rows: list[dict[str, Any]], method: str, baseline: str) -> dict[str, Any]:
    """The per-workload ratios averaged over workloads, and the ratio of the summed medians."""
    with_both = [r for r in rows if "median_ratio" in r]
    return {"median_ratio": _mean([r["median_ratio"] for r in with_both]),
            "iqr_ratio": _mean([r["iqr_ratio"] for r in with_both]),
            "median_ratio_vs_random": _mean([r["median_ratio_vs_random"] for r in rows
                                             if "median_ratio_vs_random" in r]),
            "sum_of_medians_ratio": (sum(r["agents"][method]["median"] for r in with_both)
                                     / sum(r["agents"][baseline]["median"] for r in with_both)
                                     if with_both else math.nan)}


# --------------------------------------------------------------------------------------------- part 2
def model_metrics(scores: np.ndarray, cost: np.ndarray, ks: Sequence[int] = KS, seed: int = 0) -> dict[str, float]:
    """The paper's model metrics of ``scores`` (higher = predicted faster) against measured ``cost``
    (seconds; ``inf`` = invalid): ``acc`` (equation 1), ``acc_vi``, ``acc_vv``, ``precision@k``, ``ndcg@k``."""
    from agents.models import metrics as M

    scores = np.asarray(scores, dtype=float)
    cost = np.asarray(cost, dtype=float)
    ok = np.isfinite(cost) & (cost > 0)
    sv, si = scores[ok], np.sort(scores[~ok])
    n_vi = sv.size * si.size
    if n_vi:
        below = np.searchsorted(si, sv, "left")
        ties = np.searchsorted(si, sv, "right") - below
        acc_vi = float((below.sum() + 0.5 * ties.sum()) / n_vi)
    else:
        acc_vi = math.nan
    _, counts = np.unique(cost[ok], return_counts=True)
    n_vv = sv.size * (sv.size - 1) // 2 - int((counts * (counts - 1) // 2).sum())  # pairs of different cost
    acc_vv = M.pairwise_accuracy(scores, cost, seed=seed) if n_vv else math.nan
    parts = [(n, a) for n, a in ((n_vi, acc_vi), (n_vv, acc_vv)) if n]
    out = {"acc": sum(n * a for n, a in parts) / sum(n for n, _ in parts) if parts else math.nan,
           "acc_vi": acc_vi, "acc_vv": acc_vv}
    for k in ks:
        out[f"precision@{k}"] = M.precision_valid_at_k(scores, cost, k, seed)
        out[f"ndcg@{k}"] = M.ndcg_at_k(scores, cost, k, seed)
    return out


def model_study(tasks: Sequence[str], ratios: Sequence[float] = RATIOS, n_train: int = 50, repeats: int = 10,
                ks: Sequence[int] = KS, seed: int = 0, preset: str = "full") -> dict[str, Any]:
    """Part 2 (see the module docstring): per task, valid share and repeat, the metrics of a model
    trained on ``n_train`` configs with that share valid, tested on the rest of the space."""
    from agents.models.features import KnobFeaturizer
    from agents.models.xgb import XGBModel
    from tune_gym.datasets import load_dataset
    from tune_gym.datasets.catalog import find_dataset
    from tune_gym.tasks import Task

    per_task: dict[str, dict[str, Any]] = {}
    for ti, tid in enumerate(tasks):
        task = Task.parse(tid)
        entry = find_dataset(task, preset)
        if entry is None or not entry.exhaustive:
            raise SystemExit(f"hwaware_study: {tid} ({preset}) has no exhaustive dataset")
        ds = load_dataset(entry.path, verify=False)
        x = KnobFeaturizer(ds.space)(ds.configs)
        y, cost = ds.gflops, ds.mean_cost
        valid, invalid = np.flatnonzero(ds.ok), np.flatnonzero(~ds.ok)
        cells: dict[str, Any] = {}
        for ri, ratio in enumerate(ratios):
            n_valid = round(ratio * n_train)
            if n_valid > valid.size or n_train - n_valid > invalid.size:
                cells[f"{ratio:g}"] = {"skipped": f"needs {n_valid} valid and {n_train - n_valid} invalid configs, "
                                                  f"the space has {valid.size} and {invalid.size}"}
                continue
            reps = []
            for rep in range(repeats):
                rng = np.random.default_rng([seed, ti, ri, rep])
                train = np.concatenate([rng.choice(valid, n_valid, replace=False),
                                        rng.choice(invalid, n_train - n_valid, replace=False)])
                test = np.setdiff1d(np.arange(len(ds)), train)
                if y[train].max() > 1e-6:  # as xgb-sa: AutoTVM fits once some config ran
                    model = XGBModel("rank", seed=int(rng.integers(2**31)), nthread=1, plan_size=n_train)
                    scores = model.fit(x[train], y[train]).predict(x[test])
                    rounds = model.rounds
                else:
                    scores, rounds = np.zeros(test.size), 0
                reps.append({**model_metrics(scores, cost[test], ks, seed=rep), "rounds": rounds})
            cells[f"{ratio:g}"] = {"mean": {k: float(np.nanmean([r[k] for r in reps])) for k in reps[0]},
                                   "repeats": reps}
        per_task[tid] = {"space": len(ds), "valid": int(valid.size), "ratios": cells}
    complete = [t for t, d in per_task.items() if all("mean" in c for c in d["ratios"].values())]
    means = {f"{r:g}": {k: float(np.mean([per_task[t]["ratios"][f"{r:g}"]["mean"][k] for t in complete]))
                        for k in per_task[complete[0]]["ratios"][f"{r:g}"]["mean"]} if complete else {}
             for r in ratios}
    return {"n_train": n_train, "repeats": repeats, "ratios": list(ratios), "ks": list(ks), "tasks": per_task,
            "mean_over": complete, "left_out": [t for t in per_task if t not in complete], "mean": means}


# --------------------------------------------------------------------------------------------- report
def _f(x: float, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def report(tuning: dict[str, Any] | None, model: dict[str, Any] | None, meta: dict[str, Any]) -> str:
    """The markdown tables of both parts."""
    lines = ["# HW-aware initialization on the simulated VTA (Rieber et al.'s study)", "",
             "Every VTA number here is simulated (`vta-sim`: the analytic model of `tune_gym.vta.model`), "
             "not measured on a board; the paper measured VTA hardware. Generated by "
             f"`{meta['command']}` in {meta['wall_secs']:.0f} s.", ""]
    if tuning is not None:
        t, s = tuning, tuning["summary"]
        agents = t["agents"]
        seeds = sorted({a["runs"] for r in t["workloads"] for a in r["agents"].values()})
        lines += ["## Trials until the best config is found", "",
                  f"Suite `{t['suite']}` (results `{t['results']}`): batch 50, budget 750 trials, "
                  f"{'/'.join(map(str, seeds))} seeds per workload and agent. Trials until a run first measures a "
                  "config at the space's optimum (from the exhaustive dataset; *opt.* configs tie at it): median "
                  "[q25, q75] over seeds, a run that never finds it counted as 750 (*never*: how many). "
                  f"Ratios: {t['method']} / {t['baseline']}. A quartile at 750 is a cap (the runs beyond it never "
                  "found the best), so such an IQR understates the spread. The runs took "
                  + ", ".join(f"{a} {v['run_wall'] / 60:.1f} min ({v['agent'] / 60:.1f} in the agent)"
                              for a, v in t.get("seconds", {}).items())
                  + " of wall time (each run's `wall_secs` summed).", "",
                  "| id | space | valid | opt. | " + " | ".join(f"{a} median [IQR range] (never)" for a in agents)
                  + " | median ratio | IQR ratio |",
                  "|---:|---:|---:|---:|" + "---|" * len(agents) + "---:|---:|"]
        for r in t["workloads"]:
            cells = []
            for a in agents:
                c = r["agents"].get(a)
                cells.append(f"{c['median']:.0f} [{c['q25']:.0f}, {c['q75']:.0f}] ({c['never']})" if c else "-")
            lines.append(f"| {r['task'].rpartition(':')[2]} | {r['space']} | {r['valid']} | {r['optimal_configs']} | "
                         + " | ".join(cells) + f" | {_f(r.get('median_ratio', math.nan))} | "
                         f"{_f(r.get('iqr_ratio', math.nan))} |")
        mr, ir, rr = s["median_ratio"], s["iqr_ratio"], s["median_ratio_vs_random"]
        lines += ["", "| ratio over workloads | ours: mean of per-workload ratios | ours: geometric mean | workloads "
                  "(better / counted / left out) | paper (mean) |", "|---|---:|---:|---|---:|",
                  f"| median trials, {t['method']} / {t['baseline']} | {_f(mr['mean'])} | {_f(mr['geomean'])} | "
                  f"{mr['better']} / {mr['workloads']} / {mr['left_out']} | {PAPER['median_ratio']} |",
                  f"| IQR, {t['method']} / {t['baseline']} | {_f(ir['mean'])} | {_f(ir['geomean'])} | "
                  f"{ir['better']} / {ir['workloads']} / {ir['left_out']} | {PAPER['iqr_ratio']} |",
                  f"| median trials, {t['method']} / random | {_f(rr['mean'])} | {_f(rr['geomean'])} | "
                  f"{rr['better']} / {rr['workloads']} / {rr['left_out']} | - |", "",
                  f"Ratio of the summed medians over workloads: {_f(s['sum_of_medians_ratio'])}. The paper's "
                  f"per-layer ratios: layer 59 {PAPER['median_ratio_59']}x, layer 107 {PAPER['median_ratio_107']:.3f}x "
                  "(\"1.36x\")"]
        quoted = [f"layer {r['task'].rpartition(':')[2]} {_f(r.get('median_ratio', math.nan))}x"
                  for r in t["workloads"] if r["task"].endswith((":59", ":107"))]
        lines[-1] += f"; ours: {', '.join(quoted)}." if quoted else "."
        lines.append("")
    if model is not None:
        m = model
        ks = m["ks"]
        cols = ["acc", "acc_vi", "acc_vv"] + [f"precision@{k}" for k in ks] + [f"ndcg@{k}" for k in ks]
        lines += ["## The cost model against the valid share of its training data", "",
                  f"AutoTVM's XGBoost (as in `xgb-sa`: rank loss, knob features) trained on {m['n_train']} configs of "
                  "one workload with the given share valid, tested on every other config of the space; mean over "
                  f"{m['repeats']} draws per workload, then over the {len(m['mean_over'])} workloads that have enough "
                  "valid configs for every share"
                  + (f" (left out: {', '.join(m['left_out'])})" if m["left_out"] else "") + ". *acc*: the paper's "
                  "pairwise accuracy (every pair but invalid-invalid), *acc v-i*: valid-invalid pairs (the valid "
                  "one ranked higher), *acc v-v*: valid-valid pairs; precision@n: share of valid configs in the "
                  "model's top n; nDCG@n with gains 2^(best/cost) - 1. At share 0 no config ran, so the model is "
                  "not fitted (AutoTVM's rule) and ranks at random.", "",
                  "| valid share (valid / n) | acc | acc v-i | acc v-v | " + " | ".join(c for c in cols[3:]) + " |",
                  "|---:|" + "---:|" * len(cols)]
        for r in m["ratios"]:
            row = m["mean"].get(f"{r:g}", {})
            lines.append(f"| {r:g} ({round(r * m['n_train'])}/{m['n_train']}) | "
                         + " | ".join(_f(row.get(c, math.nan)) for c in cols) + " |")
        lines += ["", "The paper (Figure 2, hardware-measured DeepBench layers, 75/25 random split): precision and "
                  "valid-invalid accuracy fall as the valid share grows; nDCG is bell-shaped with its best near "
                  "0.5.", "", "Per workload, nDCG@50 by valid share:", "",
                  "| id | valid | " + " | ".join(f"{r:g}" for r in m["ratios"]) + " |",
                  "|---:|---:|" + "---:|" * len(m["ratios"])]
        for tid, d in m["tasks"].items():
            lines.append(f"| {tid.rpartition(':')[2]} | {d['valid']} | " + " | ".join(
                _f(d["ratios"][f"{r:g}"]["mean"]["ndcg@50"]) if "mean" in d["ratios"][f"{r:g}"] else "n/a"
                for r in m["ratios"]) + " |")
    return "\n".join(lines) + "\n"


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, default=RESULTS, help="results file of the vta suite (tune-gym bench)")
    p.add_argument("--out", type=Path, default=OUT, help="folder of hwaware_study.json / .md")
    p.add_argument("--part", choices=["all", "tuning", "model"], default="all")
    p.add_argument("--method", default="presample")
    p.add_argument("--baseline", default="xgb-sa")
    p.add_argument("--tasks", nargs="+", help="workloads of part 2 (default: the deepbench suite)")
    p.add_argument("--ratios", type=float, nargs="+", default=list(RATIOS), help="valid shares of part 2")
    p.add_argument("--train", type=int, default=50, help="training configs of part 2")
    p.add_argument("--repeats", type=int, default=10, help="draws per workload and share in part 2")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    start = time.time()
    tuning = model = None
    if args.part in ("all", "tuning"):
        tuning = tuning_study(args.results, args.method, args.baseline,
                              agents=(args.method, args.baseline, "random"))
    if args.part in ("all", "model"):
        if args.tasks:
            tasks = args.tasks
        else:
            from tune_gym.tasks import get_suite

            tasks = [f"deepbench:{i}" for i in get_suite("deepbench").ids]
        model = model_study(tasks, args.ratios, args.train, args.repeats, seed=args.seed)
    meta = {"command": shlex.join(["python", "-m", "benchmarks.hwaware_study", *(sys.argv[1:] if argv is None
                                                                                  else argv)]),
            "wall_secs": time.time() - start, "time": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "hwaware_study.json").write_text(
        json.dumps(_jsonable({"meta": meta, "paper": PAPER, "tuning": tuning, "model": model}), indent=1) + "\n",
        encoding="utf-8")
    text = report(tuning, model, meta)
    (args.out / "hwaware_study.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
