"""TuningSession: the one owner of dedupe, budget, cache, records and clock (on replay data)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tune_gym.envs.knob_walk import KnobWalkEnv
from tune_gym.measure.base import Backend
from tune_gym.measure.reference import Reference
from tune_gym.measure.replay import ReplayBackend
from tune_gym.records import load_records, recorded_reference
from tune_gym.session import TuningSession
from tune_gym.space import KnobSpace

DATA = Path(__file__).parent / "data" / "tiny_compact.jsonl"


class CountingBackend(Backend):
    """Replay that counts what it is asked to measure."""

    name = "counting-replay"

    def __init__(self) -> None:
        self.inner = ReplayBackend(DATA)
        self.calls: list[list[tuple[int, ...]]] = []

    def measure(self, task, space, configs):
        self.calls.append(list(configs))
        return self.inner.measure(task, space, configs)

    def close(self) -> None:
        pass


@pytest.fixture()
def backend():
    return CountingBackend()


def test_dedupe_budget_and_clock(dense_task, dense_space, backend):
    session = TuningSession(dense_task, dense_space, backend, budget=5)
    configs = dense_space.sample_unique(np.random.default_rng(0), 8)
    ev = session.evaluate([configs[0], configs[1], configs[0]])
    assert [o.status for o in ev.outcomes] == ["new", "new", "repeat"]
    assert ev.outcomes[2].trial is ev.outcomes[0].trial and ev.measured == 2
    assert backend.calls == [[configs[0], configs[1]]]  # one call, duplicates removed
    ev = session.evaluate(configs[:6])  # two repeats, three new, one beyond the budget
    assert [o.status for o in ev.outcomes] == ["repeat", "repeat", "new", "new", "new", "skipped"]
    assert ev.outcomes[-1].trial is None and session.exhausted and session.budget_left == 0
    assert [t.index for t in session.trials] == [1, 2, 3, 4, 5]
    costs = np.cumsum([t.cost for t in session.trials])
    np.testing.assert_allclose([t.clock for t in session.trials], costs)
    assert session.clock == pytest.approx(costs[-1]) and ev.cost == pytest.approx(costs[-1] - costs[1])
    best = max(session.trials, key=lambda t: t.gflops)
    assert session.best == best and session.trial(best.config) == best


def test_new_run_reuses_the_cache_but_charges_the_budget(dense_task, dense_space, backend):
    session = TuningSession(dense_task, dense_space, backend, budget=3)
    configs = dense_space.sample_unique(np.random.default_rng(1), 3)
    first = session.evaluate(configs)
    assert session.new_run() == [] and session.trials_used == 0 and session.clock == 0.0
    again = session.evaluate(configs[::-1])
    assert again.measured == 0 and len(backend.calls) == 1  # nothing measured twice
    assert [t.result for t in again.new] == [t.result for t in first.new][::-1]
    assert session.exhausted  # served from the cache, still one trial each


def test_records_resume_and_reference(dense_task, dense_space, backend, tmp_path):
    log = tmp_path / "run.jsonl"
    ref = Reference(12.5, "given in a test", (12.0, 12.5, 13.0), "abc")
    configs = dense_space.sample_unique(np.random.default_rng(2), 6)
    with TuningSession(dense_task, dense_space, backend, log=log, reference=ref) as session:
        session.evaluate(configs[:4])
    records = load_records(log)
    assert [r.config for r in records] == configs[:4]
    assert recorded_reference(records, dense_task) == ref
    with TuningSession(dense_task, dense_space, backend, budget=5, log=log, resume=True) as session:
        assert [t.source for t in session.trials] == ["records"] * 4 and session.trials_used == 4
        ev = session.evaluate(configs[2:])
        assert [o.status for o in ev.outcomes] == ["repeat", "repeat", "new", "skipped"]
        assert ev.new[0].source == "measured" and backend.calls[-1] == [configs[4]]
    assert [r.config for r in load_records(log)] == configs[:5]


def test_session_refuses_a_space_of_another_task(conv_task, dense_space, backend):
    with pytest.raises(ValueError, match="space is for"):
        TuningSession(conv_task, dense_space, backend)
    with pytest.raises(ValueError, match="budget"):
        TuningSession(dense_space.task, dense_space, backend, budget=0)


def test_knob_walk_with_a_backend_has_a_budget_and_records(dense_task, backend, tmp_path):
    log = tmp_path / "walk.jsonl"
    env = KnobWalkEnv(dense_task, backend=backend, budget=3, log=log, max_steps=50, start=None)
    env.reset(seed=0)
    scores, skipped = [], False
    for _ in range(20):
        _, reward, term, trunc, info = env.step(np.full(env.space.n_knobs, 2))
        if info.get("skipped"):
            skipped = True
            assert reward == 0.0 and trunc and info["trial"] is None
            break
        scores.append(info["score"])
        assert info["trial"].gflops == info["score"]
        if term or trunc:
            env.reset()
    assert skipped and env.session.trials_used == 3
    assert len(load_records(log)) == 3 == sum(len(c) for c in backend.calls)
    env.close()
    with pytest.raises(ValueError, match="only with a backend"):
        KnobWalkEnv(dense_task, reward_fn=lambda c: np.zeros(len(c)), budget=3)


def test_importing_tune_gym_loads_nothing_from_agents():
    """Every module under tune_gym imports without pulling in the agents package."""
    code = (
        "import pkgutil, importlib, sys, tune_gym\n"
        "names = [m.name for m in pkgutil.walk_packages(tune_gym.__path__, 'tune_gym.')]\n"
        "for name in names: importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m == 'agents' or m.startswith('agents.'))\n"
        "print(len(names), bad)\n"
        "assert not bad, bad\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    count = int(out.stdout.split()[0])
    assert count > 20  # it really walked the package


def test_env_reuses_the_recorded_reference_and_writes_it(dense_task, tmp_path, monkeypatch):
    """reward_norm="torch": a dataset's or a resumed log's reference is reused, never re-measured."""
    import gymnasium as gym

    import tune_gym.measure.reference as reference_module
    from tune_gym.host import host_id
    from tune_gym.records import Record, RecordWriter

    def no_measuring(task, *args, **kwargs):
        raise AssertionError(f"measured a reference for {task.uri}")

    monkeypatch.setattr(reference_module, "measure_reference", no_measuring)
    ref = Reference(40.0, "recorded in a test", (39.0, 40.0, 41.0), host_id())
    dataset = tmp_path / "dataset.jsonl"
    replay = ReplayBackend(DATA)
    with RecordWriter(dataset) as writer:
        space = KnobSpace.for_task(dense_task, "compact")
        cfgs = space.sample_unique(np.random.default_rng(3), 4)
        writer.append([Record.create(space, c, r, "live", ref)
                       for c, r in zip(cfgs, replay.measure(dense_task, space, cfgs))])
    log = tmp_path / "run.jsonl"
    kwargs = dict(task=dense_task, preset="compact", batch_size=2, budget=4, log=log, backend="replay",
                  backend_options={"dataset": str(dataset)})
    env = gym.make("tune_gym/Tune-v0", **kwargs)
    assert env.unwrapped.reference == ref and env.unwrapped.reference_gflops == 40.0
    env.reset(seed=0)
    _, reward, *_ = env.step(np.array(cfgs[:2]))
    env.close()
    assert all(r.reference == ref for r in load_records(log))  # written with every record
    assert reward == pytest.approx(max(r.gflops for r in replay.measure(dense_task, space, cfgs[:2])) / 40.0)
    # Resumed from its own log: the log's reference (this host) is used.
    env = gym.make("tune_gym/Tune-v0", resume=True, **kwargs)
    assert env.unwrapped.reference == ref
    env.close()
