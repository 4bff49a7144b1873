"""AutoTVM's itervar features (agents/models/itervar.py): hand-checked values, layout, cache, use."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from agents.base import make_agent
from agents.models import itervar
from agents.models.itervar import ANNOTATIONS, LOOP_WIDTH, TOUCH_WIDTH, ItervarFeaturizer, ItervarLayout, extract
from tune_gym.measure.replay import ReplayBackend
from tune_gym.space import KnobSpace
from tune_gym.tasks import Task

DATA = Path(__file__).parent / "data" / "tiny_compact.jsonl"
C16_DATA = Path(__file__).parent / "data" / "transfer_conv2d_c16.jsonl"
DENSE = Task.from_uri("op://dense-v1/m32_n32_k32?weights=given&target=llvm")
CONV = Task.from_uri("op://conv2d_nchw-v1/n1_c8_h8_w8_k8_r3_s1_p1_d1?weights=given&target=llvm")
#: dense config 7: sketch 0 (no cache write), tile_i0 (2, 16), tile_i1 (4, 8), unroll 512
CFG7 = 7


@pytest.fixture(scope="module")
def dense():
    return KnobSpace.for_task(DENSE, "compact")


@pytest.fixture(scope="module")
def loops(dense):
    cfg = dense.config(CFG7)
    assert dense.to_dict(cfg) == {"sketch": 0, "tile_i0": (2, 16), "tile_i1": (4, 8), "unroll_explicit": 512}
    raw = extract(dense.apply(cfg)[0].mod["main"])
    return raw, {loop.name: loop for loop in raw.loops}


def test_loop_attributes(loops):
    raw, by_name = loops
    # C[i, j] += A[i, k] * B[j, k] under: fused parallel (2*... -> 8) / k 32 / i0_1 16 / i1_1 8 (vectorized)
    assert [loop.name for loop in raw.loops] == ["i0_0_i1_0_fused", "i0_1_init", "i1_1_fused_init", "k", "i0_1",
                                                 "i1_1_fused"]
    fused, k, i1 = by_name["i0_0_i1_0_fused"], by_name["k"], by_name["i1_1_fused"]
    assert (fused.length, fused.nest_level, ANNOTATIONS[fused.ann]) == (8, 1, "parallel")
    assert (k.length, k.nest_level, ANNOTATIONS[k.ann], k.topdown) == (32, 2, "serial", 8 * 32)
    assert (i1.nest_level, ANNOTATIONS[i1.ann], i1.topdown) == (4, "vectorized", 8 * 32 * 16 * 8)
    assert (i1.add, i1.mul, i1.div) == (1, 1, 0) and k.add == k.mul == 0  # float ops of the innermost loop
    assert k.bottomup == 32 * 16 * 8  # max over buffers of count * reuse = the nest's iterations
    assert raw.other == (512.0, 1.0)  # the unroll pragmas (AutoTVM's "other options")


def test_touch_patterns(loops):
    """stride: coefficient in the flattened index; count: extents of the loops at or below
    that move through the buffer; reuse: those that do not (touch_extractor.cc)."""
    _, by_name = loops
    k, i0, i1 = by_name["k"], by_name["i0_1"], by_name["i1_1_fused"]
    data, weight, out = "data_0", "weight_0", "T_matmul_NT_1"  # A[i, k], B[j, k], the store C[i, j]
    assert [(i1.touch[b].stride, i1.touch[b].count, i1.touch[b].reuse) for b in (data, weight, out)] == [
        (0, 1, 8), (32, 8, 1), (1, 8, 1)]
    assert [(i0.touch[b].stride, i0.touch[b].count, i0.touch[b].reuse) for b in (data, weight, out)] == [
        (32, 16, 8), (0, 8, 16), (32, 128, 1)]
    assert [(k.touch[b].stride, k.touch[b].count, k.touch[b].reuse) for b in (data, weight, out)] == [
        (1, 512, 8), (1, 256, 16), (0, 128, 32)]
    assert "T_matmul_NT_0" not in k.touch  # the init block's store is in another nest
    # thread_count: count relative to the first loop below the parallel one (8 = parallel extent)
    fused = by_name["i0_0_i1_0_fused"]
    assert fused.touch[data].thread_count == fused.touch[data].count // k.touch[data].count == 8


def test_flatten_takes_log_and_fixes_the_layout(dense, loops):
    raw, _ = loops
    layout = ItervarLayout.probe(dense)
    assert layout.n_loops >= len(raw.loops) and {"data_0", "weight_0"} <= set(layout.keys)
    row = layout.flatten(raw)
    width = LOOP_WIDTH + TOUCH_WIDTH * len(layout.keys)
    assert row.shape == (layout.dim,) == (layout.n_loops * width + 2,)
    k = row[3 * width: 4 * width]  # the 4th loop, k
    assert k[0] == pytest.approx(math.log2(33)) and k[1] == 2  # log2(1 + length); nest level raw
    assert k[4 + ANNOTATIONS.index("serial")] == 1 and k[4: 4 + len(ANNOTATIONS)].sum() == 1
    j = LOOP_WIDTH + TOUCH_WIDTH * layout.keys.index("data_0")
    np.testing.assert_allclose(k[j: j + TOUCH_WIDTH], [1, -1, math.log2(513), math.log2(9), 0, 0], rtol=1e-6)
    assert not row[len(raw.loops) * width: -2].any()  # absent loops are zeros
    assert not layout.flatten(None).any()  # an invalid config


def test_featurizer_is_fixed_width_distinct_and_cached(dense, monkeypatch):
    feats = ItervarFeaturizer(dense)
    x = feats(np.array(list(dense)))
    assert x.shape == (dense.size, feats.dim) and np.isfinite(x).all()
    assert len({r.tobytes() for r in x}) == dense.size  # every program differs
    monkeypatch.setattr(dense, "apply", lambda *args: pytest.fail("features must come from the cache"))
    np.testing.assert_array_equal(ItervarFeaturizer(dense, feats.layout)(np.array(list(dense)[:20])), x[:20])


def test_invalid_config_gives_zeros(dense, monkeypatch):
    cfg = dense.config(3)
    monkeypatch.setattr(dense, "apply", lambda *args: (None, "rejected by postproc"))
    monkeypatch.setattr(itervar, "_RAW_CACHE", {})
    layout = ItervarLayout(4, ("data_0",))
    assert not ItervarFeaturizer(dense, layout)(np.array([cfg])).any()


def test_resnet_conv2d_features():
    space = KnobSpace.for_task(Task.parse("resnet18:1"), "full")
    feats = ItervarFeaturizer(space)
    # Packed weights (the default): the timed kernel reads the pre-packed weight_global, and the
    # layout rewrite that fills it (run once ahead of time) is not part of the features.
    assert {"data_0", "weight_global_0", "pad_temp_0"} <= set(feats.layout.keys) and feats.layout.n_loops >= 20
    assert "weight_0" not in feats.layout.keys
    x = feats(np.array(space.sample(np.random.default_rng(0), 4)))
    assert np.isfinite(x).all() and (x != 0).sum(axis=1).min() > 100


def test_xgb_sa_with_itervar_features_plans_better_than_random(train_seed, record_property):
    space = KnobSpace.for_task(CONV, "compact")
    backend = ReplayBackend(DATA)
    truth = {c: r.gflops for c, r in zip(space, backend.measure(CONV, space, list(space)))}
    gains = []
    for seed in range(3 * train_seed, 3 * train_seed + 3):  # --seeds N: seeds 3N to 3N + 2
        agent = make_agent("xgb-sa", features="itervar", plan_size=64)
        agent.reset(space, CONV, seed=seed)
        first = agent.propose(64)  # random
        agent.observe(first, backend.measure(CONV, space, first))
        guided = agent.propose(64)[:-3]  # the SA's picks on the itervar model (the last 3 are random)
        assert isinstance(agent._featurizer, ItervarFeaturizer) and agent.fitted
        gains.append(np.mean([truth[c] for c in guided]) / np.mean([truth[c] for c in first]))
    record_property("median_gain", np.median(gains))
    assert np.median(gains) > 1.3, gains


def test_transfer_with_itervar_features_shares_one_layout():
    space = KnobSpace.for_task(CONV, "compact")
    agent = make_agent("xgb-sa-transfer", records=[str(C16_DATA)], features="itervar", plan_size=16)
    agent.reset(space, CONV, seed=0)
    assert agent.base is not None and agent.fitted
    assert agent.featurize(np.array(space.sample(np.random.default_rng(0), 3))).shape[1] == agent._featurizer.dim
    assert agent.base.booster.num_features() == agent._featurizer.dim
    assert len(agent.propose(16)) == 16
