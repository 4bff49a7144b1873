"""tune_gym's agents against TVM's own tuner (MetaSchedule ``tune_tir``) on one task, live.

For each agent and for MetaSchedule, one tuning run of ``max(--trials)`` trials; the best
GFLOPS after each budget in ``--trials`` is read off the run's trials in order (the first
128 trials of a 512-trial run are a 128-trial run: agents and MetaSchedule's evolutionary
search plan batch by batch, never looking at the total). Reported with the host, PyTorch's
reference measured the robust way (separate quiet process, median of 7), the seconds per
trial of each tuner and the command::

    python -m benchmarks.vs_metaschedule --task resnet18:1 --trials 128 512 \\
        --agents xgb-sa contextual-sa --out benchmarks/results/vs_metaschedule

Best-so-far figures taken during a run carry that moment's noise (another process, a clock
change), and every tuner keeps the fastest of hundreds of noisy timings, so they overstate the
kernel. ``--retime DIR ...`` takes the best kernel of every tuner of finished runs (their
``--out`` folders, where MetaSchedule's fastest records are kept as a small database) and times
them again, together, in one process: ``--rounds`` rounds, each timing every kernel once in a
seeded random order, each kernel's figure the median over rounds. With ``--top K`` it re-times
each tuner's K fastest distinct kernels (by the run's own timings) the same way, and each
tuner's *confirmed* figure is the best of their medians: the kernel a user re-checking the top of
a run would deploy, chosen the same way for every tuner. Only an idle machine gives figures worth
writing down::

    python -m benchmarks.vs_metaschedule --retime benchmarks/results/vs_metaschedule/fidelity/* --top 8

A killed comparison resumes where it stopped when run again with the same arguments: the
tuners whose runs finished are kept in the ``--out`` folder (``runs.partial.json``, with the
PyTorch reference) and taken over; the one that was running starts again. Only on the same host:
elsewhere the kept runs are refused (their GFLOPS are another machine's).

``--in-space DIR ...`` says, for MetaSchedule's kept records of finished runs, whether each is a
config of the agents' space that schedules the same program (:func:`in_space`): where
MetaSchedule is ahead, whether the agents' space holds its kernel.

MetaSchedule tunes the same module as the agents (``task.ir_module()``: with the default
``weights=packed`` the op's weights are marked ``layout_free_buffers``, so both sides' kernels
run on pre-packed weights, as a deployed model would), with its default evolutionary search
and XGBoost model, 64 trials per iteration, and the same timing as the live backend (1 call
per repeat, 3 repeats, >= 50 ms each). Its best is the fastest mean
of the repeats its runner recorded. tune_gym's agents tune the task's ``full`` space in
batches of 64 with the live backend's defaults.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from tune_gym.host import host_fingerprint, host_id
from tune_gym.measure.workers import metaschedule_measurers
from tune_gym.tasks import Task

# The key of MetaSchedule's own run; the agent that re-states its search is named ``metaschedule``.
TUNE_TIR = "tune_tir"


#: The folder of a run's ``--out`` that keeps MetaSchedule's fastest records, as a JSON database.
BEST_DB = "tune_tir_best"
#: How many of MetaSchedule's fastest records a run keeps (``--retime --top`` re-times at most these;
#: runs made before this was kept have one).
KEEP = 8
#: The file of an ``--out`` folder that keeps the runs finished so far (:class:`Progress`).
PARTIAL = "runs.partial.json"


def keep_best(work_dir: Path, gflops: list[float], out: Path, top: int = KEEP) -> None:
    """Write MetaSchedule's ``top`` fastest records of ``work_dir`` (by ``gflops``, one per record
    in order; failed ones never), fastest first, to ``out`` as a JSON database of its own:
    kilobytes, against megabytes for the whole run, and enough to rebuild those kernels
    (``--retime``)."""
    lines = [line for line in (work_dir / "database_tuning_record.json").read_text().splitlines() if line.strip()]
    if len(lines) != len(gflops):
        raise ValueError(f"{work_dir}: {len(lines)} records against {len(gflops)} timings")
    order = [int(i) for i in np.argsort(-np.asarray(gflops), kind="stable")[:top] if gflops[i] > 0]
    out.mkdir(parents=True, exist_ok=True)
    (out / "database_workload.json").write_text((work_dir / "database_workload.json").read_text())
    (out / "database_tuning_record.json").write_text("".join(lines[i] + "\n" for i in order))


def best_at(run: dict[str, Any], n: int) -> float:
    """A tuner's best GFLOPS after the first ``n`` trials of its run (a ``runs`` entry of ``summary.json``)."""
    curve = run["best_so_far"]
    return float(curve[min(n, len(curve)) - 1]) if curve else 0.0


def _gflops(task: Task, run_secs: Any) -> float:
    """GFLOPS of a MetaSchedule record's timings: the mean of them, 0 for a failed record
    (MetaSchedule records a failure as 1e10 s)."""
    costs = [float(c) for c in run_secs if float(c) < 1e9]
    return float(task.flops / np.mean(costs) / 1e9) if costs else 0.0


def _replay(rec: Any) -> Any:
    """A MetaSchedule record's schedule, rebuilt as its ``Database.query_schedule`` rebuilds the
    best one: its trace, postprocessing included, on the record's own workload."""
    from tune_gym.tvm_support import tvm

    sch = tvm().s_tir.Schedule(rec.workload.mod)
    rec.trace.apply_to_schedule(sch, remove_postproc=False)
    return sch


def record_gflops(task: Task, work_dir: Path) -> list[float]:
    """GFLOPS of each record of MetaSchedule's JSON database in ``work_dir``, in measurement order
    (the database appends them so)."""
    lines = (work_dir / "database_tuning_record.json").read_text().splitlines()
    # a line: [workload index, [trace, run_secs, target, args_info]]
    return [_gflops(task, json.loads(line)[1][1]) for line in lines if line.strip()]


def metaschedule_run(task: Task, trials: int, seed: int, work_dir: Path, keep: Path | None = None) -> dict[str, Any]:
    """Tune with MetaSchedule's ``tune_tir``; best GFLOPS after each trial, in order. With ``keep``,
    its fastest records are kept there (:func:`keep_best`)."""
    from tune_gym.tvm_support import ms

    m = ms()
    cores = len(os.sched_getaffinity(0))
    # Fresh builder workers import TVM's tensor intrinsics, which takes longer than the build
    # timeout unless done the fast way (tune_gym.tvm_support); the live backend's workers do the same.
    builder, runner = metaschedule_measurers(task.target)
    target = task.target.tvm_target()
    start = time.perf_counter()
    database = m.tir_integration.tune_tir(
        task.ir_module(), target, str(work_dir), max_trials_global=trials, num_trials_per_iter=64,
        builder=builder, runner=runner, seed=seed, num_tuning_cores=cores,
    )
    seconds = time.perf_counter() - start
    del database
    gflops = record_gflops(task, work_dir)
    if keep is not None and gflops:
        keep_best(work_dir, gflops, keep)
    return {"best_so_far": np.maximum.accumulate(gflops).tolist() if gflops else [], "seconds": seconds,
            "trials": len(gflops)}


def agent_run(task: Task, agent: str, trials: int, seed: int, log: Path) -> dict[str, Any]:
    from agents.driver import tune

    log.unlink(missing_ok=True)
    # The agents search on measured GFLOPS; the reward's scale (PyTorch's, measured only on an idle host) is not used.
    summary = tune(task, agent=agent, trials=trials, batch=64, log=log, seed=seed, preset="full", progress=False,
                   reward_norm="none")
    best = summary.run.best_so_far().tolist()
    return {"best_so_far": best, "seconds": summary.run.seconds, "trials": len(best)}


def candidates(run_dir: Path, top: int = 1) -> tuple[Task, dict[str, list[tuple[float, Any]]]]:
    """The task of a finished run folder and, per tuner, its ``top`` fastest distinct kernels by
    the GFLOPS its run recorded, fastest first, as ``(GFLOPS, schedule)``: each agent's configs
    from its log, MetaSchedule's records from its kept database (:func:`keep_best`; as many as
    it kept)."""
    from tune_gym.records import load_records
    from tune_gym.space import KnobSpace
    from tune_gym.tvm_support import ms

    summary = json.loads((run_dir / "summary.json").read_text())
    task = Task.parse(summary["task"])
    space = KnobSpace.for_task(task, "full")
    out: dict[str, list[tuple[float, Any]]] = {}
    for name in summary["runs"]:
        if name == TUNE_TIR:
            work = run_dir / BEST_DB
            if not (work / "database_tuning_record.json").exists():
                print(f"{run_dir}: MetaSchedule's best record was not kept ({BEST_DB}/); not re-timed")
                continue
            records = ms().database.JSONDatabase(work_dir=str(work)).get_all_tuning_records()
            kept = [(_gflops(task, rec.run_secs), rec) for rec in records]
            out[name] = [(g, _replay(rec)) for g, rec in sorted(kept, key=lambda c: -c[0]) if g > 0][:top]
            continue
        fastest: dict[tuple[int, ...], float] = {}
        for r in load_records(run_dir / f"{name}.jsonl", check=False):
            if r.result.ok:
                fastest[tuple(r.config)] = max(fastest.get(tuple(r.config), 0.0), r.result.gflops)
        picked = []
        for config, gflops in sorted(fastest.items(), key=lambda kv: -kv[1])[:top]:
            sch, why = space.apply(config)
            if sch is None:
                raise RuntimeError(f"{run_dir / name}.jsonl: config {config} no longer applies: {why}")
            picked.append((gflops, sch))
        out[name] = picked
    return task, out


def in_space(run_dir: Path) -> list[dict[str, Any]]:
    """Whether each of MetaSchedule's kept records of a finished run is a config of the task's
    ``full`` knob space, the one the agents search: per record, its GFLOPS, the config
    (:meth:`~tune_gym.space.KnobSpace.config_of_trace`, ``None`` with ``why`` when it is not one)
    and whether that config schedules the very program MetaSchedule's trace does. Where it does,
    an agent that missed the kernel missed it in its search, not for want of a space that holds
    it."""
    import tvm_ffi

    from tune_gym.space import KnobSpace, SpaceError
    from tune_gym.tvm_support import ms

    if not (run_dir / BEST_DB / "database_tuning_record.json").exists():
        raise FileNotFoundError(f"{run_dir}: MetaSchedule's records were not kept there ({BEST_DB}/)")
    summary = json.loads((run_dir / "summary.json").read_text())
    task = Task.parse(summary["task"])
    space = KnobSpace.for_task(task, "full")
    rows = []
    for rec in ms().database.JSONDatabase(work_dir=str(run_dir / BEST_DB)).get_all_tuning_records():
        row: dict[str, Any] = {"run": run_dir.name, "gflops": _gflops(task, rec.run_secs)}
        try:
            config = space.config_of_trace(rec.trace)
        except SpaceError as err:
            rows.append({**row, "config": None, "same_program": False, "why": str(err)})
            continue
        ours, why = space.apply(config)
        same = ours is not None and bool(tvm_ffi.structural_equal(ours.mod, _replay(rec).mod))
        rows.append({**row, "config": list(config), "same_program": same, "why": why})
    return rows


class Progress:
    """The tuners of an ``--out`` folder whose runs have finished, kept in ``PARTIAL`` after each
    one, so that a killed comparison resumes at the next tuner: a run (a tuner's whole budget) is
    kept or done again, never half-kept. The PyTorch reference measured first is kept with them,
    so a resumed comparison reports the one measured on the quiet machine before any tuning.

    A folder's progress belongs to one (task, seed, budget) on one host (:func:`tune_gym.host.host_id`,
    ``host`` to name another): runs kept on another machine are not compared with this one's. Any
    other raises ``ValueError`` naming the file and the field that differs."""

    def __init__(self, out: Path, task: str, seed: int, budget: int, host: str | None = None) -> None:
        self.path = out / PARTIAL
        self.key = {"task": task, "seed": seed, "budget": budget, "host": host or host_id()}
        self.reference: dict[str, Any] | None = None
        self.runs: dict[str, dict[str, Any]] = {}
        if not self.path.exists():
            return
        try:
            kept = json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"{self.path}: not a comparison's progress ({err}); remove it to start again") from err
        for field, value in self.key.items():
            if kept.get(field) != value:
                raise ValueError(f"{self.path}: kept runs are for {field} {kept.get(field)!r}, not {value!r}; "
                                 f"use another --out or remove the file to start again")
        self.reference = kept.get("reference")
        self.runs = dict(kept.get("runs", {}))

    def save(self) -> None:
        """Write the reference and the finished runs, atomically."""
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({**self.key, "reference": self.reference, "runs": self.runs}))
        os.replace(tmp, self.path)


class _Chosen:
    """A stand-in for a knob space whose config ``(i,)`` is the i-th of given schedules, so the
    live backend builds and times them exactly as it does a tuning run's configs."""

    def __init__(self, schedules: list[Any]) -> None:
        self.schedules = schedules

    def apply(self, config: tuple[int, ...], check: bool = True) -> tuple[Any, str]:
        return self.schedules[config[0]], ""


def retime(run_dirs: list[Path], rounds: int, seed: int, top: int = 1, backend: Any = None) -> list[dict[str, Any]]:
    """Time the ``top`` fastest kernels of every tuner of ``run_dirs`` again, interleaved (module
    docstring). One row per tuner: ``retimed`` is the median of its during-run best; with
    ``top`` > 1, ``confirmed`` is the best median of its candidates and ``confirmed_rank`` that
    kernel's place in the run's own order (0: the during-run best). Every tuner of a run gets
    the same number of candidates: ``top``, or fewer where one tuner's run kept fewer. ``backend``:
    the live backend that times them (default: one with the tuning runs' settings, closed after)."""
    from tune_gym.measure.live import LiveBackend

    rows = []
    rng = np.random.default_rng(seed)
    with contextlib.nullcontext(backend) if backend is not None else LiveBackend() as backend:
        for run_dir in run_dirs:
            task, found = candidates(run_dir, top)
            n = min([top, *(len(picked) for picked in found.values())])
            if n < top:  # every tuner gets as many candidates as the one with fewest (a run made before KEEP)
                print(f"{run_dir}: {n} candidate(s) per tuner, not {top}: that is all one tuner's run kept")
                found = {name: picked[:n] for name, picked in found.items()}
            kernels = [(name, rank) for name, picked in found.items() for rank in range(len(picked))]
            chosen = _Chosen([found[name][rank][1] for name, rank in kernels])
            per_round: list[list[float]] = [[] for _ in kernels]
            for _ in range(rounds):
                order = rng.permutation(len(kernels))
                results = backend.measure(task, chosen, [(int(i),) for i in order])  # type: ignore[arg-type]
                for i, result in zip(order, results):
                    per_round[i].append(result.gflops if result.ok else 0.0)
            summary = json.loads((run_dir / "summary.json").read_text())
            for name, picked in found.items():
                first = kernels.index((name, 0))
                medians = [float(np.median(per_round[first + rank])) for rank in range(len(picked))]
                row: dict[str, Any] = {"run": run_dir.name, "task": task.uri, "tuner": name,
                                       "during_run": summary["runs"][name]["best_so_far"][-1],
                                       "retimed": medians[0], "rounds": per_round[first]}
                line = f"{run_dir.name:24s} {name:16s} during run {row['during_run']:8.2f}  re-timed {medians[0]:8.2f}"
                if n > 1:
                    best = int(np.argmax(medians))
                    row.update(confirmed=medians[best], confirmed_rank=best,
                               candidates=[{"during_run": g, "retimed": m, "rounds": per_round[first + rank]}
                                           for rank, ((g, _), m) in enumerate(zip(picked, medians))])
                    line += f"  confirmed {medians[best]:8.2f} (candidate {best} of {len(picked)})"
                rows.append(row)
                print(line + " GFLOPS", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="resnet18:1")
    parser.add_argument("--trials", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--agents", nargs="+", default=["xgb-sa", "contextual-sa"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/vs_metaschedule"))
    parser.add_argument("--skip-metaschedule", action="store_true")
    parser.add_argument("--retime", type=Path, nargs="+", metavar="DIR",
                        help="re-time the best kernels of finished runs (their --out folders) and stop")
    parser.add_argument("--rounds", type=int, default=5, help="with --retime: timing rounds (median)")
    parser.add_argument("--top", type=int, default=1,
                        help=f"with --retime: re-time each tuner's TOP fastest kernels and confirm the best of them "
                             f"(MetaSchedule keeps {KEEP} per run)")
    parser.add_argument("--in-space", type=Path, nargs="+", metavar="DIR",
                        help="say whether MetaSchedule's kept records of finished runs are configs of the agents' "
                             "space (and the same program) and stop")
    parser.add_argument("--retime-out", type=Path, default=None, metavar="FILE",
                        help="with --retime: where to write the figures (default: retimed.json, or retimed-topK.json "
                             "with --top, beside the first run folder; an existing file there is never overwritten)")
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="keep MetaSchedule's whole database here (default: a temporary folder; its fastest "
                             f"{KEEP} records are kept in the --out folder either way)")
    args = parser.parse_args(argv)
    if args.in_space:
        for run_dir in args.in_space:
            for row in in_space(run_dir):
                if row["config"] is None:
                    where = f"not in the space: {row['why']}"
                elif row["same_program"]:
                    where = f"config {tuple(row['config'])}, the same program"
                else:
                    where = f"config {tuple(row['config'])}, another program {row['why']}".rstrip()
                print(f"{run_dir}: tune_tir {row['gflops']:8.2f} GFLOPS: {where}")
        return 0
    if args.retime:
        if args.top < 1 or args.rounds < 1:
            parser.error(f"--top and --rounds must be >= 1, got {args.top} and {args.rounds}")
        out = args.retime_out or args.retime[0].parent / (
            "retimed.json" if args.top == 1 else f"retimed-top{args.top}.json")
        if args.retime_out is None and out.exists():
            parser.error(f"{out} exists (the figures of an earlier re-timing); name another file with --retime-out")
        rows = retime(args.retime, args.rounds, args.seed, args.top)
        out.write_text(json.dumps({"host": host_fingerprint(), "host_id": host_id(), "rounds": args.rounds,
                                   "top": args.top,
                                   "time": datetime.now(UTC).isoformat(), "rows": rows}, indent=1))
        print(f"written {out}")
        return 0

    from tune_gym.measure.quiet import BusyHostError
    from tune_gym.measure.reference import Reference, measure_reference

    task = Task.parse(args.task)
    budget = max(args.trials)
    args.out.mkdir(parents=True, exist_ok=True)
    progress = Progress(args.out, task.uri, args.seed, budget)
    reference = None
    if progress.reference is not None:
        reference = Reference.from_json(progress.reference)
    elif task.has_torch_reference and not progress.runs:
        try:
            reference = measure_reference(task)
        except BusyHostError as err:  # the comparison between tuners stands without it
            print(f"no PyTorch reference: {err}", flush=True)
        progress.reference = reference.to_json() if reference else None
        progress.save()
    runs = progress.runs
    if runs:
        print(f"{progress.path}: taking over the finished runs of {', '.join(runs)}", flush=True)
    for agent in args.agents:
        if agent in runs:
            continue
        print(f"{agent}: {budget} trials ...", flush=True)
        runs[agent] = agent_run(task, agent, budget, args.seed, args.out / f"{agent}.jsonl")
        progress.save()
        print(f"  best {runs[agent]['best_so_far'][-1]:.2f} GFLOPS in {runs[agent]['seconds']:.0f} s", flush=True)
    if not args.skip_metaschedule and TUNE_TIR not in runs:
        print(f"MetaSchedule tune_tir: {budget} trials ...", flush=True)
        if args.work_dir is not None:
            args.work_dir.mkdir(parents=True, exist_ok=True)
            runs[TUNE_TIR] = metaschedule_run(task, budget, args.seed, args.work_dir, args.out / BEST_DB)
        else:
            with tempfile.TemporaryDirectory() as work:
                runs[TUNE_TIR] = metaschedule_run(task, budget, args.seed, Path(work), args.out / BEST_DB)
        progress.save()
        print(f"  best {runs[TUNE_TIR]['best_so_far'][-1]:.2f} GFLOPS in "
              f"{runs[TUNE_TIR]['seconds']:.0f} s", flush=True)

    ms_run = runs.get(TUNE_TIR)
    lines = [f"# tune_gym agents vs MetaSchedule on {task.uri}", "",
             f"Host: {host_fingerprint()['cpu']} (LLVM cpu {host_fingerprint()['llvm_cpu']}, "
             f"{host_fingerprint()['logical_cores']} logical cores, host id {host_id()}), "
             f"{datetime.now(UTC):%Y-%m-%d}, Python {platform.python_version()}, seed {args.seed}.",
             (f"PyTorch reference: {reference.gflops:.2f} GFLOPS ({reference.method})." if reference else
              "PyTorch reference: not measured (the host was busy)."), "",
             "| tuner | " + " | ".join(f"best GFLOPS @{n}" for n in args.trials)
             + " | x PyTorch @" + str(budget) + (" | x MetaSchedule @" + str(budget) if ms_run else "")
             + " | s / trial |",
             "|---|" + "---:|" * (len(args.trials) + 2 + bool(ms_run))]
    for name, run in runs.items():
        cells = [f"{best_at(run, n):.2f}" for n in args.trials]
        cells.append(f"{best_at(run, budget) / reference.gflops:.2f}" if reference else "n/a")
        if ms_run:
            cells.append(f"{best_at(run, budget) / max(best_at(ms_run, budget), 1e-9):.2f}")
        cells.append(f"{run['seconds'] / max(run['trials'], 1):.2f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Command: `python -m benchmarks.vs_metaschedule " + " ".join(argv or sys.argv[1:]) + "`"]
    text = "\n".join(lines) + "\n"
    (args.out / "summary.md").write_text(text)
    (args.out / "summary.json").write_text(json.dumps(
        {"task": task.uri, "reference": reference.to_json() if reference else None, "host": host_fingerprint(),
         "runs": runs,
         "seed": args.seed}, indent=1))
    progress.path.unlink(missing_ok=True)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
