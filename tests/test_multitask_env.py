"""MultiTune-v0: one canonical action and observation space over a task set (replayed from the
committed exhaustive datasets, no TVM), its masks, task sampling and splits; and agents that
other packages declare through the ``tune_gym.agents`` entry-point group."""

from __future__ import annotations

import json
import textwrap
import warnings
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import tune_gym  # noqa: F401  (registers the envs)
from agents import base
from tune_gym.envs import MAX_EPISODE_STEPS, task_sets
from tune_gym.envs.canonical import N_SLOTS, NVEC, SLOT_NAMES, CanonicalCodec
from tune_gym.envs.multi_task import MultiTuneEnv
from tune_gym.envs.task_sets import PARTS, SplitError, list_splits, load_split
from tune_gym.errors import SpaceError
from tune_gym.options import OptionError

MIXED = ["resnet18:7", "bert_base:0", "bert_base:4"]  # conv2d_nchw, dense, batch_matmul
_OFFSETS = np.concatenate([[0], np.cumsum(NVEC)])


@pytest.fixture(scope="module")
def every_task() -> Iterator[MultiTuneEnv]:
    """The default task set: every exhaustively measured task (12, CPU and GPU)."""
    env = MultiTuneEnv()
    yield env
    env.close()


def masked_action(mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random action of ``mask``'s rows, each slot's value drawn from its allowed values."""
    rows = mask.reshape(-1, int(NVEC.sum()))
    return np.array([[rng.choice(np.flatnonzero(row[_OFFSETS[s]:_OFFSETS[s + 1]])) for s in range(N_SLOTS)]
                     for row in rows], dtype=np.int64).ravel()


# ---------------------------------------------------------------------- the canonical vocabulary
def test_every_config_of_every_task_is_the_image_of_its_own_encoding(every_task):
    """decode(encode(c)) == c on every config of every task: the canonical actions reach the
    whole space, the optimum included."""
    assert len(every_task.tasks) == 12
    for env, codec in zip(every_task.envs, every_task.codecs):
        configs = np.array(list(env.space), dtype=np.int64)
        np.testing.assert_array_equal(codec.decode(codec.encode(configs)), configs, err_msg=env.task.uri)


def test_the_medium_split_reaches_every_config_of_its_spaces():
    """The canonical actions cover the medium spaces (reduction loops split too) as they do the
    compact ones: every config of every task of ``medium-by-network-v1`` round-trips."""
    env = MultiTuneEnv(split="medium-by-network-v1", part="all")
    try:
        assert len(env.tasks) == 6
        for sub, codec in zip(env.envs, env.codecs):
            configs = np.array(list(sub.space), dtype=np.int64)
            assert len(configs) >= 6000
            np.testing.assert_array_equal(codec.decode(codec.encode(configs)), configs, err_msg=sub.task.uri)
    finally:
        env.close()


def test_masks_allow_exactly_the_values_some_config_has(every_task):
    for env, codec in zip(every_task.envs, every_task.codecs):
        values = codec.encode(np.array(list(env.space), dtype=np.int64))
        mask = codec.mask()
        for s in range(N_SLOTS):
            allowed = set(np.flatnonzero(mask[_OFFSETS[s]:_OFFSETS[s + 1]]).tolist())
            assert allowed == set(values[:, s].tolist()), (env.task.uri, SLOT_NAMES[s])


def test_random_masked_actions_are_recorded_configs_that_keep_their_values(every_task):
    """Property: on every task, 300 random rows drawn within the mask decode to configs of the
    space that the data holds, and a knob of one slot gets exactly the value asked for."""
    rng = np.random.default_rng(0)
    for index, (env, codec) in enumerate(zip(every_task.envs, every_task.codecs)):
        rows = masked_action(np.tile(codec.mask(), 300), rng).reshape(300, N_SLOTS)
        configs = codec.decode(rows)
        np.testing.assert_array_equal(env.space.check_table(configs), configs)
        results, missing = env.backend.table(env.task, env.space).lookup([tuple(c) for c in configs.tolist()])
        assert missing.size == 0 and all(r is not None for r in results), env.task.uri
        encoded = codec.encode(configs)
        one_slot = [s for s in range(N_SLOTS) if _slot_of_single_slot_knob(codec, s)]
        np.testing.assert_array_equal(encoded[:, one_slot], rows[:, one_slot], err_msg=env.task.uri)
        every_task.reset(options={"task": env.task.uri})
        assert every_task.task_index == index
        np.testing.assert_array_equal(every_task.action_masks(), np.tile(codec.mask(), every_task.batch_size))


def _slot_of_single_slot_knob(codec: CanonicalCodec, slot: int) -> bool:
    return any(len(k.slots) == 1 and k.slots[0] == slot for k in codec._knobs)


def test_a_value_means_the_same_in_two_tasks(every_task):
    """``tile_y`` index 1 is (2, 7) on resnet18:7 and (7, 1) on resnet18:8; in canonical values
    they are 4 (a tile of half the loop) and 11 (a tile of 1/7 of it), and one canonical value
    (0: the tile is the whole loop) is (1, 14) on one and (1, 7) on the other."""
    from tune_gym.tasks.task import Task

    slot = SLOT_NAMES.index("tile2.2")  # the third split's innermost tile: tile_y
    for task_id, index_1, whole_loop in (("resnet18:7", 4, (1, 14)), ("resnet18:8", 11, (1, 7))):
        i = next(i for i, ref in enumerate(every_task.tasks) if ref.task == Task.parse(task_id).uri)
        space, codec = every_task.envs[i].space, every_task.codecs[i]
        y = space.names.index("tile_y")
        config = np.zeros((1, space.n_knobs), dtype=np.int64)
        config[0, y] = 1
        assert codec.encode(config)[0, slot] == index_1
        row = np.zeros((1, N_SLOTS), dtype=np.int64)
        assert space.knobs[y].choices[codec.decode(row)[0, y]] == whole_loop


def test_a_space_with_a_knob_no_slot_holds_is_refused():
    from tune_gym.space import RecordedSpace

    space = RecordedSpace({"task": "resnet18:7", "preset": "compact",
                           "knobs": [["memory", "nominal", ["shared", "global"]]], "active": [[0]]})
    with pytest.raises(SpaceError, match="knob 'memory' \\(nominal\\)"):
        CanonicalCodec(space)


# ---------------------------------------------------------------------- the env
def test_passes_gymnasiums_env_checker():
    env = gym.make("tune_gym/MultiTune-v0", tasks=MIXED, budget=16)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_registration_declares_the_step_limit():
    assert gym.spec("tune_gym/MultiTune-v0").max_episode_steps == MAX_EPISODE_STEPS


def test_one_observation_and_action_space_for_every_task(every_task):
    seen = set()
    for ref in every_task.tasks:
        obs, info = every_task.reset(options={"task": ref.task})
        assert every_task.observation_space.contains(obs)
        assert info["action_mask"].shape == (every_task.batch_size * NVEC.sum(),)
        obs, reward, *_ = every_task.step(masked_action(info["action_mask"], np.random.default_rng(1)))
        assert every_task.observation_space.contains(obs) and 0 <= reward <= 1
        seen.add(every_task.env.space.n_knobs)
    assert len(seen) > 1  # tasks of different knob counts, one action space


def test_a_whole_space_returns_one_under_the_optimum_norm():
    """resnet18:10's 160 configs, asked for in canonical values: the episode's return is
    best / optimum = 1 and it terminates (every config evaluated)."""
    env = gym.make("tune_gym/MultiTune-v0", tasks=["resnet18:10"], budget=160, batch_size=16)
    env.reset(seed=0)
    inner = env.unwrapped
    rows = inner.codec.encode(np.array(list(inner.env.space), dtype=np.int64))
    total, terminated = 0.0, False
    for start in range(0, 160, 16):
        _, reward, terminated, truncated, _ = env.step(rows[start:start + 16].ravel())
        total += reward
    assert terminated and not truncated
    assert total == pytest.approx(1.0)
    env.close()


def test_the_same_seed_gives_the_same_tasks_observations_and_rewards():
    def rollout(seed):
        env = gym.make("tune_gym/MultiTune-v0", tasks=MIXED, budget=16, batch_size=4)
        rng = np.random.default_rng(seed)
        out = []
        obs, info = env.reset(seed=seed)
        for _ in range(12):
            obs, reward, terminated, truncated, info = env.step(masked_action(info["action_mask"], rng))
            out.append((info["task_index"], obs, reward))
            if terminated or truncated:
                obs, info = env.reset()
        env.close()
        return out

    a, b = rollout(3), rollout(3)
    for (ta, oa, ra), (tb, ob, rb) in zip(a, b, strict=True):
        assert ta == tb and ra == rb
        np.testing.assert_array_equal(oa, ob)
    draws = set()
    env = gym.make("tune_gym/MultiTune-v0", tasks=MIXED)
    for seed in range(12):
        draws.add(env.reset(seed=seed)[1]["task_index"])
        assert env.reset(seed=seed)[1]["task_index"] == env.unwrapped.task_index
    assert draws == {0, 1, 2}
    env.close()


def test_reset_task_option_and_its_errors():
    env = gym.make("tune_gym/MultiTune-v0", split="by-op-v1", part="test")
    _, info = env.reset(options={"task": "dcgan:3"})
    assert env.unwrapped.env.task.op == "conv2d_transpose_nchw" and info["task_index"] == 1
    uri = env.unwrapped.tasks[0].task
    assert env.reset(options={"task": uri})[1]["task_index"] == 0
    with pytest.raises(OptionError, match=r"resnet18:7.* not in the task set by-op-v1 part test \(op://batch_matmul"):
        env.reset(options={"task": "resnet18:7"})
    with pytest.raises(OptionError, match="unknown option 'seed'; its options: task"):
        env.reset(options={"seed": 1})
    with pytest.raises(OptionError, match="option 'task'"):
        env.reset(options={"task": "nosuchnet:3"})
    env.close()


def test_bad_options_are_refused_by_name():
    with pytest.raises(OptionError, match="unknown option 'bugdet'"):
        gym.make("tune_gym/MultiTune-v0", bugdet=3)
    with pytest.raises(SplitError, match="no split 'by-nothing-v1'; the splits: by-host-v1, by-network-v1"):
        gym.make("tune_gym/MultiTune-v0", split="by-nothing-v1")
    with pytest.raises(SplitError, match="not 'dev'"):
        gym.make("tune_gym/MultiTune-v0", split="by-network-v1", part="dev")
    with pytest.raises(OptionError, match="either tasks or split"):
        gym.make("tune_gym/MultiTune-v0", split="by-network-v1", tasks=["resnet18:7"])
    with pytest.raises(OptionError, match="no dataset of .* \\(preset full\\)"):
        gym.make("tune_gym/MultiTune-v0", tasks=["resnet18:7"], preset="full")
    with pytest.raises(OptionError, match="reward_norm='optimum' needs replay data holding every config"):
        gym.make("tune_gym/MultiTune-v0", tasks=["resnet18:1"], preset="full")
    env = gym.make("tune_gym/MultiTune-v0", tasks=MIXED)
    env.reset(seed=0)
    with pytest.raises(SpaceError, match="slot 'unroll': value 5 out of range \\[0, 4\\]"):
        bad = np.zeros((8, N_SLOTS), dtype=np.int64)
        bad[2, 1] = 5
        env.step(bad)
    with pytest.raises(SpaceError, match="dtype is float64"):
        env.step(np.zeros(8 * N_SLOTS))
    env.close()


def test_the_step_limit_truncates_and_wasted_steps_earn_nothing():
    env = gym.make("tune_gym/MultiTune-v0", tasks=["resnet18:7"], budget=640, max_episode_steps=5)
    _, info = env.reset(seed=0)
    action = masked_action(info["action_mask"], np.random.default_rng(0))
    rewards = []
    for step in range(1, 6):
        _, reward, terminated, truncated, info = env.step(action)
        rewards.append(reward)
        assert not terminated and truncated == (step == 5)
    assert rewards[0] > 0 and rewards[1:] == [0.0] * 4
    assert info["new_trials"] == 0 and info["trials_used"] > 0
    env.close()


def test_make_vec_over_mixed_ops():
    vec = gym.make_vec("tune_gym/MultiTune-v0", num_envs=3, vectorization_mode="sync", tasks=MIXED, budget=8,
                       batch_size=4)
    obs, info = vec.reset(seed=0)
    assert obs.shape == (3, vec.single_observation_space.shape[0])
    rng = np.random.default_rng(0)
    ops = set()
    for _ in range(20):
        masks = np.stack([env.unwrapped.action_masks() for env in vec.envs])
        actions = np.stack([masked_action(m, rng) for m in masks])
        obs, rewards, terminated, truncated, info = vec.step(actions)
        assert vec.observation_space.contains(obs)
        ops |= {env.unwrapped.env.task.op for env in vec.envs}
    assert ops == {"conv2d_nchw", "dense", "batch_matmul"}
    vec.close()


KEYS = ("trials_used", "new_trials", "best_gflops", "reference_gflops", "clock", "measure_secs", "status",
        "task_index", "action_mask")


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_the_native_vector_env_steps_as_n_multitune_envs(mode):
    """Sub-envs on four tasks (conv2d, dense, batch_matmul on CPU; dense on GPU) give what four
    MultiTune-v0 on the same tasks give: observations, rewards, ends, lean info and masks,
    through step limits, budgets and autoresets (a reset sub-env's single twin is reset to the
    task the vector env drew)."""
    tasks = [*MIXED, "bert_base:0@cuda&arch=sm_90"]
    options = dict(tasks=tasks, budget=16, batch_size=4)
    vec = gym.make_vec("tune_gym/MultiTune-v0", num_envs=4, autoreset_mode=mode,
                       max_episode_steps=6, **options)
    assert type(vec).__name__ == "MultiTuneVectorEnv"
    singles = [gym.make("tune_gym/MultiTune-v0", max_episode_steps=6, **options) for _ in range(4)]
    obs, info = vec.reset(seed=0, options={"task": tasks})
    for i, env in enumerate(singles):
        np.testing.assert_array_equal(env.reset(options={"task": tasks[i]})[0], obs[i])
    rng, reset_now, ends = np.random.default_rng(0), np.zeros(4, dtype=bool), 0

    def twin_reset(i, obs, info):
        one, one_info = singles[i].reset(options={"task": vec.env.tasks[vec.task_index[i]].task})
        np.testing.assert_array_equal(one, obs[i])
        for key in KEYS:
            np.testing.assert_array_equal(one_info[key], info[key][i], err_msg=key)

    for step in range(14):
        actions = np.stack([masked_action(mask, rng) for mask in vec.action_masks()])
        obs, rewards, terminated, truncated, info = vec.step(actions)
        for i, env in enumerate(singles):
            if reset_now[i]:
                twin_reset(i, obs, info)
                continue
            one, reward, one_term, one_trunc, one_info = env.step(actions[i])
            final = mode == "same_step" and (one_term or one_trunc)
            np.testing.assert_array_equal(one, info["final_obs"][i] if final else obs[i], err_msg=f"{step} {i}")
            assert (reward, one_term, one_trunc) == (rewards[i], terminated[i], truncated[i])
            for key in KEYS:
                np.testing.assert_array_equal(one_info[key], (info["final_info"] if final else info)[key][i])
            if final:
                twin_reset(i, obs, info)
        reset_now = (terminated | truncated) if mode == "next_step" else np.zeros(4, dtype=bool)
        ends += int((terminated | truncated).sum())
    assert ends >= 8
    vec.close()
    for env in singles:
        env.close()


def test_the_vector_env_draws_tasks_from_its_seed_and_refuses_bad_input():
    def draws(seed):
        vec = gym.make_vec("tune_gym/MultiTune-v0", num_envs=6, tasks=MIXED)
        _, info = vec.reset(seed=seed)
        vec.close()
        return info["task_index"].tolist()

    assert draws(5) == draws(5) and len(set(draws(5) + draws(6))) == 3
    vec = gym.make_vec("tune_gym/MultiTune-v0", num_envs=2, tasks=MIXED)
    with pytest.raises(OptionError, match="needs 2 tasks"):
        vec.reset(options={"task": ["resnet18:7"]})
    with pytest.raises(OptionError, match="resnet18:8.* is not in the task set"):
        vec.reset(options={"task": "resnet18:8"})
    _, info = vec.reset(options={"task": ["bert_base:4", None]})
    assert info["task_index"][0] == 2
    bad = np.zeros((2, 8, N_SLOTS), dtype=np.int64)
    bad[1, 3, 0] = 4
    with pytest.raises(SpaceError, match="sub-env 1: action row 3: slot 'sketch': value 4 out of range"):
        vec.step(bad)
    vec.close()


@pytest.mark.slow
def test_maskable_ppo_learns_on_it_for_a_few_hundred_steps():
    sb3_contrib = pytest.importorskip("sb3_contrib")
    env = gym.make("tune_gym/MultiTune-v0", tasks=MIXED, budget=16, batch_size=2)
    model = sb3_contrib.MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu",
                                    policy_kwargs={"net_arch": [32]})
    model.learn(total_timesteps=256)
    assert model.num_timesteps == 256
    obs, info = env.reset(seed=1)
    action, _ = model.predict(obs, action_masks=env.unwrapped.action_masks(), deterministic=True)
    rows = action.reshape(2, N_SLOTS)
    mask = info["action_mask"].reshape(2, -1)
    assert all(mask[r, _OFFSETS[s] + rows[r, s]] for r in range(2) for s in range(N_SLOTS))
    env.close()


# ---------------------------------------------------------------------- splits
def test_every_stored_split_loads_with_disjoint_parts():
    assert list_splits() == ["by-host-v1", "by-network-v1", "by-op-v1", "medium-by-network-v1"]
    for name in list_splits():
        split = load_split(name)
        assert split.id == name
        tasks = [{(ref.task, ref.host) for ref in split.tasks(part)} for part in PARTS]
        assert all(tasks) and not (tasks[0] & tasks[1] or tasks[0] & tasks[2] or tasks[1] & tasks[2])
        assert len(split.tasks("all")) == sum(map(len, tasks))
    by_host = load_split("by-host-v1")
    assert {ref.host for ref in by_host.tasks("train")} != {ref.host for ref in by_host.tasks("test")}
    by_op = load_split("by-op-v1")
    ops = [{ref.task.split("/")[2].split("-v")[0] for ref in by_op.tasks(p)} for p in PARTS]
    assert not (ops[0] & ops[2])
    medium = load_split("medium-by-network-v1")
    assert {ref.preset for ref in medium.tasks("all")} == {"medium"}


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("preset"), "missing field 'preset'"),
    (lambda d: d.update(version=2), "name .by-network. and version 2 do not match the file name"),
    (lambda d: d["parts"].pop("validation"), "'parts' must hold exactly train, validation, test"),
    (lambda d: d["parts"]["test"][0].update(id="resnet18:6"), r"parts.test\[0\]: id 'resnet18:6' and task"),
    (lambda d: d["parts"]["test"].append(d["parts"]["train"][0]), r"parts.test\[2\]: task .* is also in parts.train"),
    (lambda d: d["parts"]["train"][0].update(weight=2), r"parts.train\[0\]: unknown field 'weight'"),
])
def test_a_bad_split_file_names_the_file_and_field(tmp_path, monkeypatch, change, message):
    data = json.loads((task_sets.SPLITS_DIR / "by-network-v1.json").read_text())
    change(data)
    (tmp_path / "by-network-v1.json").write_text(json.dumps(data))
    monkeypatch.setattr(task_sets, "SPLITS_DIR", tmp_path)
    with pytest.raises(SplitError, match=f"split file .*by-network-v1.json: {message}"):
        load_split("by-network-v1")


# ---------------------------------------------------------------------- agent entry points
@pytest.fixture
def distribution(tmp_path, monkeypatch):
    """An installed distribution (a ``*.dist-info`` on ``sys.path``) declaring three agents in
    the ``tune_gym.agents`` group: a good one, one reusing a built-in id, one that is broken."""
    (tmp_path / "my_tuners.py").write_text(textwrap.dedent('''
        from agents.base import Agent

        class Sampler(Agent):
            """Uniform samples, with repeats (an agent of another package)."""
            def propose(self, n):
                return self.space.sample(self.rng, n)
        '''))
    info = tmp_path / "my_tuners-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-tuners\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[tune_gym.agents]\nmy-sampler = my_tuners:Sampler\n"
                                           "random = my_tuners:Sampler\nbroken = my_tuners:Missing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    monkeypatch.setattr(base, "_UNAVAILABLE", dict(base._UNAVAILABLE))
    return tmp_path


def test_an_entry_point_agent_joins_the_registry(distribution):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agents = base.list_agents()
    assert agents["my-sampler"] == "Uniform samples, with repeats (an agent of another package)."
    assert agents["random"] != agents["my-sampler"]  # the built-in wins
    assert any("entry point 'random' (my_tuners:Sampler) skipped: 'random' is a built-in agent" in str(w.message)
               for w in caught)
    assert "broken" in base.unavailable_agents() and "broken" not in agents
    assert "cannot be imported" in base.unavailable_agents()["broken"]
    agent = base.make_agent("my-sampler")
    assert type(agent).__name__ == "Sampler" and agent.name == "my-sampler"


def test_make_agent_finds_an_entry_point_agent_without_listing_first(distribution):
    assert type(base.make_agent("my-sampler")).__module__ == "my_tuners"
    with pytest.raises(ImportError, match="agent 'broken' \\(entry point my_tuners:Missing"):
        base.make_agent("broken")
    with pytest.raises(OptionError, match="unknown agent 'nope'; known agents: .*my-sampler"):
        base.make_agent("nope")


@pytest.mark.slow
def test_tune_gym_bench_runs_an_entry_point_agent(distribution, tmp_path):
    """A suite of every agent (``agents = ["*"]``) holds it, and ``tune-gym bench --agents
    my-sampler`` (:func:`run_suite` with ``agents``) runs it."""
    from benchmarks.leaderboard.runner import run_suite
    from benchmarks.leaderboard.suite import load_suite

    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\nagents = ["*"]\nseeds = 1\n[[task]]\nid = "resnet18:7"\nbudget = 8\n')
    suite = load_suite(path)
    assert "my-sampler" in suite.agents
    results = run_suite(suite, tmp_path / "mine.parquet", jobs=1, agents=["my-sampler"], progress=False)
    assert [run["spec"]["agent"] for run in results.runs] == ["my-sampler"]
    assert len(results.runs[0]["configs"]) == 8
