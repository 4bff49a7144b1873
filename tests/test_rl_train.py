"""scripts/train_rl.py and the ``rl-policy`` agent: a short MaskablePPO training across tasks, its
exact resume after a stop, and the trained policy tuning a held-out task through Tune-v0."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import tune_gym  # noqa: F401  (registers the envs)
from agents.base import NotApplicable, list_agents, make_agent, run
from tune_gym.envs.multi_task import MultiTuneEnv, observation_slices
from tune_gym.options import OptionError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import train_rl

#: Two tasks' worth of steps per rollout: 2 sub-envs x 2 episodes of 4 steps (budget 32, batch 8).
SMALL: dict[str, Any] = dict(algo="maskable-ppo", steps=192, n_envs=2, budget=32, rollout_episodes=2, minibatch=16,
                             epochs=1, net=(16,), eval_every=64, eval_episodes=2, checkpoint_every=64)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """An uninterrupted short run's directory."""
    return train_rl.train(train_rl.TrainConfig(**SMALL), tmp_path_factory.mktemp("full"))


def _params(run_dir: Path) -> dict[str, np.ndarray]:
    from sb3_contrib import MaskablePPO

    model = MaskablePPO.load(run_dir / "policy.zip", device="cpu")
    return {k: v.numpy() for k, v in model.policy.state_dict().items()}


@pytest.mark.slow
def test_a_stopped_run_resumes_to_the_same_policy_and_curve(trained, tmp_path):
    cfg = train_rl.TrainConfig(**SMALL)
    stopped = train_rl.train(cfg, tmp_path, stop_at=64)
    assert (stopped / "checkpoint" / "model.zip").is_file() and not (stopped / "policy.zip").exists()
    resumed = train_rl.train(cfg, tmp_path)
    assert (resumed / "curve.csv").read_text() == (trained / "curve.csv").read_text()
    a, b = _params(trained), _params(resumed)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    lines = (trained / "curve.csv").read_text().splitlines()
    assert lines[0] == "part,step,mean_return,episodes"
    parts = {line.split(",")[0] for line in lines[1:]}
    assert parts == {"train", "validation"} and (trained / "curve.png").stat().st_size > 0


@pytest.mark.slow
def test_the_policy_tunes_a_held_out_task_and_sees_what_the_env_shows(trained):
    """The rl-policy agent proposes distinct valid configs of a test task through Tune-v0, and
    what it shows the policy equals MultiTune-v0's observation after the same batches."""
    agent = make_agent("rl-policy", checkpoint=str(trained / "policy.zip"))
    assert "rl-policy" not in list_agents()  # made by id only: a suite's "*" leaves it out
    env = gym.make("tune_gym/Tune-v0", task="bert_base:0", preset="compact", backend="replay", batch_size=8,
                   budget=32, reward_norm="none", max_episode_steps=-1)
    result = run(agent, env, seed=3)
    configs = [t.config for t in result.trials]
    assert len(configs) == len(set(configs)) == 32
    assert all(env.unwrapped.space.check_table(np.array([c]))[0].tolist() == list(c) for c in configs)
    env.close()

    multi = MultiTuneEnv(tasks=["bert_base:0"], budget=32, batch_size=8)
    obs, _ = multi.reset(seed=0)
    agent.reset(multi.env.space, multi.env.task, seed=5)
    np.testing.assert_array_equal(agent.observation(), obs)
    for _ in range(3):
        batch = agent.propose(8)
        assert len(batch) == 8
        obs, *_ = multi.step(multi.codec.encode(np.array(batch)))
        trials = multi.env.session.trials[-8:]
        agent.observe([t.config for t in trials], [t.result for t in trials])
        np.testing.assert_array_equal(agent.observation(), obs)
    multi.close()


def test_rl_policy_refuses_a_missing_checkpoint_and_a_space_it_cannot_encode(tmp_path):
    with pytest.raises(OptionError, match="needs option 'checkpoint'"):
        make_agent("rl-policy")
    with pytest.raises(OptionError, match="not a policy .zip or .pt file"):
        make_agent("rl-policy", checkpoint=str(tmp_path / "none.zip"))


@pytest.mark.slow
def test_rl_policy_declines_a_space_the_canonical_encoding_cannot_hold(trained):
    from tune_gym.space import RecordedSpace
    from tune_gym.tasks.task import Task

    space = RecordedSpace({"task": "resnet18:7", "preset": "compact",
                           "knobs": [["memory", "nominal", ["shared", "global"]]], "active": [[0]]})
    agent = make_agent("rl-policy", checkpoint=str(trained / "policy.zip"))
    with pytest.raises(NotApplicable, match="canonical encoding"):
        agent.reset(space, Task.parse("resnet18:7"), seed=0)


@pytest.mark.slow
def test_a_run_without_the_task_features_resumes_exactly_and_its_agent_hides_them(tmp_path):
    """``--hide``: the run sees zeros where the hidden parts were, a stopped run resumes to the
    same policy, and the rl-policy agent shows the policy the same zeroed observation."""
    cfg = train_rl.TrainConfig(**{**SMALL, "steps": 128, "hide": ("task", "slot_extents")})
    whole = train_rl.train(cfg, tmp_path / "whole")
    train_rl.train(cfg, tmp_path / "parts", stop_at=64)
    resumed = train_rl.train(cfg, tmp_path / "parts")
    assert (resumed / "curve.csv").read_text() == (whole / "curve.csv").read_text()
    a, b = _params(whole), _params(resumed)
    assert all(np.array_equal(a[key], b[key]) for key in a)

    agent = make_agent("rl-policy", checkpoint=str(whole / "policy.zip"))
    multi = MultiTuneEnv(tasks=["bert_base:0"], budget=32, batch_size=8)
    obs, _ = multi.reset(seed=0)
    agent.reset(multi.env.space, multi.env.task, seed=5)
    slices = observation_slices(8)
    hidden = np.zeros(len(obs), dtype=bool)
    hidden[slices["task"]] = hidden[slices["slot_extents"]] = True
    assert obs[hidden].any() and not agent.observation()[hidden].any()
    np.testing.assert_array_equal(agent.observation()[~hidden], obs[~hidden])
    multi.close()


def test_bad_training_settings_are_refused_by_name():
    with pytest.raises(OptionError, match="--budget 30 must be a multiple of --batch-size 8"):
        train_rl.TrainConfig(budget=30).check()
    with pytest.raises(OptionError, match="--algo must be one of ppo, maskable-ppo"):
        train_rl.TrainConfig(algo="dqn").check()
    with pytest.raises(OptionError, match="--hide: 'tasks' is not an observation part"):
        train_rl.TrainConfig(hide=("tasks",)).check()
    with pytest.raises(OptionError, match="--algo cleanrl-ppo is trained by scripts/cleanrl_ppo.py"):
        train_rl.train(train_rl.TrainConfig(algo="cleanrl-ppo"))


def test_the_optima_of_a_validation_part_come_from_the_data_the_runner_replays():
    optima = train_rl.test_optima("by-network-v1", "validation")
    assert list(optima) == [ref.task for ref in train_rl.load_split("by-network-v1").tasks("validation")]
    assert all(value > 0 for value in optima.values())
