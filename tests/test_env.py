"""Tune-v0: the Gymnasium contract, budgets and caching, bad actions, records and resume, the
constructor's option checks, and close() being final."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import tune_gym  # noqa: F401  (registers the envs)
from tune_gym.envs.tune_env import TuneEnv
from tune_gym.errors import SpaceError

DATA = Path(__file__).parent / "data" / "tiny_compact.jsonl"


@pytest.fixture(scope="module", params=[
    ("flat", "replay"), ("knobs", "replay"),
    pytest.param(("flat", "live"), marks=pytest.mark.slow), pytest.param(("knobs", "live"), marks=pytest.mark.slow),
], ids=lambda p: "-".join(p))
def env(request, dense_task):
    """Tune-v0 on the recorded dataset by default; on live measurements with ``-m slow``."""
    action_format, backend = request.param
    if backend == "replay":
        env = gym.make("tune_gym/Tune-v0", task=dense_task, preset="compact", batch_size=4, budget=12,
                       action_format=action_format, backend="replay", backend_options={"dataset": str(DATA)},
                       reward_norm=50.0)
    else:
        live = request.getfixturevalue("live_backend")
        env = gym.make("tune_gym/Tune-v0", task=dense_task, preset="compact", batch_size=4, budget=12,
                       action_format=action_format, backend=live)
    yield env
    env.close()


def test_gymnasium_check_env(env):
    from gymnasium.utils.env_checker import check_env

    check_env(env.unwrapped, skip_render_check=True)


def test_sb3_check_env(env):
    from stable_baselines3.common.env_checker import check_env

    check_env(env.unwrapped, warn=True)


def test_episode_budget_cache_and_reward(env):
    base = env.unwrapped
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert info["trials_used"] == 0
    space = base.space
    configs = space.sample_unique(np.random.default_rng(0), 16)
    total = 0.0
    # A batch with a duplicate row: measured once, the duplicate costs nothing.
    action = np.array([configs[0], configs[1], configs[2], configs[0]])
    obs, reward, term, trunc, info = env.step(action)
    total += reward
    assert info["trials_used"] == 3 and len(info["new_trials"]) == 3
    assert [o.config for o in info["outcomes"]] == [configs[i] for i in (0, 1, 2, 0)]
    assert [o.status for o in info["outcomes"]] == ["new", "new", "new", "repeat"]
    assert [t.index for t in info["new_trials"]] == [1, 2, 3]
    assert info["measure_secs"] == pytest.approx(sum(t.cost for t in info["new_trials"]))
    assert info["clock"] == pytest.approx(info["new_trials"][-1].clock)
    gflops = [o.result.gflops for o in info["outcomes"]]
    assert reward == pytest.approx(max(gflops) / base.reference_gflops)
    np.testing.assert_allclose(obs["last_throughput"], np.array(gflops) / base.reference_gflops, rtol=1e-5)
    # Re-proposing evaluated configs is free and gives no reward.
    obs, reward, term, trunc, info = env.step(action)
    assert reward == 0.0 and info["trials_used"] == 3 and info["new_trials"] == ()
    assert all(o.status == "repeat" for o in info["outcomes"])
    # Spend the rest of the budget: configs beyond it are skipped, then truncated.
    for start in (3, 7, 11):
        obs, reward, term, trunc, info = env.step(np.array(configs[start:start + 4]))
        total += reward
    assert info["trials_used"] == 12 and trunc and not term
    assert sum(o.status == "skipped" and o.trial is None for o in info["outcomes"]) == 3
    assert total == pytest.approx(info["best_gflops"] / base.reference_gflops, rel=1e-6)
    assert obs["progress"][1] == pytest.approx(1.0)


def test_new_episode_reuses_measurements(env):
    base = env.unwrapped
    env.reset(seed=1)
    cfg = next(iter(base.session.measured))  # a config measured in an earlier episode
    sent = base.measured_count
    _, _, _, _, info = env.step(np.array([cfg] * 4))
    assert info["trials_used"] == 1 and len(info["new_trials"]) == 1  # counted in the budget...
    assert base.measured_count == sent  # ...but not measured again


@pytest.mark.parametrize("mutate, message", [
    (lambda a: a[:, :-1], r"action shape \(4, \d+\); expected \(4, \d+\) or \(\d+,\)"),
    (lambda a: a.astype(np.float64), "dtype is float64"),
    (lambda a: np.where(np.arange(a.size).reshape(a.shape) == 1, np.nan, a), "non-finite value at row 0"),
    ("range", r"action row 2: knob '(\w+)': index \d+ out of range \[0, \d+\]"),
    (lambda a: a - 5, r"out of range \[0, "),
])
def test_bad_actions_raise_value_error_naming_the_knob(env, mutate, message):
    base = env.unwrapped
    env.reset(seed=0)
    action = np.array(base.space.sample(np.random.default_rng(0), 4))
    if mutate == "range":
        k = int(np.argmax(base.space.dims))
        action[2, k] = base.space.dims[k]
        bad = action
    else:
        bad = mutate(action.copy())
    with pytest.raises(SpaceError, match=message) as err:
        env.step(bad)
    assert isinstance(err.value, ValueError)


def test_index_action_format(dense_task):
    env = gym.make("tune_gym/Tune-v0", task=dense_task, preset="compact", batch_size=2, budget=4,
                   action_format="index", reward_norm="none", backend="replay",
                   backend_options={"dataset": str(DATA)})
    base = env.unwrapped
    env.reset(seed=0)
    _, reward, _, _, info = env.step(np.array([5, 9]))
    assert [o.config for o in info["outcomes"]] == [base.space.config(5), base.space.config(9)]
    assert reward == pytest.approx(info["best_gflops"])  # reward_norm="none": raw GFLOPS
    with pytest.raises(ValueError, match="flat index"):
        env.step(np.array([0, base.space.size]))
    env.close()


def test_vector_env(dense_task):
    # Two envs in one process share nothing; a replay backend keeps this fast.
    envs = gym.make_vec("tune_gym/Tune-v0", num_envs=2, vectorization_mode="sync", task=dense_task,
                        preset="compact", batch_size=2, budget=4, reward_norm=1.0,
                        backend="replay", backend_options={"dataset": str(DATA)})
    obs, _ = envs.reset(seed=0)
    assert obs["last_configs"].shape[0] == 2
    obs, rewards, term, trunc, infos = envs.step(envs.action_space.sample())
    assert rewards.shape == (2,) and (rewards >= 0).all()
    envs.close()


def test_records_and_resume(dense_task, tmp_path, live_backend):
    from tune_gym.records import load_records

    log = tmp_path / "run.jsonl"
    kwargs = dict(task=dense_task, preset="compact", batch_size=3, budget=6, reward_norm=1.0, log=log,
                  backend=live_backend)
    env = gym.make("tune_gym/Tune-v0", **kwargs)
    space = env.unwrapped.space
    configs = space.sample_unique(np.random.default_rng(5), 6)
    env.reset(seed=0)
    env.step(np.array(configs[:3]))
    env.close()
    assert [r.config for r in load_records(log)] == configs[:3]

    env = gym.make("tune_gym/Tune-v0", resume=True, **kwargs)
    _, info = env.reset(seed=0)
    assert info["resumed"] == 3 and info["trials_used"] == 3
    assert [t.source for t in info["new_trials"]] == ["records"] * 3
    _, _, _, trunc, info = env.step(np.array(configs[1:4]))  # two were measured before
    assert len(info["new_trials"]) == 1 and info["trials_used"] == 4
    assert [o.status for o in info["outcomes"]] == ["repeat", "repeat", "new"]
    env.close()
    records = load_records(log)
    assert len(records) == 4 and len({r.config for r in records}) == 4


# ---------------------------------------------------------------------- observation modes
@pytest.fixture(scope="module", params=["sequence", "graph", "knobs"])
def obs_env(request):
    """Tune-v0 on resnet18:5 (compact) replayed from its committed dataset, per observation mode."""
    env = gym.make("tune_gym/Tune-v0", task="resnet18:5", preset="compact", batch_size=4, budget=8,
                   backend="replay", observation=request.param)
    yield env
    env.close()


def test_observation_modes_pass_the_env_checkers(obs_env):
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    check_env(obs_env.unwrapped, skip_render_check=True)
    sb3_check_env(obs_env.unwrapped, warn=True)


def test_observation_shows_the_best_config(obs_env):
    from tune_gym.features.graph import encode_graphs
    from tune_gym.features.loops import take_logs
    from tune_gym.features.primitives import encode_trace

    base = obs_env.unwrapped
    mode = base.observation
    keys = {"sequence": {"schedule"}, "graph": {"graph_nodes", "graph_adjacency", "graph_mask"},
            "knobs": {"best_knobs"}}
    common = {"task", "last_configs", "last_throughput", "last_valid", "progress"}
    obs, _ = obs_env.reset(seed=0)
    assert set(obs) == common | keys[mode] and obs_env.observation_space.contains(obs)
    before = {k: obs[k].copy() for k in keys[mode]}
    configs = base.space.sample_unique(np.random.default_rng(3), 4)
    obs, _, _, _, info = obs_env.step(np.array(configs))
    assert obs_env.observation_space.contains(obs)
    best = info["best_config"]
    if mode == "sequence":  # log-scaled into its bounded box
        expected = {"schedule": take_logs(encode_trace(base.space.trace(best), 25, 22)).astype(np.float32)}
    elif mode == "knobs":
        expected = {"best_knobs": base.space.normalized([best])[0]}
    else:
        enc = encode_graphs(base.graph_template, base.space, [best])
        expected = {"graph_nodes": enc["nodes"][0], "graph_adjacency": enc["adjacency"][0],
                    "graph_mask": enc["mask"][0]}
        assert base.graph_template.family == "conv2d_nchw" and enc["mask"][0, 0] == 1
    for key, value in expected.items():
        np.testing.assert_array_equal(obs[key], value)
    assert any(not np.array_equal(before[k], obs[k]) for k in before)  # the default config is not the best
    for key in expected:  # observations are copies: the cached encoding stays intact
        obs[key][...] = -7
    obs, *_ = obs_env.step(np.array(configs))  # repeats: free, same best config
    for key, value in expected.items():
        np.testing.assert_array_equal(obs[key], value)


def test_observation_boxes_are_bounded_and_hold_random_rollouts(obs_env):
    """Every Box of every observation mode has finite bounds, and observations of random
    rollouts (repeats, new configs, the budget's end) stay inside them."""
    for key, box in obs_env.observation_space.spaces.items():
        assert np.all(np.isfinite(box.low)) and np.all(np.isfinite(box.high)), key
    obs_env.action_space.seed(0)
    obs, _ = obs_env.reset(seed=0)
    for _ in range(6):
        assert obs_env.observation_space.contains(obs)
        obs, _, term, trunc, _ = obs_env.step(obs_env.action_space.sample())
        if term or trunc:
            obs, _ = obs_env.reset()
    assert obs_env.observation_space.contains(obs)


@pytest.mark.parametrize("kwargs, message", [
    ({"observation": "image"}, "observation must be one of 'sequence', 'graph', 'knobs', not 'image'"),
    ({"observation": "graph", "schedule_shape": (10, 22)}, "schedule_shape applies to observation='sequence'"),
    ({"observation": "knobs", "graph_template": {}}, "graph_template applies to observation='graph'"),
])
def test_bad_observation_options_raise(dense_task, kwargs, message):
    with pytest.raises(ValueError, match=message):
        gym.make("tune_gym/Tune-v0", task=dense_task, preset="compact", backend="replay",
                 backend_options={"dataset": str(DATA)}, reward_norm=1.0, **kwargs)


def test_graph_observation_takes_a_stored_template(dense_task):
    from tune_gym.features.graph import template_for
    from tune_gym.tasks import Task

    template = template_for(dense_task)
    kwargs = dict(task=dense_task, preset="compact", batch_size=2, budget=4, backend="replay",
                  backend_options={"dataset": str(DATA)}, reward_norm=1.0, observation="graph")
    env = gym.make("tune_gym/Tune-v0", graph_template=template.to_dict(), **kwargs)
    assert env.unwrapped.graph_template == template
    assert env.observation_space["graph_nodes"].shape == (template.n_slots, template.feat_dim)
    env.close()
    other = template_for(Task.parse("resnet18:1"))
    with pytest.raises(ValueError, match="graph_template is for conv2d_nchw on llvm, but the task .* is dense"):
        gym.make("tune_gym/Tune-v0", graph_template=other, **kwargs)


# ---------------------------------------------------------------------- the constructor's options, close()
REPLAY = dict(preset="compact", backend="replay", backend_options={"dataset": str(DATA)}, reward_norm=1.0)


@pytest.mark.parametrize("name", ["budget", "batch_size"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), 16.7, 16.0, True, 0, -1, "8", None])
def test_budget_and_batch_size_must_be_integers_from_1(dense_task, name, value):
    from tune_gym.options import OptionError

    with pytest.raises(OptionError, match=f"{name} must be an integer >= 1, got ") as err:
        TuneEnv(dense_task, **{name: value}, **REPLAY)
    assert "\n" not in str(err.value) and repr(value) in str(err.value)


def test_budget_and_batch_size_take_numpy_integers(dense_task):
    env = TuneEnv(dense_task, budget=np.int64(4), batch_size=np.int32(2), **REPLAY)
    assert (env.budget, env.batch_size) == (4, 2) and type(env.budget) is int
    env.close()


@pytest.mark.parametrize("backend", [None, 3, object(), ["replay"]])
def test_a_non_backend_is_refused_by_the_constructor(dense_task, backend):
    with pytest.raises(ValueError, match="backend must be a backend id .* or a backend object") as err:
        TuneEnv(dense_task, preset="compact", backend=backend, reward_norm=1.0)
    assert "\n" not in str(err.value)


class _Answering:
    """Duck-typed: measure and close only, none of the Backend methods' defaults."""

    name = "answering"

    def measure(self, task, space, configs):
        from tune_gym.measure import MeasureResult

        return [MeasureResult(costs=(1e-3,), flops=task.flops) for _ in configs]

    def close(self):
        pass


def test_an_object_lacking_backend_methods_is_refused_naming_them(dense_task):
    with pytest.raises(ValueError, match=r"lacks reference\(\), datasets\(\), recorded_space\(\), covers\(\), "
                                         r"optimum\(\)"):
        TuneEnv(dense_task, preset="compact", backend=_Answering(), reward_norm=1.0)


@pytest.mark.parametrize("path", ["tune_gym.measure.live:LiveBackend", "tune_gym.measure.rpc:RPCBackend",
                                  "tune_gym.measure.replay:ReplayBackend",
                                  "tune_gym.measure.surrogate:SurrogateBackend", "tune_gym.vta.backend:VTASimBackend"])
def test_every_backend_is_a_backend_with_one_reference_signature(path):
    import importlib
    import inspect

    from tune_gym.measure import Backend
    from tune_gym.measure.base import BACKEND_METHODS

    module, name = path.split(":")
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, Backend) and cls.name and not inspect.isabstract(cls)
    assert list(inspect.signature(cls.reference).parameters) == ["self", "task", "preset"]
    assert all(callable(getattr(cls, m)) for m in BACKEND_METHODS)


def test_a_backend_subclass_gets_the_defaults_and_the_env_asks_it_directly(dense_task):
    from tune_gym.measure import Backend, is_backend

    class Answering(_Answering, Backend):
        pass

    backend = Answering()
    assert is_backend(backend) and not is_backend(_Answering())
    assert backend.reference(dense_task, "compact") is None and backend.datasets(dense_task, "compact") == []
    assert backend.simulated is False
    env = TuneEnv(dense_task, preset="compact", backend=backend, reward_norm=2.0, budget=2)
    env.reset(seed=0)
    assert env.reference is None and env.space.preset == "compact"
    with pytest.raises(ValueError, match=r"the answering backend's data does not hold them all"):
        TuneEnv(dense_task, preset="compact", backend=backend, reward_norm="optimum")
    env.close()


def test_close_is_final_step_and_reset_measure_and_log_nothing(dense_task, tmp_path):
    from gymnasium.error import ClosedEnvironmentError

    log = tmp_path / "run.jsonl"
    env = gym.make("tune_gym/Tune-v0", task=dense_task, batch_size=2, budget=8, log=log, **REPLAY)
    base = env.unwrapped
    configs = base.space.sample_unique(np.random.default_rng(1), 4)
    env.reset(seed=0)
    env.step(np.array(configs[:2]))
    env.close()
    lines, measured = log.read_text().splitlines(), base.measured_count
    assert len(lines) == 2
    with pytest.raises(ClosedEnvironmentError, match=r"closed: step\(\) after close\(\)"):
        env.step(np.array(configs[2:]))
    with pytest.raises(ClosedEnvironmentError, match=r"closed: reset\(\) after close\(\)"):
        env.reset(seed=0)
    assert log.read_text().splitlines() == lines and base.measured_count == measured
    env.close()  # closing again is allowed and does nothing
