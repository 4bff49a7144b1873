"""KnobWalk-v0 (Chameleon's environment) and the ``rl-ppo`` agent, on the replayed tiny dataset."""

from __future__ import annotations

import math
import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import tune_gym  # noqa: F401  (registers the envs)
from agents.base import list_agents, make_agent, run
from agents.rl import RLPPOAgent, adaptive_clusters, adaptive_sample, seeded_globals
from tune_gym.envs.knob_walk import KnobWalkEnv, walk
from tune_gym.measure.replay import ReplayBackend
from tune_gym.space import KnobSpace
from tune_gym.tasks.task import Task

DATASET = Path(__file__).parent / "data" / "tiny_compact.jsonl"
CONV = "op://conv2d_nchw-v1/n1_c8_h8_w8_k8_r3_s1_p1_d1?weights=given&target=llvm"
#: Tiny search budgets so an agent run takes seconds.
TINY = {"n_starts": 16, "max_steps": 20, "num_rounds": 30}


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
    new, moved, stop = walk(space, configs, actions, stuck_fraction=0.5)
    movable = space.dims > 1  # every knob of this space is used by both sketches
    for cfg, act, out, m, s in zip(configs, actions, new, moved, stop):
        wanted = cfg + act - 1
        expected = space.canonical(np.clip(wanted, 0, space.dims - 1))
        assert tuple(out) == expected
        assert m == sum(a != b for a, b in zip(cfg, expected))
        stuck = movable & ((act == 1) | (wanted < 0) | (wanted >= space.dims))
        assert s == (stuck.sum() >= 0.5 * movable.sum())


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


@pytest.mark.parametrize("kwargs,needle", [
    ({"budget": math.nan}, "budget must be an integer >= 1 or None, got nan"),
    ({"budget": 16.7}, "budget must be an integer >= 1 or None, got 16.7"),
    ({"budget": True}, "budget must be an integer >= 1 or None, got True"),
    ({"budget": 0}, "budget must be an integer >= 1 or None, got 0"),
    ({"max_steps": 2.5}, "max_steps must be an integer >= 1"),
    ({"stuck_fraction": math.nan}, "stuck_fraction must be"),
])
def test_knob_walk_refuses_bad_budgets_and_settings(task, backend, kwargs, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        KnobWalkEnv(task, backend=backend, **kwargs)


@pytest.fixture
def one_torch_thread():
    """Tiny networks train faster on one thread (and the CPU is shared)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_ppo_beats_random_policy(task, space, one_torch_thread, train_seed, record_property):
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
                policy_kwargs={"net_arch": [16]}, seed=train_seed, device="cpu")
    model.learn(256)
    trained_return = episode_return(make_env(), lambda obs: model.predict(obs, deterministic=True)[0])
    record_property("random_return", random_return)
    record_property("trained_minus_random", trained_return - random_return)
    assert random_return < 0.5
    assert trained_return > random_return + 0.3, (trained_return, random_return)


# ---------------------------------------------------------------------- adaptive sampling
def blobs(n_blobs=16, per_blob=10, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 100, size=(n_blobs, 4))
    blob = np.repeat(np.arange(n_blobs), per_blob)
    return centres[blob] + rng.normal(0, 0.1, size=(len(blob), 4)), blob, rng.random(len(blob))


def test_adaptive_k_stops_where_the_loss_stops_dropping_2_5x():
    from sklearn.cluster import KMeans

    points, blob, _ = blobs()
    inertia = {k: KMeans(n_clusters=k, n_init=10, random_state=0).fit(points).inertia_ for k in (8, 16, 24)}
    assert inertia[8] > 2.5 * inertia[16] and inertia[16] < 2.5 * inertia[24]  # the premise
    labels = adaptive_clusters(points, seed=0)
    # 8 -> 16 cuts the loss > 2.5x, 16 -> 24 does not: the code keeps the k = 24 clustering it
    # broke out of its loop on.
    assert len(np.unique(labels)) == 24
    assert all(len(np.unique(blob[labels == c])) == 1 for c in np.unique(labels))  # blobs only split
    assert len(np.unique(adaptive_clusters(points, seed=0, k_max=16))) == 16  # capped by the plan size
    few = adaptive_clusters(points[:5], seed=0)  # <= 8 distinct points: each its own cluster
    assert sorted(few) == list(range(5))


def test_adaptive_sample_one_representative_per_cluster():
    points, blob, scores = blobs()
    labels = adaptive_clusters(points, seed=0)
    reps = adaptive_sample(points, scores, seed=0)
    assert len(reps) == len(np.unique(labels)) == 24
    assert sorted(labels[reps]) == sorted(np.unique(labels))  # one per cluster
    for i in reps:
        assert scores[i] == scores[labels == labels[i]].max()  # the cluster's best member
    assert list(scores[reps]) == sorted(scores[reps], reverse=True)
    assert set(blob[reps]) == set(range(16))  # every blob is measured


def test_adaptive_plan_measures_one_per_cluster_plus_random_slots(task, space, backend):
    measured = space.sample_unique(np.random.default_rng(1), 16)
    results = backend.measure(task, space, measured)

    def first_model_plan(adaptive):
        agent = RLPPOAgent(plan_size=16, n_init=16, eps=0.125, adaptive_sampling=adaptive, **TINY)
        agent.reset(space, task, seed=0)
        agent.observe(measured, results)
        return agent, agent.propose(16)

    _, plain = first_model_plan(False)
    agent, adaptive = first_model_plan(True)
    assert RLPPOAgent().adaptive_sampling  # on by default
    assert len(plain) == 16
    n_reps = len(adaptive) - 2  # round(0.125 * 16) = 2 random slots after the representatives
    assert 0 < n_reps < 14 and n_reps == agent._n_reps
    assert len(set(adaptive)) == len(adaptive) and not set(adaptive) & set(measured)
    reps = adaptive[:n_reps]
    assert set(reps) <= set(plain[:14])  # representatives are among the plain plan's model picks
    # ... one per k-means cluster of those picks, each its cluster's best-predicted member
    picks = plain[:14]
    scores = agent.score(np.asarray(picks))
    labels = adaptive_clusters(space.normalized(picks), seed=0, k_max=16)
    rep_labels = [labels[picks.index(c)] for c in reps]
    assert sorted(rep_labels) == sorted(set(labels.tolist()))
    for c, lab in zip(reps, rep_labels):
        assert scores[picks.index(c)] == scores[labels == lab].max()


# ---------------------------------------------------------------------- PPO, online
def hidden_target_reward(space, target):
    """1 at ``target``, falling linearly with the L1 index distance to it."""
    span = (space.dims - 1).sum()
    return lambda configs: 1.0 - np.abs(np.asarray(configs).reshape(-1, space.n_knobs) - target).sum(axis=1) / span


def test_defaults_reach_the_sb3_model(task, space):
    agent = RLPPOAgent()
    agent.reset(space, task, seed=0)
    agent.score = hidden_target_reward(space, np.zeros(space.n_knobs, dtype=np.int64))
    with seeded_globals(0):
        agent.explore(space.sample(agent.rng, 1))
    ppo = agent.ppo
    assert (agent.n_starts, agent.max_steps, agent.stuck_fraction) == (128, 500, 0.75)
    assert ppo.learning_rate == 1e-3 and ppo.policy.optimizer.param_groups[0]["lr"] == 1e-3
    assert ppo.policy.optimizer.defaults["eps"] == 1e-5
    assert (ppo.gamma, ppo.gae_lambda, ppo.clip_range(1.0), ppo.vf_coef, ppo.ent_coef) == (0.9, 0.99, 0.2, 1.0, 0.3)
    assert ppo.max_grad_norm == float("inf") and not ppo.normalize_advantage
    # the code's 3 "epochs" of minibatch 32: one pass (SB3 n_epochs=1) over 3 x 32 drawn transitions
    assert (ppo.n_epochs, ppo.batch_size, ppo.rollout_buffer.buffer_size) == (1, 32, 96)
    assert ppo.observation_space.shape == (space.n_knobs,)  # knob indices only, as in the code
    net = ppo.policy.mlp_extractor
    assert [m.out_features for m in net.policy_net if hasattr(m, "out_features")] == [20, 20]
    assert [m.out_features for m in net.value_net if hasattr(m, "out_features")] == [20, 20, 20]


def test_one_update_per_trajectory_with_one_batched_prediction(task, space, monkeypatch):
    import torch
    from stable_baselines3 import PPO

    agent = RLPPOAgent(max_steps=30)
    agent.reset(space, task, seed=0)
    reward = hidden_target_reward(space, np.array([1, 0, 2, 1, 2, 1]))
    calls: list[int] = []
    agent.score = lambda configs: calls.append(len(configs)) or reward(configs)
    trains: list[tuple[bool, int]] = []
    train = PPO.train

    def counting_train(ppo):
        trains.append((ppo.rollout_buffer.full, ppo.rollout_buffer.buffer_size))
        before = [p.detach().clone() for p in ppo.policy.parameters()]
        train(ppo)
        assert any(not torch.equal(a, b) for a, b in zip(before, ppo.policy.parameters()))  # it learned

    lengths: list[int] = []
    walk_policy = agent.walk_policy

    def recording_walk(env, start):
        out = walk_policy(env, start)
        lengths.append(len(out[0]))
        return out

    monkeypatch.setattr(PPO, "train", counting_train)
    monkeypatch.setattr(agent, "walk_policy", recording_walk)
    starts = space.sample_unique(np.random.default_rng(0), 12)
    with seeded_globals(0):
        predicted = agent.explore(starts)
    assert len(trains) == agent.n_updates == 12 and all(t == (True, 96) for t in trains)  # one per walk
    # one prediction call for the starts, then one per walk, for the whole trajectory at once
    assert calls == [12] + lengths and len(lengths) == 12
    assert set(starts) <= set(predicted)


def test_online_ppo_reaches_better_configs_than_a_random_walk(task, space, train_seed, record_property):
    """Trained online (one update per walk) on a hidden-target reward, the policy's walks
    reach better configs than uniform random walks from the same starts (same stop rule)."""
    target = np.array([1, 0, 2, 1, 2, 1])
    reward = hidden_target_reward(space, target)
    agent = RLPPOAgent(max_steps=50)
    agent.reset(space, task, seed=train_seed)
    agent.score = reward
    starts = np.asarray(space.sample(np.random.default_rng(100), 64))
    rng = np.random.default_rng(1)

    def random_walk(start):
        config, visited = start[None, :], []
        for _ in range(agent.max_steps):
            config, _, stop = walk(space, config, rng.integers(0, 3, size=config.shape), agent.stuck_fraction)
            visited.append(config[0])
            if stop[0]:
                break
        return np.asarray(visited)

    def best_reached(walker):
        return np.mean([max(reward(s)[0], reward(walker(s)).max()) for s in starts])

    with seeded_globals(train_seed):
        agent.explore(space.sample(agent.rng, 256))  # 256 walks, 256 online updates
        env = agent.walk_env()
        trained = best_reached(lambda s: agent.walk_policy(env, s)[2])
    uniform = best_reached(random_walk)
    record_property("trained_minus_uniform", trained - uniform)
    assert trained > uniform + 0.01, (trained, uniform)  # seeds 0-19: 0.022-0.100 above


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


def test_rl_ppo_without_adaptive_sampling_runs_within_budget():
    result = tune(seed=5, adaptive_sampling=False)
    configs = [t.config for t in result.trials]
    assert len(configs) == 48 and len(set(configs)) == 48
