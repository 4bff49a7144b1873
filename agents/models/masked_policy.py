"""A masked multi-categorical actor-critic in plain PyTorch, for ``MultiTune-v0``'s actions.

``MultiTune-v0``'s action is ``batch_size`` rows of canonical values, a ``MultiDiscrete``
of :math:`batch\\_size \\times N\\_SLOTS` slots (216 at batch 8), each a categorical over its own
number of values (``nvec``), and ``env.action_masks()`` (one flat bool vector of ``nvec.sum()``)
says which values the task has. :class:`MaskedPolicy` computes every slot's logits in one
forward pass, laid out as a ``(slots, max(nvec))`` table (values a slot does not have are
padding), sets the logits of disallowed and padding values to ``-inf``, and samples all slots at
once with the Gumbel-max trick from an explicit ``torch.Generator`` (or the global one), so a
batch of observations costs one matrix product and one ``argmax``, and a seeded run repeats
exactly. The critic is a separate network of the same widths.

``copy_best_at`` (optional) adds a *copy* pathway: the observation holds the best config so far
as canonical values scaled to [0, 1] from that index on (``MultiTune-v0``'s ``best`` part), and a
third network of the same widths outputs one gate per action slot that is added to the logit of
that slot's value in the best config. A gate near 0 leaves the slot to the actor's logits; a
large one keeps the best config's value. "Stay near the best config" then needs no mapping from
a scaled number to a category, and means the same on every task (a search behaviour, not a
task's answer). ``copy_init`` is the gates' starting value (their output layer's bias): 0
starts from the actor alone, 1.5 from "keep each of the best config's values about e^1.5 times
as often as any other value". ``values=False`` drops the actor's per-value logits: every
allowed value is equally likely but for the gates, so the policy learns only how closely to keep
to the best config (in each slot, row and state), never which values are good on the tasks it
trained on.

``scripts/cleanrl_ppo.py`` trains it; :meth:`MaskedPolicy.save` writes the weights
(``policy.pt``) and :meth:`MaskedPolicy.load` reads them back, and :meth:`MaskedPolicy.predict`
answers like a stable-baselines3 model's, so the ``rl-policy`` agent (:mod:`agents.rl_policy`,
algo ``cleanrl-ppo``) runs it like an SB3 policy.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from tune_gym.envs.canonical import N_SLOTS, NVEC

__all__ = ["MaskedPolicy"]


def _mlp(sizes: list[int], out_std: float) -> nn.Sequential:
    """Linear layers with tanh between them, orthogonally initialised (the hidden layers with
    gain sqrt(2), the output layer with ``out_std``; biases 0), as cleanrl's PPO does."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layer = nn.Linear(a, b)
        last = i == len(sizes) - 2
        nn.init.orthogonal_(layer.weight, out_std if last else np.sqrt(2))
        nn.init.zeros_(layer.bias)
        layers.append(layer)
        if not last:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


class MaskedPolicy(nn.Module):
    """Actor (masked categorical per ``MultiDiscrete`` slot) and critic over flat observations.

    Args:
        obs_dim: length of an observation.
        nvec: values of each action slot (``action_space.nvec``).
        net: hidden layer widths of the actor and of the critic.
    """

    def __init__(self, obs_dim: int, nvec: np.ndarray, net: tuple[int, ...] = (256, 256),
                 copy_best_at: int | None = None, copy_init: float = 0.0, values: bool = True) -> None:
        super().__init__()
        self.obs_dim, self.nvec, self.net = int(obs_dim), np.asarray(nvec, dtype=np.int64), tuple(net)
        self.copy_best_at, self.values = copy_best_at, values
        if not values and copy_best_at is None:
            raise ValueError("a policy without value logits needs the copy pathway (copy_best_at)")
        if copy_best_at is not None:
            if len(self.nvec) % N_SLOTS or not (self.nvec.reshape(-1, N_SLOTS) == NVEC).all():
                raise ValueError("copy_best_at needs MultiTune-v0's action (rows of canonical slots)")
            if not 0 <= copy_best_at <= self.obs_dim - N_SLOTS:
                raise ValueError(f"copy_best_at {copy_best_at}: the best config's {N_SLOTS} values must lie in the "
                                 f"observation of {self.obs_dim}")
            self.copy = _mlp([self.obs_dim, *self.net, len(self.nvec)], 0.01)
            gate = self.copy[-1]
            assert isinstance(gate, nn.Linear)
            nn.init.constant_(gate.bias, copy_init)
        flat = int(self.nvec.sum())
        self.actor = _mlp([self.obs_dim, *self.net, flat], 0.01) if values else None
        self.critic = _mlp([self.obs_dim, *self.net, 1], 1.0)
        width = int(self.nvec.max())
        # where each (slot, value) of the padded table is in the flat vector; padding reads
        # the extra column ``flat`` (logit -inf, mask False)
        index = np.full((len(self.nvec), width), flat, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(self.nvec)[:-1]])
        for slot, (start, n) in enumerate(zip(starts, self.nvec)):
            index[slot, :n] = start + np.arange(n)
        self.index: torch.Tensor
        self.register_buffer("index", torch.from_numpy(index), persistent=False)

    # ------------------------------------------------------------------ distributions
    def masked_logits(self, obs: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
        """Log-probabilities ``(n, slots, max(nvec))`` of every slot's values: the actor's
        logits with disallowed values (``masks`` False, ``(n, nvec.sum())``) and padding at
        ``-inf``, normalised per slot."""
        logits = self.actor(obs) if self.actor is not None else torch.zeros((obs.shape[0], int(self.nvec.sum())))
        extra = torch.full((logits.shape[0], 1), -torch.inf, dtype=logits.dtype)
        table = torch.cat([logits.masked_fill(~masks, -torch.inf), extra], dim=1)[:, self.index]
        if self.copy_best_at is not None:
            table = table.scatter_add(-1, self.best_values(obs).unsqueeze(-1), self.copy(obs).unsqueeze(-1))
        return torch.log_softmax(table, dim=-1)

    def best_values(self, obs: torch.Tensor) -> torch.Tensor:
        """The best config's canonical value of every action slot (each row of the action
        has the same), ``(n, slots)``, read from the observation."""
        at = self.copy_best_at
        assert at is not None
        scaled = obs[:, at:at + N_SLOTS] * torch.from_numpy(NVEC - 1).to(obs.dtype)
        values = torch.round(scaled).long().clamp(min=0)
        return values.repeat(1, len(self.nvec) // N_SLOTS)

    def sample(self, logp: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """One value per slot drawn from :meth:`masked_logits`' output (Gumbel-max), ``(n, slots)``."""
        u = torch.rand(logp.shape, generator=generator, dtype=logp.dtype).clamp_(1e-20, 1.0)
        return torch.argmax(logp - torch.log(-torch.log(u)), dim=-1)

    @staticmethod
    def log_prob_entropy(logp: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The log-probability of ``action`` (summed over slots) and the entropy (summed over
        slots) of each row, ``(n,)`` each; disallowed values add nothing to the entropy."""
        chosen = logp.gather(-1, action.unsqueeze(-1)).squeeze(-1).sum(-1)
        finite = torch.where(torch.isfinite(logp), logp, torch.zeros_like(logp))
        entropy = -(finite.exp() * finite).sum(-1).sum(-1)
        return chosen, entropy

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """The critic's value of each observation, ``(n,)``."""
        return self.critic(obs).squeeze(-1)

    # ------------------------------------------------------------------ as an SB3 model
    def predict(self, obs: np.ndarray, deterministic: bool = False,
                action_masks: np.ndarray | None = None) -> tuple[np.ndarray, None]:
        """Actions for one observation ``(obs_dim,)`` or a batch ``(n, obs_dim)``, like
        stable-baselines3's ``predict``: the most likely value of each slot, or one sampled
        with PyTorch's global generator; ``action_masks`` (default: everything allowed)."""
        single = np.ndim(obs) == 1
        x = torch.as_tensor(np.atleast_2d(obs), dtype=torch.float32)
        flat = int(self.nvec.sum())
        m = np.ones((x.shape[0], flat), dtype=bool) if action_masks is None else np.atleast_2d(action_masks)
        with torch.no_grad():
            logp = self.masked_logits(x, torch.as_tensor(m, dtype=torch.bool))
            action = logp.argmax(-1) if deterministic else self.sample(logp)
        out = action.numpy().astype(np.int64)
        return (out[0] if single else out), None

    def save(self, path: str | Path) -> None:
        """Write the weights and the shapes (``torch.save``) to ``path``."""
        torch.save({"obs_dim": self.obs_dim, "nvec": self.nvec.tolist(), "net": list(self.net),
                    "copy_best_at": self.copy_best_at, "values": self.values, "state_dict": self.state_dict()}, path)

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu", **_: Any) -> MaskedPolicy:
        """The policy :meth:`save` wrote (on the CPU; ``device`` is accepted for SB3's signature)."""
        if device != "cpu":
            raise ValueError(f"MaskedPolicy runs on the CPU, not {device!r}")
        data = torch.load(path, map_location="cpu", weights_only=True)
        policy = cls(data["obs_dim"], np.array(data["nvec"]), tuple(data["net"]), data.get("copy_best_at"),
                     values=data.get("values", True))
        policy.load_state_dict(data["state_dict"])
        policy.eval()
        return policy
