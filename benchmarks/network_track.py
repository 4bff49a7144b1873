"""The network track of the leaderboard: agents ranked by a whole network's latency at a fixed
trial budget, on recorded data (no hardware needed, the same on every machine).

    python -m benchmarks.network_track --network resnet18 \\
        --data benchmarks/datasets/networks/2cec5717df96/resnet18 --agents random xgb-sa ga \\
        --seeds 5 --trials 512 --out benchmarks/results/network_track

Each run tunes every kernel of the network under one budget (:func:`agents.network.tune_network`,
gradient scheduler, batch 8) on the ``surrogate`` backend fitted, kernel by kernel, to the
datasets in ``--data`` (one per tunable kernel, collected with ``tune-gym collect tir://...``:
``benchmarks/datasets/networks/HOST/NETWORK/``), seeded per run, so a seed gives the same run on
every machine. Its score is the network latency the tuned kernels add up to,
``sum(weight * latency of the best config found)``; the table gives per agent the median over
seeds with the interquartile range, the ratio to the best-known latency (every kernel at the
fastest config its dataset measured), and the simulated tuning time (recorded build and run
seconds of the configs measured). Lower latency ranks first.

``--shared-model`` and ``--transfer K`` run the agents as ``tune_network(shared_model=True,
transfer=K)`` does (one cost model over the kernels' rows; ``K`` configs a batch carried from a
kernel's peers); such runs are ranked as their own entries, ``AGENT --shared-model --transfer K``,
next to the plain ones. So are runs with ``--confirm K`` (``tune_network(confirm=K)``: each
kernel's ``K`` fastest configs measured again at the end, the fastest of that re-measurement
picked; their simulated tuning time counts the re-measurements).

``--drift S`` (> 0) runs the track on a host whose speed wanders between measurements: every
measurement is scaled by one factor ``exp(S * z)``, ``z ~ N(0, 1)`` (the surrogate's
``drift`` option, :mod:`tune_gym.measure.surrogate`). A tuner then sees lucky measurements as
fast configs, so such a track scores each run by the true latency of the configs it picked (the
surrogate's noise-free prediction, ``true ms``) and shows the measured one next to it; their gap
is the winner's curse. Every run records both. Without drift the track ranks by the measured
latency, which the surrogate's per-repeat noise (averaged over the repeats) keeps close to the
true one.

Results go to ``OUT/NETWORK.jsonl`` (``OUT/NETWORK-driftS.jsonl`` with ``--drift S``; one line
per run, keyed by entry, seed and budget: a killed track resumes with the runs it has not done)
and the ``.md`` of the same name, which ranks every entry of the file at this budget, whichever
``--agents`` this invocation ran.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

OUT = Path("benchmarks/results/network_track")


def kernel_datasets(network: Any, data_dir: Path, preset: str = "full") -> dict[str, Path]:
    """The dataset file of each tunable kernel (by task URI).

    Raises:
        SystemExit: a tunable kernel has no dataset in ``data_dir`` (names them all).
    """
    from tune_gym.datasets.catalog import catalog

    found = {e.task: e.path for e in catalog([data_dir]) if e.preset == preset}
    missing = [t.task.uri for t in network.tasks if t.tunable and t.task.uri not in found]
    if missing:
        raise SystemExit(f"{len(missing)} kernel(s) of {network.name} have no {preset} dataset in {data_dir}: "
                         + ", ".join(missing) + " (collect them with `tune-gym collect URI --preset full ...`)")
    return {t.task.uri: found[t.task.uri] for t in network.tasks if t.tunable}


def best_known_latency(network: Any, files: dict[str, Path]) -> float:
    """``sum(weight * fastest measured latency)`` over the tunable kernels' datasets."""
    from tune_gym.datasets.dataset import load_dataset

    total = 0.0
    for t in network.tasks:
        if t.tunable:
            ds = load_dataset(files[t.task.uri])
            total += t.weight * min(r.mean for r in ds.results if r.ok)
    return total


def entry(agent: str, shared_model: bool = False, transfer: int = 0, options: dict[str, Any] | None = None,
          backend_options: dict[str, Any] | None = None, confirm: int = 0) -> str:
    """The name a run goes by (here and in :mod:`benchmarks.network_e2e`): the agent, then its
    options as on the command line."""
    return (agent + "".join(f" -o {k}={v}" for k, v in (options or {}).items())
            + "".join(f" -b {k}={v}" for k, v in (backend_options or {}).items())
            + (" --shared-model" if shared_model else "") + (f" --transfer {transfer}" if transfer else "")
            + (f" --confirm {confirm}" if confirm else ""))


def row_entry(row: dict[str, Any]) -> str:
    """A result line's entry (lines written before the options existed are plain runs)."""
    return entry(row["agent"], row.get("shared_model", False), row.get("transfer", 0), confirm=row.get("confirm", 0))


def true_latency(result: Any, backend: Any) -> float:
    """``sum(weight * noise-free latency of the kernel's pick)`` over the run's kernels (seconds):
    the surrogate's prediction of each pick, without per-repeat noise or drift."""
    total = 0.0
    for p in result.tasks:
        pick = p.pick
        if pick is None:
            return float("inf")
        space = p.runner.base.space
        cost, _ = backend.model(p.task.task, space.preset).predict([pick[0]])
        total += p.task.weight * float(cost[0])
    return total


def run_one(network: Any, files: dict[str, Path], agent: str, seed: int, trials: int, batch: int,
            shared_model: bool = False, transfer: int = 0, drift: float = 0.0, confirm: int = 0) -> dict[str, Any]:
    from agents.network import tune_network
    from tune_gym.measure.surrogate import SurrogateBackend

    backend = SurrogateBackend(dataset=[str(p) for p in files.values()], seed=seed, drift=drift)
    t0 = time.perf_counter()
    result = tune_network(network, agent=agent, trials=trials, batch=batch, backend=backend, seed=seed,
                          progress=False, shared_model=shared_model, transfer=transfer, confirm=confirm)
    seconds = time.perf_counter() - t0
    simulated = sum(t.result.build_secs + t.result.run_secs for p in result.tasks for t in p.runner.result.trials
                    if t.source == "measured")
    simulated += sum(r.build_secs + r.run_secs for p in result.tasks for r in p.confirmed.values())
    row_confirm = {"confirm": confirm, "remeasured": sum(len(p.confirmed) for p in result.tasks),
                   "pick_not_best": sum(p.pick_changed for p in result.tasks)} if confirm else {}
    return {"agent": agent, "shared_model": shared_model, "transfer": transfer, **row_confirm, "seed": seed,
            "trials": sum(p.trials for p in result.tasks), "drift": drift,
            "latency_ms": result.estimated_latency * 1e3, "true_latency_ms": true_latency(result, backend) * 1e3,
            "simulated_tuning_s": round(simulated, 1),
            "agent_s": round(seconds, 1),
            "per_kernel_trials": [p.trials for p in result.tasks],
            "carried": sum(len(p.carried) for p in result.tasks),
            "best_carried": sum(p.pick_carried for p in result.tasks)}


def markdown(network: str, runs: list[dict[str, Any]], best_ms: float, meta: dict[str, Any]) -> str:
    drift = meta.get("drift", 0.0)
    head = (f"**{network}** network track: {meta['trials']} trials over the network, batch {meta['batch']}, gradient "
            f"scheduler, `surrogate` backend fitted to `{meta['data']}` ({meta['kernels']} kernel datasets, measured "
            f"on host `{meta['host']}`). Best known: {best_ms:.3f} ms (every kernel at its dataset's fastest config). ")
    if drift:
        head += (f"Host drift {drift}: each measurement scaled by exp({drift} z), z ~ N(0, 1), drawn afresh. "
                 "Score (true ms): sum over kernels of weight x the noise-free latency of the config the run "
                 "picked as its best; measured ms: the same configs as the run measured them; median [IQR] over "
                 "seeds.")
        cols = "| rank | agent | seeds | true ms | measured ms | vs best known | simulated tuning s | agent s |"
    else:
        head += ("Latency: sum over kernels of weight x the best config's latency as measured; true ms: the same with "
                 "the surrogate's noise-free latency of those configs (- where a run predates it); median [IQR] over "
                 "seeds.")
        cols = "| rank | agent | seeds | latency ms | true ms | vs best known | simulated tuning s | agent s |"
    lines = [head, "", cols, "|---:|---|" + "---:|" * (cols.count("|") - 3)]
    key = "true_latency_ms" if drift else "latency_ms"
    by_agent: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_agent.setdefault(row_entry(r), []).append(r)
    rows = []
    for agent, rs in by_agent.items():
        q1, med, q3 = np.percentile([r[key] for r in rs], [25, 50, 75])
        measured = float(np.median([r["latency_ms"] for r in rs]))
        true = float(np.median([r["true_latency_ms"] for r in rs])) if all("true_latency_ms" in r for r in rs) else None
        rows.append((med, agent, len(rs), q1, q3, measured, true, np.median([r["simulated_tuning_s"] for r in rs]),
                     np.median([r["agent_s"] for r in rs])))
    for rank, (med, agent, n, q1, q3, measured, true, sim, secs) in enumerate(sorted(rows), 1):
        second = measured if drift else true
        shown = f"{med:.3f} [{q1:.3f}, {q3:.3f}] | " + (f"{second:.3f} | " if second is not None else "- | ")
        lines.append(f"| {rank} | {agent} | {n} | {shown}{best_ms / med:.3f} | {sim:.0f} | {secs:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--network", required=True)
    p.add_argument("--data", type=Path, required=True, help="folder of the network's kernel datasets")
    p.add_argument("--agents", nargs="+", default=["random", "xgb-sa"])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--trials", type=int, default=512)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--shared-model", action="store_true",
                   help="the kernels' agents train on every kernel's measurements (meta-bo)")
    p.add_argument("--transfer", type=int, default=0, metavar="K",
                   help="configs per batch carried from kernels with the same knobs")
    p.add_argument("--confirm", type=int, default=0, metavar="K",
                   help="after the budget, measure each kernel's K fastest configs again and pick the fastest of "
                        "that (tune_network(confirm=K); extra measurements, not trials)")
    p.add_argument("--drift", type=float, default=0.0, metavar="S",
                   help="host drift: each measurement scaled by exp(S z), z ~ N(0, 1); runs are scored by "
                        "the true latency of their picks and go to OUT/NETWORK-driftS.jsonl (0: none)")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    if not 0 <= args.transfer <= args.batch:
        p.error(f"--transfer {args.transfer} must be in [0, --batch] = [0, {args.batch}]")
    if args.confirm < 0:
        p.error(f"--confirm {args.confirm} must be >= 0")
    if not 0 <= args.drift <= 2:
        p.error(f"--drift {args.drift} must be in [0, 2]")

    from tune_gym.datasets.catalog import catalog
    from tune_gym.networks import import_network
    from tune_gym.tasks import Task

    entries = catalog([args.data])
    if not entries:
        raise SystemExit(f"no datasets in {args.data}")
    target = Task.parse(entries[0].task).target
    net = import_network(args.network, target)
    files = kernel_datasets(net, args.data)
    best_ms = best_known_latency(net, files) * 1e3
    stem = args.network + (f"-drift{args.drift:g}" if args.drift else "")
    out = args.out / f"{stem}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    done = [json.loads(line) for line in out.read_text().splitlines() if line.strip()] if out.exists() else []
    keys = {(row_entry(r), r["seed"], r["trials"]) for r in done}
    names = [entry(agent, args.shared_model, args.transfer, confirm=args.confirm) for agent in args.agents]
    for agent, name in zip(args.agents, names):
        for seed in range(args.seeds):
            if (name, seed, args.trials) in keys:
                continue
            row = run_one(net, files, agent, seed, args.trials, args.batch, args.shared_model, args.transfer,
                          args.drift, args.confirm)
            print(f"{name} seed {seed}: {row['latency_ms']:.3f} ms measured, {row['true_latency_ms']:.3f} true "
                  f"({row['agent_s']:.0f} s)", flush=True)
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            done.append(row)
    hosts = sorted({h for e in entries for h in e.hosts})
    meta = {"trials": args.trials, "batch": args.batch, "data": str(args.data), "kernels": len(files),
            "host": ", ".join(hosts), "drift": args.drift}
    table = markdown(args.network, [r for r in done if r["trials"] == args.trials], best_ms, meta)
    (args.out / f"{stem}.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
