"""A cleanrl-style PPO on ``MultiTune-v0``: one loop, plain PyTorch, masked actions.

Run from the repository root::

    python scripts/cleanrl_ppo.py --split by-network-v1 --seed 0 --steps 50000

It trains on the split's train part through the native vector env (the same env, settings and
outputs as ``scripts/train_rl.py train``, whose :class:`TrainConfig` it takes): every
``MultiDiscrete`` slot of the action is a categorical whose disallowed values (``env.action_masks()``)
have logit ``-inf`` (:class:`~agents.models.masked_policy.MaskedPolicy`), advantages are GAE's,
the policy loss is PPO's clipped objective with an entropy bonus, the value loss is squared
error, and the gradient norm is clipped. Every episode lasts ``budget / batch_size`` steps and
ends terminally (the budget is spent), and a rollout holds whole episodes, so no value is ever
bootstrapped past a rollout.

Determinism: the weights are initialised after ``torch.manual_seed(seed)``; the actions come from
a ``torch.Generator`` and the minibatch order from a NumPy ``Generator``, both seeded by ``seed``;
the env's task draws from ``reset(seed=seed)``; one PyTorch thread on the CPU. The same command
gives the same numbers. The run has no checkpoints (it is short): a killed run starts over.

Outputs in ``<out>/cleanrl-ppo-<split>-s<seed>/``: ``policy.pt`` + ``policy.json`` (what the
``rl-policy`` agent loads, so ``train_rl.py evaluate`` scores it on the test part),
``curve.csv`` / ``curve.png`` as ``train_rl.py`` writes them, and ``stats.csv``: per update, the
mean entropy of a slot's distribution (over the slots a task uses), the approximate KL to the
rollout's policy and the fraction of clipped ratios.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_rl import (
    RESULTS,
    TRAIN_HELP,
    TrainConfig,
    make_vec_env,
    native_vec_env,
    plot_curve,
    validation_return,
    write_curve,
)
from training_common import command_line, display

from agents.models.masked_policy import MaskedPolicy
from agents.rl import unchecked_distributions
from agents.rl_policy import hide_parts, write_meta
from tune_gym.envs.multi_task import observation_slices
from tune_gym.options import OptionError

__all__ = ["ALGO", "PPOSettings", "train"]

ALGO = "cleanrl-ppo"


class PPOSettings:
    """PPO's constants that ``TrainConfig`` leaves out (stable-baselines3's defaults, so both
    trainers run the same algorithm)."""

    clip = 0.2
    gae_lambda = 0.95
    gamma = 1.0  # returns are the best config found: undiscounted
    vf_coef = 0.5
    max_grad_norm = 0.5


def gae(rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, lam: float, gamma: float) -> np.ndarray:
    """Generalised advantage estimates of a rollout, ``(steps, envs)``; ``dones[t]`` marks that
    step ``t`` ended its episode (terminally: nothing is bootstrapped past it; the rollout's last
    step always ends one)."""
    advantages = np.zeros_like(rewards)
    last = np.zeros(rewards.shape[1])
    for t in range(len(rewards) - 1, -1, -1):
        live = 1.0 - dones[t]
        next_value = values[t + 1] if t + 1 < len(rewards) else np.zeros_like(last)
        delta = rewards[t] + gamma * next_value * live - values[t]
        last = delta + gamma * lam * live * last
        advantages[t] = last
    return advantages


def rollout(policy: MaskedPolicy, env: Any, obs: np.ndarray, cfg: TrainConfig,
            gen: torch.Generator) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """``n_steps`` steps of every sub-env with actions sampled from ``policy`` (``gen``); the
    buffers (obs, masks, actions, log-probabilities, values, rewards, dones) and the next obs."""
    n, s = cfg.n_envs, cfg.n_steps
    buf = {"obs": np.zeros((s, n, obs.shape[1]), np.float32),
           "masks": np.zeros((s, n, int(policy.nvec.sum())), bool),
           "actions": np.zeros((s, n, len(policy.nvec)), np.int64), "logp": np.zeros((s, n)),
           "values": np.zeros((s, n)), "rewards": np.zeros((s, n)), "dones": np.zeros((s, n))}
    for t in range(s):
        masks = env.action_masks()
        with torch.no_grad():
            x = torch.from_numpy(obs)
            logp = policy.masked_logits(x, torch.from_numpy(masks))
            action = policy.sample(logp, gen)
            chosen, _ = policy.log_prob_entropy(logp, action)
            value = policy.value(x)
        buf["obs"][t], buf["masks"][t], buf["actions"][t] = obs, masks, action.numpy()
        buf["logp"][t], buf["values"][t] = chosen.numpy(), value.numpy()
        obs, rewards, terminated, truncated, _ = env.step(buf["actions"][t])
        obs = hide_parts(obs, cfg.hide, cfg.batch_size)
        buf["rewards"][t], buf["dones"][t] = rewards, terminated | truncated
    if not buf["dones"][-1].all():
        raise RuntimeError("a rollout ended in mid-episode: n_steps must be whole episodes")
    return buf, obs


def update(policy: MaskedPolicy, optimizer: torch.optim.Optimizer, buf: dict[str, np.ndarray],
           cfg: TrainConfig, rng: np.random.Generator) -> dict[str, float]:
    """PPO's epochs of minibatch updates on one rollout; the mean entropy per used slot, the
    approximate KL and the clipped fraction of the last epoch."""
    ppo = PPOSettings
    advantages = gae(buf["rewards"], buf["values"], buf["dones"], ppo.gae_lambda, ppo.gamma)
    flat = {k: torch.from_numpy(v.reshape(-1, *v.shape[2:])) for k, v in buf.items()}
    adv, ret = torch.from_numpy(advantages.reshape(-1)), torch.from_numpy((advantages + buf["values"]).reshape(-1))
    size = len(adv)
    stats: dict[str, float] = {}
    for _ in range(cfg.epochs):
        order = rng.permutation(size)
        kls, clipped, entropies = [], [], []
        for start in range(0, size, cfg.minibatch):
            idx = torch.from_numpy(order[start:start + cfg.minibatch])
            logp = policy.masked_logits(flat["obs"][idx], flat["masks"][idx])
            new, entropy = policy.log_prob_entropy(logp, flat["actions"][idx])
            ratio = torch.exp(new - flat["logp"][idx])
            a = adv[idx]
            a = (a - a.mean()) / (a.std() + 1e-8) if len(idx) > 1 else a
            pg = torch.max(-a * ratio, -a * ratio.clamp(1 - ppo.clip, 1 + ppo.clip)).mean()
            v_loss = 0.5 * ((policy.value(flat["obs"][idx]) - ret[idx]) ** 2).mean()
            loss = pg - cfg.ent_coef * entropy.mean() + ppo.vf_coef * v_loss
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), ppo.max_grad_norm)
            optimizer.step()
            with torch.no_grad():
                log_ratio = new - flat["logp"][idx]
                kls.append(float(((ratio - 1) - log_ratio).mean()))
                clipped.append(float(((ratio - 1).abs() > ppo.clip).float().mean()))
                slots = (logp > -torch.inf).sum(-1) > 1  # slots with a choice
                entropies.append(float(entropy.sum() / slots.sum().clamp(min=1)))
        stats = {"entropy": float(np.mean(entropies)), "approx_kl": float(np.mean(kls)),
                 "clip_fraction": float(np.mean(clipped))}
    return stats


def train(cfg: TrainConfig, out: Path = RESULTS / "runs", argv: list[str] | None = None,
          copy_best: float | None = None, copy_only: bool = False) -> Path:
    """Train the run of ``cfg`` (``algo`` ``cleanrl-ppo``) under ``out``; returns its directory.
    ``copy_best``: the policy has :class:`~agents.models.masked_policy.MaskedPolicy`'s copy
    pathway to the best config so far, its gates starting at this value (None: no pathway);
    ``copy_only``: the policy has the gates only (no per-value logits)."""
    cfg = replace(cfg, algo=ALGO)
    cfg.check()
    if copy_only and copy_best is None:
        raise OptionError("--copy-only needs --copy-best (the gates are all the policy has)")
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    gen, rng = torch.Generator().manual_seed(cfg.seed), np.random.default_rng(cfg.seed)
    run_dir = out / f"{ALGO}-{cfg.split}-s{cfg.seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    env = native_vec_env(cfg, "train", cfg.n_envs)
    val_env = make_vec_env(cfg, "validation", cfg.eval_episodes)
    try:
        best_at = observation_slices(cfg.batch_size)["best"].start if copy_best is not None else None
        policy = MaskedPolicy(env.single_observation_space.shape[0], env.single_action_space.nvec, cfg.net, best_at,
                              copy_best or 0.0, values=not copy_only)
        optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.learning_rate, eps=1e-5)
        obs, _ = env.reset(seed=cfg.seed)
        obs = hide_parts(obs, cfg.hide, cfg.batch_size)
        curve: list[tuple[str, int, float, int]] = []
        stat_rows: list[dict[str, float]] = []
        step, next_eval, started = 0, 0, time.perf_counter()
        with unchecked_distributions():
            while step < cfg.steps:
                if step >= next_eval:
                    curve.append(("validation", step, validation_return(policy, cfg, val_env, cfg.seed + step),
                                  cfg.eval_episodes))
                    next_eval += cfg.eval_every
                buf, obs = rollout(policy, env, obs, cfg, gen)
                step += cfg.n_steps * cfg.n_envs
                episode_returns = _episode_returns(buf["rewards"], buf["dones"])
                curve.append(("train", step, float(np.mean(episode_returns)), len(episode_returns)))
                stat_rows.append({"step": step, **update(policy, optimizer, buf, cfg, rng)})
            seconds = time.perf_counter() - started
            curve.append(("validation", step, validation_return(policy, cfg, val_env, cfg.seed + step),
                          cfg.eval_episodes))
        policy.save(run_dir / "policy.pt")
        write_meta(run_dir / "policy.pt", {
            "algo": ALGO, "split": cfg.split, "seed": cfg.seed, "timesteps": step, "batch_size": cfg.batch_size,
            "budget": cfg.budget, "reward_norm": "optimum", "hide": list(cfg.hide), "copy_best": copy_best,
            "copy_only": copy_only, "config": asdict(cfg),
            "command": command_line("cleanrl_ppo.py", argv), "env_steps_per_second": round(step / seconds, 1)})
        write_curve(curve, run_dir)
        plot_curve(curve, run_dir / "curve.png", f"{ALGO} on {cfg.split} (seed {cfg.seed})")
        _write_stats(stat_rows, run_dir / "stats.csv")
        print(f"{ALGO}: {step} env steps in {seconds:.1f} s ({step / seconds:.1f} steps/s); last validation "
              f"{curve[-1][2]:.3f}, entropy/slot {stat_rows[-1]['entropy']:.3f}; wrote {display(run_dir)}/policy.pt",
              flush=True)
    finally:
        env.close()
        val_env.close()
    return run_dir


def _episode_returns(rewards: np.ndarray, dones: np.ndarray) -> list[float]:
    """The return of every episode of a rollout (they all end inside it)."""
    out, partial = [], np.zeros(rewards.shape[1])
    for r, d in zip(rewards, dones):
        partial += r
        out.extend(partial[d > 0].tolist())
        partial[d > 0] = 0.0
    return out


def _write_stats(rows: list[dict[str, float]], path: Path) -> None:
    """Per-update statistics as CSV."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = TrainConfig(algo=ALGO)
    for field, value in asdict(defaults).items():
        if field in ("algo", "checkpoint_every"):
            continue
        if field in ("net", "hide"):
            parser.add_argument(f"--{field}", type=int if field == "net" else str, nargs="+" if field == "net" else "*",
                                default=list(value), help=TRAIN_HELP.get(field, "hidden layer widths"))
        else:
            parser.add_argument(f"--{field.replace('_', '-')}", type=type(value), default=value,
                                help=f"{TRAIN_HELP[field]} (default {value})")
    parser.add_argument("--copy-best", type=float, default=None, metavar="INIT",
                        help="give the policy a learned gate per action slot towards the best config's value, "
                             "starting at INIT (e.g. 0 or 1.5; default: no such gate)")
    parser.add_argument("--copy-only", action="store_true",
                        help="with --copy-best: the policy learns the gates only, no per-value logits (every allowed "
                             "value equally likely but for the gates)")
    parser.add_argument("--out", type=Path, default=RESULTS / "runs", help="folder of the runs (default %(default)s)")
    args = parser.parse_args(argv)
    fields = {k: getattr(args, k) for k in asdict(defaults) if k not in ("algo", "checkpoint_every")}
    try:
        train(TrainConfig(**{**fields, "algo": ALGO, "net": tuple(args.net), "hide": tuple(args.hide)}), args.out,
              argv=argv, copy_best=args.copy_best,
              copy_only=args.copy_only)
    except (OptionError, ValueError) as err:
        parser.exit(2, f"cleanrl_ppo.py: error: {err}\n")


if __name__ == "__main__":
    main()
