"""The ``kt`` task kind: Kernel Tuner measured spaces as tasks, spaces, replay data and a suite.

Every test writes its own small files (a T1 problem with int, string and bool parameters and
two restrictions, and a Kernel Tuner cache of every valid configuration); one slow test reads
the FAIR Benchmark Hub's files in ../shared when they are there."""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import math
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import tune_gym  # noqa: F401  (registers Tune-v0)
from tune_gym import kinds
from tune_gym.errors import SpaceError, TaskError
from tune_gym.external import files
from tune_gym.external.kernel_tuner_io import KernelTunerFileError
from tune_gym.external.replay import kt_dataset
from tune_gym.external.space import KTSpace
from tune_gym.external.task import NOMINAL_FLOPS, KTTask, kt_task
from tune_gym.measure import make_backend
from tune_gym.space import KnobSpace
from tune_gym.tasks import Task, get_suite

HUB = Path(__file__).resolve().parents[2] / "shared" / "external" / "benchmark_hub"

PARAMS: dict[str, list[Any]] = {"bx": [1, 2, 4, 8], "tile": [1, 2, 3], "mem": ["shared", "global"],
                                "unroll": [True, False]}
RESTRICTIONS = ["bx * tile <= 12", "mem == 'shared' or unroll"]
FAILS = {(8, 1, "global", True): "CompilationFailedConfig", (1, 3, "shared", False): "RuntimeFailedConfig",
         (2, 2, "global", True): "InvalidConfig"}


def valid_configs() -> list[tuple[Any, ...]]:
    """Python's own evaluation of the test's restrictions over the Cartesian product."""
    out = []
    for combo in itertools.product(*PARAMS.values()):
        env = dict(zip(PARAMS, combo))
        if all(eval(r, {}, env) for r in RESTRICTIONS):  # the test's own strings
            out.append(combo)
    return out


def time_ms(combo: tuple[Any, ...]) -> float:
    bx, tile, mem, unroll = combo
    return 1.0 + 4.0 / (bx * tile) + (0.5 if mem == "global" else 0.0) + (0.0 if unroll else 0.25)


def t1_problem(kernel: str = "toy_kernel", restrictions: list[str] | None = None) -> dict[str, Any]:
    types = {"bx": "int", "tile": "int", "mem": "string", "unroll": "bool"}
    return {
        "General": {"BenchmarkName": "toy_conv", "OutputFormat": "JSON"},
        "ConfigurationSpace": {
            "TuningParameters": [{"Name": n, "Type": types[n], "Values": repr(v)} for n, v in PARAMS.items()],
            "Conditions": [{"Expression": r, "Parameters": [n for n in PARAMS if n in r]}
                           for r in (RESTRICTIONS if restrictions is None else restrictions)],
        },
        "KernelSpecification": {"Language": "CUDA", "KernelName": kernel, "KernelFile": "toy.cu",
                                "GlobalSize": {"X": "64"}, "LocalSize": {"X": "bx"}, "ProblemSize": [64, 64]},
    }


def kt_cache(device: str = "Toy GPU", drop: str | None = None) -> dict[str, Any]:
    """A brute-force cache of every valid configuration (``drop``: a parameter left out of ``tune_params``)."""
    cache = {}
    for combo in valid_configs():
        key = ",".join(str(v) for v in combo)
        timings = {"compile_time": 800.0 + 10 * combo[0], "verification_time": 5.0, "benchmark_time": 40.0,
                   "framework_time": 3.0, "strategy_time": 0}
        error = FAILS.get(combo)
        fields = {"time": error} if error else {"time": time_ms(combo), "times": [time_ms(combo)] * 3}
        cache[key] = {**dict(zip(PARAMS, combo)), **fields, **timings}
    params = {k: v for k, v in PARAMS.items() if k != drop}
    return {"device_name": device, "kernel_name": "toy_kernel", "problem_size": [64, 64],
            "tune_params_keys": list(params), "tune_params": params, "objective": "time", "cache": cache}


def write(path: Path, data: Any, gz: bool = False) -> Path:
    raw = (data if isinstance(data, str) else json.dumps(data)).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(raw, mtime=0) if gz else raw)
    return path


def sha16(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


@pytest.fixture(autouse=True)
def _fresh_search_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts with no data directory and no file given by path (in this process)."""
    from tune_gym.tasks.suites import clear_kind_suites

    monkeypatch.delenv("TUNE_GYM_DATA", raising=False)
    monkeypatch.setattr(files, "_added", [])
    monkeypatch.setattr(files, "_registered", {})
    clear_kind_suites()
    yield
    clear_kind_suites()


@pytest.fixture
def hub(tmp_path: Path) -> Path:
    """A directory laid out as the Benchmark Hub's: kernels/<kernel>.json, cachefiles/<kernel>/<GPU>.json.gz."""
    write(tmp_path / "hub" / "kernels" / "toy_conv.json", t1_problem())
    write(tmp_path / "hub" / "cachefiles" / "toy_conv" / "A1.json.gz", kt_cache("Toy GPU A1"), gz=True)
    write(tmp_path / "hub" / "cachefiles" / "toy_conv" / "B2.json", kt_cache(""))
    return tmp_path / "hub"


@pytest.fixture
def task(hub: Path) -> KTTask:
    return kt_task(hub / "cachefiles" / "toy_conv" / "A1.json.gz", hub / "kernels" / "toy_conv.json")


def kt_tasks(suite: Any) -> list[KTTask]:
    tasks = [st.task for st in suite.tasks]
    assert all(isinstance(t, KTTask) for t in tasks)
    return tasks


def one_line(err: pytest.ExceptionInfo[BaseException], *parts: str) -> None:
    msg = str(err.value)
    assert "\n" not in msg
    for part in parts:
        assert part in msg, msg


# ---------------------------------------------------------------------------- tasks and URIs
def test_task_from_paths_is_named_by_content(hub: Path, task: KTTask) -> None:
    cache = hub / "cachefiles" / "toy_conv" / "A1.json.gz"
    spec = hub / "kernels" / "toy_conv.json"
    assert task.uri == f"kt://toy_conv/A1?digest={sha16(cache)}&spec={sha16(spec)}&target=kt"
    assert Task.parse(task.uri) == task and Task.from_uri(task.uri) == task
    assert Task.parse(task.uri.replace("&target=kt", "")) == task  # the target defaults to kt
    assert (task.data_file, task.problem_file) == (cache, spec)
    assert task.flops == NOMINAL_FLOPS and task.flops_nominal and not Task.parse("resnet18:1").flops_nominal
    assert kinds.get_kind(task.target.kind) is kinds.get_kind("kt") and kinds.default_observation(task) == "knobs"
    assert task.with_target("kt") is task and not task.has_torch_reference
    for call in (lambda: task.opdef, lambda: task.input_shapes, task.tensors, task.ir_module, task.output_shape,
                 lambda: task.target.tvm_target(), lambda: task.with_target("llvm")):
        with pytest.raises(TaskError):
            call()


def test_task_is_found_on_the_search_path_by_digest(hub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache, spec = hub / "cachefiles" / "toy_conv" / "B2.json", hub / "kernels" / "toy_conv.json"
    uri = f"kt://anything/B2?spec={sha16(spec)}&digest={sha16(cache)}"
    with pytest.raises(TaskError) as err:
        Task.parse(uri)
    one_line(err, "its measurement file", f"sha256 digest {sha16(cache)}", "kernel anything, device B2",
             "TUNE_GYM_DATA is not set", "https://doi.org/10.5281/zenodo.15364124")
    monkeypatch.setenv("TUNE_GYM_DATA", str(hub / "cachefiles"))
    with pytest.raises(TaskError) as err:
        Task.parse(uri)
    one_line(err, "its T1 problem file", f"sha256 digest {sha16(spec)}", str(hub / "cachefiles"))
    files.add_data_dir(hub / "kernels")
    task = Task.parse(uri)
    assert isinstance(task, KTTask) and task.data_file == cache and task.problem_file == spec
    assert task.uri == f"kt://anything/B2?digest={sha16(cache)}&spec={sha16(spec)}&target=kt"  # canonical order


@pytest.mark.parametrize("uri, part", [
    ("kt://toy/A1", "lacks digest=<16 hex digits>"),
    ("kt://toy/A1?digest=0123456789abcdef", "lacks spec=<16 hex digits>"),
    ("kt://toy/A1?digest=0123456789abcdef&spec=0123456789abcdef&target=llvm", "target 'llvm' is not supported"),
    ("kt://toy/A1?digest=0123456789abcdef&spec=0123456789abcdef&cores=2", "unknown field(s) cores"),
    ("kt://toy/A1?digest=0123456789ABCDEF&spec=0123456789abcdef", "want 16 lowercase hex digits"),
    ("kt://toy?digest=0123456789abcdef&spec=0123456789abcdef", "malformed kt task URI"),
    ("kt://to y/A1?digest=0123456789abcdef&spec=0123456789abcdef", "malformed kt task URI"),
])
def test_malformed_uris(uri: str, part: str) -> None:
    with pytest.raises(TaskError) as err:
        Task.parse(uri)
    one_line(err, part)


def test_a_file_with_the_digest_of_another_kind_is_named(hub: Path) -> None:
    spec = hub / "kernels" / "toy_conv.json"
    files.add_data_dir(hub)
    with pytest.raises(TaskError) as err:
        Task.parse(f"kt://x/y?digest={sha16(spec)}&spec={sha16(spec)}")
    one_line(err, f"{spec} has its digest but is not a Kernel Tuner cache or T4 results file")


# ---------------------------------------------------------------------------- bad input
def _dropped_param_cache() -> dict[str, Any]:
    data = kt_cache()
    for entry in data["cache"].values():
        del entry["unroll"]
    data["cache"] = {",".join(k.split(",")[:3]): v for k, v in data["cache"].items()}
    data["tune_params_keys"] = ["bx", "tile", "mem"]
    data["tune_params"] = {k: v for k, v in PARAMS.items() if k != "unroll"}
    return data


@pytest.mark.parametrize("cache, problem, parts", [
    ('{"device_name": "x", "tune_params_keys": [', t1_problem(), ["cache.json: file: malformed JSON"]),
    (kt_cache(), t1_problem(restrictions=["bx *** 2 > 1"]), ["toy.json: ConfigurationSpace.Conditions[0]",
                                                             "bx *** 2 > 1"]),
    (kt_cache(), t1_problem(restrictions=["__import__('os')"]), ["ConfigurationSpace.Conditions[0]"]),
    (_dropped_param_cache(), t1_problem(), ["cache.json: tune_params_keys", "differ from the problem's"]),
    (kt_cache(), t1_problem(kernel="other_kernel"), ["cache.json: kernel_name", "'other_kernel'"]),
])
def test_bad_files_are_one_line_errors_and_leave_nothing_behind(tmp_path: Path, cache: Any, problem: Any,
                                                                 parts: list[str]) -> None:
    cache_path, problem_path = write(tmp_path / "cache.json", cache), write(tmp_path / "toy.json", problem)
    with pytest.raises(KernelTunerFileError) as err:
        kt_task(cache_path, problem_path)
    one_line(err, *parts)
    assert files.find(sha16(cache_path)) is None and files.find(sha16(problem_path)) is None


def test_t4_results_are_checked_against_the_schema(tmp_path: Path) -> None:
    problem = write(tmp_path / "toy.json", t1_problem())
    bad = write(tmp_path / "A1_T4.json", {"schema_version": "1.0.0", "results": [{"configuration": {}}]})
    with pytest.raises(KernelTunerFileError) as err:
        kt_task(bad, problem)
    one_line(err, "A1_T4.json: results[0]", "fails the T4/1.0.0/results-schema.json schema")
    assert files.find(sha16(bad)) is None


def test_a_task_from_t4_results(tmp_path: Path) -> None:
    combo = valid_configs()[0]
    result = {"timestamp": "2024-01-01 00:00:00", "configuration": dict(zip(PARAMS, combo)),
              "times": {"compilation": 900.0, "framework": 10.0, "search_algorithm": 0, "validation": 0,
                        "runtimes": [2.0, 2.0]},
              "invalidity": "correct", "correctness": 1, "measurements": [{"name": "time", "value": 2.0, "unit": ""}],
              "objectives": ["time"]}
    t4 = write(tmp_path / "A1_T4.json", {"schema_version": "1.0.0", "metadata": {"timeunit": "miliseconds"},
                                         "results": [result]})
    task = kt_task(t4, write(tmp_path / "toy.json", t1_problem()), device="A1")
    ds = kt_dataset(task, "full")
    assert task.device == "A1" and len(ds) == 1 and ds.meta["external"]["format"] == "t4"
    assert ds.costs[0] == (2e-3, 2e-3) and ds.mode == ["records"]  # one of the valid configurations


def test_missing_files_and_wrong_formats(tmp_path: Path) -> None:
    problem = write(tmp_path / "toy.json", t1_problem())
    with pytest.raises(KernelTunerFileError) as err:
        kt_task(tmp_path / "nope.json", problem)
    one_line(err, "nope.json: file: cannot be read")
    with pytest.raises(KernelTunerFileError) as err:
        kt_task(problem, problem)
    one_line(err, "toy.json: tune_params_keys: missing")


# ---------------------------------------------------------------------------- the space
def test_space_is_the_valid_configurations(task: KTTask) -> None:
    space = KnobSpace.for_task(task)
    assert isinstance(space, KTSpace) and space is KTSpace.for_task(task, "full") and not space.has_schedules
    assert [(k.name, k.kind, k.choices) for k in space.knobs] == [
        ("bx", "categorical", (1, 2, 4, 8)), ("tile", "categorical", (1, 2, 3)),
        ("mem", "nominal", ("shared", "global")), ("unroll", "nominal", (True, False))]
    valid = valid_configs()
    assert space.size == len(valid) == 30 and len(KnobSpace.for_task(task, "compact")) == space.size
    as_values = [tuple(space.to_dict(c).values()) for c in space]
    assert as_values == valid  # Cartesian order, restrictions applied
    assert all(space.index(space.config(i)) == i for i in range(space.size))
    rng = np.random.default_rng(0)
    assert all(space.is_valid(c) for c in space.sample(rng, 50) + space.sample_unique(rng, 20))
    assert sorted(space.sample_unique(rng, 40)) == sorted(space)  # only 30 exist
    for cfg in space.sample(rng, 10):
        for nb in space.neighbours(cfg):
            assert space.is_valid(nb) and sum(abs(a - b) for a, b in zip(cfg, nb)) == 1


def test_configs_outside_the_restrictions(task: KTTask) -> None:
    space = KnobSpace.for_task(task)
    bad = space.check([3, 2, 0, 0])  # bx=8, tile=3: 24 > 12
    assert not space.is_valid(bad) and space.excluded(bad) == "fails restriction 'bx * tile <= 12'"
    assert space.excluded(space.check([0, 0, 1, 1])) == "fails restriction \"mem == 'shared' or unroll\""
    assert space.excluded(space.config(0)) is None
    with pytest.raises(SpaceError, match="is not in the space: fails restriction 'bx \\* tile <= 12'"):
        space.index(bad)
    assert space.from_dict({"bx": 8, "tile": 1, "mem": "global", "unroll": True}) == (3, 0, 1, 0)
    with pytest.raises(SpaceError, match="unroll=1 is not one of its values"):
        space.from_dict({"bx": 8, "tile": 1, "mem": "global", "unroll": 1})  # 1 is not True
    with pytest.raises(SpaceError, match="has no TVM trace"):
        space.trace(space.config(0))
    with pytest.raises(SpaceError, match="has no TVM schedule"):
        space.apply(space.config(0))


def test_knob_features_handle_nominal_knobs(task: KTTask) -> None:
    from agents.models.features import KnobFeaturizer
    from tune_gym.measure.surrogate import KnobFeatures

    space = KnobSpace.for_task(task)
    featurize = KnobFeaturizer(space)
    x = featurize(np.asarray(list(space)))
    assert featurize.widths == [1, 1, 2, 2] and x.shape == (30, 6) and np.isfinite(x).all()
    assert x[:, 0].tolist() == pytest.approx([math.log2(1 + space.knobs[0].choices[c[0]]) for c in space])
    assert (x[:, 2:4].sum(axis=1) == 1).all() and (x[:, 4:6].sum(axis=1) == 1).all()  # one-hot
    rows = featurize.from_knobs([{"bx": 2, "tile": 1, "mem": "global", "unroll": False}, {"mem": "other", "unroll": 1}])
    assert rows[0].tolist() == [pytest.approx(math.log2(3)), 1.0, 0.0, 1.0, 0.0, 1.0]
    assert np.isnan(rows[1]).all()  # unknown knobs, a value of no choice, 1 is no bool: all missing
    assert np.isfinite(KnobFeatures(space)(np.asarray(list(space)))).all()


def test_negative_numbers_in_a_categorical_knob() -> None:
    from agents.models.features import knob_values

    table = knob_values("categorical", [-3, 0, 3], 1)
    assert table[:, 0].tolist() == pytest.approx([-2.0, 0.0, 2.0])


# ---------------------------------------------------------------------------- replay
def test_replay_answers_from_the_file(task: KTTask) -> None:
    env = gym.make("tune_gym/Tune-v0", task=task.uri, backend="replay", batch_size=4, budget=8,
                   disable_env_checker=True, render_mode="ansi")
    base: Any = env.unwrapped
    space = base.space
    _, info = env.reset(seed=0)
    assert info["flops_nominal"] is True and base.observation == "knobs"
    ok = space.from_dict({"bx": 4, "tile": 3, "mem": "shared", "unroll": True})
    failed = space.from_dict({"bx": 8, "tile": 1, "mem": "global", "unroll": True})
    invalid = space.from_dict({"bx": 2, "tile": 2, "mem": "global", "unroll": True})
    outside = space.check([3, 2, 0, 0])
    _, _, _, _, info = env.step(np.array([ok, failed, invalid, outside]).reshape(-1))
    results = [o.result for o in info["outcomes"]]
    assert [o.status for o in info["outcomes"]] == ["new", "new", "new", "excluded"]
    assert info["trials_used"] == 3 and info["outcomes"][3].trial is None  # outside the space: no trial
    assert results[0].costs == pytest.approx((time_ms((4, 3, "shared", True)) / 1e3,) * 3)
    assert [r.error for r in results] == [None, "build_error", "invalid", "invalid"]
    assert [r.error_msg for r in results[1:3]] == ["CompilationFailedConfig", "InvalidConfig"]
    assert results[3].error_msg == "fails restriction 'bx * tile <= 12' (outside the space: not a trial)"
    charges = [(800 + 10 * 4 + 48) / 1e3, (800 + 10 * 8 + 48) / 1e3, (800 + 10 * 2 + 48) / 1e3, 0.0]
    assert [r.build_secs + r.run_secs for r in results] == pytest.approx(charges)
    assert info["clock"] == pytest.approx(sum(charges)) and info["measure_secs"] == pytest.approx(sum(charges))
    assert info["best_secs"] == pytest.approx(time_ms((4, 3, "shared", True)) / 1e3)
    assert info["best_gflops"] == pytest.approx(1 / time_ms((4, 3, "shared", True)))  # 1 / ms: nominal
    _, _, _, _, info = env.step(np.array([ok] * 4).reshape(-1))  # a repeat is free
    assert info["clock"] == pytest.approx(sum(charges))
    times = sorted(time_ms(c) for c in valid_configs() if c not in FAILS)
    assert base.reference.gflops == pytest.approx(1 / times[(len(times) - 1) // 2])
    assert "median of the 27 configurations that ran" in base.reference.method
    shown = str(env.render())
    assert f"best {time_ms((4, 3, 'shared', True)):.4g} ms per call" in shown and "GFLOPS" not in shown
    env.close()


@pytest.mark.parametrize("autoreset", ["next_step", "same_step"])
def test_native_vector_env_equals_sync_vector_env_on_a_kt_task(task: KTTask, autoreset: str) -> None:
    """Configs outside the restrictions are excluded, configs that failed are trials that did not
    run, and the space runs out: as in N copies of Tune-v0."""
    from gymnasium.vector import AutoresetMode

    n, batch = 3, 4
    kwargs = dict(task=task, backend="replay", batch_size=batch, budget=5, max_episode_steps=6, info="lean")
    native = gym.make_vec("tune_gym/Tune-v0", num_envs=n, autoreset_mode=autoreset, **kwargs)
    sync = gym.make_vec("tune_gym/Tune-v0", num_envs=n, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": AutoresetMode[autoreset.upper()]}, **kwargs)
    space = native.unwrapped.env.space
    pool = np.array([*space.sample(np.random.default_rng(0), 6), space.check([3, 2, 0, 0]),
                     space.from_dict({"bx": 8, "tile": 1, "mem": "global", "unroll": True})])
    rng = np.random.default_rng(1)

    def same(a: Any, b: Any) -> None:
        if isinstance(a, (tuple, dict)):
            keys = range(len(a)) if isinstance(a, tuple) else sorted(a)
            assert (len(a) == len(b)) if isinstance(a, tuple) else set(a) == set(b)
            for key in keys:
                same(a[key], b[key])
        elif isinstance(a, np.ndarray) and a.dtype == object:
            for x, y in zip(a, b):
                same(x, y) if x is not None else None
        else:
            np.testing.assert_allclose(a, b, rtol=1e-12)

    same(native.reset(seed=0), sync.reset(seed=0))
    statuses = set()
    for _ in range(20):
        actions = pool[rng.integers(0, len(pool), size=(n, batch))].reshape(n, -1)
        got = native.step(actions)
        same(got, sync.step(actions))
        for info in (got[4], got[4].get("final_info", {})):  # same_step: an ending step's info is final_info
            statuses |= set(info.get("status", np.zeros(0)).ravel().tolist())
    assert {0, 1, 2, 3} <= statuses  # new, repeat, excluded and skipped rows all happened
    native.close()
    sync.close()


def test_the_space_is_done_when_every_valid_config_is_a_trial(task: KTTask) -> None:
    env = gym.make("tune_gym/Tune-v0", task=task, backend="replay", batch_size=30, budget=40,
                   disable_env_checker=True)
    base: Any = env.unwrapped
    space = base.space
    env.reset(seed=0)
    valid, outside = list(space), space.check([3, 2, 0, 0])
    _, _, terminated, _, info = env.step(np.array([outside, *valid[:29]]).reshape(-1))
    assert info["trials_used"] == 29 and not terminated  # 29 of the 30 configs; the outside one is no trial
    _, _, terminated, truncated, info = env.step(np.array([valid[29]] * 30).reshape(-1))
    assert info["trials_used"] == 30 and terminated and not truncated
    env.close()


def test_dataset_keeps_device_file_and_checksum(hub: Path, task: KTTask) -> None:
    ds = kt_dataset(task, "full")
    cache = hub / "cachefiles" / "toy_conv" / "A1.json.gz"
    meta = ds.meta["external"]
    assert (meta["device"], meta["device_label"], meta["file"], meta["sha256"]) == (
        "Toy GPU A1", "A1", "A1.json.gz", hashlib.sha256(cache.read_bytes()).hexdigest())
    assert meta["problem_file"] == "toy_conv.json" and meta["flops_nominal"] and "zenodo" in meta["doi"]
    assert meta["counts"] == {"ok": 27, "build_error": 1, "run_error": 1, "invalid": 1}
    assert len(ds) == 30 and ds.exhaustive and set(ds.mode) == {"exhaustive"} and ds.hosts == ["A1"]
    assert ds.source == str(cache) and ds.flops == NOMINAL_FLOPS
    backend: Any = make_backend("replay")
    assert backend.covers(task, KnobSpace.for_task(task)) and backend.sources == [str(cache)]


def test_surrogate_backend_serves_a_kt_task(task: KTTask) -> None:
    space = KnobSpace.for_task(task)
    backend = make_backend("surrogate", seed=0)
    out = backend.measure(task, space, list(space)[:5])
    assert len(out) == 5 and all(r.flops == NOMINAL_FLOPS for r in out)


def test_listings_show_times_not_nominal_gflops(hub: Path, task: KTTask, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from agents.driver import print_summary, tune
    from tune_gym.cli import main

    files.add_data_dir(hub)
    assert main(["tasks", "--suite", "external"]) == 0
    listing = capsys.readouterr().out
    assert f"external:0   x1         - GFLOP  {task.uri}" in listing
    log = tmp_path / "kt.jsonl"
    summary = tune(task, "random", trials=6, batch=3, log=log, backend="replay", progress=False)
    best = summary.run.best
    assert best is not None and summary.reference_method.startswith("the median of the 27 configurations")
    print_summary(summary)
    assert main(["best", str(log)]) == 0
    out = capsys.readouterr().out
    assert f"best tuned kernel  {best.result.mean * 1e3:.4g} ms per call" in out
    assert f"{best.result.mean * 1e3:.4g} ms per call  (6 records" in out
    assert re.search(r"[0-9] *GFLOPS", out) is None  # no number shown as a throughput


# ---------------------------------------------------------------------------- the suite
def test_external_suite_lists_every_pair_on_the_search_path(hub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(get_suite("external")) == 0 and "none found" in get_suite("external").description
    write(hub / "kernels" / "other.json", t1_problem(kernel="another_kernel"))  # pairs with no cache
    write(hub / "notes.json", {"hello": "world"})  # some other JSON
    write(hub / "cachefiles" / "toy_conv" / "copy" / "A1.json.gz", kt_cache("Toy GPU A1"), gz=True)  # same bytes
    monkeypatch.setenv("TUNE_GYM_DATA", str(hub))
    from tune_gym.tasks.suites import clear_kind_suites

    clear_kind_suites()
    suite = get_suite("external")
    tasks = kt_tasks(suite)
    assert [t.device for t in tasks] == ["A1", "B2"] and suite.task_ids == (0, 1)
    assert [t.weight for t in suite.tasks] == [1, 1] and "2 found in" in suite.description
    assert Task.parse("external:1") == tasks[1] and tasks[1].data_file.name == "B2.json"
    assert "external" in kinds.suite_names() and kinds.owner_of_suite("external") is kinds.get_kind("kt")


def test_suite_leaves_out_an_unreadable_problem_with_a_warning(hub: Path) -> None:
    write(hub / "kernels" / "toy_conv.json", t1_problem(restrictions=["bx ** "]))
    files.add_data_dir(hub)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        suite = get_suite("external")
    assert len(suite) == 0 and len(caught) == 2
    assert "ConfigurationSpace.Conditions[0]" in str(caught[0].message)


def test_add_data_dir_refuses_a_file(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="is not a directory"):
        files.add_data_dir(write(tmp_path / "x.json", {}))


# ---------------------------------------------------------------------------- agents
_SA = {"sa_points": 16, "sa_steps": 10}
#: Small settings under which an agent's second batch already comes from its model (its cost
#: model reads the knob features of the nominal knobs).
_SMALL: dict[str, dict[str, Any]] = {
    "batch-bo": {"plan_size": 4, "n_init": 4, "encoding": "knob", "pool_size": 64, "mc_samples": 16, **_SA},
    "contextual-sa": {"plan_size": 4, "n_init": 4, **_SA},
    "ga": {"pop_size": 4, "elite_num": 1},
    "presample": {"plan_size": 4, "presample_limit": 16, "n_parallel": 8, "n_valid": 2, "n_init": 4, **_SA},
    "rl-ppo": {"plan_size": 4, "n_init": 4, "n_starts": 2, "max_steps": 4},
    "xgb-sa": {"plan_size": 4, "n_init": 4, **_SA},
    "xgb-sa-transfer": {"plan_size": 4, "n_init": 4, **_SA},
}


def _agents() -> list[str]:
    from agents.base import list_agents

    return sorted(a for a in list_agents() if not a.startswith("test-"))  # other tests register test-* agents


def test_the_small_settings_cover_every_model_agent() -> None:
    from agents.base import make_agent

    knobs_only = {a for a in _agents() if not make_agent(a).needs_schedules}
    assert knobs_only - set(_SMALL) == {"grid", "random"}  # no model, no settings


@pytest.mark.parametrize("agent_id", _agents())
def test_every_knobs_only_agent_tunes_a_kt_task(task: KTTask, agent_id: str) -> None:
    from agents.base import EnvRunner, NotApplicable, make_agent

    agent = make_agent(agent_id, **_SMALL.get(agent_id, {}))
    space = KnobSpace.for_task(task)
    if agent.needs_schedules:
        with pytest.raises(NotApplicable, match=f"^agent {agent_id} needs TVM schedules; configs of target kt"):
            agent.reset(space, task, seed=0)
        return
    env = gym.make("tune_gym/Tune-v0", task=task, backend="replay", batch_size=4, budget=8,
                   disable_env_checker=True)
    runner = EnvRunner(agent, env, seed=0)
    runner.start()
    first, second = runner.step(), runner.step()
    env.close()
    new = first + second
    assert len(first) == 4 and 1 <= len(second) <= 4 and all(t.result.flops == NOMINAL_FLOPS for t in new)
    assert getattr(agent, "fitted", True)  # a model-guided agent planned its second batch with its model
    assert all(t.ok or t.result.error in ("build_error", "run_error", "invalid") for t in new)


# ---------------------------------------------------------------------------- the Benchmark Hub's files
@pytest.mark.slow
@pytest.mark.skipif(not HUB.is_dir(), reason="the Benchmark Hub's files are not in ../shared/external")
def test_benchmark_hub_spaces() -> None:
    """What the Hub's README states: 12 spaces; convolution 4,362 valid configurations of 10,240, of
    which 3,889 to 4,362 ran; dedispersion 11,130 of 22,272, all of which ran; every file complete."""
    files.add_data_dir(HUB)
    tasks = kt_tasks(get_suite("external"))
    assert len(tasks) == 12 and {t.kernel for t in tasks} == {"convolution_milo", "dedispersion_milo"}
    for task in tasks:
        space = KTSpace.for_task(task)
        ds = kt_dataset(task, "full")
        conv = task.kernel == "convolution_milo"
        assert (space.size, space.params.cartesian_size) == ((4362, 10240) if conv else (11130, 22272))
        assert len(ds) == space.size and ds.exhaustive
        ran = int(ds.ok.sum())
        assert 3889 <= ran <= 4362 if conv else ran == 11130
        assert ds.best_gflops == pytest.approx(1e-3 / float(ds.mean_cost.min()))  # nominal: 1 / ms


def test_an_agent_proposing_only_configs_outside_the_space_ends(task: KTTask) -> None:
    """Excluded configs are no trials (as Kernel Tuner counts): an agent that proposes nothing
    else adds no trial, sees each as an invalid failure, and the run ends after MAX_IDLE_STEPS."""
    from agents.base import MAX_IDLE_STEPS, Agent, run

    class Outside(Agent):
        name = "outside"

        def __init__(self) -> None:
            self.errors: list[Any] = []

        def propose(self, n: int) -> list[Any]:
            return [self.space.check([3, 2, 0, 0])] * n

        def observe(self, configs: Any, results: Any) -> None:
            self.errors.extend(r.error for r in results)

    env = gym.make("tune_gym/Tune-v0", task=task.uri, backend="replay", batch_size=2, budget=8,
                   disable_env_checker=True)
    agent = Outside()
    result = run(agent, env, seed=0)
    assert result.trials == [] and env.unwrapped.session.clock == 0.0
    assert agent.errors == ["invalid"] * (2 * MAX_IDLE_STEPS)  # two per step
    env.close()
