"""Whole networks tuned end to end on this CPU: tune_gym's agents against PyTorch eager, TVM's
untuned default build and MetaSchedule's own network tuning at the same trial budget.

    python -m benchmarks.network_e2e --network resnet18 --agents xgb-sa random --trials 512 --part tune
    python -m benchmarks.network_e2e --network resnet18 --agents xgb-sa random --trials 512 --part metaschedule
    python -m benchmarks.network_e2e --network resnet18 --agents xgb-sa random --trials 512 --part time

Three parts, each resumable, so the slow ones can run in the background and the timing can wait
for a quiet machine:

* ``tune``: each agent tunes every kernel of the network (:func:`agents.network.tune_network`,
  gradient scheduler, batch 8, live backend) into ``OUT/NETWORK/AGENT/records``; a killed run
  started again resumes from its records (nothing measured twice) until the budget is spent.
  Wall seconds of every invocation add up in ``OUT/NETWORK/AGENT/tuning.json``. ``-o KEY=VALUE``
  sets an agent option (runs under ``AGENT-KEYVALUE``), ``-b KEY=VALUE`` a live-backend option
  (runs under ``AGENT-bKEYVALUE``; e.g. ``-b flush_cache=true -b number=1 -b min_repeat_ms=0
  -b repeat=10`` times each config on ten cold-cache calls, as AutoTVM's x86 network recipe does).
  ``--shared-model`` lets the kernels' agents learn from each other's measurements (runs under
  ``AGENT-...-shared``); ``--transfer K`` starts each batch with up to K configs carried from
  kernels with the same knobs (:mod:`agents.transfer`; runs under ``AGENT-...-transferK``);
  ``--confirm K`` measures each kernel's K fastest configs again once the budget is spent and
  keeps the fastest of that (runs under ``AGENT-...-confirmK``; the ``time`` part compiles those
  picks).
* ``metaschedule``: MetaSchedule's ``tune_relax`` at the same budget, 16 trials per task
  iteration (``--ms-trials-per-iter``; its default, 64, would spend 512 trials on the first 8
  kernels of its round-robin warm-up and leave the rest untuned), into
  ``OUT/NETWORK/metaschedule``: its JSON database, then kept as the best record of each kernel,
  gzip-compressed (:func:`tune_gym.records.keep_best_records`). Not resumable inside a run: a
  finished run writes ``tuning.json`` and is not run again.
* ``time``: compile each database (MetaSchedule's and every agent run's under ``OUT/NETWORK``),
  check the outputs against PyTorch, and time every build end to end, PyTorch eager and TVM's
  default build included, in ``--rounds`` rounds that take the builds in turn
  (:func:`tune_gym.networks.timing.time_rounds`: a fresh process per build and round, the median
  of 3 timings of >= 0.5 s) with the target's threads. A build's latency is the median over
  rounds; "vs PyTorch" and "vs tune_relax" are ratios taken round by round (median, lowest,
  highest), so a drift of the host moves both sides of a ratio alike. ``--only LABEL ...`` times
  those builds alone next to PyTorch and ``tune_relax`` (more rounds in the same time);
  ``--tag TAG`` writes ``OUT/NETWORK-TAG.json`` and ``.md`` instead. "estimate ms" is what the
  tuner measured: the weighted sum of each kernel's best time when it was tuned. Each tuned
  build is also profiled inside the network (seconds per pass in each kernel,
  :func:`tune_gym.networks.timing.profile_executable`; ``in_network_s`` in the JSON), next to
  what its tuner timed it at alone (``tuned_s``: the record's mean time, times its calls a pass,
  :meth:`tune_gym.networks.network.Network.tuned_seconds`), so a kernel that runs slower in the
  network than when it was tuned shows (a second table sums the kernels of >= 0.5 ms). Then
  ``OUT/NETWORK.json`` and ``.md``.

Target: ``llvm&cores=1`` by default (one thread everywhere, PyTorch included), so a 2-core host
keeps a core free. Weights and inputs are the model's seed-0 random ones. ``--weights packed``
imports the network with its weights re-laid out per schedule and pre-packed at compile time
(results under ``NETWORK-packed``). ``--layout NCHW16c`` computes every convolution whose channels
16 divides in the blocked layout vendor libraries use (:func:`tune_gym.networks.network.import_torch`;
results under ``NETWORK-nchw16c``); MetaSchedule's part then tunes the same converted network.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.network_track import entry

OUT = Path("benchmarks/results/networks")
#: Kernels of at least this many milliseconds a pass inside the network are compared with their tuned time.
KERNEL_MS = 0.5
MS = "MetaSchedule tune_relax"


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def _save(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)


def run_name(agent: str, options: Sequence[str], backend_options: Sequence[str] = ()) -> str:
    """The folder of an agent's run: its id, then each agent ``KEY=VALUE`` option as
    ``-KEYVALUE`` and each backend option as ``-bKEYVALUE``."""
    return (agent + "".join(f"-{o.replace('=', '')}" for o in options)
            + "".join(f"-b{o.replace('=', '')}" for o in backend_options))


def part_tune(net: Any, args: argparse.Namespace, root: Path) -> None:
    from agents.network import tune_network
    from tune_gym.cli import parse_options

    for agent in args.agents:
        run_dir = root / (run_name(agent, args.option, args.backend_option) + ("-shared" if args.shared_model else "")
                          + (f"-transfer{args.transfer}" if args.transfer else "")
                          + (f"-confirm{args.confirm}" if args.confirm else ""))
        info = _load(run_dir / "tuning.json")
        if info.get("trials_done", 0) >= args.trials:
            print(f"{agent}: done ({info['trials_done']} trials, {info['seconds']:.0f} s)", flush=True)
            continue
        print(f"{agent}: tuning {net.name} to {args.trials} trials", flush=True)
        t0 = time.perf_counter()
        result = tune_network(net, agent=agent, trials=args.trials, batch=args.batch, scheduler=args.scheduler,
                              agent_options=parse_options(args.option), out_dir=run_dir, resume=True, seed=args.seed,
                              backend_options=parse_options(args.backend_option) or None, progress=not args.quiet,
                              shared_model=args.shared_model, transfer=args.transfer, confirm=args.confirm)
        done = sum(p.trials for p in result.tasks)
        info = {"agent": agent, "options": parse_options(args.option),
                "backend_options": parse_options(args.backend_option), "shared_model": args.shared_model,
                "transfer": args.transfer, "confirm": args.confirm, "trials_done": done,
                "seconds": info.get("seconds", 0.0) + time.perf_counter() - t0,
                "scheduler": args.scheduler, "batch": args.batch, "estimated_ms": result.estimated_latency * 1e3,
                "per_task_trials": {p.task.task.name: p.trials for p in result.tasks}}
        if args.transfer:  # what this invocation carried (a resumed run counts its own part only)
            info["carried"] = {p.task.task.name: len(p.carried) for p in result.tasks if p.carried}
            info["best_carried"] = [p.task.task.name for p in result.tasks if p.pick_carried]
        if args.confirm:  # kernels whose pick the re-measurement changed from the best trial
            info["pick_not_best"] = [p.task.task.name for p in result.tasks if p.pick_changed]
        _save(run_dir / "tuning.json", info)
        print(f"{agent}: {done} trials, {info['seconds']:.0f} s, estimated {info['estimated_ms']:.2f} ms", flush=True)


def part_metaschedule(net: Any, args: argparse.Namespace, root: Path) -> None:
    from tune_gym.networks.timing import metaschedule_tune
    from tune_gym.records import keep_best_records

    work = root / "metaschedule"
    if (work / "tuning.json").exists():
        print("metaschedule: done", flush=True)
        return
    for name in ("database_workload.json", "database_tuning_record.json"):  # a killed run starts over
        (work / name).unlink(missing_ok=True)
    print(f"metaschedule: tune_relax {net.name} to {args.trials} trials", flush=True)
    _, secs = metaschedule_tune(net, args.trials, work, seed=args.seed, trials_per_iter=args.ms_trials_per_iter)
    records = sum(1 for line in (work / "database_tuning_record.json").read_text().splitlines() if line.strip())
    kept = keep_best_records(work)  # what rebuilds its network: megabytes less in the repository
    _save(work / "tuning.json", {"trials_done": records, "seconds": secs, "trials_per_iter": args.ms_trials_per_iter,
                                 "records_kept": kept})
    print(f"metaschedule: {records} records ({kept} kept: the best of each kernel), {secs:.0f} s", flush=True)


def part_time(net: Any, args: argparse.Namespace, root: Path) -> dict[str, Any]:

    from agents.network import pick_records
    from tune_gym.host import host_fingerprint, host_id
    from tune_gym.networks.timing import paired_ratio, profile_executable, time_rounds
    from tune_gym.records import export_database, load_database

    threads = int(net.target.resolved().get("num-cores", 1))
    ref = net.torch_outputs()
    executables: dict[str, Any] = {"PyTorch eager": None}
    extra: dict[str, dict[str, Any]] = {}
    if not args.only:
        print("building TVM's default build", flush=True)
        executables["TVM default build"] = net.default_build()
        extra["TVM default build"] = {}
    ms_info = _load(root / "metaschedule" / "tuning.json")
    databases = []
    if ms_info:
        databases.append((MS, load_database(root / "metaschedule"), ms_info))
    labels = []
    for run in sorted(p for p in root.iterdir() if (p / "records").is_dir() and (p / "tuning.json").exists()):
        info = _load(run / "tuning.json")  # every agent run of this network, whatever --agents says
        label = "tune_gym " + entry(info["agent"], info.get("shared_model", False), info.get("transfer", 0),
                                    info.get("options"), info.get("backend_options"), info.get("confirm", 0))
        labels.append(label)
        if args.only and label not in args.only:  # PyTorch and tune_relax stay: the ratios' bases
            continue
        records = pick_records(run, None if info.get("confirm") else set())  # each kernel's pick
        databases.append((label, load_database(export_database(records, run / "database")), info))
    unknown = set(args.only) - set(labels)
    if unknown:
        raise SystemExit(f"--only: no build named {sorted(unknown)}; builds: {labels}")
    calls = {t.task.name: t.weight for t in net.tasks}  # a kernel's calls a pass
    for name, db, info in databases:
        print(f"building {name}", flush=True)
        executables[name] = net.compile(db)
        extra[name] = {"tuning_s": info["seconds"], "trials": info["trials_done"],
                       "kernels_tuned": len(net.applied(db)),
                       "tuned_s": {k: s * calls[k] for k, s in net.tuned_seconds(db).items()}}
        if "estimated_ms" in info:
            extra[name]["estimated_ms"] = info["estimated_ms"]
    for name, lib in executables.items():
        if lib is not None:
            extra[name]["max_rel_error"] = net.max_rel_error(lib, ref)
    print(f"timing {len(executables)} builds in {args.rounds} rounds", flush=True)
    latency = time_rounds(executables, net.inputs, threads, rounds=args.rounds, repeats=args.repeats,
                          torch_model=args.network, seed=args.seed)
    for name, lib in executables.items():
        if lib is not None and name != "TVM default build":  # the untuned build takes seconds a pass
            print(f"profiling {name}", flush=True)
            extra[name]["in_network_s"] = profile_executable(lib, net.inputs, threads)
    rows: dict[str, Any] = {}
    for name, lat in latency.items():
        rows[name] = {**lat.to_json(), **extra.get(name, {}),
                      "x_torch": list(paired_ratio(lat, latency["PyTorch eager"]))}
        if MS in latency:
            rows[name]["x_tune_relax"] = list(paired_ratio(lat, latency[MS]))
    doc = {"network": net.name, "target": str(net.target), "budget": args.trials, "batch": args.batch,
           "kernels": len(net.tasks), "tunable": sum(t.tunable for t in net.tasks), "host": host_id(),
           "host_fingerprint": host_fingerprint(), "date": datetime.now(UTC).strftime("%Y-%m-%d"),
           "rounds": args.rounds, "repeats": args.repeats, "rows": rows}
    stem = net.name + (f"-{args.tag}" if args.tag else "")
    _save(args.out / f"{stem}.json", doc)
    (args.out / f"{stem}.md").write_text(markdown(doc))
    print(markdown(doc))
    return doc


def markdown(doc: dict[str, Any]) -> str:
    fp = doc["host_fingerprint"]
    rows = doc["rows"]
    ratios = "x_torch" in rows["PyTorch eager"]  # files written before the interleaved timing have none

    def band(r: list[float] | None) -> str:
        return "-" if r is None else f"{r[0]:.2f}x [{r[1]:.2f}, {r[2]:.2f}]"

    timing = (f"Latency: the median of {doc['rounds']} rounds, every build timed once per round in turn (a fresh "
              f"process each, median of {doc.get('repeats', 3)} timings of >= 0.5 s); ratios are taken round by "
              "round: their median [lowest, highest]." if ratios else "Latency: median of 7 timings in a separate "
              "process.")
    lines = [
        f"**{doc['network']}**, batch 1, target `{doc['target']}`, host `{doc['host']}` ({fp.get('cpu')}, "
        f"{fp.get('llvm_cpu')}), {doc['date']}. {doc['kernels']} kernels ({doc['tunable']} tunable); budget "
        f"{doc['budget']} trials over the network, batch {doc['batch']}. {timing}", "",
        "| build | latency ms | vs PyTorch | vs tune_relax | estimate ms | tuning s | trials | kernels tuned | "
        "max rel. error |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    torch_ms = rows["PyTorch eager"]["median"] * 1e3
    for name, row in rows.items():
        ms = row["median"] * 1e3
        vs_torch = band(row["x_torch"]) if ratios else f"{torch_ms / ms:.2f}x"
        tuning = f"{row['tuning_s']:.0f}" if "tuning_s" in row else "-"
        trials = str(row.get("trials", "-"))
        tuned = str(row.get("kernels_tuned", "-"))
        err = f"{row['max_rel_error']:.1e}" if "max_rel_error" in row else "-"
        estimate = f"{row['estimated_ms']:.2f}" if "estimated_ms" in row else "-"
        lines.append(f"| {name} | {ms:.2f} | {vs_torch} | {band(row.get('x_tune_relax'))} | {estimate} | {tuning} | "
                     f"{trials} | {tuned} | {err} |")
    kernels = [(name, row) for name, row in rows.items() if row.get("in_network_s") and row.get("tuned_s")]
    if kernels:
        lines += ["", f"Kernels of >= {KERNEL_MS} ms a pass inside the network: their time a pass when they were tuned "
                  "(alone, as the tuner timed them) and inside the network (the profile), and the ratio per kernel "
                  "(median [lowest, highest]).", "",
                  "| build | kernels | tuned ms | in network ms | in network / tuned |", "|---|---:|---:|---:|---:|"]
        for name, row in kernels:
            n, tuned, inside, ratio = kernel_losses(row)
            lines.append(f"| {name} | {n} | {tuned * 1e3:.2f} | {inside * 1e3:.2f} | {band(ratio)} |")
    return "\n".join(lines) + "\n"


def kernel_losses(row: dict[str, Any]) -> tuple[int, float, float, list[float] | None]:
    """What a build's kernels of >= ``KERNEL_MS`` ms a pass inside the network lose there: how many,
    their tuned and in-network seconds a pass (summed), and in-network over tuned per kernel
    (median, lowest, highest; ``None`` without such kernels)."""
    tuned, inside = row["tuned_s"], row["in_network_s"]
    names = [k for k in tuned if inside.get(k, 0.0) >= KERNEL_MS * 1e-3 and tuned[k] > 0]
    if not names:
        return 0, 0.0, 0.0, None
    ratios = [inside[k] / tuned[k] for k in names]
    return (len(names), sum(tuned[k] for k in names), sum(inside[k] for k in names),
            [float(np.median(ratios)), min(ratios), max(ratios)])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--network", required=True)
    p.add_argument("--agents", nargs="+", default=["xgb-sa", "random"])
    p.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE",
                   help="an option of every agent (e.g. -o plan_size=16); runs go to AGENT-KEYVALUE")
    p.add_argument("--backend-option", "-b", action="append", default=[], metavar="KEY=VALUE",
                   help="an option of the live backend that tunes (a LiveConfig field, e.g. -b flush_cache=true); "
                        "runs go to AGENT-bKEYVALUE")
    p.add_argument("--shared-model", action="store_true",
                   help="the kernels' agents train on every kernel's measurements (tune_network(shared_model=True); "
                        "meta-bo); runs go to AGENT-...-shared")
    p.add_argument("--transfer", type=int, default=0, metavar="K",
                   help="configs per batch carried from kernels with the same knobs (tune_network(transfer=K)); "
                        "runs go to AGENT-...-transferK")
    p.add_argument("--confirm", type=int, default=0, metavar="K",
                   help="after the budget, each kernel's K fastest configs measured again, the fastest of that "
                        "picked (tune_network(confirm=K)); runs go to AGENT-...-confirmK")
    p.add_argument("--trials", type=int, default=512)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--scheduler", default="gradient")
    p.add_argument("--ms-trials-per-iter", type=int, default=16,
                   help="MetaSchedule's trials per task iteration (16: its first round reaches every kernel "
                        "within 512 trials for ResNet-18; each iteration costs tens of seconds of search on 2 cores)")
    p.add_argument("--target", default="llvm&cores=1")
    p.add_argument("--weights", default="given", choices=["given", "packed"],
                   help="kernels' weight layout (packed: results under NETWORK-packed)")
    p.add_argument("--layout", default="NCHW",
                   help="convolutions' data layout: NCHW, or NCHW<n>c blocked by n channels (results under "
                        "NETWORK-nchw<n>c; tune_relax tunes the same converted network)")
    p.add_argument("--rounds", type=int, default=6,
                   help="timing rounds: every build once per round, in turn, so host drift moves all alike")
    p.add_argument("--repeats", type=int, default=3, help="timings of >= 0.5 s per build and round (their median)")
    p.add_argument("--only", nargs="+", default=[], metavar="LABEL",
                   help="time: only these builds (labels as in the table, e.g. 'tune_gym meta-bo'), next to "
                        "PyTorch and tune_relax, without TVM's default build")
    p.add_argument("--tag", default="", help="time: write OUT/NETWORK-TAG.json and .md (keeps the full table)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--part", choices=["tune", "metaschedule", "time", "all"], default="all")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)

    from tune_gym.host import host_id
    from tune_gym.networks import import_network
    from tune_gym.tasks.prim_func import repo_store, save

    net = import_network(args.network, args.target, seed=args.seed, weights=args.weights, layout=args.layout)
    net.name = args.network + ("-packed" if args.weights == "packed" else "") + (
        f"-{args.layout.lower()}" if args.layout != "NCHW" else "")
    for t in net.tasks:  # the records name kernels by digest: keep the kernels with the repository
        save(t.task, repo_store())
    root = args.out / host_id() / net.name
    if args.part in ("tune", "all"):
        part_tune(net, args, root)
    if args.part in ("metaschedule", "all"):
        part_metaschedule(net, args, root)
    if args.part in ("time", "all"):
        part_time(net, args, root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
