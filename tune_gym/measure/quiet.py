"""Whether this machine is quiet enough to time a reference: probes, checks and retries.

A reference timed while another job holds a core is not slow by the other job's share but by
up to 50x: a 2-thread oneDNN/MKL kernel waits at every barrier for the thread whose core was
taken. Recorded references show it (on a Zen 3 host BERT's dense layer at 6.2 GFLOPS, its
batch_matmul at 3.2; timed the same way on an idle host, 346 and 296). So
:func:`tune_gym.measure.reference.measure_reference` records a value only when the checks of
a :class:`QuietPolicy` pass, each a figure measured at the time:

* **others' CPU before**: over ``settle_seconds`` before the timing, the CPUs this process may
  run on (its affinity set) spent at most ``max_other_cores`` cores' worth of time on other
  processes. The figure is the busy time of those CPUs (the kernel's per-CPU counters,
  ``/proc/stat`` through psutil: user, nice, system, irq, softirq and steal) minus the CPU time
  of this process and its finished children (``getrusage``), over the wall time. An idle
  host's kernel threads and daemons take a few hundredths of a core; a background job at any
  nice level takes 0.5 or more.
* **others' CPU during**: the same figure over the whole timing (every thread count), the
  timing processes' own CPU time subtracted.
* **calibration**: the timing process times a fixed float32 matmul (:data:`CALIBRATION_N`)
  before and after the op, at the op's thread count. Both must reach ``min_calibration`` of the
  best calibration this host ever gave at that thread count and device (kept per host id in
  ``$XDG_CACHE_HOME/tune_gym/host_peaks.json``, :class:`PeakCache`) and of each other.
  Interference only ever slows a matmul down, so the best value seen is the host's own speed
  and it only rises; the check catches what process counters miss: a neighbouring VM, a
  throttled clock, another container's load. The first time a host is seen the calibration is
  only compared within the attempt.

The 1-minute load average (``/proc/loadavg``) is recorded before and after for humans, but
decides nothing: it lags a minute behind and counts the timing processes themselves.

An attempt that fails a check is retried ``retries`` times, ``retry_wait`` seconds apart;
then :class:`BusyHostError` names what was busy, with the figures. Every probe goes through a
:class:`Machine`, so tests script a busy or an idle machine without timing anything.
"""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tune_gym.errors import TuneGymError
from tune_gym.host import host_id

__all__ = ["CALIBRATION_N", "BusyHostError", "CpuTimes", "Machine", "PeakCache", "QuietPolicy", "QuietTimings",
           "Timing", "other_cores", "quiet_timings"]

#: Side of the square float32 matmul the timing process calibrates with, per device: 2 GFLOP
#: per call on a CPU (milliseconds, compute-bound even on one core), 1.1 TFLOP on a GPU.
CALIBRATION_N = {"cpu": 1024, "cuda": 8192}


class BusyHostError(RuntimeError):
    """The host stayed too busy to time a reference that can be trusted (the message names
    what was busy and the figures)."""


@dataclass(frozen=True)
class QuietPolicy:
    """The thresholds of the quiet checks (see the module docstring).

    Attributes:
        max_other_cores: most cores' worth of CPU time other processes may take, on average,
            before and during the timing.
        min_calibration: least fraction of the host's best calibration (and of the attempt's
            other calibration) a calibration may reach.
        settle_seconds: the window sampled before the timing.
        retries: attempts after the first one.
        retry_wait: seconds between attempts.
        low_fraction: a reference below this fraction of the host's calibration peak at its
            thread count is flagged (not refused) on an op of at least ``flag_min_flops``.
        flag_min_flops: the least FLOPs of an op whose low reference is flagged (below it a
            call is short enough for per-call overhead to matter).
    """

    max_other_cores: float = 0.10
    min_calibration: float = 0.70
    settle_seconds: float = 1.0
    retries: int = 3
    retry_wait: float = 30.0
    low_fraction: float = 0.05
    flag_min_flops: int = 20_000_000

    def __post_init__(self) -> None:
        for name, low, high in (("max_other_cores", 0.0, math.inf), ("min_calibration", 0.0, 1.0),
                                ("settle_seconds", 0.0, math.inf), ("retry_wait", 0.0, math.inf),
                                ("low_fraction", 0.0, 1.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
                raise TuneGymError(f"QuietPolicy {name} {value!r} is not a number in [{low:g}, {high:g}]")
        for name in ("retries", "flag_min_flops"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise TuneGymError(f"QuietPolicy {name} {value!r} is not an integer >= 0")


@dataclass(frozen=True)
class CpuTimes:
    """One reading of the CPU counters.

    Attributes:
        busy: seconds the CPUs of this process's affinity set spent busy, every process's work.
        own: CPU seconds of this process and of its children that have finished.
        wall: a monotonic clock, seconds.
    """

    busy: float
    own: float
    wall: float


@dataclass(frozen=True)
class Timing:
    """What one timing process reports: GFLOPS of each timed loop of the op, and of the
    calibration matmul before and after it."""

    samples: tuple[float, ...]
    calibration: tuple[float, ...]


def other_cores(start: CpuTimes, end: CpuTimes) -> float:
    """Average cores' worth of CPU time other processes took between two readings."""
    wall = end.wall - start.wall
    if wall <= 0:
        return 0.0
    return max(0.0, (end.busy - start.busy) - (end.own - start.own)) / wall


class PeakCache:
    """The best calibration GFLOPS each host gave, per ``"device:threads"``, in a small JSON
    file (``{host id: {key: GFLOPS}}``); values only rise."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tune_gym"
        self.path = Path(path) if path is not None else cache / "host_peaks.json"

    def read(self) -> dict[str, dict[str, float]]:
        """The whole file (empty when there is none); ``TuneGymError`` naming it when it is not
        ``{host: {key: number > 0}}``."""
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise TuneGymError(f"host peak cache {self.path} cannot be read ({err}); delete it (the peaks are "
                               f"measured again)") from None
        good = isinstance(data, dict) and all(
            isinstance(v, dict) and all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0
                                        for x in v.values()) for v in data.values())
        if not good:
            raise TuneGymError(f"host peak cache {self.path} is not {{host: {{device:threads: GFLOPS}}}}; delete it "
                               f"(the peaks are measured again)")
        return data

    def best(self, host: str, key: str) -> float | None:
        """The host's best calibration at ``key``, or ``None`` before the first."""
        value = self.read().get(host, {}).get(key)
        return float(value) if value is not None else None

    def update(self, host: str, key: str, gflops: float) -> None:
        """Keep ``gflops`` when it beats the recorded best (written atomically)."""
        data = self.read()
        if gflops <= data.get(host, {}).get(key, 0.0):
            return
        data.setdefault(host, {})[key] = float(gflops)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)


class Machine:
    """The probes of the quiet checks, on this machine. A test subclasses it to script a busy
    or an idle machine (every method is a probe; nothing else touches the host).

    Args:
        peaks: where the host's best calibrations are kept (default: the user cache).
    """

    def __init__(self, peaks: PeakCache | None = None) -> None:
        self.peaks = peaks or PeakCache()

    def host(self) -> str:
        """This machine's :func:`tune_gym.host.host_id`."""
        return host_id()

    def cpu_times(self) -> CpuTimes:
        import psutil

        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        per_cpu = psutil.cpu_times(percpu=True)
        busy = sum(sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))
                   for i, t in enumerate(per_cpu) if cpus is None or i in cpus)
        own = sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                    resource.getrusage(resource.RUSAGE_CHILDREN)))
        return CpuTimes(busy, own, time.monotonic())

    def load_average(self) -> float:
        return os.getloadavg()[0]

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def time_op(self, uri: str, threads: int, repeats: int, warmup: int, min_seconds: float,
                timeout: float) -> Timing:
        """Time the task's op in a separate Python process (``python -m tune_gym.measure.reference``).

        Raises:
            RuntimeError: the process failed (its stderr is in the message).
        """
        cmd = [sys.executable, "-m", "tune_gym.measure.reference", uri, "--threads", str(threads),
               "--repeats", str(repeats), "--warmup", str(warmup), "--min-seconds", str(min_seconds)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{uri}: PyTorch reference measurement failed:\n{proc.stderr.strip()[-2000:]}")
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        return Timing(tuple(out["samples"]), tuple(out["calibration"]))


@dataclass(frozen=True)
class QuietTimings:
    """The timings of one quiet attempt, per thread count, and the figures that made it quiet
    (``conditions``: others' cores before and during, load averages, calibrations and the
    host's calibration peaks per thread count, the attempts it took)."""

    timings: dict[int, Timing]
    conditions: dict[str, float]


def quiet_timings(uri: str, device: str, thread_counts: Sequence[int], time_op: Callable[[int], Timing],
                  machine: Machine, policy: QuietPolicy) -> QuietTimings:
    """Time the op at every thread count within one quiet attempt (see the module docstring).

    Args:
        uri: the task, for messages.
        device: ``cpu`` or ``cuda`` (the calibration peaks are kept per device and thread count).
        thread_counts: the thread counts to time, the first is the one the checks report on.
        time_op: times the op at a thread count (in a separate process).

    Raises:
        BusyHostError: every attempt failed a check; names the last failure and its figures.
    """
    attempts = 1 + policy.retries
    reason = ""
    for attempt in range(1, attempts + 1):
        if attempt > 1:
            machine.sleep(policy.retry_wait)
        result = _attempt(device, thread_counts, time_op, machine, policy)
        if isinstance(result, QuietTimings):
            result.conditions["attempts"] = attempt
            return result
        reason = result
    tried = f"in all {attempts} attempts ({policy.retry_wait:g} s apart)" if attempts > 1 else "in its only attempt"
    raise BusyHostError(
        f"{uri}: refused to record a PyTorch reference: the host was busy {tried}; last: {reason}. Measure it on "
        f"an idle machine (stop the other jobs), or give a tuning run a numeric reward_norm or 'none' (tune-gym tune "
        f"--reward-norm)")


def _attempt(device: str, thread_counts: Sequence[int], time_op: Callable[[int], Timing], machine: Machine,
             policy: QuietPolicy) -> QuietTimings | str:
    """One attempt: the timings and conditions, or why the host was busy."""
    limit = policy.max_other_cores
    load_before = machine.load_average()
    start = machine.cpu_times()
    machine.sleep(policy.settle_seconds)
    ready = machine.cpu_times()
    before = other_cores(start, ready)
    if before > limit:
        return (f"before the timing other processes used {before:.2f} cores on average over "
                f"{ready.wall - start.wall:.1f} s (limit {limit:g}; load average {load_before:.2f})")
    timings = {threads: time_op(threads) for threads in thread_counts}
    end = machine.cpu_times()
    load_after = machine.load_average()
    during = other_cores(ready, end)
    loads = f"load average {load_before:.2f} before, {load_after:.2f} after"
    if during > limit:
        return (f"during the timing other processes used {during:.2f} cores on average over "
                f"{end.wall - ready.wall:.1f} s (limit {limit:g}; {loads})")
    conditions: dict[str, float] = {"others_cores_before": round(before, 4), "others_cores_during": round(during, 4),
                                    "load_before": load_before, "load_after": load_after}
    host = machine.host()
    for threads, timing in timings.items():
        key = f"{device}:{threads}"
        low, high = min(timing.calibration), max(timing.calibration)
        best = max(machine.peaks.best(host, key) or 0.0, high)
        machine.peaks.update(host, key, high)
        conditions[f"calibration_gflops_{threads}t"] = low
        conditions[f"host_peak_gflops_{threads}t"] = best
        if low < policy.min_calibration * best:
            runs = ", ".join(f"{c:.1f}" for c in timing.calibration)
            return (f"the calibration matmul at {threads} thread(s) ran at {low:.1f} GFLOPS, below "
                    f"{policy.min_calibration:.0%} of this host's best {best:.1f} GFLOPS (this attempt's calibrations: "
                    f"{runs}; others' cores {during:.2f}; {loads})")
    return QuietTimings(timings, conditions)
