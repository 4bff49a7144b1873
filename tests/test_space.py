from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tune_gym.errors import SpaceError
from tune_gym.space import KnobSpace, perfect_tiles
from tune_gym.tasks import Task


def test_perfect_tiles_enumerates_every_factorization():
    tiles = perfect_tiles(12, 3, 4)
    assert all(math.prod(t) == 12 and t[-1] <= 4 for t in tiles)
    brute = {(a, b, c) for a in range(1, 13) for b in range(1, 13) for c in range(1, 5) if a * b * c == 12}
    assert set(tiles) == brute
    assert len(perfect_tiles(64, 4, 64)) == math.comb(6 + 3, 3)


@pytest.fixture(scope="module")
def conv_space(conv_task):
    return KnobSpace.for_task(conv_task, "full")


def test_full_space_knobs_are_named_after_loops(conv_space):
    names = set(conv_space.names)
    assert {"sketch", "tile_f", "tile_y", "tile_x", "tile_rc", "tile_ry", "tile_rx", "unroll_explicit"} <= names
    assert any(n.startswith("compute_at_") for n in names)
    assert len(conv_space.knobs[conv_space.names.index("tile_f")]) == len(perfect_tiles(16, 4, 64))
    assert conv_space.size > 1e6


def test_compact_space_is_exhaustively_measurable():
    for tid in ["resnet18:1", "resnet18:0", "mobilenet_v2:2", "bert_base:4"]:
        space = KnobSpace.for_task(Task.parse(tid), "compact")
        assert 500 <= space.size <= 50_000, (tid, space.size)


@given(data=st.data())
@settings(max_examples=150, deadline=None)
def test_flat_index_round_trip(conv_space, data):
    index = data.draw(st.integers(0, conv_space.size - 1))
    cfg = conv_space.config(index)
    assert conv_space.index(cfg) == index
    assert conv_space.check(cfg) == cfg
    assert conv_space.from_dict(conv_space.to_dict(cfg)) == cfg


def test_index_enumerates_compact_space_bijectively(dense_space):
    configs = list(dense_space)
    assert len(configs) == dense_space.size == len(set(configs))
    assert [dense_space.index(c) for c in configs] == list(range(dense_space.size))


def test_sampling_is_seeded(conv_space):
    a = conv_space.sample(np.random.default_rng(7), 20)
    b = conv_space.sample(np.random.default_rng(7), 20)
    c = conv_space.sample(np.random.default_rng(8), 20)
    assert a == b and a != c
    u = conv_space.sample_unique(np.random.default_rng(1), 50)
    assert len(set(u)) == 50


def test_neighbours_are_at_distance_one(conv_space):
    cfg = conv_space.sample(np.random.default_rng(3), 1)[0]
    nbrs = conv_space.neighbours(cfg)
    assert nbrs and cfg not in nbrs
    for n in nbrs:
        changed = [i for i in conv_space.active(cfg) if n[i] != cfg[i]]
        assert len(changed) == 1 and abs(n[changed[0]] - cfg[changed[0]]) == 1


def test_inactive_knobs_are_canonicalized():
    # conv2d_transpose sketches place the dilation block differently: one knob per sketch.
    space = KnobSpace.for_task(Task.make("conv2d_transpose_nchw", c=8, h=4, w=4, k=8, r=4, s=2, p=1), "full")
    only_some = [i for i, k in enumerate(space.knobs)
                 if space.active_mask[:, i].sum() < space.n_sketches]
    assert only_some, space
    k = only_some[0]
    sketch = next(s for s in range(space.n_sketches) if not space.active_mask[s, k])
    cfg = list(space.config(sum(space.sketch_sizes[:sketch])))
    cfg[k] = len(space.knobs[k]) - 1
    canon = space.check(cfg)
    assert canon[k] == 0 and space.index(canon) == sum(space.sketch_sizes[:sketch])


@pytest.mark.parametrize("bad, message", [
    ([0], "config has 1 values"),
    ("index", "out of range"),
    ("float", "is not an integer"),
    ("nan", "not a finite index"),
])
def test_bad_configs_name_the_knob(conv_space, bad, message):
    cfg = list(conv_space.config(0))
    if bad == "index":
        i = conv_space.names.index("tile_f")
        cfg[i] = len(conv_space.knobs[i]) + 3
        with pytest.raises(SpaceError, match=rf"knob 'tile_f': index {cfg[i]} out of range \[0, "):
            conv_space.check(cfg)
        return
    if bad == "float":
        cfg[1] = 0.5
    elif bad == "nan":
        cfg = np.array(cfg, dtype=float)
        cfg[2] = np.nan
    else:
        cfg = bad
    with pytest.raises(SpaceError, match=message):
        conv_space.check(cfg)


def test_schedule_applies_decisions(conv_space):
    cfg = conv_space.sample(np.random.default_rng(0), 1)[0]
    sch = conv_space.to_schedule(cfg)
    text = str(sch.trace)
    factors = conv_space.to_dict(cfg)["tile_f"]
    assert f"decision=[{', '.join(map(str, factors))}]" in text
    assert conv_space.is_valid(cfg)


def test_config_of_trace_inverts_trace(conv_space):
    from tune_gym.tvm_support import tvm

    assert "compute_at_pad_temp" in conv_space.names  # a knob whose valid choices depend on the tiles
    for cfg in conv_space.sample(np.random.default_rng(0), 40):
        assert conv_space.config_of_trace(conv_space.trace(cfg)) == cfg
        sch, _ = conv_space.apply(cfg)  # replayed and postprocessed: a location may have moved
        back = conv_space.config_of_trace(sch.trace)
        tvm().ir.assert_structural_equal(conv_space.to_schedule(back).mod, conv_space.to_schedule(cfg).mod)


def test_design_space_holds_the_sketches(conv_space):
    design = conv_space.design_space()
    assert len(design) == conv_space.n_sketches
    assert [conv_space.sketch_of(conv_space.config_of_trace(sch.trace)) for sch in design] == list(
        range(conv_space.n_sketches))


def test_config_of_trace_refuses_other_traces(conv_space, dense_space):
    trace = dense_space.trace(dense_space.config(0))
    with pytest.raises(SpaceError, match="the trace is not one of the space's 3 sketches"):
        conv_space.config_of_trace(trace)
    inst = next(i for i in trace.insts if i.kind.name == "SamplePerfectTile")
    odd = trace.with_decision(inst, [1, 1], remove_postproc=True)  # factors of another extent
    with pytest.raises(SpaceError, match="knob 'tile_i0': decision \\[1, 1\\] is not one of its"):
        dense_space.config_of_trace(odd)


def test_cuda_validity_without_gpu():
    space = KnobSpace.for_task(Task.parse("resnet18:1@cuda"), "full")
    rng = np.random.default_rng(0)
    valid = [space.is_valid(c) for c in space.sample(rng, 150)]
    # GPU code verification rejects most random configs and accepts some: a real invalid regime.
    assert 0 < sum(valid) < len(valid)
    cfg = next(c for c, v in zip(space.sample(np.random.default_rng(0), 150), valid) if not v)
    sch, why = space.apply(cfg)
    assert sch is None and why


def test_unknown_preset():
    with pytest.raises(SpaceError, match="unknown space preset"):
        KnobSpace(Task.parse("resnet18:1"), "tiny")


@pytest.mark.parametrize("preset", ["compact", "full"])
def test_knob_space_is_the_same_with_packed_and_given_weights(conv_task, dense_task, preset):
    for task in (conv_task, dense_task.with_weights("packed")):
        packed, given = KnobSpace.for_task(task, preset), KnobSpace.for_task(task.with_weights("given"), preset)
        assert task.weights == "packed" and packed is not given  # the weight layout is part of the cache key
        assert packed.knobs == given.knobs and packed.size == given.size
        assert packed.sketch_sizes == given.sketch_sizes and (packed.active_mask == given.active_mask).all()
        cfg = packed.sample(np.random.default_rng(0), 1)[0]
        # Only the packed task's schedule rewrites the weight layout (MetaSchedule's RewriteLayout).
        assert "meta_schedule.layout_rewrite_preproc" in packed.apply(cfg)[0].mod.script()
        assert "meta_schedule.layout_rewrite_preproc" not in given.apply(cfg)[0].mod.script()


@pytest.mark.parametrize("space_fixture", ["dense_space", "conv_space"])
def test_recorded_space_is_the_space_it_describes_without_schedules(space_fixture, request):
    import json

    from tune_gym.datasets import space_fingerprint
    from tune_gym.space import RecordedSpace

    space = request.getfixturevalue(space_fixture)
    recorded = RecordedSpace(json.loads(json.dumps(space.to_json())))
    assert space_fingerprint(recorded) == space_fingerprint(space)
    assert (recorded.size, recorded.names, recorded.sketch_sizes) == (space.size, space.names, space.sketch_sizes)
    assert (recorded.dims == space.dims).all() and (recorded.active_mask == space.active_mask).all()
    configs = space.sample(np.random.default_rng(0), 50)
    assert [recorded.index(c) for c in configs] == [space.index(c) for c in configs]
    assert [recorded.config(space.index(c)) for c in configs] == configs
    table = np.array(space.sample(np.random.default_rng(1), 20))
    assert (recorded.check_table(table) == space.check_table(table)).all()
    assert not recorded.has_schedules
    with pytest.raises(SpaceError, match="rebuilt from its description, without TVM, and has no trace"):
        recorded.trace(configs[0])


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("knobs"), "not a knob space description"),
    (lambda d: d.update(active=[[0, 99]]), "a sketch uses a knob that does not exist"),
    (lambda d: d.update(preset="tiny"), "unknown space preset 'tiny'"),
])
def test_bad_space_descriptions_are_refused(dense_space, mutate, message):
    from tune_gym.space import RecordedSpace

    description = dense_space.to_json()
    mutate(description)
    with pytest.raises(SpaceError, match=message):
        RecordedSpace(description)
