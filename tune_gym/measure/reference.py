"""Vendor-library reference throughput: the same op through PyTorch on this host.

Rewards are normalized by this number, so it must not depend on what ran before it. Timed in
the tuning process, PyTorch's oneDNN kernels competed with TVM's still-spinning runtime
threads and one conv measured anywhere from 224 to 395 GFLOPS on one host. So the reference
is measured the robust way (:func:`measure_reference`):

* in a separate, quiet Python process that imports PyTorch and nothing of TVM, with
  ``torch.set_num_threads`` = the target's cores;
* after ``warmup`` untimed calls (oneDNN picks and caches its kernel on the first ones);
* as the median of ``repeats`` timings, each a loop of at least ``min_seconds``.

The value, its samples and how it was measured travel as a :class:`Reference` in every
tuning record written with it, so a replayed or resumed run reuses the recorded number and
its rewards are reproducible.

Command line (what :func:`measure_reference` runs)::

    python -m tune_gym.measure.reference URI --threads 2 [--repeats 7 --warmup 3 --min-seconds 0.2]
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import json
import math
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from tune_gym.tasks.targets import host_cores
from tune_gym.tasks.task import Task

__all__ = ["Reference", "measure_reference", "time_torch"]


@dataclass(frozen=True)
class Reference:
    """A reference throughput and how it was measured.

    Attributes:
        gflops: the reference GFLOPS (the median of ``samples``).
        method: how it was measured, for humans (library, threads, process, statistic).
        samples: GFLOPS of each timing.
        host: :func:`tune_gym.records.host_id` of the machine that measured it.
    """

    gflops: float
    method: str
    samples: tuple[float, ...] = ()
    host: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"gflops": self.gflops, "method": self.method, "samples": list(self.samples), "host": self.host}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Reference:
        """Parse :meth:`to_json`'s form; ``ValueError`` on a missing or non-positive throughput
        or fields of the wrong type (a target's upper bound is checked by :meth:`check`)."""
        if not isinstance(d, dict) or "gflops" not in d:
            raise ValueError(f"a reference is a JSON object with 'gflops', not {str(d)[:60]}")
        gflops, samples = d["gflops"], d.get("samples", [])
        if not _positive(gflops):
            raise ValueError(f"reference gflops {gflops!r} is not a finite number > 0")
        if not isinstance(samples, list) or not all(_positive(s) for s in samples):
            raise ValueError(f"reference samples {str(samples)[:60]} are not a list of finite numbers > 0")
        method, host = d.get("method", ""), d.get("host", "")
        if not isinstance(method, str) or not isinstance(host, str):
            raise ValueError("reference method and host must be strings")
        return cls(float(gflops), method, tuple(float(s) for s in samples), host)

    def check(self, target_kind: str) -> None:
        """Raise ``ValueError`` unless the throughput and samples are possible on ``target_kind``
        (:func:`tune_gym.measure.result.check_gflops`)."""
        from tune_gym.measure.result import check_gflops

        check_gflops(self.gflops, target_kind, "reference")
        for s in self.samples:
            check_gflops(s, target_kind, "reference sample")


def _positive(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _threads(task: Task) -> int:
    return int(task.target.resolved()["num-cores"]) if task.target.kind == "llvm" else host_cores()


@functools.lru_cache(maxsize=256)
def measure_reference(task: Task, repeats: int = 7, warmup: int = 3, min_seconds: float = 0.2,
                      timeout: float = 600.0) -> Reference:
    """PyTorch's GFLOPS for ``task``, measured in a separate quiet process (cached per process).

    Only CPU (``llvm``) tasks can be measured without a GPU; a CUDA task needs a GPU and a
    CUDA build of PyTorch.

    Raises:
        RuntimeError: the measuring process failed (its stderr is in the message).
    """
    from tune_gym.records import host_id

    if not task.has_torch_reference:
        raise RuntimeError(f"{task.uri} has no PyTorch op to time: give the env a numeric reward_norm")
    threads = _threads(task)
    cmd = [sys.executable, "-m", "tune_gym.measure.reference", task.uri, "--threads", str(threads),
           "--repeats", str(repeats), "--warmup", str(warmup), "--min-seconds", str(min_seconds)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{task.uri}: PyTorch reference measurement failed:\n{proc.stderr.strip()[-2000:]}")
    samples = tuple(json.loads(proc.stdout.strip().splitlines()[-1])["samples"])
    device = "cuda" if task.target.is_gpu else "cpu"
    method = (f"torch {importlib.metadata.version('torch')} {device}, {threads} threads, separate process, median "
              f"of {repeats} timings of >= {min_seconds} s after {warmup} warm-up calls")
    return Reference(statistics.median(samples), method, samples, host_id())


def time_torch(task: Task, threads: int, repeats: int = 7, warmup: int = 3, min_seconds: float = 0.2) -> list[float]:
    """GFLOPS of each of ``repeats`` timed loops of the op in PyTorch, in this process."""
    import torch

    device = "cuda" if task.target.is_gpu else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"{task}: PyTorch reference for a CUDA task needs a GPU")
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    inputs = [torch.from_numpy(rng.uniform(-1, 1, s).astype(task.dtype)).to(device) for s in task.input_shapes]
    fn, params = task.opdef.torch_fn, task.param_dict

    def call() -> None:
        fn(torch, params, inputs)
        if device == "cuda":
            torch.cuda.synchronize()

    samples = []
    with torch.no_grad():
        for _ in range(max(1, warmup)):
            call()
        start, calls = time.perf_counter(), 0
        while time.perf_counter() - start < min_seconds or calls == 0:
            call()
            calls += 1
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(calls):
                call()
            samples.append(task.flops / ((time.perf_counter() - t0) / calls) / 1e9)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time one task's op in PyTorch; print JSON samples (GFLOPS).")
    parser.add_argument("uri")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--min-seconds", type=float, default=0.2)
    args = parser.parse_args(argv)
    samples = time_torch(Task.from_uri(args.uri), args.threads, args.repeats, args.warmup, args.min_seconds)
    print(json.dumps({"samples": samples}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
