"""CUDA tasks on a real GPU: the machine, the live backend with every kernel checked, and the
validity labels (made without a GPU) against what really fails on the GPU.

Usage::

    python scripts/cuda_gpu.py env --out DIR
    python scripts/cuda_gpu.py live "resnet18:1@cuda&arch=sm_90" --preset compact --n 64 --out DIR
    python scripts/cuda_gpu.py labels "resnet18:1@cuda&arch=sm_90" \\
        --labels benchmarks/datasets/cuda_validity/resnet18_1_compact.parquet --n 200 --out DIR

``env`` writes ``env.json``: the GPU, its driver, CUDA's compiler, PyTorch, TVM and the host id.

``live`` measures ``--n`` distinct random configs of the task's space (seed ``--seed``) with the
live backend, every running kernel checked against PyTorch (``check_all``), and writes one JSON
line per config (``live_<task>_<preset>.jsonl``: its outcome, GFLOPS and error) and a summary
with PyTorch's own GFLOPS on the same GPU.

``labels`` takes configs of a committed validity-label file (``tune_gym.datasets.validity``), half
labelled valid and half invalid (seeded), applies each to the same space on this GPU's target
with every postproc *but* ``VerifyGPUCode`` (the check the labels rest on), builds it, runs it
once and checks it against PyTorch, and writes what happened next to its label
(``labels_<task>.jsonl`` and a confusion table in the summary). The label file must be of a
space with the same knobs as the task's (the ``compact`` spaces of every architecture are; see
``tune_gym.space``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def _slug(task_id: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in task_id).strip("_")


def _run(cmd: list[str]) -> str:
    if shutil.which(cmd[0]) is None:
        return f"{cmd[0]}: not found"
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    return (proc.stdout + proc.stderr).strip()


def cmd_env(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import tvm

    from tune_gym.host import host_fingerprint, host_id

    dev = tvm.cuda(0)
    info = {
        "host_id": host_id(), "fingerprint": host_fingerprint(), "python": platform.python_version(),
        "nvidia_smi": _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,"
                                          "clocks.sm,temperature.gpu,utilization.gpu", "--format=csv"]),
        "nvcc": _run(["nvcc", "--version"]).splitlines()[-1:],
        "torch": torch.__version__, "torch_cuda": torch.version.cuda, "torch_gpu": torch.cuda.get_device_name(0),
        "tvm": tvm.__version__, "tvm_cuda_exists": bool(dev.exist),
        "tvm_compute_version": dev.compute_version if dev.exist else None,
        "tvm_compile_mode": os.environ.get("TVM_CUDA_COMPILE_MODE", "nvrtc"),
    }
    return info


def _space(task_id: str, preset: str) -> tuple[Any, Any]:
    from tune_gym.space import KnobSpace
    from tune_gym.tasks import Task

    task = Task.parse(task_id)
    return task, KnobSpace.for_task(task, preset)


def _reference(task: Any) -> dict[str, Any]:
    from tune_gym.measure.reference import measure_reference

    try:
        ref = measure_reference(task)
    except Exception as err:  # reported, not fatal: the kernels' own numbers stand without it
        return {"error": str(err)[-500:]}
    return {"gflops": ref.gflops, "method": ref.method, "samples": list(ref.samples)}


def cmd_live(args: argparse.Namespace) -> dict[str, Any]:
    from tune_gym.measure.live import LiveBackend, LiveConfig

    task, space = _space(args.task, args.preset)
    rng = np.random.default_rng(args.seed)
    configs = space.sample_unique(rng, min(args.n, space.size))
    config = LiveConfig(check_all=True, repeat=args.repeat, min_repeat_ms=args.min_repeat_ms)
    out = Path(args.out) / f"live_{_slug(args.task)}_{args.preset}.jsonl"
    counts: dict[str, int] = {}
    best = 0.0
    start = time.perf_counter()
    with LiveBackend(config) as backend, out.open("w") as f:
        for lo in range(0, len(configs), args.batch):
            batch = configs[lo:lo + args.batch]
            for cfg, res in zip(batch, backend.measure(task, space, batch)):
                kind = res.error or ("ok" if res.extra.get("checked") else "unchecked")
                counts[kind] = counts.get(kind, 0) + 1
                best = max(best, res.gflops)
                f.write(json.dumps({"config": list(cfg), "outcome": kind, "gflops": res.gflops,
                                    "costs": list(res.costs), "build_secs": res.build_secs,
                                    "error": (res.error_msg or "")[:600]}) + "\n")
            f.flush()
            print(f"  {args.task} {args.preset}: {lo + len(batch)}/{len(configs)} {counts} best {best:.1f} GFLOPS",
                  flush=True)
    return {"task": task.uri, "preset": args.preset, "space_size": space.size, "configs": len(configs),
            "outcomes": counts, "best_gflops": best, "seconds": time.perf_counter() - start,
            "timing": {"repeat": args.repeat, "min_repeat_ms": args.min_repeat_ms}, "pytorch": _reference(task)}


def _unverified(space: Any, config: Any) -> tuple[Any | None, str]:
    """``config`` applied with every postproc of the space but ``VerifyGPUCode``."""
    try:
        sch = space.to_schedule(config)
    except Exception as err:
        return None, f"schedule: {str(err).strip().splitlines()[-1][:200]}"
    for post in space.postprocs:
        if type(post).__name__ == "VerifyGPUCode":
            continue
        try:
            if not post.apply(sch):
                return None, f"rejected by {type(post).__name__}"
        except Exception as err:
            return None, f"{type(post).__name__} failed: {str(err).strip()[:200]}"
    return sch, ""


def cmd_labels(args: argparse.Namespace) -> dict[str, Any]:
    from tvm.support.popen_pool import PopenPoolExecutor, StatusKind

    from tune_gym.datasets.validity import load_validity
    from tune_gym.measure.live import error_message, make_build_pool
    from tune_gym.measure.workers import build_artifact, init_worker, run_artifact

    task, space = _space(args.task, "compact")
    labels = load_validity(args.labels)  # checked against the space it was made for
    theirs = labels.space()
    if [(k.name, k.kind, k.choices) for k in theirs.knobs] != [(k.name, k.kind, k.choices) for k in space.knobs] \
            or not np.array_equal(theirs.active_mask, space.active_mask):
        raise SystemExit(f"{args.labels}: the knobs of its space ({labels.task}) are not those of {args.task}'s")
    rng = np.random.default_rng(args.seed)
    valid, invalid = np.flatnonzero(labels.valid), np.flatnonzero(~labels.valid)
    half = min(args.n // 2, len(valid))
    rows = [int(i) for i in rng.permutation(valid)[:half]]
    rows += [int(i) for i in rng.permutation(invalid)[: args.n - half]]
    configs = labels.config_list()
    picked = [{"config": configs[i], "valid": bool(labels.valid[i]), "reason": labels.causes[i] or labels.reason[i]}
              for i in rows]

    target = task.target.resolved()
    mods, outcome = [], [None] * len(picked)
    for j, row in enumerate(picked):
        sch, why = _unverified(space, row["config"])
        if sch is None:
            outcome[j] = {"outcome": "not_buildable", "error": why}
        else:
            mods.append((j, sch.mod))
    pool = make_build_pool(None, 120.0, 256)
    built = list(pool.map_with_error_catching(build_artifact, [(m, target) for _, m in mods]))
    pool.shutdown(wait=False)
    runner = None
    job_base = {"device": "cuda", "inputs": task.input_shapes, "dtypes": task.input_dtypes,
                "output": task.output_shape(), "dtype": task.dtype, "number": 1, "repeat": 3,
                "min_repeat_ms": 10, "flush_cache": False, "seed": 0, "adaptive": None}
    for (j, _), b in zip(mods, built):
        if b.status != StatusKind.COMPLETE:
            outcome[j] = {"outcome": "build_error", "error": error_message(b.value)[:600]}
            continue
        if runner is None:
            runner = PopenPoolExecutor(max_workers=1, timeout=60.0, initializer=init_worker,
                                       initargs=(None, os.getpid()))
        job = {**job_base, "path": b.value["path"], "args": b.value["args"], "packs": b.value["packs"],
               "check_task": task.uri}
        try:
            res = runner.submit(run_artifact, job).result()
        except Exception as err:
            outcome[j] = {"outcome": "run_error", "error": error_message(err)[:600]}
            runner.shutdown(wait=False)
            runner = None  # a fresh CUDA context for the next kernel
            continue
        if res["check_error"]:
            outcome[j] = {"outcome": "wrong_result", "error": res["check_error"][:600]}
        else:
            cost = float(np.mean(res["costs"]))
            outcome[j] = {"outcome": "ok", "gflops": task.flops / cost / 1e9}
    if runner is not None:
        runner.shutdown(wait=False)

    out = Path(args.out) / f"labels_{_slug(args.task)}.jsonl"
    table: dict[str, dict[str, int]] = {}
    with out.open("w") as f:
        for row, got in zip(picked, outcome):
            assert got is not None
            label = "valid" if row["valid"] else f"invalid:{row['reason']}"
            table.setdefault(label, {})
            table[label][got["outcome"]] = table[label].get(got["outcome"], 0) + 1
            f.write(json.dumps({"config": list(row["config"]), "label": label, **got}) + "\n")
    return {"task": task.uri, "labels": str(args.labels), "configs": len(picked), "table": table}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    env = sub.add_parser("env", help="the GPU, driver, compilers and host id")
    live = sub.add_parser("live", help="live backend on random configs, every kernel checked")
    live.add_argument("task")
    live.add_argument("--preset", choices=["compact", "full"], default="compact")
    live.add_argument("--n", type=int, default=64)
    live.add_argument("--batch", type=int, default=64)
    live.add_argument("--repeat", type=int, default=3)
    live.add_argument("--min-repeat-ms", type=int, default=10)
    labels = sub.add_parser("labels", help="validity labels against the GPU")
    labels.add_argument("task")
    labels.add_argument("--labels", required=True)
    labels.add_argument("--n", type=int, default=200)
    for p in (env, live, labels):
        p.add_argument("--out", default=".")
        p.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    result = {"env": cmd_env, "live": cmd_live, "labels": cmd_labels}[args.cmd](args)
    name = f"{args.cmd}.json" if args.cmd == "env" else f"{args.cmd}_{_slug(args.task)}_summary.json"
    (Path(args.out) / name).write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps(result, default=str)[:3000], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
