"""scripts/cleanrl_ppo.py: a tiny PPO run on a train part that mixes conv2d, dense and batch_matmul
tasks, the masks its actions keep to, its repeatability, and its policy run by the rl-policy agent."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import tune_gym  # noqa: F401  (registers the envs)
from agents.base import make_agent, run
from agents.models.masked_policy import MaskedPolicy
from tune_gym.envs.task_sets import load_split

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import cleanrl_ppo
import train_rl

#: by-host-v1's train part holds conv2d_nchw, dense and batch_matmul tasks (and two more operators).
SPLIT = "by-host-v1"
#: 2 sub-envs x 1 episode of 4 steps per rollout (budget 32, batch 8): 4 updates in 32 steps.
TINY: dict[str, Any] = dict(split=SPLIT, steps=32, n_envs=2, budget=32, rollout_episodes=1, minibatch=4, epochs=2,
                            net=(16,), eval_every=16, eval_episodes=2)


def test_the_split_mixes_the_operators():
    ops = {ref.task.split("/")[2] for ref in load_split(SPLIT).tasks("train")}
    assert {"conv2d_nchw-v1", "dense-v1", "batch_matmul-v1"} <= ops


def test_sampled_actions_keep_to_the_masks():
    cfg = train_rl.TrainConfig(**TINY)
    env = train_rl.native_vec_env(cfg, "train", cfg.n_envs)
    torch.manual_seed(0)
    policy = MaskedPolicy(env.single_observation_space.shape[0], env.single_action_space.nvec, (16,))
    obs, _ = env.reset(seed=1)
    buf, _ = cleanrl_ppo.rollout(policy, env, obs, cfg, torch.Generator().manual_seed(2))
    env.close()
    starts = np.concatenate([[0], np.cumsum(policy.nvec)[:-1]])
    allowed = np.take_along_axis(buf["masks"], starts + buf["actions"], axis=-1)
    assert allowed.all()
    assert (buf["masks"].sum(-1) < policy.nvec.sum()).all()  # the masks do forbid something
    assert buf["dones"][-1].all() and np.isfinite(buf["logp"]).all()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    """The same tiny run twice, in two folders."""
    cfg = train_rl.TrainConfig(**TINY)
    return cleanrl_ppo.train(cfg, tmp_path_factory.mktemp("a")), cleanrl_ppo.train(cfg, tmp_path_factory.mktemp("b"))


def test_a_tiny_run_writes_its_outputs_and_repeats_exactly(runs):
    a, b = runs
    for name in ("policy.pt", "policy.json", "curve.csv", "curve.png", "stats.csv"):
        assert (a / name).stat().st_size > 0, name
    curve = (a / "curve.csv").read_text().splitlines()
    assert curve[0] == "part,step,mean_return,episodes" and len(curve) == 1 + 4 + 3  # 4 rollouts, 3 evaluations
    assert (a / "curve.csv").read_text() == (b / "curve.csv").read_text()
    assert (a / "stats.csv").read_text() == (b / "stats.csv").read_text()
    wa, wb = torch.load(a / "policy.pt")["state_dict"], torch.load(b / "policy.pt")["state_dict"]
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_another_seed_gives_other_numbers(runs, tmp_path):
    other = cleanrl_ppo.train(train_rl.TrainConfig(**{**TINY, "seed": 1}), tmp_path)
    assert (other / "stats.csv").read_text() != (runs[0] / "stats.csv").read_text()


@pytest.mark.slow
def test_the_rl_policy_agent_runs_the_trained_policy(runs):
    agent = make_agent("rl-policy", checkpoint=str(runs[0] / "policy.pt"))
    assert agent.masked
    env = gym.make("tune_gym/Tune-v0", task="bert_base:0", preset="compact", backend="replay", batch_size=8,
                   budget=32, reward_norm="none", max_episode_steps=-1)
    result = run(agent, env, seed=3)
    env.close()
    configs = [t.config for t in result.trials]
    assert len(configs) == len(set(configs)) > 8


def test_the_copy_pathway_keeps_the_best_configs_values_and_survives_a_save(tmp_path):
    from tune_gym.envs.canonical import N_SLOTS, NVEC
    from tune_gym.envs.multi_task import observation_slices

    slices = observation_slices(2)
    obs_dim = max(s.stop for s in slices.values())
    torch.manual_seed(0)
    policy = MaskedPolicy(obs_dim, np.tile(NVEC, 2), (8,), copy_best_at=slices["best"].start)
    best = np.random.default_rng(0).integers(0, NVEC)
    obs = np.zeros((3, obs_dim), np.float32)
    obs[:, slices["best"]] = best / (NVEC - 1)
    masks = np.ones((3, 2 * int(NVEC.sum())), bool)
    with torch.no_grad():
        policy.copy[-1].bias.fill_(60.0)  # a gate this large keeps every slot at the best value
    action, _ = policy.predict(obs, action_masks=masks)
    assert (action.reshape(3, 2, N_SLOTS) == best).all()
    policy.save(tmp_path / "p.pt")
    again, _ = MaskedPolicy.load(tmp_path / "p.pt").predict(obs, deterministic=True, action_masks=masks)
    assert (again.reshape(3, 2, N_SLOTS) == best).all()


def test_a_gates_only_policy_is_uniform_but_for_its_gates(tmp_path):
    from tune_gym.envs.canonical import NVEC
    from tune_gym.envs.multi_task import observation_slices
    from tune_gym.options import OptionError

    slices = observation_slices(1)
    obs_dim = max(s.stop for s in slices.values())
    with pytest.raises(ValueError, match="needs the copy pathway"):
        MaskedPolicy(obs_dim, NVEC, (8,), values=False)
    with pytest.raises(OptionError, match="--copy-only needs --copy-best"):
        cleanrl_ppo.train(train_rl.TrainConfig(**TINY), tmp_path, copy_only=True)
    policy = MaskedPolicy(obs_dim, NVEC, (8,), copy_best_at=slices["best"].start, copy_init=0.0, values=False)
    assert policy.actor is None
    with torch.no_grad():
        policy.copy[-1].weight.zero_()
        logp = policy.masked_logits(torch.zeros((1, obs_dim)), torch.ones((1, int(NVEC.sum())), dtype=torch.bool))
    probs = logp.exp()[0]
    for slot, n in enumerate(NVEC):
        np.testing.assert_allclose(probs[slot, :n].numpy(), 1.0 / n, rtol=1e-5)
    policy.save(tmp_path / "p.pt")
    assert MaskedPolicy.load(tmp_path / "p.pt").actor is None
