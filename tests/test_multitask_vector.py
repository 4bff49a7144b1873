"""MultiTune-v0's array paths: the canonical decode as one array operation (per codec and across
tasks), the native vector env against single envs on a training split, and an observation that
holds nothing of the task's optimum."""

from __future__ import annotations

import itertools

import gymnasium as gym
import numpy as np
import pytest

import tune_gym  # noqa: F401  (registers the envs)
from tune_gym.envs.canonical import N_SLOTS, NVEC, CanonicalCodec, nearest_choices, pad_tables
from tune_gym.envs.multi_task import MultiTuneEnv

_OFFSETS = np.concatenate([[0], np.cumsum(NVEC)])


@pytest.fixture(scope="module")
def every_task():
    env = MultiTuneEnv()
    yield env
    env.close()


def masked_actions(masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One random action per mask (a row of ``masks``), each slot's value among its allowed ones."""
    out = []
    for mask in masks:
        rows = mask.reshape(-1, int(NVEC.sum()))
        out.append([[rng.choice(np.flatnonzero(row[_OFFSETS[s]:_OFFSETS[s + 1]])) for s in range(N_SLOTS)]
                    for row in rows])
    return np.array(out, dtype=np.int64).reshape(len(masks), -1)


def l1_nearest(codec, rows: np.ndarray) -> np.ndarray:
    """The decode's definition, knob by knob: the choice nearest each row (L1 over the knob's
    slots, ties to the lower index), made canonical."""
    out = np.zeros((len(rows), codec.space.n_knobs), dtype=np.int64)
    for k in codec._knobs:
        for r, row in enumerate(rows):
            distances = [int(np.abs(row[k.slots] - values).sum()) for values in k.values]
            out[r, k.knob] = distances.index(min(distances))
    return codec.space.check_table(out)


def nested_splits_codec() -> CanonicalCodec:
    """A codec whose knobs have 3, 2 and 1 slots (four- and three-factor splits, an unroll
    step), as a ``full``-preset space has."""
    from tune_gym.space import RecordedSpace

    four = [list(c) for c in itertools.product([1, 2, 4, 8], repeat=4) if np.prod(c) == 64]
    three = [list(c) for c in itertools.product([1, 3, 9], repeat=3) if np.prod(c) == 9]
    space = RecordedSpace({"task": "resnet18:7", "preset": "full", "active": [[0, 1, 2]],
                           "knobs": [["tile_x", "split", four], ["tile_y", "split", three],
                                     ["auto_unroll_max_step", "categorical", [0, 16, 64]]]})
    return CanonicalCodec(space)


def test_decode_is_the_l1_nearest_choice_on_any_row_and_across_tasks_at_once(every_task):
    """Rows anywhere in range (not only masked ones) decode as the per-knob definition says,
    per codec and all tasks' rows in one call (each row with its task's tables), on every
    exhaustive task and on a space of nested (multi-slot) splits."""
    codecs = [*every_task.codecs, nested_splits_codec()]
    assert [len(k.slots) for k in codecs[-1]._knobs] == [3, 2, 1]
    rng = np.random.default_rng(0)
    rows = rng.integers(0, NVEC, size=(len(codecs), 40, N_SLOTS))
    for t, codec in enumerate(codecs):
        np.testing.assert_array_equal(codec.decode(rows[t]), l1_nearest(codec, rows[t]), err_msg=codec.space.task.uri)
        configs = codec.decode(rows[t])
        np.testing.assert_array_equal(codec.decode(codec.encode(configs)), configs)
    slot_index, values = pad_tables([codec.tables for codec in codecs])
    together = nearest_choices(rows, slot_index[:, None], values[:, None])
    for t, codec in enumerate(codecs):
        k = codec.space.n_knobs
        np.testing.assert_array_equal(codec.space.check_table(together[t, :, :k]), codec.decode(rows[t]))


def test_the_vector_env_steps_as_single_envs_on_a_training_split():
    """64 sub-envs over by-network-v1's train part at the training settings (batch 8, budget
    64, episodes of 8 steps, same-step autoreset), 20 steps of random masked actions: each
    sub-env's observations, rewards, ends and lean info are those of a single MultiTune-v0
    put on the same tasks."""
    n, options = 64, dict(split="by-network-v1", part="train", batch_size=8, budget=64)
    vec = gym.make_vec("tune_gym/MultiTune-v0", num_envs=n, autoreset_mode="same_step", max_episode_steps=8, **options)
    single = gym.make("tune_gym/MultiTune-v0", max_episode_steps=8, **options)
    obs, info = vec.reset(seed=7)
    states = []  # per sub-env: the actions of its episode so far, replayed on the single env
    for i in range(n):
        states.append((int(vec.task_index[i]), []))
    rng = np.random.default_rng(7)
    for step in range(20):
        actions = masked_actions(vec.action_masks(), rng)
        tasks_before = vec.task_index.copy()
        obs, rewards, terminated, truncated, info = vec.step(actions)
        for i in range(0, n, 7):  # a spread of sub-envs (replaying all 64 would be slow)
            task, past = states[i]
            assert task == tasks_before[i]
            single.reset(options={"task": single.unwrapped.tasks[task].task})
            for action in past:
                single.step(action)
            one, reward, one_term, one_trunc, one_info = single.step(actions[i])
            ended = terminated[i] or truncated[i]
            np.testing.assert_array_equal(one, info["final_obs"][i] if ended else obs[i], err_msg=f"{step} {i}")
            assert (reward, one_term, one_trunc) == (rewards[i], terminated[i], truncated[i])
            source = info["final_info"] if ended else info
            for key in ("trials_used", "new_trials", "best_gflops", "reference_gflops", "status", "action_mask"):
                np.testing.assert_array_equal(one_info[key], source[key][i], err_msg=key)
        for i in range(n):
            ended = terminated[i] or truncated[i]
            states[i] = (int(vec.task_index[i]), []) if ended else (states[i][0], [*states[i][1], actions[i]])
    assert len({int(t) for t in vec.task_index}) > 1
    vec.close()
    single.close()


def test_the_observation_holds_nothing_of_the_optimum():
    """The same actions under reward_norm="optimum" and "none" give different rewards (GFLOPS
    over the optimum, raw GFLOPS) but the same observations, within [0, 1] where GFLOPS show."""
    envs = [MultiTuneEnv(tasks=["resnet18:7", "bert_base:0"], budget=32, reward_norm=norm)
            for norm in ("optimum", "none")]
    rng = np.random.default_rng(3)
    for task in ("resnet18:7", "bert_base:0"):
        first = [env.reset(options={"task": task})[0] for env in envs]
        np.testing.assert_array_equal(first[0], first[1])
        for _ in range(4):
            action = masked_actions(envs[0].action_masks()[None], rng)[0]
            (obs_a, reward_a, _, _, info), (obs_b, reward_b, *_) = (env.step(action) for env in envs)
            np.testing.assert_array_equal(obs_a, obs_b)
            assert envs[0].observation_space.contains(obs_a)
            assert reward_a <= 1.0 and (reward_b == reward_a == 0 or reward_b > reward_a)
        parts = dict(zip([name for name, *_ in envs[0].observation_parts],
                         np.split(obs_a, np.cumsum([size for _, size, _ in envs[0].observation_parts])[:-1])))
        best = envs[0].env.session.best_gflops
        assert parts["best_log_gflops"][0] == np.float32(np.log2(1 + best) / 20)
        trials = {t.config: t for t in envs[0].env.session.trials}  # the batch's rows ran (or repeated) as trials
        ran = [trials.get(tuple(c)) for c in envs[0].decode_action(action).tolist()]
        last = np.array([t.gflops if t is not None and t.ok else 0.0 for t in ran])
        np.testing.assert_array_equal(parts["last_relative"], np.float32(last / best))
    for env in envs:
        env.close()
