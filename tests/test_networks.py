"""Whole networks: PrimFunc tasks, import and kernel extraction, the task scheduler, compiling
with tuned records (tune_gym.tasks.prim_func, tune_gym.networks, agents.network)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from tune_gym.errors import TaskError
from tune_gym.measure import Backend
from tune_gym.tasks import Task
from tune_gym.tasks import prim_func as pf


@pytest.fixture()
def store(tmp_path, monkeypatch):
    """A private user store: nothing written by other tests or sessions is found."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "benchmarks").mkdir()
    monkeypatch.setenv("TUNE_GYM_BENCHMARKS", str(tmp_path / "benchmarks"))  # an empty repository store
    monkeypatch.setattr(pf, "_registered", {})
    return tmp_path / "cache" / "tune_gym" / "tir"


def _scale_func(rows: int = 8):
    from tvm import te

    a = te.placeholder((rows, 16), name="A")
    b = te.compute((rows, 16), lambda i, j: a[i, j] * 2.0, name="B")
    return te.create_prim_func([a, b])


def test_prim_func_task_uri_round_trip_and_store(store):
    task = pf.register(_scale_func(), "scale", "llvm&cores=1")
    assert task.uri == f"tir://scale/{task.digest}?target=llvm&cores=1"
    assert (store / f"{task.digest}.json").is_file()
    assert Task.parse(task.uri) == task and Task.from_uri(task.uri) == task
    assert task.op == "prim_func" and task.weights == "given" and task.dtype == "float32"
    assert task.input_shapes == [(8, 16)] and task.output_shape() == (8, 16) and task.input_dtypes == ["float32"]
    assert task.flops == 128
    assert pf.digest_of(_scale_func()) == task.digest  # content-addressed: same function, same digest
    assert pf.digest_of(_scale_func(4)) != task.digest
    pf._registered.clear()  # another process: found through the store file
    again = Task.parse(task.uri)
    assert again == task and again.ir_module()["main"] is not None
    assert task.with_target("cuda").target.kind == "cuda"


def test_prim_func_task_errors(store):
    task = pf.register(_scale_func(), "scale")
    with pytest.raises(TaskError, match="unknown PrimFunc 0123456789abcdef.*TUNE_GYM_TIR"):
        Task.parse("tir://scale/0123456789abcdef?target=llvm")
    with pytest.raises(TaskError, match="malformed PrimFunc task URI"):
        Task.parse("tir://scale/xyz?target=llvm")
    with pytest.raises(TaskError, match="weights='packed' is not this kernel's layout; accepted: given"):
        task.with_weights("packed")
    with pytest.raises(TaskError, match="target vta is not supported"):
        task.with_target("vta")
    with pytest.raises(TaskError, match="no op builder"):
        _ = task.opdef
    (store / "badbadbadbadbad0.json").write_text("{not json")
    with pytest.raises(TaskError, match="not a PrimFunc task file"):
        Task.parse("tir://x/badbadbadbadbad0?target=llvm")


@pytest.mark.heavy
def test_prim_func_task_measures_live_and_checks_against_tvm(store):
    from tune_gym.measure.live import LiveBackend
    from tune_gym.space import KnobSpace

    task = pf.register(_scale_func(64), "scale", "llvm&cores=1")
    space = KnobSpace.for_task(task, "full")
    configs = space.sample_unique(np.random.default_rng(0), 3)
    with LiveBackend(repeat=1, number=2, build_workers=1) as backend:
        results = backend.measure(task, space, configs)
    assert all(r.ok for r in results), [r.error_msg for r in results]


@pytest.fixture(scope="module")
def tiny():
    from tune_gym.networks import import_network

    return import_network("tiny", "llvm&cores=1")


def test_tiny_import_kernels_and_anchors(tiny):
    names = [t.task.name for t in tiny.tasks]
    assert len(names) == len(set(t.task.digest for t in tiny.tasks)) == 8
    convs = sorted(t.anchor.uri for t in tiny.tasks if t.anchor is not None and t.anchor.op == "conv2d_nchw")
    assert convs == sorted([
        "op://conv2d_nchw-v1/n1_c3_h32_w32_k16_r3_s1_p1_d1?target=llvm&cores=1",
        "op://conv2d_nchw-v1/n1_c16_h32_w32_k16_r3_s1_p1_d1?target=llvm&cores=1",
        "op://conv2d_nchw-v1/n1_c16_h32_w32_k16_r3_s1_p1_d1?target=llvm&cores=1",  # two kernels, one shape
        "op://conv2d_nchw-v1/n1_c16_h16_w16_k32_r1_s1_p0_d1?target=llvm&cores=1",
    ])
    ops = {t.anchor.op for t in tiny.tasks if t.anchor is not None}
    assert ops == {"conv2d_nchw", "depthwise_conv2d_nchw", "dense"}
    assert sum(not t.tunable for t in tiny.tasks) == 1  # the reshape: one config
    assert all(t.weight == 1 for t in tiny.tasks)


def test_kernel_uris_are_stable_across_imports(tiny):
    from tune_gym.networks import import_network

    again = import_network("tiny", "llvm&cores=1")
    assert [t.task.uri for t in again.tasks] == [t.task.uri for t in tiny.tasks]
    other = import_network("tiny", "llvm&cores=1", seed=1)  # other weights: the same kernels
    assert {t.task.digest for t in other.tasks} == {t.task.digest for t in tiny.tasks}


def _fake(weight: int, trials: int, latency: float, done: bool = False, history=()):
    task = SimpleNamespace(weight=weight)
    runner = SimpleNamespace(done=done)
    return SimpleNamespace(task=task, runner=runner, trials=trials, best_latency=latency, history=list(history))


def test_gradient_scheduler_choices():
    from agents.network import _pick

    inf = float("inf")
    # a task that never ran goes first
    assert _pick([_fake(1, 8, 1e-3), _fake(1, 0, inf)], "gradient", 0) == 1
    # then the largest weight * latency / trials (forward term; no history yet)
    assert _pick([_fake(1, 8, 1e-3), _fake(3, 8, 1e-3), _fake(1, 8, 2e-3)], "gradient", 0) == 1
    assert _pick([_fake(1, 8, 1e-3, done=True), _fake(1, 16, 1e-3)], "gradient", 0) == 1
    # a task still improving fast gains the backward term
    hist = [(8, 4e-3), (16, 3e-3), (24, 2e-3), (32, 1e-3)]
    assert _pick([_fake(1, 32, 1e-3, history=hist), _fake(1, 32, 1.1e-3, history=[(32, 1.1e-3)] * 4)],
                 "gradient", 0) == 0
    assert _pick([_fake(1, 8, 1e-3, done=True)], "gradient", 0) is None
    # round robin: in turn from `turn`
    tasks = [_fake(1, 8, 1e-3), _fake(1, 8, 1e-3), _fake(1, 8, 1e-3)]
    assert [_pick(tasks, "round-robin", t) for t in (0, 1, 2, 3)] == [0, 1, 2, 0]


@pytest.mark.heavy
def test_tune_tiny_network_resume_compile_and_check(tiny, tmp_path):
    from agents.network import tune_network

    out = tmp_path / "run"
    first = tune_network(tiny, agent="random", trials=20, batch=4, scheduler="round-robin", out_dir=out,
                         progress=False, backend_options={"repeat": 1, "number": 2})
    assert sum(p.trials for p in first.tasks) == 20
    assert len(first.tasks) == 7  # the reshape is not tuned
    assert [p.trials for p in first.tasks] == [4, 4, 4, 4, 4, 0, 0]  # round robin, one batch each
    records = first.records()
    assert len(records) == 20 and len({(r.task, r.config) for r in records}) == 20
    # resumed with a bigger budget: the 20 records are reused, only 12 new configs are measured
    second = tune_network(tiny, agent="random", trials=32, batch=4, scheduler="round-robin", out_dir=out,
                          resume=True, progress=False, backend_options={"repeat": 1, "number": 2})
    assert sum(p.trials for p in second.tasks) == 32 and len(second.records()) == 32
    db = second.database()
    tuned = {p.task.task.name for p in second.tasks if p.trials}
    assert set(tiny.applied(db)) == tuned
    from tune_gym.records import best_records

    best = {Task.from_uri(uri).name: rec.result.mean for uri, rec in best_records(second.records()).items()}
    seconds = tiny.tuned_seconds(db)  # what the tuner timed each kernel's best config at
    assert set(seconds) == tuned and seconds == pytest.approx({k: best[k] for k in tuned})
    outputs, expected = tiny.run(tiny.compile(db)), tiny.torch_outputs()
    assert len(outputs) == len(expected) == 1
    np.testing.assert_allclose(outputs[0], expected[0], rtol=1e-4, atol=1e-5)
    summary = json.loads(json.dumps([r.to_json() for r in records[:1]]))  # records stay JSON
    assert summary[0]["task"].startswith("tir://")


def test_network_e2e_sums_what_kernels_lose_inside_the_network():
    from benchmarks import network_e2e as e2e

    row = {"tuned_s": {"a": 1e-3, "b": 2e-3, "c": 1e-4}, "in_network_s": {"a": 1.5e-3, "b": 2e-3, "c": 4e-4, "vm": 1.0}}
    n, tuned, inside, ratio = e2e.kernel_losses(row)  # c (0.4 ms inside) is under the cut; vm was never tuned
    assert (n, tuned, inside) == (2, pytest.approx(3e-3), pytest.approx(3.5e-3))
    assert ratio == pytest.approx([1.25, 1.0, 1.5])
    assert e2e.kernel_losses({"tuned_s": {"c": 1e-4}, "in_network_s": {"c": 4e-4}}) == (0, 0.0, 0.0, None)
    lat = {"median": 0.01, "x_torch": [1.0, 1.0, 1.0], "x_tune_relax": [1.0, 1.0, 1.0]}
    doc = {"network": "n", "target": "llvm", "budget": 8, "batch": 4, "kernels": 3, "tunable": 3, "host": "h",
           "host_fingerprint": {"cpu": "c", "llvm_cpu": "l"}, "date": "d", "rounds": 2,
           "rows": {"PyTorch eager": lat, "MetaSchedule tune_relax": {**lat, **row}}}
    text = e2e.markdown(doc)
    assert "| MetaSchedule tune_relax | 2 | 3.00 | 3.50 | 1.25x [1.00, 1.50] |" in text
    del doc["rows"]["MetaSchedule tune_relax"]["tuned_s"]  # a file written before tuned_s: no second table
    assert "in network / tuned" not in e2e.markdown(doc)


@pytest.mark.heavy
def test_time_rounds_takes_builds_in_turn_and_pairs_ratios_by_round(tiny):
    from tune_gym.networks.timing import Latency, paired_ratio, time_rounds

    build = tiny.default_build()
    lat = time_rounds({"PyTorch eager": None, "a": build, "b": build}, tiny.inputs, threads=1, rounds=2, repeats=1,
                      min_seconds=0.01, torch_model="tiny")
    assert list(lat) == ["PyTorch eager", "a", "b"]
    for name, x in lat.items():
        assert len(x.samples) == 2 and all(v > 0 for v in x.samples)  # one value per round
        assert x.median == float(np.median(x.samples))
        assert ("torch" in x.method) == (name == "PyTorch eager") and "2 rounds" in x.method
    med, lo, hi = paired_ratio(lat["a"], lat["b"])
    ratios = [b / a for a, b in zip(lat["a"].samples, lat["b"].samples)]
    assert (lo, hi) == (min(ratios), max(ratios)) and lo <= med <= hi
    with pytest.raises(ValueError, match="same rounds"):
        paired_ratio(lat["a"], Latency(1.0, (1.0,), "one round"))
    with pytest.raises(ValueError, match="rounds"):
        time_rounds({"a": build}, tiny.inputs, threads=1, rounds=0)
    with pytest.raises(ValueError, match="'PyTorch eager' is None"):
        time_rounds({"PyTorch eager": None}, tiny.inputs, threads=1)  # no torch_model to time


@pytest.mark.heavy
def test_profile_times_each_kernel_inside_the_network(tiny):
    from tune_gym.networks.timing import profile_executable

    seconds = profile_executable(tiny.default_build(), tiny.inputs, threads=1, calls=3)
    kernels = {t.task.name for t in tiny.tasks if t.tunable}  # the reshape runs as the VM's builtin
    assert kernels <= set(seconds)  # every kernel of the network ran, under its own name
    assert all(v > 0 for v in seconds.values()) and list(seconds.values()) == sorted(seconds.values(), reverse=True)
    with pytest.raises(ValueError, match="calls must be >= 1"):
        profile_executable(tiny.default_build(), tiny.inputs, threads=1, calls=0)


def test_tune_network_rejects_bad_arguments(tiny):
    from agents.network import tune_network

    with pytest.raises(ValueError, match="unknown scheduler 'fifo'"):
        tune_network(tiny, scheduler="fifo")
    with pytest.raises(ValueError, match="resume=True needs out_dir"):
        tune_network(tiny, resume=True)
    with pytest.raises(ValueError, match="agent 'random' cannot train on other kernels' measurements"):
        tune_network(tiny, agent="random", shared_model=True)
    with pytest.raises(ValueError, match=r"transfer \(5\) must be in \[0, batch\] = \[0, 4\]"):
        tune_network(tiny, batch=4, transfer=5)


def test_transfer_maps_configs_by_knob_name_keeping_the_inner_factors():
    from agents.transfer import compatible, map_config
    from tune_gym.space import KnobSpace

    a = KnobSpace.for_task(Task.from_uri("op://conv2d_nchw-v1/n1_c16_h32_w32_k16_r3_s1_p1_d1?target=llvm"))
    b = KnobSpace.for_task(Task.from_uri("op://conv2d_nchw-v1/n1_c64_h14_w14_k96_r3_s1_p1_d1?target=llvm"))
    dense = KnobSpace.for_task(Task.from_uri("op://dense-v1/m32_n32_k32?weights=given&target=llvm"))
    assert compatible(a, b) and compatible(b, a) and not compatible(a, dense)
    rng = np.random.default_rng(0)
    for config in a.sample(rng, 20):  # a space's own configs map onto themselves
        assert map_config(a.to_dict(config), a) == config
    values = {"tile_f": (2, 1, 1, 8), "tile_x": (1, 2, 2, 8), "unroll_explicit": 60, "nothing": 3}
    mapped = b.to_dict(map_config(values, b))
    # 96 = 12 * 8 keeps the innermost 8 of tile_f; 14 has no factor 8: tile_x's inner part is the nearest, 7
    assert mapped["tile_f"][-1] == 8 and np.prod(mapped["tile_f"]) == 96
    assert mapped["tile_x"][-1] == 7 and np.prod(mapped["tile_x"]) == 14
    assert mapped["unroll_explicit"] == 64  # the nearest step in log scale
    assert map_config({}, b) == b.canonical([0] * b.n_knobs)


def test_tune_network_carries_peers_best_configs(tiny):
    """transfer=2: a kernel's batch starts with its peers' best configs (same split knobs),
    mapped, fastest peer first; they count against the budget and the agent learns from them."""
    from agents.network import tune_network
    from agents.transfer import compatible, peer_configs

    n = len([t for t in tiny.tasks if t.tunable])
    result = tune_network(tiny, agent="random", trials=4 * n, batch=4, scheduler="round-robin", transfer=2,
                          progress=False, backend_options={"repeat": 1, "number": 2})
    assert [p.trials for p in result.tasks] == [4] * n  # one batch each
    carried = 0
    for j, p in enumerate(result.tasks):
        space = p.runner.base.space
        before = [(q.runner.base.space, q.best_trial.config, q.best_trial.result.gflops)
                  for q in result.tasks[:j] if q.best_trial.result.ok]
        expected = peer_configs(space, before, n=2)
        assert [t.config for t in p.runner.result.trials[:len(expected)]] == expected
        assert p.carried == set(expected)
        assert set(p.carried) <= set(p.runner.agent.seen)  # the agent observed them
        if any(compatible(space, s) for s, _, _ in before):
            assert expected
        carried += len(expected)
    assert carried >= 4  # the tiny network's five convolutions share their knobs


class _Reversing(Backend):
    """A host whose second look reverses the first: a config's first measurement grows with a
    hash of it, every later one shrinks with it. Counts what it measures."""

    name = "reversing"

    def __init__(self):
        from collections import Counter

        self.calls: list[list[tuple[int, ...]]] = []
        self.times: Counter = Counter()

    def measure(self, task, space, configs):
        import hashlib

        from tune_gym.measure.result import MeasureResult

        self.calls.append(list(configs))
        out = []
        for c in configs:
            u = int(hashlib.sha256(repr((task.uri, c)).encode()).hexdigest()[:8], 16) / 2**32
            first = self.times[(task.uri, c)] == 0
            self.times[(task.uri, c)] += 1
            out.append(MeasureResult(costs=(1e-3 * (1 + u) if first else 1e-3 * (2 - u),), flops=task.flops))
        return out


def test_tune_network_confirm_remeasures_the_fastest_and_picks_from_that(tiny, tmp_path):
    """confirm=3: after the budget, each kernel's 3 fastest configs are measured again in one
    batch; the fastest of that is the pick the estimate adds up and the database exports; a
    resumed run re-uses the kept re-measurement."""
    from agents.network import tune_network

    n = len([t for t in tiny.tasks if t.tunable])
    backend = _Reversing()
    result = tune_network(tiny, agent="random", trials=8 * n, batch=4, scheduler="round-robin", confirm=3,
                          backend=backend, out_dir=tmp_path, progress=False)
    assert sum(p.trials for p in result.tasks) == 8 * n  # re-measurements are not trials
    tops = [p.fastest(3) for p in result.tasks]
    assert backend.calls[-n:] == tops  # one batch per kernel, after the budget
    for p, top in zip(result.tasks, tops):
        assert len(top) == 3 and list(p.confirmed) == top
        assert p.best_trial.config == top[0] and p.pick[0] == top[-1]  # the second look reversed the order
    assert result.estimated_latency == pytest.approx(sum(p.task.weight * p.confirmed[p.pick[0]].mean
                                                         for p in result.tasks))
    db = result.database()
    assert tiny.tuned_seconds(db) == pytest.approx({p.task.task.name: p.pick_latency for p in result.tasks})
    assert sorted(f.name for f in (tmp_path / "confirm").iterdir()) == sorted(
        f"{p.task.task.digest}.jsonl" for p in result.tasks)
    again = _Reversing()
    resumed = tune_network(tiny, agent="random", trials=8 * n, batch=4, scheduler="round-robin", confirm=3,
                           backend=again, out_dir=tmp_path, resume=True, progress=False)
    assert again.calls == [] and resumed.estimated_latency == pytest.approx(result.estimated_latency)
    with pytest.raises(ValueError, match=r"confirm \(-1\) must be >= 0"):
        tune_network(tiny, confirm=-1)


@pytest.mark.slow
def test_resnet18_kernels_map_onto_its_suite():
    from tune_gym.networks import import_network, suite_mapping

    net = import_network("resnet18")
    rows = suite_mapping(net)
    assert len(rows) == 12
    assert all(r["network"] == r["suite"] and r["suite_index"] is not None for r in rows), rows


@pytest.mark.slow
def test_network_cli_on_tiny(tmp_path, capsys):
    from tune_gym.cli import main

    out = tmp_path / "cli"
    assert main(["network", "tiny", "--agent", "random", "--trials", "16", "--batch", "4", "--target",
                 "llvm&cores=1", "--out", str(out), "--quiet", "--compare", "torch,default",
                 "--timing-repeats", "2"]) == 0
    report = json.loads((out / "summary.json").read_text())
    assert set(report["latency"]) == {"tune_gym random", "TVM default build", "PyTorch eager"}
    assert report["max_rel_error_vs_torch"] < 1e-4
    assert "end to end" in capsys.readouterr().out


@pytest.mark.slow
def test_network_track_on_tiny(tiny, tmp_path):
    """Kernel datasets collected live, then the track on the surrogate: one line per run, resumed."""
    from benchmarks import network_track
    from tune_gym.datasets.collect import collect, parse_plan
    from tune_gym.measure.live import LiveBackend

    data = tmp_path / "data"
    with LiveBackend(repeat=1, number=2) as backend:
        for t in tiny.tasks:
            if t.tunable:
                collect(t.task, "full", data / f"tir_{t.task.digest}_full.parquet", [parse_plan("random:16")],
                        backend=backend, progress=False)
    out = tmp_path / "track"
    args = ["--network", "tiny", "--data", str(data), "--agents", "random", "ga", "--seeds", "2", "--trials", "64",
            "--out", str(out)]
    assert network_track.main(args) == 0
    rows = [json.loads(line) for line in (out / "tiny.jsonl").read_text().splitlines()]
    assert [(r["agent"], r["seed"]) for r in rows] == [("random", 0), ("random", 1), ("ga", 0), ("ga", 1)]
    assert all(r["trials"] == 64 and np.isfinite(r["latency_ms"]) for r in rows)
    assert network_track.main(args) == 0  # resumed: nothing new
    assert len((out / "tiny.jsonl").read_text().splitlines()) == 4
    assert "| 1 |" in (out / "tiny.md").read_text()
    # configs carried across kernels: its own entry, ranked next to the plain runs
    assert network_track.main(["--network", "tiny", "--data", str(data), "--agents", "random", "--seeds", "1",
                               "--trials", "64", "--transfer", "2", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "tiny.jsonl").read_text().splitlines()]
    assert [(network_track.row_entry(r), r["seed"]) for r in rows[4:]] == [("random --transfer 2", 0)]
    assert rows[4]["transfer"] == 2 and rows[4]["trials"] == 64 and rows[4]["carried"] > 0  # tiny's convs are peers
    table = (out / "tiny.md").read_text()
    assert all(f"| {name} |" in table for name in ("random", "ga", "random --transfer 2"))
    assert all(r["true_latency_ms"] > 0 and r["drift"] == 0 for r in rows)
    assert "| rank | agent | seeds | latency ms | true ms |" in table
    # a drifting host: its own file, runs scored by the true latency of their picks
    assert network_track.main(["--network", "tiny", "--data", str(data), "--agents", "random", "--seeds", "1",
                               "--trials", "64", "--drift", "0.5", "--out", str(out)]) == 0
    [row] = [json.loads(line) for line in (out / "tiny-drift0.5.jsonl").read_text().splitlines()]
    assert row["drift"] == 0.5 and np.isfinite(row["true_latency_ms"]) and row["true_latency_ms"] != row["latency_ms"]
    assert "| rank | agent | seeds | true ms | measured ms |" in (out / "tiny-drift0.5.md").read_text()
    with pytest.raises(SystemExit):
        network_track.main(["--network", "tiny", "--data", str(data), "--drift", "3", "--out", str(out)])


@pytest.mark.heavy
def test_packed_weights_network_tunes_compiles_and_matches_torch(tmp_path):
    """weights=packed: kernels marked layout_free_buffers, timed on pre-packed weights, and the
    network compiled with the packing folded into its constants."""
    from agents.network import tune_network
    from tune_gym.networks import import_network

    net = import_network("tiny", "llvm&cores=1", weights="packed")
    convs = [t.task for t in net.tasks if t.anchor is not None]
    assert convs and all(t.weights == "packed" and t.packed for t in convs)
    assert Task.parse(convs[0].uri) == convs[0]
    with pytest.raises(TaskError, match="not this kernel's layout"):
        convs[0].with_weights("given")
    result = tune_network(net, agent="random", trials=14, batch=2, out_dir=tmp_path, progress=False,
                          backend_options={"repeat": 1, "number": 2})
    assert all(t.result.ok for p in result.tasks for t in p.runner.result.trials)  # checked against TVM's build
    db = result.database()
    assert len(net.applied(db)) == 7
    outputs, expected = net.run(net.compile(db)), net.torch_outputs()
    np.testing.assert_allclose(outputs[0], expected[0], rtol=1e-4, atol=1e-5)


@pytest.mark.heavy
def test_blocked_layout_network_tunes_compiles_and_matches_torch(tmp_path):
    """layout=NCHW<n>c: the convolutions whose channels the block divides compute in the blocked
    layout (TOPI's conv2d_NCHWc), the others stay NCHW, and the tuned network matches PyTorch."""
    from agents.network import tune_network
    from tune_gym.networks import import_network

    net = import_network("tiny", "llvm&cores=1", layout="NCHW8c")
    names = [t.task.name for t in net.tasks]
    assert net.layout == "NCHW8c" and sum("conv2d_NCHWc" in n for n in names) == 3
    assert any(n.startswith("fused_conv2d_subtract") for n in names)  # the 3-channel stem stays NCHW
    result = tune_network(net, agent="random", trials=16, batch=2, out_dir=tmp_path, progress=False,
                          backend_options={"repeat": 1, "number": 2})
    assert all(t.result.ok for p in result.tasks for t in p.runner.result.trials)
    db = result.database()
    assert any("conv2d_NCHWc" in name for name in net.applied(db))
    np.testing.assert_allclose(net.run(net.compile(db))[0], net.torch_outputs()[0], rtol=1e-4, atol=1e-5)
    for bad in ("NHWC", "NCHW0c", "NCHWc"):
        with pytest.raises(TaskError, match=rf"layout='{bad}'; accepted: NCHW, or NCHW<n>c"):
            import_network("tiny", "llvm&cores=1", layout=bad)
    with pytest.raises(TaskError, match="needs an llvm target"):
        import_network("tiny", "cuda", layout="NCHW8c")
