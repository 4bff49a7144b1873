"""End-to-end latency of a network: a built TVM executable, PyTorch eager, and the baselines a
tuned network is compared with (TVM's default build, MetaSchedule's own network tuning).

Every latency is measured in a fresh, separate process (PyTorch's timing moves with whatever
else runs in its process, and TVM's runtime threads spin after a run), after warm-up calls, as
the median of ``repeats`` timings of at least ``min_seconds`` each, with ``threads`` threads
(``TVM_NUM_THREADS`` for TVM, ``torch.set_num_threads`` for PyTorch). Run nothing else on the
machine while timing; leave a core free.

    python -m tune_gym.networks.timing vm LIB.so INPUTS.npz --threads 1
    python -m tune_gym.networks.timing torch resnet18 --seed 0 --threads 1
    python -m tune_gym.networks.timing profile LIB.so INPUTS.npz   # seconds per kernel, in the network
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Latency", "metaschedule_tune", "paired_ratio", "profile_executable", "time_executable", "time_rounds",
           "time_torch"]


@dataclass(frozen=True)
class Latency:
    """Seconds per forward pass: the median of ``samples`` (one per timed loop)."""

    median: float
    samples: tuple[float, ...]
    method: str

    def to_json(self) -> dict[str, Any]:
        return {"median": self.median, "samples": list(self.samples), "method": self.method}


def _child(cmd: list[str], threads: int, timeout: float) -> dict[str, Any]:
    """Run ``cmd`` (this module's ``main`` in a fresh process) on ``threads`` threads; the JSON of
    its last output line."""
    env = {**os.environ, "TVM_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"timing process failed ({' '.join(cmd[2:4])}):\n{proc.stderr.strip()[-2000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _run(cmd: list[str], threads: int, timeout: float) -> list[float]:
    return [float(x) for x in _child(cmd, threads, timeout)["samples"]]


def time_executable(executable: Any, inputs: tuple[np.ndarray, ...], threads: int, repeats: int = 7,
                    min_seconds: float = 0.5, timeout: float = 1200.0) -> Latency:
    """Latency of a built Relax executable (``Network.compile`` / ``default_build``) on the host CPU."""
    with tempfile.TemporaryDirectory(prefix="tune_gym_net_") as tmp:
        lib, data = Path(tmp) / "net.so", Path(tmp) / "inputs.npz"
        executable.export_library(str(lib))
        np.savez(data, *inputs)
        samples = _run([sys.executable, "-m", __name__, "vm", str(lib), str(data), "--threads", str(threads),
                        "--repeats", str(repeats), "--min-seconds", str(min_seconds)], threads, timeout)
    method = (f"TVM relax VM, {threads} thread(s), separate process, median of {repeats} timings of >= "
              f"{min_seconds} s after warm-up")
    return Latency(statistics.median(samples), tuple(samples), method)


def time_torch(model: str, threads: int, seed: int = 0, repeats: int = 7, min_seconds: float = 0.5,
               timeout: float = 1200.0) -> Latency:
    """Latency of a model of :mod:`tune_gym.networks.models` in PyTorch eager mode (no grad)."""
    import importlib.metadata

    samples = _run([sys.executable, "-m", __name__, "torch", model, "--seed", str(seed), "--threads", str(threads),
                    "--repeats", str(repeats), "--min-seconds", str(min_seconds)], threads, timeout)
    method = (f"torch {importlib.metadata.version('torch')} eager, {threads} thread(s), separate process, median of "
              f"{repeats} timings of >= {min_seconds} s after warm-up")
    return Latency(statistics.median(samples), tuple(samples), method)


def time_rounds(builds: dict[str, Any], inputs: tuple[np.ndarray, ...], threads: int, rounds: int = 6,
                repeats: int = 3, min_seconds: float = 0.5, torch_model: str | None = None, seed: int = 0,
                timeout: float = 1200.0) -> dict[str, Latency]:
    """Latencies of several builds timed in turn, so that a slow drift of the host (another
    tenant of a virtual machine, a frequency change) moves them all alike.

    Each of ``rounds`` rounds times every build once, in the order given: a fresh process runs
    ``repeats`` timings of >= ``min_seconds`` s after warm-up, and the round's value is their
    median. A build's :class:`Latency` is the median over rounds, its ``samples`` the rounds'
    values in order, so that ratios between two builds can be taken round by round
    (:func:`paired_ratio`).

    Args:
        builds: name -> built Relax executable; the name ``"PyTorch eager"`` with
            ``torch_model`` set times that model of :mod:`tune_gym.networks.models` instead.
        inputs: the executables' inputs.
        threads: CPU threads of every build (``TVM_NUM_THREADS``, ``torch.set_num_threads``).
        torch_model, seed: the PyTorch model and the seed of its weights and inputs.
    """
    import importlib.metadata

    if rounds < 1 or repeats < 1:
        raise ValueError(f"time_rounds: rounds ({rounds}) and repeats ({repeats}) must be >= 1")
    per_round: dict[str, list[float]] = {name: [] for name in builds}
    with tempfile.TemporaryDirectory(prefix="tune_gym_net_") as tmp:
        data = Path(tmp) / "inputs.npz"
        np.savez(data, *inputs)
        commands: dict[str, list[str]] = {}
        for i, (name, executable) in enumerate(builds.items()):
            if name == "PyTorch eager" and torch_model is not None:
                commands[name] = [sys.executable, "-m", __name__, "torch", torch_model, "--seed", str(seed)]
                continue
            if executable is None:
                raise ValueError(f"time_rounds: build {name!r} is None (only 'PyTorch eager' with torch_model "
                                 "may be)")
            lib = Path(tmp) / f"net{i}.so"
            executable.export_library(str(lib))
            commands[name] = [sys.executable, "-m", __name__, "vm", str(lib), str(data)]
        for _ in range(rounds):
            for name, cmd in commands.items():
                samples = _run([*cmd, "--threads", str(threads), "--repeats", str(repeats), "--min-seconds",
                                str(min_seconds)], threads, timeout)
                per_round[name].append(statistics.median(samples))
    how = (f"{threads} thread(s), {rounds} rounds, every build once per round in turn; a round: a fresh process, "
           f"the median of {repeats} timings of >= {min_seconds} s after warm-up; the median of the rounds")
    out = {}
    for name, values in per_round.items():
        engine = (f"torch {importlib.metadata.version('torch')} eager" if commands[name][3] == "torch"
                  else "TVM relax VM")
        out[name] = Latency(statistics.median(values), tuple(values), f"{engine}, {how}")
    return out


def profile_executable(executable: Any, inputs: tuple[np.ndarray, ...], threads: int, calls: int = 30,
                       timeout: float = 1200.0) -> dict[str, float]:
    """Seconds per forward pass spent in each function the Relax VM calls (kernels by name, and
    the VM's builtins such as ``vm.builtin.alloc_tensor``), measured inside the network: a fresh
    process, 20 warm-up passes, then ``calls`` passes with a timer around every call the VM
    makes (``VirtualMachine.set_instrument``; TVM 0.27's Relax VM has no ``profile`` method).
    A kernel called twice per pass (weight 2) counts both calls. The timer adds about a
    microsecond per call, so only kernels of tens of microseconds or more read true."""
    if calls < 1:
        raise ValueError(f"profile_executable: calls must be >= 1, got {calls}")
    with tempfile.TemporaryDirectory(prefix="tune_gym_net_") as tmp:
        lib, data = Path(tmp) / "net.so", Path(tmp) / "inputs.npz"
        executable.export_library(str(lib))
        np.savez(data, *inputs)
        seconds = _child([sys.executable, "-m", __name__, "profile", str(lib), str(data), "--calls", str(calls)],
                         threads, timeout)["seconds"]
    return {str(k): float(v) for k, v in seconds.items()}


def paired_ratio(a: Latency, b: Latency) -> tuple[float, float, float]:
    """How many times faster ``a`` ran than ``b``, round by round (``b / a`` per round of
    :func:`time_rounds`): ``(median, lowest, highest)``."""
    if len(a.samples) != len(b.samples) or not a.samples:
        raise ValueError("paired_ratio: the latencies must come from the same rounds")
    ratios = [y / x for x, y in zip(a.samples, b.samples)]
    return statistics.median(ratios), min(ratios), max(ratios)


def metaschedule_tune(network: Any, trials: int, work_dir: str | Path, seed: int = 0,
                      trials_per_iter: int = 64) -> tuple[Any, float]:
    """MetaSchedule's own network tuning (``tune_relax``: its gradient task scheduler, XGBoost
    cost model and evolutionary search) at ``trials`` trials, ``trials_per_iter`` per task
    iteration; returns ``(database, seconds)``.

    A database already in ``work_dir`` is extended (MetaSchedule's JSON database resumes).
    """
    from tune_gym.measure.workers import metaschedule_measurers
    from tune_gym.tvm_support import ms

    m = ms()
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    builder, runner = metaschedule_measurers(network.target)
    t0 = time.perf_counter()
    db = m.relax_integration.tune_relax(
        network.mod, None, network.target.tvm_target(), str(work), max_trials_global=trials,
        num_trials_per_iter=trials_per_iter, builder=builder, runner=runner, seed=seed)
    return db, time.perf_counter() - t0


def _loop(call: Any, repeats: int, min_seconds: float) -> list[float]:
    for _ in range(3):
        call()
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < min_seconds or calls == 0:
        call()
        calls += 1
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        samples.append((time.perf_counter() - t0) / calls)
    return samples


def _load_vm(lib_path: str, data_path: str) -> tuple[Any, list[Any]]:
    """A Relax VM of the exported library on the CPU, and its inputs from ``data_path``."""
    import tvm
    from tvm import relax

    dev = tvm.cpu(0)
    vm = relax.VirtualMachine(tvm.runtime.load_module(lib_path), dev)
    with np.load(data_path) as data:
        args = [tvm.runtime.tensor(data[f"arr_{i}"], dev) for i in range(len(data.files))]
    return vm, args


def _time_vm(lib_path: str, data_path: str, repeats: int, min_seconds: float) -> list[float]:
    vm, args = _load_vm(lib_path, data_path)
    return _loop(lambda: vm["main"](*args), repeats, min_seconds)


def _profile_vm(lib_path: str, data_path: str, calls: int) -> dict[str, float]:
    vm, args = _load_vm(lib_path, data_path)
    spent: dict[str, float] = {}
    state = {"on": False, "t0": 0.0}

    def instrument(func: Any, name: Any, before: bool, ret: Any, *call_args: Any) -> int:
        if before:
            state["t0"] = time.perf_counter()
        elif state["on"]:
            spent[str(name)] = spent.get(str(name), 0.0) + time.perf_counter() - state["t0"]
        return 0  # go on as usual

    vm.set_instrument(instrument)
    for _ in range(20):
        vm["main"](*args)
    state["on"] = True
    for _ in range(calls):
        vm["main"](*args)
    return {name: total / calls for name, total in sorted(spent.items(), key=lambda kv: -kv[1])}


def _time_torch(model: str, seed: int, threads: int, repeats: int, min_seconds: float) -> list[float]:
    import torch

    from tune_gym.networks.models import get_model

    torch.set_num_threads(threads)
    spec = get_model(model)
    net, inputs = spec.build(seed=seed), spec.inputs(seed=seed)
    with torch.no_grad():
        return _loop(lambda: net(*inputs), repeats, min_seconds)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Time one network in this process; print JSON samples (seconds).")
    sub = p.add_subparsers(dest="what", required=True)
    vm = sub.add_parser("vm")
    vm.add_argument("lib")
    vm.add_argument("inputs")
    tr = sub.add_parser("torch")
    tr.add_argument("model")
    tr.add_argument("--seed", type=int, default=0)
    pr = sub.add_parser("profile")
    pr.add_argument("lib")
    pr.add_argument("inputs")
    pr.add_argument("--calls", type=int, default=30)
    for s in (vm, tr):
        s.add_argument("--threads", type=int, required=True)
        s.add_argument("--repeats", type=int, default=7)
        s.add_argument("--min-seconds", type=float, default=0.5)
    args = p.parse_args(argv)
    if args.what == "profile":
        print(json.dumps({"seconds": _profile_vm(args.lib, args.inputs, args.calls)}))
        return 0
    if args.what == "vm":
        samples = _time_vm(args.lib, args.inputs, args.repeats, args.min_seconds)
    else:
        samples = _time_torch(args.model, args.seed, args.threads, args.repeats, args.min_seconds)
    print(json.dumps({"samples": samples}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
