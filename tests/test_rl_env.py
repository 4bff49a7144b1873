"""What an RL loop relies on in Tune-v0 on replay: episodes end (a registered step limit), the
cost of a wasted step, reward_norm="optimum", bounded observations, lean info, refused options,
and the native vector env: the same as N copies of Tune-v0, deterministic, without TVM, and
usable by SB3 through its adapter.

Everything here replays committed data against its recorded space (no TVM): resnet18:5's
compact space, measured exhaustively (640 configs), and resnet18:1's full one (3,000 of 1.4e9).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import tune_gym  # noqa: F401  (registers the envs)
from tune_gym.envs.tune_env import MAX_EPISODE_STEPS
from tune_gym.errors import SpaceError
from tune_gym.options import OptionError
from tune_gym.session import STATUSES

RECORDED = {"backend": "replay", "backend_options": {"spaces": "recorded"}}
TASK = dict(task="resnet18:5", preset="compact", **RECORDED)
PARTIAL = dict(task="resnet18:1", preset="full", **RECORDED)
ROOT = Path(__file__).resolve().parents[1]


def make(**kwargs):
    return gym.make("tune_gym/Tune-v0", **{**TASK, **kwargs})


def compare(a, b, where="") -> None:
    """``a`` and ``b`` (observations, infos, arrays) hold the same values with the same types."""
    if isinstance(a, tuple):  # what reset() and step() return
        assert isinstance(b, tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            compare(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert set(a) == set(b), (where, set(a) ^ set(b))
        for key in a:
            compare(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, np.ndarray) and a.dtype == object:
        for x, y in zip(a, b, strict=True):
            assert (x is None) == (y is None), where
            if x is not None:
                compare(x, y, where)
    else:
        a, b = np.asarray(a), np.asarray(b)
        assert (a.dtype, a.shape) == (b.dtype, b.shape), where
        if where.endswith(("clock", "measure_secs")):  # sums of recorded seconds, summed in another order
            np.testing.assert_allclose(a, b, rtol=1e-12, err_msg=where)
        else:
            np.testing.assert_array_equal(a, b, err_msg=where)


# ---------------------------------------------------------------------- episode rules
def test_registration_declares_the_step_limit_and_the_vector_env():
    spec = gym.spec("tune_gym/Tune-v0")
    assert spec.max_episode_steps == MAX_EPISODE_STEPS
    assert spec.vector_entry_point == "tune_gym.envs.tune_vector:TuneVectorEnv"


def test_a_policy_that_repeats_itself_ends_at_the_step_limit():
    env = make(info="lean")
    _, info = env.reset(seed=0)
    action = env.action_space.sample()
    _, first, _, _, info = env.step(action)
    used = info["trials_used"]
    rewards, steps = [], 1
    while True:
        _, reward, terminated, truncated, info = env.step(action)
        rewards.append(reward)
        steps += 1
        if terminated or truncated:
            break
    assert steps == MAX_EPISODE_STEPS and truncated and not terminated
    assert first > 0 and set(rewards) == {0.0}  # a step of repeats: reward 0, no other penalty
    assert info["trials_used"] == used and info["new_trials"] == 0
    assert info["status"].tolist() == [STATUSES.index("repeat")] * env.unwrapped.batch_size
    env.close()


def test_the_budget_truncates_before_the_step_limit_and_max_episode_steps_overrides_it():
    env = make(batch_size=4, budget=8, max_episode_steps=3)
    env.reset(seed=0)
    configs = np.array(env.unwrapped.space.sample_unique(np.random.default_rng(0), 8))
    assert env.step(configs[:4])[3] is False
    assert env.step(configs[4:])[3] is True  # the budget is spent at step 2
    env.close()
    env = make(batch_size=4, budget=8, max_episode_steps=2)
    env.reset(seed=0)
    env.step(configs[:4])
    _, _, terminated, truncated, _ = env.step(configs[:4])  # repeats: the step limit ends it
    assert truncated and not terminated
    env.close()


def test_sb3_evaluate_policy_terminates_on_tune_v0():
    """(The registered limit is 1024 steps; a smaller one keeps this short.)"""
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import DummyVecEnv

    venv = DummyVecEnv([lambda: make(info="lean", max_episode_steps=128)])
    model = PPO("MultiInputPolicy", venv, n_steps=16, batch_size=16, seed=0, device="cpu")  # untrained
    returns, lengths = evaluate_policy(model, venv, n_eval_episodes=2, deterministic=True, warn=False,
                                       return_episode_rewards=True)
    assert len(returns) == 2 and all(0 < n <= 128 for n in lengths)  # every episode ended
    venv.close()


# ---------------------------------------------------------------------- options
def test_checkers_pass_with_the_new_options():
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = make(info="lean", reward_norm="optimum")
    check_env(env.unwrapped, skip_render_check=True)
    sb3_check_env(env.unwrapped, warn=True)
    env.close()


def test_reward_norm_optimum_makes_the_optimum_return_one():
    from tune_gym.datasets import load_dataset

    env = make(reward_norm="optimum", batch_size=1, budget=640)
    best = load_dataset(ROOT / "benchmarks/datasets/resnet18_5_compact.parquet", env.unwrapped.space).best_gflops
    assert env.unwrapped.reference_gflops == pytest.approx(best) and env.unwrapped.reference is None
    env.reset(seed=0)
    space = env.unwrapped.space
    total = 0.0
    for index in range(space.size):  # every config once: the return is best / optimum = 1
        _, reward, terminated, truncated, _ = env.step(np.array(space.config(index)))
        total += reward
    assert terminated and total == pytest.approx(1.0)
    env.close()


def test_reward_norm_optimum_is_refused_without_an_exhaustive_dataset():
    with pytest.raises(OptionError, match=r"reward_norm='optimum' needs replay data holding every config .*"
                                          r"not an exhaustive dataset"):
        gym.make("tune_gym/Tune-v0", reward_norm="optimum", **PARTIAL)
    with pytest.raises(ValueError, match="reward_norm must be 'torch', 'optimum', 'none' or a positive number"):
        make(reward_norm="best")


def test_lean_info_holds_only_numbers_and_arrays():
    env = make(info="lean")
    _, info = env.reset(seed=0)
    keys = set(info)
    for _ in range(3):
        for value in info.values():
            assert isinstance(value, (int, float, np.ndarray)) and not isinstance(value, bool)
            assert not isinstance(value, np.ndarray) or value.dtype != object
        _, _, _, _, info = env.step(env.action_space.sample())
        assert set(info) == keys
    assert info["status"].dtype == np.int8 and info["status"].shape == (env.unwrapped.batch_size,)
    env.close()


@pytest.mark.parametrize("make_it, message", [
    (lambda: make(bugdet=3), r"Tune-v0: unknown option 'bugdet'; its options: task, backend, .*budget"),
    (lambda: make(info="verbose"), "info must be one of 'full', 'lean', got 'verbose'"),
    (lambda: make().reset(options={"start": 1}), "Tune-v0 reset: unknown option 'start'; its options: none"),
    (lambda: make(backend_options={"spaces": "mine"}), "spaces must be one of 'task', 'recorded', got 'mine'"),
    (lambda: make(observation="sequence"), "no TVM schedule to encode .* use observation='knobs'"),
    (lambda: gym.make_vec("tune_gym/Tune-v0", num_envs=2, log="x.jsonl", **TASK), "option 'log' is not available"),
    (lambda: gym.make_vec("tune_gym/Tune-v0", num_envs=2, info="full", **TASK), "info must be 'lean'"),
    (lambda: gym.make_vec("tune_gym/Tune-v0", num_envs=2, task="resnet18:5", backend="live"),
     "backend must be 'replay' or a ReplayBackend"),
    (lambda: gym.make_vec("tune_gym/Tune-v0", num_envs=2, autoreset_mode="later", **TASK),
     "autoreset_mode must be one of 'next_step', 'same_step'"),
    (lambda: gym.make_vec("tune_gym/Tune-v0", num_envs=2, bugdet=1, **TASK), "Tune-v0 vector env: unknown option"),
])
def test_unknown_and_unavailable_options_are_refused(make_it, message):
    with pytest.raises(ValueError, match=message):
        make_it()


# ---------------------------------------------------------------------- the native vector env
def _pool(space, n, seed):
    """``n`` configs, so random actions from it repeat configs and spend budgets."""
    return np.array(space.sample(np.random.default_rng(seed), n))


@pytest.mark.parametrize("autoreset, action_format, reward_norm", [
    ("next_step", "flat", "torch"), ("same_step", "flat", "optimum"), ("next_step", "index", "none"),
    ("same_step", "knobs", 2.0),
])
def test_vector_env_equals_sync_vector_env_of_tune_v0(autoreset, action_format, reward_norm):
    n, batch = 5, 4
    kwargs = dict(batch_size=batch, budget=12, max_episode_steps=7, action_format=action_format,
                  reward_norm=reward_norm, info="lean", **TASK)
    native = gym.make_vec("tune_gym/Tune-v0", num_envs=n, vectorization_mode="vector_entry_point",
                          autoreset_mode=autoreset, **kwargs)
    sync = gym.make_vec("tune_gym/Tune-v0", num_envs=n, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": AutoresetMode[autoreset.upper()]}, **kwargs)
    assert native.metadata["autoreset_mode"] == sync.metadata["autoreset_mode"]
    assert native.single_observation_space == sync.single_observation_space
    assert native.single_action_space == sync.single_action_space
    compare(native.reset(seed=3), sync.reset(seed=3))
    space = native.unwrapped.env.space
    pool = _pool(space, 24, seed=1)
    rng = np.random.default_rng(2)
    ends = 0
    for _ in range(40):
        rows = pool[rng.integers(0, len(pool), size=(n, batch))]
        if action_format == "index":
            actions = np.array([[space.index(tuple(c)) for c in env_rows] for env_rows in rows])
        else:
            actions = rows.reshape(n, batch, -1) if action_format == "knobs" else rows.reshape(n, -1)
        got, want = native.step(actions), sync.step(actions)
        for a, b, name in zip(got, want, ("obs", "rewards", "terminated", "truncated", "info"), strict=True):
            compare(a, b, name)
        ends += int(got[2].sum() + got[3].sum())
    assert ends > n  # episodes ended (by the budget and the step limit) and restarted
    native.close()
    sync.close()


def test_vector_env_is_deterministic_and_resets_by_mask():
    def run():
        venv = gym.make_vec("tune_gym/Tune-v0", num_envs=4, budget=16, **TASK)
        venv.action_space.seed(7)
        out = [venv.reset(seed=0)]
        out += [venv.step(venv.action_space.sample()) for _ in range(12)]
        mask = np.array([True, False, True, False])
        obs, _ = venv.reset(options={"reset_mask": mask})
        last = out[-1][0]
        assert (obs["progress"][mask] == 0).all() and (obs["progress"][~mask] == last["progress"][~mask]).all()
        assert (obs["last_configs"][~mask] == last["last_configs"][~mask]).all()
        venv.close()
        return out

    first, second = run(), run()
    for a, b in zip(first, second, strict=True):
        compare(a, b)


def test_vector_env_errors_name_the_sub_env_and_change_nothing():
    venv = gym.make_vec("tune_gym/Tune-v0", num_envs=3, batch_size=2, **PARTIAL)
    venv.reset(seed=0)
    base = venv.unwrapped
    recorded = (base._keys[:, None] // base._weights) % base.env.space.dims
    actions = np.stack([recorded[:2].reshape(-1)] * 3)
    venv.step(actions)
    before = base._trials.copy()
    bad = actions.copy()
    bad[1, :] = 0  # sketch 0, every knob at index 0: not among the recorded configs
    assert not (base._keys == 0).any()
    with pytest.raises(Exception, match=r"replay: config \[0, 0, .*\] of .* is not in the dataset"):
        venv.step(bad)
    assert (base._trials == before).all()
    k = base.env.space.n_knobs
    out_of_range = actions.copy()
    out_of_range[2, k + 1] = 10**6
    with pytest.raises(SpaceError, match=rf"sub-env 2: action row 1: knob '{base.env.space.names[1]}': index 1000000"):
        venv.step(out_of_range)
    with pytest.raises(SpaceError, match=r"actions shape \(3, 5\); expected"):
        venv.step(actions[:, :5])
    venv.close()


def test_vector_env_imports_no_tvm():
    code = ("import sys, gymnasium as gym, tune_gym\n"
            "venv = gym.make_vec('tune_gym/Tune-v0', num_envs=4, task='resnet18:5', preset='compact')\n"
            "venv.reset(seed=0)\n"
            "for _ in range(20): venv.step(venv.action_space.sample())\n"
            "print([m for m in sys.modules if m == 'tvm' or m.startswith(('tvm.', 'tvm_ffi'))])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stderr[-2000:]


def test_sb3_adapter_trains_ppo_and_reports_cut_episodes():
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy

    from tune_gym.envs.sb3 import SB3VecEnv

    with pytest.raises(OptionError, match="same-step autoreset"):
        SB3VecEnv(gym.make_vec("tune_gym/Tune-v0", num_envs=2, **TASK))
    venv = SB3VecEnv(gym.make_vec("tune_gym/Tune-v0", num_envs=4, max_episode_steps=2, autoreset_mode="same_step",
                                  **TASK))
    obs = venv.reset()
    assert obs["progress"].shape == (4, 2) and venv.reset_infos[0]["trials_used"] == 0
    for step in range(2):
        venv.step_async(np.stack([venv.action_space.sample() for _ in range(4)]))
        obs, rewards, dones, infos = venv.step_wait()
        assert dones.all() == (step == 1) and rewards.dtype == np.float32
    for i, info in enumerate(infos):  # cut by the step limit: PPO bootstraps their value
        assert info["TimeLimit.truncated"] and set(info["terminal_observation"]) == set(obs)
        assert info["terminal_observation"]["progress"][1] > 0 and obs["progress"][i, 1] == 0  # the next episode
    model = PPO("MultiInputPolicy", venv, n_steps=8, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(64)
    assert model.num_timesteps == 64
    mean, _ = evaluate_policy(model, venv, n_eval_episodes=4, deterministic=True, warn=False)
    assert mean > 0
    venv.close()


# ---------------------------------------------------------------------- stored space descriptions
def test_committed_space_descriptions_match_their_datasets():
    from tune_gym import kinds
    from tune_gym.datasets.catalog import catalog, repo_datasets
    from tune_gym.datasets.spaces import read_space, repo_spaces
    from tune_gym.tasks import Task

    fingerprints = {e.meta["fingerprint"]: e for e in catalog([repo_datasets()])
                    if kinds.get_kind(Task.from_uri(e.task).target.kind) is None}  # MetaSchedule spaces
    files = sorted(repo_spaces().glob("*.json"))
    assert {p.stem for p in files} == set(fingerprints)
    for path in files:
        space = read_space(path)
        entry = fingerprints[path.stem]
        assert (space.task.uri, space.preset, space.size) == (entry.task, entry.preset, entry.space_size)
        assert space.names == entry.meta["knobs"]


def test_a_description_that_does_not_match_its_name_is_refused(tmp_path):
    from tune_gym.datasets import DatasetError
    from tune_gym.datasets.spaces import read_space, repo_spaces

    source = next(iter(sorted(repo_spaces().glob("*.json"))))
    description = json.loads(source.read_text())
    description["knobs"][-1][2] = description["knobs"][-1][2][:-1]  # one choice less: another space
    bad = tmp_path / source.name
    bad.write_text(json.dumps(description))
    with pytest.raises(DatasetError, match=f"describes a space of fingerprint .*, not {source.stem}"):
        read_space(bad)
    (tmp_path / "0000000000000000.json").write_text("{not json")
    with pytest.raises(DatasetError, match="0000000000000000.json"):
        read_space(tmp_path / "0000000000000000.json")


@pytest.mark.slow
def test_committed_space_descriptions_are_up_to_date():
    out = subprocess.run([sys.executable, "scripts/describe_spaces.py", "--check"], capture_output=True, text=True,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
