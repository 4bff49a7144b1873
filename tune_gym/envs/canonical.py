"""One action vocabulary for every task: knob choices expressed by what they do.

A task's own action (``Tune-v0``) is a tuple of per-knob choice *indices*, and an index means
different things in different tasks (``tile_y`` index 1 is the split ``(2, 7)`` of one
convolution and ``(7, 1)`` of another). ``MultiTune-v0`` (:mod:`tune_gym.envs.multi_task`) acts
in this module's *canonical* vocabulary instead: a fixed number of slots (:data:`N_SLOTS`), each a
categorical whose values mean the same in every task.

Slots (:data:`SLOT_NAMES`):
    ``sketch`` (slot 0): the MetaSchedule sketch index, 0 .. :data:`MAX_SKETCHES` - 1 (sketches
        come from the same schedule rules for every task of a target and preset).
    ``unroll`` (slot 1): the ``unroll_explicit`` step, an index into :data:`UNROLL_STEPS`.
    ``compute_at`` (slot 2): a ``compute_at`` knob's location, ``location + 2`` (0 inline,
        1 root, 2 + i the i-th loop), below :data:`N_LOCATIONS`.
    ``tile<s>.<l>`` (slots 3 ..): tile sizes. The ``s``-th split knob of the task (in the space's
        order, at most :data:`MAX_SPLITS`) has up to :data:`MAX_LEVELS` slots, one per nested tile:
        a split ``(f0, f1, ..., fn)`` of a loop of extent ``E`` has the tiles ``f1 * ... * fn``,
        ``f2 * ... * fn``, ..., ``fn`` (the innermost). Each slot's value is the tile's size as
        ``round(TILE_STEPS_PER_OCTAVE * log2(E / tile))`` (0: the tile is the whole loop; each
        step a quarter octave smaller), below :data:`N_TILE_VALUES`. The tiles are right-aligned:
        the innermost tile of every split is always the knob's last slot, ``tile<s>.2``.

Slots a task does not use (no sketch knob, fewer splits, fewer levels) are padding: their value
is ignored, and their mask allows only 0.

Decoding (:meth:`CanonicalCodec.decode`) maps each knob to its choice nearest the requested
values (the L1 distance over the knob's slots, ties to the lower index), deterministically,
so every action of the space is a config of the task; the mask (:meth:`CanonicalCodec.mask`)
allows exactly the values some choice of the task has, slot by slot. On a knob with one slot (a
two-way split, the unroll step, a location) an allowed value therefore decodes to the choice
that has it. :meth:`CanonicalCodec.encode` is the inverse: a config's canonical values.

Spaces with a knob this vocabulary has no slot for (a ``nominal`` knob, a categorical other
than the unroll step, a second ``compute_at`` knob, more than :data:`MAX_SPLITS` splits or
:data:`MAX_SKETCHES` sketches) are refused with an error naming the knob.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tune_gym.errors import SpaceError
from tune_gym.space import Knob, KnobSpace

__all__ = ["MAX_LEVELS", "MAX_SKETCHES", "MAX_SPLITS", "NVEC", "N_LOCATIONS", "N_SLOTS", "N_TILE_VALUES",
           "SLOT_NAMES", "TILE_STEPS_PER_OCTAVE", "UNROLL_STEPS", "CanonicalCodec", "encode_choices",
           "nearest_choices", "pad_tables", "tile_value"]

#: Sketches a task may have (the ``full`` presets have 3).
MAX_SKETCHES = 4
#: Every unroll step MetaSchedule's rules offer (``unroll_max_steps`` of the CPU and GPU rules).
UNROLL_STEPS = (0, 16, 64, 512, 1024)
#: Locations of a ``compute_at`` knob: -2 (inline), -1 (root), loops 0 .. N_LOCATIONS - 3.
N_LOCATIONS = 16
#: Split knobs a task may have (a full-preset ``conv2d_nchw`` has 7: n, f, y, x, rc, ry, rx).
MAX_SPLITS = 8
#: Nested tiles of one split (a ``full``-preset CPU split has four factors: three tiles).
MAX_LEVELS = 3
#: Resolution of a tile slot: values per octave of ``extent / tile``.
TILE_STEPS_PER_OCTAVE = 4
#: Values of a tile slot: tiles down to 2**-12 of the loop (extents up to 4096).
N_TILE_VALUES = 12 * TILE_STEPS_PER_OCTAVE + 1

_SKETCH, _UNROLL, _COMPUTE_AT, _TILES = 0, 1, 2, 3
SLOT_NAMES = ("sketch", "unroll", "compute_at",
              *(f"tile{s}.{level}" for s in range(MAX_SPLITS) for level in range(MAX_LEVELS)))
N_SLOTS = len(SLOT_NAMES)
#: Values of each slot (the ``nvec`` of one row of the action).
NVEC = np.array([MAX_SKETCHES, len(UNROLL_STEPS), N_LOCATIONS] + [N_TILE_VALUES] * (MAX_SPLITS * MAX_LEVELS),
                dtype=np.int64)
#: Offset of each slot's values in a flat mask (``mask[OFFSETS[s] + v]``).
_OFFSETS = np.concatenate([[0], np.cumsum(NVEC)[:-1]])


def tile_value(extent: int, tile: int) -> int:
    """A tile's canonical value: ``round(TILE_STEPS_PER_OCTAVE * log2(extent / tile))``, at most
    ``N_TILE_VALUES - 1``."""
    return min(round(TILE_STEPS_PER_OCTAVE * math.log2(extent / tile)), N_TILE_VALUES - 1)


@dataclass(frozen=True)
class _KnobSlots:
    """Where one knob lives in the canonical row: its slots and each choice's values there."""

    knob: int  # index in the space
    slots: np.ndarray  # (n_slots,) slot indices
    values: np.ndarray  # (n_choices, n_slots) canonical values of each choice


class CanonicalCodec:
    """The canonical action vocabulary of one task's space (see the module docstring).

    Raises:
        SpaceError: the space has a knob no slot can hold (naming the task and the knob).
    """

    def __init__(self, space: KnobSpace) -> None:
        self.space = space
        self._knobs: list[_KnobSlots] = []
        splits = 0
        for i, knob in enumerate(space.knobs):
            slots, values = self._place(knob, splits)
            splits += knob.kind == "split"
            self._knobs.append(_KnobSlots(i, np.asarray(slots, dtype=np.int64), values))
        used = np.concatenate([k.slots for k in self._knobs]) if self._knobs else np.zeros(0, dtype=np.int64)
        if len(set(used.tolist())) != len(used):
            raise SpaceError(f"{space.task.uri}: two knobs need the same canonical slot ({', '.join(space.names)})")
        mask = np.zeros(int(NVEC.sum()), dtype=bool)
        mask[_OFFSETS] = True  # padding slots: only 0
        for k in self._knobs:
            for j, slot in enumerate(k.slots):
                mask[_OFFSETS[slot]] = False
                mask[_OFFSETS[slot] + np.unique(k.values[:, j])] = True
        mask.setflags(write=False)
        self._mask = mask
        self._slot_index, self._choice_values = _padded_knobs(self._knobs, space.n_knobs)
        #: Per tile slot, log2 of the split loop's extent (0 for padding): what a policy sees of
        #: the loop a tile slot tiles.
        self.slot_extents = np.zeros(N_SLOTS, dtype=np.float32)
        for k in self._knobs:
            knob = space.knobs[k.knob]
            if knob.kind == "split":
                self.slot_extents[k.slots] = math.log2(math.prod(knob.choices[0]))

    def _place(self, knob: Knob, splits: int) -> tuple[list[int], np.ndarray]:
        """The slots of ``knob`` and its choices' values there (``splits``: split knobs before it)."""
        where = f"{self.space.task.uri}: knob {knob.name!r} ({knob.kind})"
        if knob.kind == "sketch":
            if len(knob) > MAX_SKETCHES:
                raise SpaceError(f"{where}: {len(knob)} sketches; MultiTune-v0 encodes at most {MAX_SKETCHES}")
            return [_SKETCH], np.arange(len(knob)).reshape(-1, 1)
        if knob.kind == "categorical" and "unroll" in knob.name:
            bad = [c for c in knob.choices if c not in UNROLL_STEPS]
            if bad:
                raise SpaceError(f"{where}: unroll steps {bad} are not among the canonical {UNROLL_STEPS}")
            return [_UNROLL], np.array([[UNROLL_STEPS.index(c)] for c in knob.choices])
        if knob.kind == "compute_at":
            if any(not -2 <= c < N_LOCATIONS - 2 for c in knob.choices):
                raise SpaceError(f"{where}: locations {knob.choices} beyond the canonical -2 .. {N_LOCATIONS - 3}")
            if any(k.slots[0] == _COMPUTE_AT for k in self._knobs):
                raise SpaceError(f"{where}: a second compute_at knob; MultiTune-v0 encodes one")
            return [_COMPUTE_AT], np.array([[c + 2] for c in knob.choices])
        if knob.kind == "split":
            levels = len(knob.choices[0]) - 1
            if splits >= MAX_SPLITS or levels > MAX_LEVELS:
                raise SpaceError(f"{where}: MultiTune-v0 encodes at most {MAX_SPLITS} splits of at most "
                                 f"{MAX_LEVELS + 1} factors")
            first = _TILES + splits * MAX_LEVELS + MAX_LEVELS - levels  # right-aligned: innermost last
            values = np.array([[tile_value(math.prod(c), math.prod(c[j + 1:])) for j in range(levels)]
                               for c in knob.choices], dtype=np.int64).reshape(len(knob), levels)
            return list(range(first, first + levels)), values
        raise SpaceError(f"{where}: MultiTune-v0 has no canonical slot for this kind of knob (it encodes sketches, "
                         "unroll steps, one compute_at location and tile splits)")

    def mask(self) -> np.ndarray:
        """The allowed values of one row, a read-only flat bool vector of ``NVEC.sum()``: slot
        ``s`` value ``v`` at ``offset(s) + v`` (the per-dimension masks of a ``MultiDiscrete``
        concatenated, as sb3-contrib's MaskablePPO reads them)."""
        return self._mask

    def decode(self, rows: np.ndarray) -> np.ndarray:
        """Canonical rows ``(n, N_SLOTS)`` (in range) -> the task's configs ``(n, n_knobs)``,
        int64, canonical: per knob the choice nearest the row's values (ties: lower index)."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1, N_SLOTS)
        return self.space.check_table(nearest_choices(rows, self._slot_index, self._choice_values))

    def encode(self, configs: np.ndarray) -> np.ndarray:
        """Configs ``(n, n_knobs)`` -> their canonical rows ``(n, N_SLOTS)`` (padding 0)."""
        configs = np.asarray(configs, dtype=np.int64).reshape(-1, self.space.n_knobs)
        return encode_choices(configs, self._slot_index, self._choice_values)

    @property
    def tables(self) -> tuple[np.ndarray, np.ndarray]:
        """The codec as arrays (what :func:`nearest_choices` and :func:`encode_choices` take),
        level by level (a knob's ``l``-th slot; ``n_levels`` is the most slots a knob has):
        ``slot_index`` ``(n_levels, n_knobs)``, each knob's slots (:data:`N_SLOTS`, a column of
        zeros, where a knob has fewer), and ``choice_values`` ``(n_levels, n_knobs,
        n_choices)`` int32, each choice's values there (:data:`_FAR` for the choices past a
        knob's last), so the arrays of knobs, and of tasks, stack to one shape."""
        return self._slot_index, self._choice_values


#: Value of the padding choices in :attr:`CanonicalCodec.tables`: farther from any row than
#: every real choice, so never the nearest.
_FAR = 1 << 20


def _padded_knobs(knobs: list[_KnobSlots], n_knobs: int) -> tuple[np.ndarray, np.ndarray]:
    """:attr:`CanonicalCodec.tables` of a codec's knobs (in the space's knob order)."""
    n_choices = max((len(k.values) for k in knobs), default=1)
    n_levels = max((len(k.slots) for k in knobs), default=1)
    slot_index = np.full((n_levels, n_knobs), N_SLOTS, dtype=np.int64)
    values = np.zeros((n_levels, n_knobs, n_choices), dtype=np.int32)
    for k in knobs:
        slot_index[:len(k.slots), k.knob] = k.slots
        values[:len(k.slots), k.knob] = np.pad(k.values.T, ((0, 0), (0, n_choices - len(k.values))),
                                               constant_values=_FAR)
    return slot_index, values


def pad_tables(tables: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Several codecs' :attr:`~CanonicalCodec.tables` stacked to ``(n_codecs, levels, knobs,
    ...)``: missing knobs and levels take slot :data:`N_SLOTS` and choice 0, missing choices
    :data:`_FAR`."""
    n_levels = max(index.shape[0] for index, _ in tables)
    n_knobs = max(index.shape[1] for index, _ in tables)
    n_choices = max(values.shape[2] for _, values in tables)
    slot_index = np.full((len(tables), n_levels, n_knobs), N_SLOTS, dtype=np.int64)
    values = np.full((len(tables), n_levels, n_knobs, n_choices), _FAR, dtype=np.int32)
    values[..., 0] = 0  # a missing knob or level: choice 0, at distance 0
    for t, (index, vals) in enumerate(tables):
        levels, knobs, choices = vals.shape
        slot_index[t, :levels, :knobs] = index
        values[t, :levels, :knobs, :choices] = vals
        values[t, levels:, :knobs] = 0  # levels no knob of this codec has: no distance
    return slot_index, values


def nearest_choices(rows: np.ndarray, slot_index: np.ndarray, choice_values: np.ndarray) -> np.ndarray:
    """Per knob, the index of the choice nearest canonical ``rows`` (L1 over the knob's slots,
    ties to the lower index), as a few array operations (one per level).

    ``rows`` is ``(..., N_SLOTS)`` int; ``slot_index`` and ``choice_values`` are a codec's
    :attr:`~CanonicalCodec.tables` (the same for every row), or per-row ones with leading
    dimensions that broadcast against the rows' (a vector env's ``(num_envs, 1, ...)``: each
    sub-env's task's tables for its ``batch_size`` rows). Returns ``(..., n_knobs)`` int64 (not
    canonical: :meth:`KnobSpace.check_table` makes it so)."""
    wide = np.zeros((*rows.shape[:-1], N_SLOTS + 1), dtype=np.int32)
    wide[..., :N_SLOTS] = rows
    distance = None
    for level in range(slot_index.shape[-2]):
        index = slot_index[..., level, :]
        picked = wide[..., index] if index.ndim == 1 else np.take_along_axis(wide, index, axis=-1)
        term = np.abs(picked[..., None] - choice_values[..., level, :, :])  # (..., knobs, choices)
        distance = term if distance is None else distance + term
    assert distance is not None
    return distance.argmin(axis=-1)


def encode_choices(configs: np.ndarray, slot_index: np.ndarray, choice_values: np.ndarray) -> np.ndarray:
    """Configs ``(n, n_knobs)`` -> canonical rows ``(n, N_SLOTS)`` with one codec's
    :attr:`~CanonicalCodec.tables` (padding slots 0)."""
    n, n_knobs = configs.shape
    wide = np.zeros((n, N_SLOTS + 1), dtype=np.int64)
    for level in range(slot_index.shape[0]):
        wide[:, slot_index[level]] = choice_values[level, np.arange(n_knobs), configs]
    return wide[:, :N_SLOTS]
