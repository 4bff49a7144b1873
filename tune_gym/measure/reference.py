"""Vendor-library reference throughput: the same op through PyTorch on this host."""

from __future__ import annotations

import functools
import time

import numpy as np

from tune_gym.tasks.targets import host_cores
from tune_gym.tasks.task import Task

__all__ = ["torch_gflops"]


@functools.lru_cache(maxsize=256)
def torch_gflops(task: Task, min_seconds: float = 0.3, repeat: int = 5) -> float:
    """GFLOPS of PyTorch (oneDNN / MKL on CPU) for ``task``, best of ``repeat`` timings.

    Runs on as many threads as the task's target has cores. Only CPU (``llvm``) tasks can be
    measured here; for CUDA tasks a GPU and a CUDA build of torch are needed.
    """
    import torch

    if task.target.is_gpu:
        if not torch.cuda.is_available():
            raise RuntimeError(f"{task}: PyTorch reference for a CUDA task needs a GPU")
        device = "cuda"
    else:
        device = "cpu"
        cores = int(task.target.resolved()["num-cores"]) if task.target.kind == "llvm" else host_cores()
        torch.set_num_threads(cores)
    rng = np.random.default_rng(0)
    inputs = [torch.from_numpy(rng.uniform(-1, 1, s).astype(task.dtype)).to(device) for s in task.input_shapes]
    fn = task.opdef.torch_fn
    params = task.param_dict

    def call() -> None:
        fn(torch, params, inputs)
        if device == "cuda":
            torch.cuda.synchronize()

    with torch.no_grad():
        call()  # warm up (and let oneDNN pick its kernel)
        start, calls = time.perf_counter(), 0
        while time.perf_counter() - start < min_seconds / repeat:
            call()
            calls += 1
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(calls):
                call()
            best = min(best, (time.perf_counter() - t0) / calls)
    return task.flops / best / 1e9
