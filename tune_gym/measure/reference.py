"""Vendor-library reference throughput: the same op through PyTorch on this host.

Rewards are normalized by this number, so it must not depend on what ran before it, nor on
what else runs beside it. Timed in the tuning process, PyTorch's oneDNN kernels competed with
TVM's still-spinning runtime threads and one conv measured anywhere from 224 to 395 GFLOPS on
one host; timed while another job held a core, a 2-thread kernel collapsed to a few GFLOPS.
So the reference is measured the robust way (:func:`measure_reference`):

* in a separate, quiet Python process that imports PyTorch and nothing of TVM, with
  ``torch.set_num_threads`` = the target's cores, and again with one thread;
* after ``warmup`` untimed calls (oneDNN picks and caches its kernel on the first ones);
* as the median of ``repeats`` timings, each a loop of at least ``min_seconds``;
* only on a quiet host (:mod:`tune_gym.measure.quiet`: other processes' CPU time before and
  during the timing, a calibration matmul against the host's best): a busy host is retried,
  then refused with :class:`~tune_gym.measure.quiet.BusyHostError`;
* flagged (:attr:`Reference.flags`, and a warning) when it is below a fraction of the host's
  calibration peak at its thread count, which a quiet host rarely explains.

The value, its samples, the single-thread value and the quiet figures travel as a
:class:`Reference` in every tuning record written with it, so a replayed or resumed run
reuses the recorded number and its rewards are reproducible. References recorded before the
quiet checks carry no thread count, single-thread value or figures; they stay readable, and
the reference audit (:mod:`tune_gym.datasets.reference_audit`) marks those that cannot be
right as :attr:`Reference.suspect`.

Command line (what :func:`measure_reference` runs, once per thread count)::

    python -m tune_gym.measure.reference URI --threads 2 [--repeats 7 --warmup 3 --min-seconds 0.2]
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import json
import math
import re
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tune_gym.host import host_cores
from tune_gym.measure.quiet import CALIBRATION_N, Machine, QuietPolicy, quiet_timings
from tune_gym.tasks.task import Task

__all__ = ["Reference", "measure_reference", "reference_at", "reference_threads", "time_calibration", "time_torch"]


@dataclass(frozen=True)
class Reference:
    """A reference throughput and how it was measured.

    Attributes:
        gflops: the reference GFLOPS (the median of ``samples``), at ``threads`` threads:
            what rewards are normalized by.
        method: how it was measured, for humans (library, threads, process, statistic).
        samples: GFLOPS of each timing.
        host: :func:`tune_gym.host.host_id` of the machine that measured it.
        threads: the thread count of ``gflops`` (0: not recorded, a reference measured before
            thread counts were; :func:`reference_threads` reads it from ``method`` then).
        single_thread_gflops: the same op with one thread (``None``: not measured; equal to
            ``gflops`` when ``threads`` is 1; a GPU op has none).
        single_thread_samples: its timings.
        conditions: how quiet the host was (:func:`~tune_gym.measure.quiet.quiet_timings`:
            others' cores before and during, load averages, calibrations and host peaks).
        flags: doubts found when it was measured (below a fraction of the host's peak).
        suspect: why the reference audit marks it as a value that cannot be right (empty: not
            marked). Set on read from the audit's verdicts, not by the measurement.
    """

    gflops: float
    method: str
    samples: tuple[float, ...] = ()
    host: str = ""
    threads: int = 0
    single_thread_gflops: float | None = None
    single_thread_samples: tuple[float, ...] = ()
    conditions: dict[str, float] = field(default_factory=dict, hash=False)
    flags: tuple[str, ...] = ()
    suspect: str = ""

    def to_json(self) -> dict[str, Any]:
        """The JSON form; the fields added after the first four only when set, so a reference
        read from an older file writes back the same object."""
        out: dict[str, Any] = {"gflops": self.gflops, "method": self.method, "samples": list(self.samples),
                               "host": self.host}
        optional = {"threads": self.threads, "single_thread_gflops": self.single_thread_gflops,
                    "single_thread_samples": list(self.single_thread_samples), "conditions": dict(self.conditions),
                    "flags": list(self.flags), "suspect": self.suspect}
        return out | {k: v for k, v in optional.items() if v}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Reference:
        """Parse :meth:`to_json`'s form; ``ValueError`` on a missing or non-positive throughput
        or fields of the wrong type (a target's upper bound is checked by :meth:`check`)."""
        if not isinstance(d, dict) or "gflops" not in d:
            raise ValueError(f"a reference is a JSON object with 'gflops', not {str(d)[:60]}")
        gflops = d["gflops"]
        if not _positive(gflops):
            raise ValueError(f"reference gflops {gflops!r} is not a finite number > 0")
        samples = _positives(d, "samples")
        method, host, suspect = d.get("method", ""), d.get("host", ""), d.get("suspect", "")
        if not isinstance(method, str) or not isinstance(host, str) or not isinstance(suspect, str):
            raise ValueError("reference method, host and suspect must be strings")
        threads = d.get("threads", 0)
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
            raise ValueError(f"reference threads {threads!r} is not an integer >= 0")
        single = d.get("single_thread_gflops")
        if single is not None and not _positive(single):
            raise ValueError(f"reference single_thread_gflops {single!r} is not a finite number > 0")
        conditions = d.get("conditions", {})
        if not isinstance(conditions, dict) or not all(_finite(v) for v in conditions.values()):
            raise ValueError(f"reference conditions {str(conditions)[:60]} is not an object of finite numbers")
        flags = d.get("flags", [])
        if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
            raise ValueError(f"reference flags {str(flags)[:60]} is not a list of strings")
        return cls(float(gflops), method, samples, host, threads, float(single) if single is not None else None,
                   _positives(d, "single_thread_samples"), dict(conditions), tuple(flags), suspect)

    def check(self, target_kind: str) -> None:
        """Raise ``ValueError`` unless the throughputs and samples are possible on ``target_kind``
        (:func:`tune_gym.measure.result.check_gflops`)."""
        from tune_gym.measure.result import check_gflops

        check_gflops(self.gflops, target_kind, "reference")
        for s in self.samples:
            check_gflops(s, target_kind, "reference sample")
        if self.single_thread_gflops is not None:
            check_gflops(self.single_thread_gflops, target_kind, "single-thread reference")
        for s in self.single_thread_samples:
            check_gflops(s, target_kind, "single-thread reference sample")


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _positive(x: Any) -> bool:
    return _finite(x) and x > 0


def _positives(d: dict[str, Any], name: str) -> tuple[float, ...]:
    """``d[name]`` (absent: empty) as a tuple of finite numbers > 0; ``ValueError`` otherwise."""
    values = d.get(name, [])
    if not isinstance(values, list) or not all(_positive(s) for s in values):
        raise ValueError(f"reference {name} {str(values)[:60]} are not a list of finite numbers > 0")
    return tuple(float(s) for s in values)


def reference_threads(ref: Reference) -> int | None:
    """The thread count ``ref.gflops`` was measured at: its ``threads``, or for a reference
    recorded before thread counts were, the ``N threads`` its ``method`` names (``None``:
    unknown, e.g. a simulated peak)."""
    if ref.threads:
        return ref.threads
    found = re.search(r"\b(\d+) threads?\b", ref.method)
    return int(found.group(1)) if found else None


def reference_at(ref: Reference, threads: int | None) -> tuple[float, int | None]:
    """The value of ``ref`` to set a kernel timed on ``threads`` CPU threads against, and its
    thread count: ``ref.single_thread_gflops`` for a one-thread kernel where it was measured,
    else ``ref.gflops`` at :func:`reference_threads` (which differs from ``threads`` when the
    reference has no value at that count; ``None``: unknown)."""
    own = reference_threads(ref)
    if threads == 1 and own != 1 and ref.single_thread_gflops:
        return ref.single_thread_gflops, 1
    return ref.gflops, own


def _threads(task: Task) -> int:
    return int(task.target.resolved()["num-cores"]) if task.target.kind == "llvm" else host_cores()


@functools.lru_cache(maxsize=256)
def measure_reference(task: Task, repeats: int = 7, warmup: int = 3, min_seconds: float = 0.2,
                      timeout: float = 600.0, machine: Machine | None = None,
                      policy: QuietPolicy | None = None) -> Reference:
    """PyTorch's GFLOPS for ``task``, measured in separate quiet processes (cached per process).

    A CPU (``llvm``) op is timed at the target's cores (the value rewards are normalized by)
    and with one thread; a CUDA op (which needs a GPU and a CUDA build of PyTorch) once. Both
    timings happen within one attempt that passes the quiet checks of ``policy``
    (:func:`~tune_gym.measure.quiet.quiet_timings`); a value below ``policy.low_fraction`` of
    the host's calibration peak at its thread count is flagged in :attr:`Reference.flags`
    and warned about.

    Args:
        machine: the probes (default: this machine); tests pass a scripted one.
        policy: the quiet thresholds (default :class:`~tune_gym.measure.quiet.QuietPolicy`).

    Raises:
        RuntimeError: the task has no PyTorch op, or a measuring process failed (its stderr is
            in the message).
        BusyHostError: the host stayed busy through every attempt (a RuntimeError).
    """
    if not task.has_torch_reference:
        raise RuntimeError(f"{task.uri} has no PyTorch op to time: give the env a numeric reward_norm")
    machine, policy = machine or Machine(), policy or QuietPolicy()
    threads = _threads(task)
    device = "cuda" if task.target.is_gpu else "cpu"
    counts = [threads] if device == "cuda" or threads == 1 else [threads, 1]
    time_op: Callable[[int], Any] = lambda t: machine.time_op(task.uri, t, repeats, warmup, min_seconds, timeout)
    quiet = quiet_timings(task.uri, device, counts, time_op, machine, policy)
    medians = {t: statistics.median(timing.samples) for t, timing in quiet.timings.items()}
    flags = tuple(_low_flag(task, t, medians[t], quiet.conditions[f"host_peak_gflops_{t}t"], policy) for t in counts)
    flags = tuple(f for f in flags if f)
    for flag in flags:
        warnings.warn(f"{task.uri}: {flag}", stacklevel=2)
    single = 1 if device == "cpu" else None
    method = (f"torch {importlib.metadata.version('torch')} {device}, {threads} threads"
              f"{' and 1 thread' if len(counts) > 1 else ''}, separate process, median of {repeats} timings of "
              f">= {min_seconds} s after {warmup} warm-up calls, quiet-checked (others' CPU <= "
              f"{policy.max_other_cores:g} cores, calibration >= {policy.min_calibration:.0%} of the host's best)")
    return Reference(medians[threads], method, quiet.timings[threads].samples, machine.host(), threads,
                     medians[single] if single else None, quiet.timings[single].samples if single else (),
                     quiet.conditions, flags)


def _low_flag(task: Task, threads: int, gflops: float, peak: float, policy: QuietPolicy) -> str:
    """Why ``gflops`` at ``threads`` is doubtful, or ``""``: below ``policy.low_fraction`` of
    the host's calibration peak on an op of at least ``policy.flag_min_flops``."""
    if task.flops < policy.flag_min_flops or gflops >= policy.low_fraction * peak:
        return ""
    return (f"reference at {threads} thread(s) {gflops:.2f} GFLOPS is below {policy.low_fraction:.0%} of this host's "
            f"calibration matmul peak at that thread count ({peak:.1f} GFLOPS) on an op of "
            f"{task.flops / 1e6:.0f} MFLOP")


def time_calibration(threads: int, device: str, min_seconds: float) -> float:
    """GFLOPS of the calibration matmul (:data:`~tune_gym.measure.quiet.CALIBRATION_N`) at
    ``threads`` threads, in this process: one warm-up call, then a loop of ``min_seconds``."""
    import torch

    torch.set_num_threads(threads)
    n = CALIBRATION_N[device]
    rng = np.random.default_rng(0)
    a, b = (torch.from_numpy(rng.uniform(-1, 1, (n, n)).astype(np.float32)).to(device) for _ in range(2))

    def call() -> None:
        torch.mm(a, b)
        if device == "cuda":
            torch.cuda.synchronize()

    with torch.no_grad():
        call()
        start, calls = time.perf_counter(), 0
        while time.perf_counter() - start < min_seconds or calls == 0:
            call()
            calls += 1
        elapsed = time.perf_counter() - start
    return 2.0 * n**3 * calls / elapsed / 1e9


def _torch_device(task: Task) -> str:
    """``cuda`` or ``cpu``: where PyTorch runs the task's op (``RuntimeError`` for a CUDA task
    without a GPU)."""
    import torch

    device = "cuda" if task.target.is_gpu else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"{task}: PyTorch reference for a CUDA task needs a GPU")
    return device


def time_torch(task: Task, threads: int, repeats: int = 7, warmup: int = 3, min_seconds: float = 0.2) -> list[float]:
    """GFLOPS of each of ``repeats`` timed loops of the op in PyTorch, in this process."""
    import torch

    device = _torch_device(task)
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
    parser = argparse.ArgumentParser(description="Time one task's op in PyTorch between two calibration matmuls; "
                                                 "print JSON samples and calibrations (GFLOPS).")
    parser.add_argument("uri")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--min-seconds", type=float, default=0.2)
    args = parser.parse_args(argv)
    task = Task.from_uri(args.uri)
    device = _torch_device(task)
    before = time_calibration(args.threads, device, args.min_seconds)
    samples = time_torch(task, args.threads, args.repeats, args.warmup, args.min_seconds)
    after = time_calibration(args.threads, device, args.min_seconds)
    print(json.dumps({"samples": samples, "calibration": [before, after]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
