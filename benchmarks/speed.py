"""How fast the simulated side of tune_gym runs: backend lookups and ``Tune-v0`` steps.

Usage:
    python -m benchmarks.speed [--task resnet18:7] [--dataset PATH] [--cpu 0] [--repeats 5] \
        [--steps 5000] [--backend surrogate] [--out [PATH]]

Measures, pinned to one core (``--cpu``; ``-1`` leaves the affinity alone):

1. ``replay`` backend: configs/s of ``backend.measure`` on a shuffled batch of recorded configs
   (``--lookup-batch``; drawn with replacement when the data hold fewer configs).
2. ``Tune-v0`` on replay at ``--batch`` (default 8): env steps/s, on ``env.unwrapped`` and
   through ``gym.make``'s wrappers, for three kinds of actions:
   ``random`` (``action_space.sample()``: mostly configs already tried, which are free),
   ``fresh`` (configs not yet tried in the episode, as the agents propose them: canonical,
   an int64 array; episodes of one pass over the recorded configs) and ``repeat`` (the same
   action every step). Resets at episode ends are included. A warm-up pass runs first, so the
   session's cache holds every recorded result: as in long RL training on one dataset, the
   timed steps send nothing to the backend (that cost is row 1).
3. Other backends by name (``--backend``, default ``surrogate``), built with
   ``tune_gym.measure.make_backend(name, **options)`` (options: ``--backend-options`` JSON,
   default ``{"dataset": DATASET}``) and timed like row 1 (the warm-up absorbs one-time work
   such as fitting a surrogate's model); a name that ``make_backend`` does not know is
   skipped with a message, and so is one it cannot build with these options.

Every number is the median of ``--repeats`` timed repeats (``time.perf_counter``) after a
warm-up; ``cpu/s`` is the same work over ``time.process_time``, a hint when the machine is
busy. The machine (CPU model from /proc/cpuinfo, cores, load average) and the exact command
are printed with the table and stored in the JSON (``--out``, by default
``benchmarks/results/speed/speed.json``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import tune_gym  # noqa: F401  (registers the environments)
from tune_gym.host import host_fingerprint
from tune_gym.measure import BACKENDS, make_backend
from tune_gym.space import PRESETS, KnobSpace
from tune_gym.tasks import Task

DEFAULT_DATASET = "benchmarks/datasets/resnet18_7_compact.parquet"
DEFAULT_OUT = Path("benchmarks/results/speed/speed.json")
ACTIONS = ("random", "fresh", "repeat")


def write_report(report: dict[str, Any], out: Path | None) -> None:
    """Write ``report`` as JSON to ``out`` (folders made), unless ``out`` is None."""
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="resnet18:7")
    parser.add_argument("--preset", default="compact", choices=PRESETS)
    parser.add_argument("--dataset", default=DEFAULT_DATASET, help="replay data: a .jsonl record file or a dataset")
    parser.add_argument("--cpu", type=int, default=0, help="core to pin to (-1: leave the affinity alone)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--lookup-batch", type=int, default=4096, help="configs per backend.measure call")
    parser.add_argument("--lookups", type=int, default=20, help="backend.measure calls per timed repeat")
    parser.add_argument("--batch", type=int, default=8, help="Tune-v0 batch_size")
    parser.add_argument("--steps", type=int, default=5000, help="env steps per timed repeat")
    parser.add_argument("--backend", action="append", default=None,
                        help="other backend to time by name (repeatable; default: surrogate)")
    parser.add_argument("--backend-options", default=None, help="JSON options for --backend (default: the dataset)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, nargs="?", const=DEFAULT_OUT, default=None,
                        help=f"write the results as JSON (default path {DEFAULT_OUT})")
    args = parser.parse_args(argv)

    if args.cpu >= 0:
        os.sched_setaffinity(0, {args.cpu})
    task = Task.parse(args.task)
    space = KnobSpace.for_task(task, args.preset)
    rng = np.random.default_rng(args.seed)
    replay = make_backend("replay", dataset=args.dataset)
    recorded = recorded_configs(replay, task, space)
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []

    # 1. replay lookups
    batch = lookup_batch(recorded, args.lookup_batch, rng)
    rows.append(time_backend("replay", replay, task, space, batch, args))

    # 2. Tune-v0 steps on replay
    env = gym.make("tune_gym/Tune-v0", task=task, preset=args.preset, backend="replay",
                   backend_options={"dataset": args.dataset}, batch_size=args.batch, budget=10**9)
    env.action_space.seed(args.seed)
    actions = {
        "random": [env.action_space.sample() for _ in range(1000)],
        "fresh": fresh_actions(recorded, args.batch, rng),
        "repeat": [env.action_space.sample()],
    }
    for wrapped in (False, True):
        target = env if wrapped else env.unwrapped
        for kind in ACTIONS:
            episode = len(actions[kind]) if kind == "fresh" else None
            rate = timed(functools.partial(run_steps, target, actions[kind], args.steps, episode), args.steps,
                         args.repeats)
            rows.append({"name": f"Tune-v0 {'wrapped' if wrapped else 'unwrapped'}, {kind} actions",
                         "unit": "steps/s", "batch_size": args.batch, **rate})
    env.close()

    # 3. other backends by name (a surrogate once it exists)
    options = json.loads(args.backend_options) if args.backend_options else {"dataset": args.dataset}
    for name in args.backend or ["surrogate"]:
        if name not in BACKENDS:
            skipped.append(f"backend {name!r}: not known to make_backend yet (known: {', '.join(BACKENDS)})")
            continue
        try:
            backend = make_backend(name, **options)
        except Exception as err:  # a backend that cannot be built here is reported, not fatal
            skipped.append(f"backend {name!r}: make_backend({name!r}, **{options}) failed: {err}")
            continue
        try:
            rows.append(time_backend(name, backend, task, space, batch, args))
        finally:
            backend.close()
    replay.close()

    report = {
        "machine": {**host_fingerprint(), "affinity": sorted(os.sched_getaffinity(0)),
                    "load_average": os.getloadavg(), "numpy": np.__version__, "platform": platform.platform()},
        "command": shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv])),
        "task": task.uri, "preset": args.preset, "dataset": args.dataset, "recorded_configs": len(recorded),
        "repeats": args.repeats, "rows": rows, "skipped": skipped,
    }
    print(markdown(report))
    write_report(report, args.out)
    return 0


# ---------------------------------------------------------------------------- workloads
def recorded_configs(replay: Any, task: Task, space: KnobSpace) -> np.ndarray:
    """The distinct configs the replay data hold for the task, as an ``n x n_knobs`` array."""
    datasets = replay.datasets(task, space.preset)
    if not datasets:
        raise SystemExit(f"the replay data hold no configs of {task.uri} (preset {space.preset})")
    return np.unique(np.concatenate([np.asarray(d.configs, dtype=np.int64) for d in datasets]), axis=0)


def lookup_batch(recorded: np.ndarray, size: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """``size`` recorded configs in random order (with replacement only when fewer are recorded)."""
    rows = rng.permutation(len(recorded))[:size] if size <= len(recorded) else rng.integers(0, len(recorded), size)
    return [tuple(c) for c in recorded[rows].tolist()]


def fresh_actions(recorded: np.ndarray, batch: int, rng: np.random.Generator) -> list[np.ndarray]:
    """One episode of actions that propose each recorded config once, ``batch`` per step."""
    order = recorded[rng.permutation(len(recorded))]
    order = order[: len(order) - len(order) % batch]  # whole batches only
    return [order[i:i + batch].reshape(-1).copy() for i in range(0, len(order), batch)]


def run_steps(env: Any, actions: list[Any], steps: int, episode: int | None) -> None:
    """``steps`` env steps cycling through ``actions``; reset when an episode ends, and every
    ``episode`` steps when given (the fresh actions run out after one pass)."""
    env.reset()
    for i in range(steps):
        _, _, terminated, truncated, _ = env.step(actions[i % len(actions)])
        if terminated or truncated or (episode is not None and (i + 1) % episode == 0):
            env.reset()


def time_backend(name: str, backend: Any, task: Task, space: KnobSpace, batch: list[tuple[int, ...]],
                 args: argparse.Namespace) -> dict[str, Any]:
    def work() -> None:
        for _ in range(args.lookups):
            backend.measure(task, space, batch)

    rate = timed(work, args.lookups * len(batch), args.repeats)
    return {"name": f"{name} backend.measure, {len(batch)} configs per call", "unit": "configs/s", **rate}


# ---------------------------------------------------------------------------- timing and output
def timed(work: Callable[[], None], count: int, repeats: int) -> dict[str, Any]:
    """Rates of ``work`` (``count`` items per call): one warm-up call, then ``repeats`` timed ones."""
    work()
    wall, cpu = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        work()
        wall.append(count / (time.perf_counter() - w))
        cpu.append(count / max(time.process_time() - c, 1e-9))
    return {"median": statistics.median(wall), "min": min(wall), "max": max(wall),
            "cpu_median": statistics.median(cpu), "repeats": wall}


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [f"Machine: {m['cpu']}, {m['logical_cores']} logical / {m['physical_cores']} physical cores, "
             f"pinned to {m['affinity']}, load average {', '.join(f'{x:.2f}' for x in m['load_average'])} "
             f"(Python {m['python']}, NumPy {m['numpy']})",
             f"Command: `{report['command']}`",
             f"Task {report['task']} ({report['preset']}), data {report['dataset']} "
             f"({report['recorded_configs']} configs); median of {report['repeats']} repeats.", "",
             "| what | unit | median | min - max | cpu/s |", "|---|---|---:|---:|---:|"]
    for row in report["rows"]:
        lines.append(f"| {row['name']} | {row['unit']} | {row['median']:,.0f} | "
                     f"{row['min']:,.0f} - {row['max']:,.0f} | {row['cpu_median']:,.0f} |")
    lines += [f"\nskipped: {s}" for s in report["skipped"]]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
