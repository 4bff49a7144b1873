"""A small measured GPU-like space written as Kernel Tuner's files (cache, T1 problem, T4 results).

Shared by the tests of Kernel Tuner runs and of the P cross-check: 4 parameters, 2
restrictions, 98 valid configurations of 144, 4 of them failed (2 runtime, 2 compile). Kernel
times are a deterministic function of the parameters times seeded log-normal noise (a skewed
distribution, like measured spaces); the timings (compile, verification, benchmark,
framework) vary per configuration so the simulated clock is not proportional to trials.
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

PARAMS: dict[str, list[int]] = {"block_size_x": [16, 32, 48, 64, 96, 128], "tile": [1, 2, 3, 4], "unroll": [0, 1],
                                "vec": [1, 2, 4]}
RESTRICTIONS = ["block_size_x * tile <= 256", "vec <= tile or unroll == 1"]
KERNEL = "toy_kernel"
DEVICE = "Toy GPU"


@dataclass(frozen=True)
class ToySpace:
    """The files written and what they hold (``rows``: one per valid configuration, in
    ``itertools.product`` order: ``(config, time_ms or error name, timings in ms)``)."""

    cache: Path
    problem: Path
    t4: Path
    rows: tuple[tuple[dict[str, int], float | str, dict[str, float]], ...]


def _valid(config: dict[str, int]) -> bool:
    return config["block_size_x"] * config["tile"] <= 256 and (config["vec"] <= config["tile"] or config["unroll"] == 1)


def _failure(config: dict[str, int]) -> str | None:
    if config["block_size_x"] == 128 and config["vec"] == 4:
        return "RuntimeFailedConfig"
    if config["block_size_x"] == 16 and config["tile"] == 4 and config["unroll"] == 1 and config["vec"] >= 2:
        return "CompilationFailedConfig"
    return None


def rows(seed: int = 1) -> list[tuple[dict[str, int], float | str, dict[str, float]]]:
    """Every valid configuration with its time (ms) or failure, and its timings (ms)."""
    rng = np.random.default_rng(seed)
    out = []
    for values in itertools.product(*PARAMS.values()):
        config = dict(zip(PARAMS, values))
        if not _valid(config):
            continue
        b, t, u, v = values
        time_ms = 0.2 * abs(math.log2(b / 48)) + 0.15 * abs(t - 3) + 0.3 * (1 - u) / v + 0.4
        time_ms *= float(rng.lognormal(0.0, 0.25))
        timings = {"compile_time": 800.0 + 150.0 * t * (1 + u) + float(rng.uniform(0, 100)),
                   "verification_time": 3.0, "benchmark_time": 32 * time_ms + 4.0,
                   "framework_time": 10.0 + float(rng.uniform(0, 5))}
        failure = _failure(config)
        if failure is not None:
            timings["benchmark_time"] = 0.5 if failure == "RuntimeFailedConfig" else 0.0
        out.append((config, failure if failure is not None else time_ms, timings))
    return out


def _key(config: dict[str, int]) -> str:
    return ",".join(str(v) for v in config.values())


def cache_json(table: list[tuple[dict[str, int], float | str, dict[str, float]]]) -> dict[str, Any]:
    """Kernel Tuner's cache of ``table`` (times in ms, as Kernel Tuner writes them)."""
    return {"device_name": DEVICE, "kernel_name": KERNEL, "problem_size": [1024, 1024],
            "tune_params_keys": list(PARAMS), "tune_params": PARAMS, "objective": "time",
            "cache": {_key(c): {**c, "time": t, **({"times": [t] * 4} if isinstance(t, float) else {}), **timings,
                                "strategy_time": 0}
                      for c, t, timings in table}}


def problem_json() -> dict[str, Any]:
    """The T1 problem: the parameters and the restrictions."""
    return {
        "General": {"BenchmarkName": "toy", "OutputFormat": "JSON"},
        "ConfigurationSpace": {
            "TuningParameters": [{"Name": n, "Type": "int", "Values": repr(v), "Default": v[0]}
                                 for n, v in PARAMS.items()],
            "Conditions": [{"Expression": r, "Parameters": [n for n in PARAMS if n in r]} for r in RESTRICTIONS],
        },
        "KernelSpecification": {"Language": "CUDA", "KernelName": KERNEL, "KernelFile": "toy.cu",
                                "GlobalSize": {"X": "1024 // block_size_x"}, "LocalSize": {"X": "block_size_x"},
                                "ProblemSize": [1024, 1024]},
    }


def t4_json(table: list[tuple[dict[str, int], float | str, dict[str, float]]]) -> dict[str, Any]:
    """The same space as T4 results in seconds, as the autotuning methodology reads them: the
    benchmark time as the one entry of ``runtimes``, so the methodology's per-configuration
    seconds (compilation + runtimes + framework + search_algorithm + validation) are
    compile + verification + benchmark + framework, tune_gym's charge."""
    invalidity = {"CompilationFailedConfig": "compile", "RuntimeFailedConfig": "runtime"}
    results = []
    for config, t, timings in table:
        value: float | str = t if isinstance(t, str) else t / 1e3
        results.append({
            "timestamp": "2024-01-01 00:00:00", "configuration": config, "objectives": ["time"],
            "times": {"compilation": timings["compile_time"] / 1e3, "framework": timings["framework_time"] / 1e3,
                      "search_algorithm": 0.0, "validation": timings["verification_time"] / 1e3,
                      "runtimes": [timings["benchmark_time"] / 1e3]},
            "invalidity": invalidity[t] if isinstance(t, str) else "correct",
            "correctness": 0 if isinstance(t, str) else 1,
            "measurements": [{"name": "time", "value": value, "unit": "s"}]})
    return {"schema_version": "1.0.0", "metadata": {"timeunit": "seconds"}, "results": results}


def write_toy_space(folder: Path, *, gz: bool = True, seed: int = 1) -> ToySpace:
    """Writes the cache (gzipped unless ``gz=False``), the T1 problem and the T4 results into
    ``folder``. With the default seed 3 valid configurations lie within 5% of the way from the
    optimum to the median (random search's budget: 27 draws); with seed 0 only the optimum does."""
    table = rows(seed)
    cache = folder / ("toy_cache.json.gz" if gz else "toy_cache.json")
    text = json.dumps(cache_json(table)).encode()
    cache.write_bytes(gzip.compress(text) if gz else text)
    problem = folder / "toy_problem.json"
    problem.write_text(json.dumps(problem_json()))
    t4 = folder / "toy_T4.json"
    t4.write_text(json.dumps(t4_json(table)))
    return ToySpace(cache=cache, problem=problem, t4=t4, rows=tuple(table))
