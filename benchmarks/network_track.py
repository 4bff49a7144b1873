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
next to the plain ones.

Results go to ``OUT/NETWORK.jsonl`` (one line per run, keyed by entry, seed and budget: a killed
track resumes with the runs it has not done) and ``OUT/NETWORK.md``, which ranks every entry of the
file at this budget, whichever ``--agents`` this invocation ran.
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
          backend_options: dict[str, Any] | None = None) -> str:
    """The name a run goes by (here and in :mod:`benchmarks.network_e2e`): the agent, then its
    options as on the command line."""
    return (agent + "".join(f" -o {k}={v}" for k, v in (options or {}).items())
            + "".join(f" -b {k}={v}" for k, v in (backend_options or {}).items())
            + (" --shared-model" if shared_model else "") + (f" --transfer {transfer}" if transfer else ""))


def row_entry(row: dict[str, Any]) -> str:
    """A result line's entry (lines written before the options existed are plain runs)."""
    return entry(row["agent"], row.get("shared_model", False), row.get("transfer", 0))


def run_one(network: Any, files: dict[str, Path], agent: str, seed: int, trials: int, batch: int,
            shared_model: bool = False, transfer: int = 0) -> dict[str, Any]:
    from agents.network import tune_network
    from tune_gym.measure.surrogate import SurrogateBackend

    backend = SurrogateBackend(dataset=[str(p) for p in files.values()], seed=seed)
    t0 = time.perf_counter()
    result = tune_network(network, agent=agent, trials=trials, batch=batch, backend=backend, seed=seed,
                          progress=False, shared_model=shared_model, transfer=transfer)
    simulated = sum(t.result.build_secs + t.result.run_secs for p in result.tasks for t in p.runner.result.trials
                    if t.source == "measured")
    return {"agent": agent, "shared_model": shared_model, "transfer": transfer, "seed": seed,
            "trials": sum(p.trials for p in result.tasks),
            "latency_ms": result.estimated_latency * 1e3, "simulated_tuning_s": round(simulated, 1),
            "agent_s": round(time.perf_counter() - t0, 1),
            "per_kernel_trials": [p.trials for p in result.tasks],
            "carried": sum(len(p.carried) for p in result.tasks),
            "best_carried": sum(p.best_trial is not None and p.best_trial.config in p.carried for p in result.tasks)}


def markdown(network: str, runs: list[dict[str, Any]], best_ms: float, meta: dict[str, Any]) -> str:
    lines = [
        f"**{network}** network track: {meta['trials']} trials over the network, batch {meta['batch']}, gradient "
        f"scheduler, `surrogate` backend fitted to `{meta['data']}` ({meta['kernels']} kernel datasets, measured on "
        f"host `{meta['host']}`). Best known: {best_ms:.3f} ms (every kernel at its dataset's fastest config). "
        "Latency: sum over kernels of weight x the best config's latency; median [IQR] over seeds.", "",
        "| rank | agent | seeds | latency ms | vs best known | simulated tuning s | agent s |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    by_agent: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_agent.setdefault(row_entry(r), []).append(r)
    rows = []
    for agent, rs in by_agent.items():
        lat = np.array([r["latency_ms"] for r in rs])
        q1, med, q3 = np.percentile(lat, [25, 50, 75])
        rows.append((med, agent, len(rs), q1, q3, np.median([r["simulated_tuning_s"] for r in rs]),
                     np.median([r["agent_s"] for r in rs])))
    for rank, (med, agent, n, q1, q3, sim, secs) in enumerate(sorted(rows), 1):
        lines.append(f"| {rank} | {agent} | {n} | {med:.3f} [{q1:.3f}, {q3:.3f}] | {best_ms / med:.3f} | "
                     f"{sim:.0f} | {secs:.0f} |")
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
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    if not 0 <= args.transfer <= args.batch:
        p.error(f"--transfer {args.transfer} must be in [0, --batch] = [0, {args.batch}]")

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
    out = args.out / f"{args.network}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    done = [json.loads(line) for line in out.read_text().splitlines() if line.strip()] if out.exists() else []
    keys = {(row_entry(r), r["seed"], r["trials"]) for r in done}
    names = [entry(agent, args.shared_model, args.transfer) for agent in args.agents]
    for agent, name in zip(args.agents, names):
        for seed in range(args.seeds):
            if (name, seed, args.trials) in keys:
                continue
            row = run_one(net, files, agent, seed, args.trials, args.batch, args.shared_model, args.transfer)
            print(f"{name} seed {seed}: {row['latency_ms']:.3f} ms ({row['agent_s']:.0f} s)", flush=True)
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            done.append(row)
    hosts = sorted({h for e in entries for h in e.hosts})
    meta = {"trials": args.trials, "batch": args.batch, "data": str(args.data), "kernels": len(files),
            "host": ", ".join(hosts)}
    table = markdown(args.network, [r for r in done if r["trials"] == args.trials], best_ms, meta)
    (args.out / f"{args.network}.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
