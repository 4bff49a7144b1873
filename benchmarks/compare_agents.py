"""Run every agent on one live task with the same budget and write a results table.

Usage:
    python -m benchmarks.compare_agents --task resnet18:1 --trials 256 --batch 64 \
        --out benchmarks/results/agents_resnet18_1 [--agents xgb-sa,random] [--seed 0]

Each agent's records go to ``OUT/<agent>.jsonl`` (resumable: re-running skips what was
measured); ``OUT/summary.json`` and ``OUT/summary.md`` hold best GFLOPS, trials, wall time
and the PyTorch reference, with the host fingerprint and the command.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from agents.base import list_agents
from agents.driver import tune
from tune_gym.host import host_fingerprint
from tune_gym.space import PRESETS
from tune_gym.tasks import Task


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="resnet18:1")
    parser.add_argument("--trials", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--agents", default="", help="comma-separated ids (default: all registered)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", default="full", choices=PRESETS)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    task = Task.parse(args.task)
    agent_ids = [a for a in args.agents.split(",") if a] or [a for a in list_agents() if a != "xgb-sa-transfer"]
    args.out.mkdir(parents=True, exist_ok=True)
    summary_path = args.out / "summary.json"
    rows = json.loads(summary_path.read_text())["rows"] if summary_path.exists() else {}
    for agent_id in agent_ids:
        start = time.time()
        result = tune(task, agent=agent_id, trials=args.trials, batch=args.batch, log=args.out / f"{agent_id}.jsonl",
                      resume=True, seed=args.seed, preset=args.preset, plot=args.out / f"{agent_id}.png")
        run = result.run
        best = run.best
        rows[agent_id] = {
            "best_gflops": best.result.gflops if best else 0.0,
            "best_trial": best.index if best else None,
            "trials": len(run.trials),
            "failed": sum(1 for t in run.trials if not t.result.ok),
            "wall_seconds_this_invocation": round(time.time() - start, 1),
            "reference_gflops": result.reference_gflops,
        }
        print(f"{agent_id:>16}: best {rows[agent_id]['best_gflops']:.2f} GFLOPS at trial {rows[agent_id]['best_trial']}"
              f" of {len(run.trials)} (PyTorch {result.reference_gflops:.2f})", flush=True)
        summary = {"task": task.uri, "trials": args.trials, "batch": args.batch, "seed": args.seed,
                   "preset": args.preset, "host": host_fingerprint(), "python": platform.python_version(),
                   "command": " ".join([Path(sys.executable).name, "-m", "benchmarks.compare_agents", *sys.argv[1:]]),
                   "rows": rows}
        summary_path.write_text(json.dumps(summary, indent=2))
        _markdown(summary, args.out / "summary.md")
    return 0


def _markdown(summary: dict, path: Path) -> None:
    lines = [f"# Agents on {summary['task']}", "",
             f"{summary['trials']} unique trials per agent, batch {summary['batch']}, seed {summary['seed']}, "
             f"preset {summary['preset']}.", f"Host: {summary['host'].get('cpu')} "
             f"({summary['host'].get('physical_cores')} cores, LLVM cpu {summary['host'].get('llvm_cpu')}).",
             f"Command: `{summary['command']}`", "",
             "| agent | best GFLOPS | found at trial | failed configs | vs PyTorch |", "|---|---:|---:|---:|---:|"]
    for agent_id, row in sorted(summary["rows"].items(), key=lambda kv: -kv[1]["best_gflops"]):
        ratio = row["best_gflops"] / row["reference_gflops"] if row["reference_gflops"] else float("nan")
        cells = [agent_id, f"{row['best_gflops']:.2f}", row['best_trial'], row['failed'], f"{ratio:.2f}x"]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
