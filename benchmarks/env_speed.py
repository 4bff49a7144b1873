"""How fast an RL loop can step ``Tune-v0`` and ``MultiTune-v0`` on replay: one env, vector envs, and PPO training.

Usage:
    taskset -c 0 python -m benchmarks.env_speed [--task resnet18:5] [--num-envs 64] [--batch 8] \
        [--budget 64] [--steps 20000] [--repeats 3] [--ppo-steps 16384] [--section all] [--out [PATH]]

Measures, on one core (run it under ``taskset -c 0``; ``--cpu`` pins the process as well), with
random actions (a pool of ``action_space.sample()`` drawn before the clock starts) and the
registered step limit, resets included (vector envs reset their sub-envs themselves):

1. ``Tune-v0``, one env made by ``gym.make`` (``info="full"``, the default, and ``"lean"``);
2. gymnasium's ``SyncVectorEnv`` of ``--num-envs`` ``Tune-v0`` (``info="lean"``);
3. SB3's ``DummyVecEnv`` of ``--num-envs`` ``Tune-v0`` (``info="lean"``);
4. the native vector env (``make_vec``'s default mode, :mod:`tune_gym.envs.tune_vector`);
5. SB3 PPO (``MultiInputPolicy``, ``n_steps`` ``--ppo-n-steps`` per sub-env, batch 256, 10
   epochs: SB3's defaults but the rollout length) learning on the native vector env through
   :class:`tune_gym.envs.sb3.SB3VecEnv`: environment steps per second of ``learn()``, updates
   included (one timed run after a short warm-up run).

``MultiTune-v0`` (``--section multi``; ``tune`` runs rows 1-5 only, ``all`` both), over the
tasks of ``--split`` part ``--part`` (default by-network-v1's train part, what
``scripts/train_rl.py`` trains on), with random *masked* actions (each row's slots drawn among the
values the sub-env's task allows, a pool per task drawn before the clock starts):

6. ``MultiTune-v0``, one env made by ``gym.make``;
7. its native vector env of ``--num-envs`` sub-envs (:mod:`tune_gym.envs.multi_vector`);
8. SB3 PPO and sb3-contrib MaskablePPO (``MlpPolicy``, the settings of ``scripts/train_rl.py``:
   ``--multi-envs`` sub-envs, episodes of ``budget / batch`` steps, rollouts of 4 episodes,
   minibatch 256, 4 epochs, net 256 x 256, PyTorch's distribution checks off) learning on the
   native vector env: env steps per second of ``learn()``, updates included.

Rates are env steps per second, summed over the sub-envs of a vector env (one vector step of
64 sub-envs is 64 env steps); rows 1-4 are the median of ``--repeats`` timed repeats after a
warm-up. Every env replays the data against its recorded space (``spaces="recorded"``: no TVM).
The host id (:func:`tune_gym.host.host_id`), CPU model, load average and the exact command are
printed with the table and stored in the JSON (``--out``, by default
``benchmarks/results/speed/env_speed.json``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import tune_gym  # noqa: F401  (registers the environments)
from benchmarks.speed import timed, write_report
from tune_gym.space import PRESETS

DEFAULT_OUT = Path("benchmarks/results/speed/env_speed.json")
REPLAY = {"backend": "replay", "backend_options": {"spaces": "recorded"}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="resnet18:5")
    parser.add_argument("--preset", default="compact", choices=PRESETS)
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8, help="Tune-v0 batch_size")
    parser.add_argument("--budget", type=int, default=64, help="Tune-v0 budget (trials per episode)")
    parser.add_argument("--steps", type=int, default=20000, help="env steps per timed repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ppo-steps", type=int, default=16384, help="env steps of the timed PPO run (0: skip)")
    parser.add_argument("--ppo-n-steps", type=int, default=64, help="PPO rollout length per sub-env")
    parser.add_argument("--cpu", type=int, default=0, help="core to pin to (-1: leave the affinity alone)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--section", default="all", choices=["all", "tune", "multi"],
                        help="Tune-v0 rows, MultiTune-v0 rows, or both")
    parser.add_argument("--split", default="by-network-v1", help="MultiTune-v0 task set: a stored split")
    parser.add_argument("--part", default="train", help="MultiTune-v0 task set: the split's part")
    parser.add_argument("--multi-envs", type=int, default=16, help="sub-envs of the MultiTune-v0 PPO rows")
    parser.add_argument("--out", type=Path, nargs="?", const=DEFAULT_OUT, default=None,
                        help=f"write the results as JSON (default path {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    if args.cpu >= 0:
        os.sched_setaffinity(0, {args.cpu})
    options = dict(task=args.task, preset=args.preset, batch_size=args.batch, budget=args.budget, **REPLAY)
    n = args.num_envs
    rows = tune_rows(options, args) if args.section in ("all", "tune") else []
    if args.section in ("all", "multi"):
        rows += multi_rows(args)

    from tune_gym.host import host_fingerprint, host_id  # reads TVM's version: after the timings

    report = {
        "machine": {"host_id": host_id(), "cpu": host_fingerprint()["cpu"], "model": cpu_model(),
                    "affinity": sorted(os.sched_getaffinity(0)), "load_average": os.getloadavg()},
        "command": shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv])),
        "options": {k: v for k, v in options.items() if k != "backend_options"}, "num_envs": n,
        "multi_options": {"split": args.split, "part": args.part, "multi_envs": args.multi_envs},
        "repeats": args.repeats, "rows": rows,
    }
    print(markdown(report))
    write_report(report, args.out)
    return 0


def tune_rows(options: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Rows 1-5: ``Tune-v0`` one env, vector envs and PPO."""
    n, steps = args.num_envs, args.steps
    rows = []
    for info in ("full", "lean"):
        env = gym.make("tune_gym/Tune-v0", info=info, **options)
        rate = timed(stepper(env, args.seed, 1, steps), steps, args.repeats)
        rows.append(row(f"Tune-v0, one env, info={info}", 1, rate))
        env.close()
    sync = gym.make_vec("tune_gym/Tune-v0", num_envs=n, vectorization_mode="sync", info="lean", **options)
    rows.append(row("SyncVectorEnv of Tune-v0", n, timed(stepper(sync, args.seed, n, steps), steps, args.repeats)))
    sync.close()
    dummy = sb3_dummy(n, options)
    rows.append(row("SB3 DummyVecEnv of Tune-v0", n, timed(stepper(dummy, args.seed, n, steps, sb3=True), steps,
                                                           args.repeats)))
    dummy.close()
    native = gym.make_vec("tune_gym/Tune-v0", num_envs=n, **options)
    rows.append(row("native vector env", n, timed(stepper(native, args.seed, n, steps), steps, args.repeats)))
    native.close()
    if args.ppo_steps > 0:
        rows.append(row("SB3 PPO learning on the native vector env", n, ppo_rate(n, options, args)))
    return rows


def multi_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Rows 6-8: ``MultiTune-v0`` one env, its native vector env, PPO and MaskablePPO."""
    options = dict(split=args.split, part=args.part, batch_size=args.batch, budget=args.budget)
    n, steps = args.num_envs, args.steps
    rows = []
    env = gym.make("tune_gym/MultiTune-v0", **options)
    one = max(steps // 10, 100)  # the single env is the slow one: fewer steps per repeat
    rows.append(row("MultiTune-v0, one env", 1, timed(masked_stepper(env, args.seed, 1, one), one, args.repeats)))
    env.close()
    vec = gym.make_vec("tune_gym/MultiTune-v0", num_envs=n, **options)
    rows.append(row("MultiTune-v0 native vector env", n, timed(masked_stepper(vec, args.seed, n, steps), steps,
                                                               args.repeats)))
    vec.close()
    if args.ppo_steps > 0:
        for algo in ("ppo", "maskable-ppo"):
            rows.append(row(f"{algo} learning on the MultiTune-v0 native vector env", args.multi_envs,
                            multi_ppo_rate(algo, options, args)))
    return rows


def masked_pools(env: Any, seed: int, size: int = 256) -> np.ndarray:
    """Per task of ``env``'s set, ``size`` random actions within the task's mask: int64
    ``(tasks, size, batch_size * N_SLOTS)``."""
    from tune_gym.envs.canonical import NVEC

    inner = env.unwrapped
    multi = inner.env if hasattr(inner, "engines") else inner  # a vector env's MultiTuneEnv
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(NVEC)])
    pools = []
    for codec in multi.codecs:
        mask = codec.mask()
        allowed = [np.flatnonzero(mask[offsets[s]:offsets[s + 1]]) for s in range(len(NVEC))]
        rows = np.stack([rng.choice(values, size=size * multi.batch_size) for values in allowed], axis=1)
        pools.append(rows.reshape(size, -1))
    return np.stack(pools)


def masked_stepper(env: Any, seed: int, num_envs: int, steps: int) -> Any:
    """A function running ``steps`` env steps of random masked actions on a ``MultiTune-v0``
    env (``num_envs`` 1) or its native vector env: each sub-env's action is the next of its
    task's pool (:func:`masked_pools`)."""
    stacked = masked_pools(env, seed)
    size = stacked.shape[1]
    inner = env.unwrapped

    def work() -> None:
        env.reset(seed=seed)
        for i in range(steps // num_envs):
            if num_envs == 1:
                _, _, terminated, truncated, _ = env.step(stacked[inner.task_index, i % size])
                if terminated or truncated:
                    env.reset()
            else:
                env.step(stacked[np.maximum(inner.task_index, 0), (i + np.arange(num_envs)) % size])

    return work


def multi_ppo_rate(algo: str, options: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Env steps per second of ``learn`` of ``algo`` (``ppo`` or ``maskable-ppo``) on the
    ``MultiTune-v0`` native vector env, with ``scripts/train_rl.py``'s settings."""
    import torch

    from agents.rl import unchecked_distributions
    from agents.rl_policy import algo_class
    from tune_gym.envs.multi_vector import MultiTuneVectorEnv
    from tune_gym.envs.sb3 import SB3VecEnv

    torch.set_num_threads(1)
    n, horizon = args.multi_envs, args.budget // args.batch
    venv = SB3VecEnv(MultiTuneVectorEnv(num_envs=n, max_episode_steps=horizon, autoreset_mode="same_step",
                                        reward_norm="optimum", **options))
    n_steps = 4 * horizon
    model = algo_class(algo)("MlpPolicy", venv, n_steps=n_steps, batch_size=256, n_epochs=4, seed=args.seed,
                             device="cpu", policy_kwargs={"net_arch": [256, 256]})
    with unchecked_distributions():  # as scripts/train_rl.py trains
        model.learn(n * n_steps)  # warm-up: one rollout and update
        wall, cpu = time.perf_counter(), time.process_time()
        model.learn(args.ppo_steps, reset_num_timesteps=False)
    done = model.num_timesteps - n * n_steps
    rate = done / (time.perf_counter() - wall)
    venv.close()
    return {"median": rate, "min": rate, "max": rate, "cpu_median": done / max(time.process_time() - cpu, 1e-9),
            "repeats": [rate]}


def stepper(env: Any, seed: int, num_envs: int, steps: int, sb3: bool = False) -> Any:
    """A function that runs ``steps`` env steps (``steps / num_envs`` vector steps) of random
    actions on ``env`` (reset first; a single env is reset when its episode ends)."""
    space = env.action_space  # SB3's VecEnv has the single env's: its actions are stacked
    space.seed(seed)
    pool = [np.stack([space.sample() for _ in range(num_envs)]) if sb3 else space.sample() for _ in range(256)]
    single = num_envs == 1

    def work() -> None:
        env.reset() if sb3 else env.reset(seed=seed)
        for i in range(steps // num_envs):
            if sb3:
                env.step(pool[i % len(pool)])
                continue
            _, _, terminated, truncated, _ = env.step(pool[i % len(pool)])
            if single and (terminated or truncated):
                env.reset()

    return work


def sb3_dummy(n: int, options: dict[str, Any]) -> Any:
    from stable_baselines3.common.vec_env import DummyVecEnv

    return DummyVecEnv([lambda: gym.make("tune_gym/Tune-v0", info="lean", **options)] * n)


def ppo_rate(n: int, options: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Env steps per second of ``PPO.learn`` on the native vector env (SB3's adapter)."""
    import torch
    from stable_baselines3 import PPO

    from tune_gym.envs.sb3 import SB3VecEnv

    torch.set_num_threads(1)
    venv = SB3VecEnv(gym.make_vec("tune_gym/Tune-v0", num_envs=n, autoreset_mode="same_step", **options))
    model = PPO("MultiInputPolicy", venv, n_steps=args.ppo_n_steps, batch_size=256, seed=args.seed, device="cpu")
    model.learn(n * args.ppo_n_steps)  # warm-up: one rollout and update
    wall, cpu = time.perf_counter(), time.process_time()
    model.learn(args.ppo_steps, reset_num_timesteps=False)
    done = model.num_timesteps - n * args.ppo_n_steps
    rate = done / (time.perf_counter() - wall)
    venv.close()
    return {"median": rate, "min": rate, "max": rate, "cpu_median": done / max(time.process_time() - cpu, 1e-9),
            "repeats": [rate]}


def row(name: str, num_envs: int, rate: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "sub_envs": num_envs, "unit": "env steps/s", **rate}


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (empty where there is none)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [f"Host {m['host_id']} ({m['model'] or m['cpu']}), pinned to {m['affinity']}, load average "
             f"{', '.join(f'{x:.2f}' for x in m['load_average'])}",
             f"Command: `{report['command']}`",
             f"Options: {report['options']}; median of {report['repeats']} repeats.", "",
             "| what | sub-envs | env steps/s | min - max | cpu/s |", "|---|---:|---:|---:|---:|"]
    for r in report["rows"]:
        lines.append(f"| {r['name']} | {r['sub_envs']} | {r['median']:,.0f} | {r['min']:,.0f} - {r['max']:,.0f} | "
                     f"{r['cpu_median']:,.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
