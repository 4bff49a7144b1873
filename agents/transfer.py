"""Configs carried from one kernel of a network to another (``tune_network(..., transfer=K)``).

The kernels of a network often share a schedule structure: ResNet-18's blocked convolutions
(NCHW16c) all have the knobs ``tile_oc_chunk``, ``tile_oh``, ``tile_ow``, ``tile_oc_block``,
``tile_ic``, ... with different extents. A schedule that is fast for one of them -- the
channel block vectorized innermost, a register tile of a few output columns -- is often fast
for the others, and a per-kernel agent with twenty-odd trials may not find it alone. Reusing
tuned schedules across kernels of one structure is the idea of transfer-tuning (Gibson and
Cano, PACT 2022); here it runs inside one network run, under the run's trial budget:

* **Peers** (:func:`compatible`): two kernels whose spaces have the same split knobs (names
  and number of parts). Other knobs (unroll, compute-at, sketch) are carried when both
  spaces have them.
* **Mapping** (:func:`map_config`): a peer's best config, as knob values, becomes for each
  knob of this kernel the choice nearest to it: split factors by ``sum_i 2**i * |log2 a_i -
  log2 b_i|`` over the parts from outer to inner (the inner factors -- vector width, register
  tile -- weigh most), ordered numbers by ``|log2(1 + a) - log2(1 + b)|``, compute-at
  locations by index, anything else by equality (else the first choice). Knobs the peer lacks
  take their first choice.
* **Which first** (:func:`peer_configs`): the peers' best configs ordered by the peer's
  best throughput (GFLOPS), fastest first, mapped, without configs this kernel has
  evaluated; the first ``K`` go ahead of the agent's proposals in each batch
  (:meth:`agents.base.EnvRunner.step`), and the agent observes their results like its own.
  As a peer's best improves, its new best is carried on the next step.

Measured with ``benchmarks/transfer_probe.py`` after a 512-trial ``meta-bo --shared-model`` run
of ResNet-18 (NCHW16c, 2 threads, Intel Xeon, LLVM ``emeraldrapids``): on each of the 17 blocked
convolutions the fastest of the other 16 kernels' best configs, mapped, beat the kernel's own
best re-timed in the same batch (1.01-4.96x, median 1.48x); the two of the fastest peers took
the convolutions' sum from 35.3 to 21.3 ms a pass (``docs/networks.md``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from tune_gym.space import Config, Knob, KnobSpace

__all__ = ["compatible", "map_config", "peer_configs"]


def _split_signature(space: KnobSpace) -> dict[str, int]:
    """``{split knob name: number of parts}``."""
    return {k.name: len(k.choices[0]) for k in space.knobs if k.kind == "split"}


def compatible(a: KnobSpace, b: KnobSpace) -> bool:
    """True when ``a`` and ``b`` have the same split knobs (names and parts) and at least one."""
    sig = _split_signature(a)
    return bool(sig) and sig == _split_signature(b)


def _distance(knob: Knob, choice: Any, value: Any) -> float:
    if knob.kind == "split":
        if len(choice) != len(value):
            return math.inf
        return sum(2.0 ** i * abs(math.log2(a) - math.log2(b)) for i, (a, b) in enumerate(zip(choice, value)))
    if knob.kind == "compute_at":
        return abs(int(choice) - int(value))
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > -1 for v in (choice, value))
    if knob.kind == "categorical" and numbers:
        return abs(math.log2(1 + choice) - math.log2(1 + value))
    return 0.0 if choice == value else 1.0


def map_config(values: Mapping[str, Any], space: KnobSpace) -> Config:
    """The config of ``space`` nearest to ``values`` (``{knob name: value}``, e.g. another
    space's :meth:`~tune_gym.space.KnobSpace.to_dict`), knob by knob (see the module
    docstring); knobs missing from ``values`` take index 0. Ties go to the earlier choice."""
    config = [0] * space.n_knobs
    for i, knob in enumerate(space.knobs):
        if knob.name not in values:
            continue
        value = values[knob.name]
        value = tuple(value) if isinstance(value, list) else value
        dists = [_distance(knob, c, value) for c in knob.choices]
        config[i] = min(range(len(dists)), key=dists.__getitem__)
    return space.canonical(config)


def peer_configs(space: KnobSpace, peers: Iterable[tuple[KnobSpace, Config, float]],
                 exclude: Iterable[Config] = (), n: int | None = None) -> list[Config]:
    """Up to ``n`` (all: ``None``) distinct configs of ``space`` mapped from its peers' best
    configs, fastest peer first.

    Args:
        space: the kernel's space.
        peers: ``(peer space, peer's best config, its GFLOPS)``; peers that are not
            :func:`compatible` with ``space`` are skipped.
        exclude: configs not to return (those the kernel has evaluated).
        n: how many at most.
    """
    skip = set(exclude)
    out: list[Config] = []
    for peer_space, best, _ in sorted(peers, key=lambda p: -p[2]):  # stable: ties keep the peers' order
        if n is not None and len(out) >= n:
            break
        if not compatible(space, peer_space):
            continue
        config = map_config(peer_space.to_dict(best), space)
        if config not in skip:
            skip.add(config)
            out.append(config)
    return out
