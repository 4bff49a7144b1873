"""Functions that run inside measurement worker processes (never in the tuning process).

They are sent to TVM's ``PopenPoolExecutor`` workers: a crash or hang here kills only the
worker, which the pool restarts lazily, and the caller records the config as failed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import numpy as np

__all__ = ["build_artifact", "init_worker", "reference_output", "run_artifact"]


def init_worker() -> None:
    """Import TVM once per worker (the pool calls this before the first job)."""
    import tvm  # noqa: F401


def build_artifact(job: tuple[Any, dict[str, Any]]) -> str:
    """Compile a scheduled IRModule for a target and export it as a shared library.

    Args:
        job: ``(IRModule, resolved target dict)``.

    Returns:
        Path of the ``.so`` file (in a fresh temporary directory the runner deletes).
    """
    import tvm

    mod, target = job
    lib = tvm.compile(mod, target=tvm.target.Target(target))
    path = os.path.join(tempfile.mkdtemp(prefix="tune_gym_"), "kernel.so")
    lib.export_library(path)
    return path


def _inputs(shapes: list[tuple[int, ...]], dtype: str, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.0, 1.0, size=s).astype(dtype) for s in shapes]


def reference_output(task_uri: str, inputs: list[np.ndarray]) -> np.ndarray:
    """The op's output on ``inputs`` computed by PyTorch (the vendor library)."""
    import torch

    from tune_gym.tasks.task import Task

    task = Task.from_uri(task_uri)
    with torch.no_grad():
        out = task.opdef.torch_fn(torch, task.param_dict, [torch.from_numpy(x) for x in inputs])
    return out.numpy()


def run_artifact(job: dict[str, Any]) -> dict[str, Any]:
    """Load a built kernel, time it, optionally check its output, then delete the artifact.

    Args:
        job: ``path``; ``device`` ("cpu"/"cuda"); ``inputs`` (list of shapes), ``output``
            (shape), ``dtype``; ``number``, ``repeat``, ``min_repeat_ms``, ``flush_cache``;
            ``check_task`` (a task URI to check against PyTorch, or None); ``seed``;
            ``adaptive`` (None, or a dict for :func:`tune_gym.measure.adaptive.adaptive_costs`).

    Returns:
        ``{"costs": [seconds per call per repeat], "check_error": str | None, "extra": {...}}``.
    """
    import tvm

    path = job["path"]
    try:
        lib = tvm.runtime.load_module(path)
        dev = tvm.cuda(0) if job["device"] == "cuda" else tvm.cpu(0)
        host = _inputs(job["inputs"], job["dtype"], job["seed"])
        args = [tvm.runtime.tensor(x, dev) for x in host]
        out = tvm.runtime.tensor(np.zeros(job["output"], dtype=job["dtype"]), dev)
        check_error = None
        if job.get("check_task"):
            lib["main"](*args, out)
            dev.sync()
            check_error = _compare(out.numpy(), reference_output(job["check_task"], host))
        extra: dict[str, Any] = {}
        if job.get("adaptive") is not None:
            from tune_gym.measure.adaptive import adaptive_costs

            costs, extra = adaptive_costs(lib, dev, [*args, out], **job["adaptive"])
        else:
            timer = lib.time_evaluator(
                "main", dev, number=job["number"], repeat=job["repeat"],
                min_repeat_ms=job["min_repeat_ms"],
                f_preproc="cache_flush_cpu_non_first_arg" if job.get("flush_cache") else "",
            )
            costs = list(timer(*args, out).results)
        return {"costs": [float(c) for c in costs], "check_error": check_error, "extra": extra}
    finally:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def _compare(out: np.ndarray, ref: np.ndarray) -> str | None:
    """None when ``out`` matches ``ref`` to float32 reduction-order tolerance, else why not."""
    if out.shape != ref.shape:
        return f"output shape {out.shape} != reference shape {ref.shape}"
    scale = max(1.0, float(np.abs(ref).max()))
    err = np.abs(out.astype(np.float64) - ref.astype(np.float64))
    bad = err > 1e-3 * scale + 1e-3 * np.abs(ref)
    if bad.any():
        idx = np.unravel_index(int(np.argmax(err)), err.shape)
        return (f"{int(bad.sum())} of {bad.size} outputs differ from PyTorch; worst at {tuple(map(int, idx))}: "
                f"{float(out[idx]):.6g} vs {float(ref[idx]):.6g}")
    return None
