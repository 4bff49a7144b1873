"""KnobWalk-v0 (Chameleon's environment) and the ``rl-ppo`` agent, on the replayed tiny dataset."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import tune_gym  # noqa: F401  (registers the envs)
from agents.base import list_agents, make_agent, run
from agents.rl import RLPPOAgent, adaptive_sample
from tune_gym.envs.knob_walk import KnobWalkEnv, walk
from tune_gym.measure.replay import ReplayBackend
from tune_gym.space import KnobSpace
from tune_gym.tasks.task import Task

DATASET = Path(__file__).parent / "data" / "tiny_compact.jsonl"
CONV = "op://conv2d_nchw-v1/n1_c8_h8_w8_k8_r3_s1_p1_d1?target=llvm"
#: Tiny PPO / rollout budgets so an agent run takes seconds.
TINY = {"train_steps": 64, "n_steps": 32, "batch_size": 32, "n_epochs": 2, "n_starts": 16, "max_steps": 20,
        "net_arch": (16,), "num_rounds": 30}


@pytest.fixture(scope="module")
def task():
    return Task.from_uri(CONV)


@pytest.fixture(scope="module")
def space(task):
    return KnobSpace.for_task(task, "compact")


@pytest.fixture(scope="module")
def backend():
    return ReplayBackend(DATASET)


def distance_reward(space):
    """1 at the config with every knob at its last index, falling linearly with L1 distance."""
    target = space.dims - 1
    return lambda configs: 1.0 - np.abs(np.asarray(configs) - target).sum(axis=1) / target.sum()


# ---------------------------------------------------------------------- environment
@pytest.mark.parametrize("mode", ["reward_fn", "backend"])
def test_check_env(task, space, mode):
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    source = {"reward_fn": distance_reward(space)} if mode == "reward_fn" else {
        "backend": "replay", "backend_options": {"dataset": str(DATASET)}}
    env = gym.make("tune_gym/KnobWalk-v0", task=task if mode == "reward_fn" else CONV, preset="compact", **source)
    check_env(env.unwrapped, skip_render_check=True)
    sb3_check_env(env.unwrapped, warn=True)
    env.close()


def test_seeded_determinism(task, space):
    def trajectory(seed):
        env = KnobWalkEnv(task, reward_fn=distance_reward(space), max_steps=30)
        env.action_space.seed(seed)
        out = []
        for episode in range(3):
            obs, info = env.reset(seed=seed if episode == 0 else None)
            out.append(info["config"])
            done = False
            while not done:
                obs, reward, term, trunc, info = env.step(env.action_space.sample())
                out.append((info["config"], reward, term, trunc))
                done = term or trunc
        return out

    assert trajectory(7) == trajectory(7)
    assert trajectory(7) != trajectory(8)


def test_walk_clips_counts_moves_and_stops(task, space):
    env = KnobWalkEnv(task, reward_fn=distance_reward(space), start=[0] * space.n_knobs, reward="improvement")
    obs, info = env.reset(seed=0)
    assert info["config"] == (0,) * space.n_knobs
    np.testing.assert_allclose(obs[: space.n_knobs], 0.0)
    movable = int((space.dims > 1).sum())
    up = np.full(space.n_knobs, 2)
    obs, reward, term, trunc, info = env.step(up)  # every movable knob steps up
    assert info["moved"] == movable and not term
    assert info["config"] == tuple(int(v) for v in np.minimum(1, space.dims - 1))
    assert reward == pytest.approx(movable / (space.dims - 1).sum())  # improvement = distance covered
    total = reward
    while not term:  # at the upper bounds the moves are clipped: most knobs stop, the episode ends
        obs, reward, term, trunc, info = env.step(up)
        total += reward
    assert info["config"] == tuple(int(v) for v in space.dims - 1) and info["moved"] == 0
    assert total == pytest.approx(1.0)
    np.testing.assert_allclose(obs[: space.n_knobs], (space.dims > 1).astype(np.float32))
    with pytest.raises(ValueError, match="integers in"):
        env.step(np.full(space.n_knobs, 3))


def test_vectorized_walk_matches_clip_and_canonical(space):
    rng = np.random.default_rng(0)
    configs = np.asarray(space.sample(rng, 64))
    actions = rng.integers(0, 3, size=configs.shape)
    new, moved, stop = walk(space, configs, actions, stop_fraction=0.5)
    movable = (space.dims > 1).sum()  # every knob of this space is used by both sketches
    for cfg, act, out, m, s in zip(configs, actions, new, moved, stop):
        expected = space.canonical(np.clip(cfg + act - 1, 0, space.dims - 1))
        assert tuple(out) == expected
        assert m == sum(a != b for a, b in zip(cfg, expected))
        assert s == (m < 0.5 * movable)


def test_backend_reward_is_measured_gflops(task, space, backend):
    env = KnobWalkEnv(task, backend=backend, max_steps=5)
    env.reset(seed=3)
    for _ in range(5):
        _, reward, term, trunc, info = env.step(np.full(space.n_knobs, 2))
        assert reward == pytest.approx(backend.measure(task, space, [info["config"]])[0].gflops)
        if term or trunc:
            break
    with pytest.raises(ValueError, match="exactly one"):
        KnobWalkEnv(task, reward_fn=distance_reward(space), backend=backend)


@pytest.fixture
def one_torch_thread():
    """Tiny networks train faster on one thread (and the CPU is shared)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_ppo_beats_random_policy(task, space, one_torch_thread):
    from stable_baselines3 import PPO

    def make_env():
        return KnobWalkEnv(task, reward_fn=distance_reward(space), start=[0] * space.n_knobs,
                           reward="improvement", max_steps=50)

    def episode_return(env, act):
        obs, _ = env.reset(seed=0)
        total, done = 0.0, False
        while not done:
            obs, reward, term, trunc, _ = env.step(act(obs))
            total, done = total + reward, term or trunc
        return total

    rng = np.random.default_rng(0)
    env = make_env()
    random_return = np.mean([episode_return(env, lambda _: rng.integers(0, 3, space.n_knobs)) for _ in range(100)])
    model = PPO("MlpPolicy", make_env(), n_steps=64, batch_size=32, n_epochs=4, learning_rate=3e-3,
                policy_kwargs={"net_arch": [16]}, seed=0, device="cpu")
    model.learn(256)
    trained_return = episode_return(make_env(), lambda obs: model.predict(obs, deterministic=True)[0])
    assert random_return < 0.5
    assert trained_return > random_return + 0.3


# ---------------------------------------------------------------------- adaptive sampling
def test_adaptive_sample_one_representative_per_cluster():
    rng = np.random.default_rng(0)
    centres = rng.uniform(0, 100, size=(16, 4))
    blob = np.repeat(np.arange(16), 10)
    points = centres[blob] + rng.normal(0, 0.1, size=(len(blob), 4))
    scores = rng.random(len(blob))
    reps = adaptive_sample(points, scores, seed=0)
    # 8 -> 16 clusters cuts the loss far more than 2.5x; 16 -> 24 only splits blobs.
    assert len(reps) == 16 and len(set(reps)) == 16
    assert sorted(blob[reps]) == list(range(16))  # one per blob
    for i in reps:
        assert scores[i] == scores[blob == blob[i]].max()  # the blob's best member
    assert list(scores[reps]) == sorted(scores[reps], reverse=True)
    few = adaptive_sample(points[:5], scores[:5], seed=0)  # <= 8 distinct points: each its own cluster
    assert sorted(few) == list(range(5))


def test_adaptive_plan_is_smaller_and_from_the_plain_plan(task, space, backend):
    measured = space.sample_unique(np.random.default_rng(1), 16)
    results = backend.measure(task, space, measured)

    def first_model_plan(adaptive):
        agent = RLPPOAgent(plan_size=16, n_init=16, adaptive_sampling=adaptive, **TINY)
        agent.reset(space, task, seed=0)
        agent.observe(measured, results)
        return agent.propose(16)

    plain, adaptive = first_model_plan(False), first_model_plan(True)
    assert len(plain) == 16
    assert 0 < len(adaptive) < len(plain) and len(set(adaptive)) == len(adaptive)
    assert not set(adaptive) & set(measured)
    reps = adaptive[:-1]  # the last slot is random (ceil(k * 0.05 / 0.95) = 1)
    assert set(reps) <= set(plain[:15])  # representatives are among the plain plan's model picks


# ---------------------------------------------------------------------- the agent
def tune(seed, **options):
    env = gym.make("tune_gym/Tune-v0", task=Task.from_uri(CONV), preset="compact", backend="replay",
                   backend_options={"dataset": str(DATASET)}, batch_size=16, budget=48, reward_norm=1.0)
    agent = make_agent("rl-ppo", plan_size=16, n_init=16, **TINY, **options)
    result = run(agent, env, seed=seed)
    env.close()
    return result


def test_rl_ppo_runs_within_budget_and_is_deterministic():
    import torch

    assert "rl-ppo" in list_agents()
    np_state, torch_state = np.random.get_state()[1].copy(), torch.random.get_rng_state().clone()
    first = tune(seed=5)
    configs = [t.config for t in first.trials]
    assert len(configs) == 48 and len(set(configs)) == 48
    assert first.best is not None and first.best.result.gflops > 0
    assert [t.config for t in tune(seed=5).trials] == configs
    assert [t.config for t in tune(seed=6).trials] != configs
    # PPO's global-generator draws are sandboxed: the callers' generators are untouched.
    assert np.array_equal(np.random.get_state()[1], np_state)
    assert torch.equal(torch.random.get_rng_state(), torch_state)


def test_rl_ppo_adaptive_runs_within_budget():
    result = tune(seed=5, adaptive_sampling=True)
    configs = [t.config for t in result.trials]
    assert len(configs) == 48 and len(set(configs)) == 48
