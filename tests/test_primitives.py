"""TLP primitive-sequence features (tune_gym.features.primitives)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

from tune_gym.features.primitives import (
    KNOWN_TOKENS,
    PRIMITIVE_KINDS,
    SequenceEncoder,
    default_shape,
    encode_configs,
    encode_trace,
    token_id,
    trace_rows,
)
from tune_gym.space import KnobSpace
from tune_gym.tasks.task import Task

_DIGEST_SCRIPT = """
import hashlib
from tune_gym.features.primitives import encode_configs
from tune_gym.space import KnobSpace
from tune_gym.tasks.task import Task
space = KnobSpace.for_task(Task.make("dense", m=16, n=16, k=16), "compact")
configs = [space.config(i) for i in (0, 7, 42, space.size - 1)]
print(hashlib.sha256(encode_configs(space, configs).tobytes()).hexdigest())
"""


@pytest.fixture(scope="module")
def cpu_space() -> KnobSpace:
    return KnobSpace.for_task(Task.make("dense", m=16, n=16, k=16), "compact")


@pytest.fixture(scope="module")
def conv_space() -> KnobSpace:  # full CPU space: splits, unroll and a compute location
    return KnobSpace.for_task(Task.make("conv2d_nchw", c=16, h=8, w=8, k=16, r=3, p=1), "full")


def _configs(space: KnobSpace, n: int = 6) -> list[tuple[int, ...]]:
    return space.sample(np.random.default_rng(0), n)


def test_shapes(cpu_space: KnobSpace) -> None:
    configs = _configs(cpu_space)
    x = encode_configs(cpu_space, configs)
    assert x.shape == (len(configs), 25, 22) and x.dtype == np.float32
    trace = cpu_space.trace(configs[0])
    assert encode_trace(trace).shape == (25, 22)
    assert encode_trace(trace, max_len=7, vec_len=30).shape == (7, 30)
    assert encode_configs(cpu_space, configs[:2], max_len=12, vec_len=16).shape == (2, 12, 16)
    with pytest.raises(ValueError):
        encode_trace(trace, vec_len=len(PRIMITIVE_KINDS) - 1)


def test_rows_are_one_hot_then_arguments(cpu_space: KnobSpace) -> None:
    trace = cpu_space.trace(_configs(cpu_space)[0])
    x = encode_trace(trace)
    rows = trace_rows(trace)
    k = len(PRIMITIVE_KINDS)
    for r, (kind, nums, toks) in enumerate(rows):
        assert x[r, :k].sum() == 1 and x[r, PRIMITIVE_KINDS.index(kind)] == 1
        args = (nums + toks)[: 22 - k]
        np.testing.assert_array_equal(x[r, k:k + len(args)], np.asarray(args, dtype=np.float32))
    kinds = [kind for kind, _, _ in rows]
    assert "Split" in kinds and "GetSBlock" not in kinds and "SamplePerfectTile" not in kinds


def test_cropping_is_a_prefix(conv_space: KnobSpace) -> None:
    trace = conv_space.trace(_configs(conv_space)[0])
    full = encode_trace(trace, max_len=40, vec_len=40)
    np.testing.assert_array_equal(encode_trace(trace, max_len=5, vec_len=22), full[:5, :22])


def test_padding_rows_are_zero(cpu_space: KnobSpace) -> None:
    for config in _configs(cpu_space):
        trace = cpu_space.trace(config)
        n = len(trace_rows(trace))
        x = encode_trace(trace)
        assert 0 < n < 25
        assert np.all(x[n:] == 0)
        assert np.all(x[:n].any(axis=1))


def test_deterministic_in_process(cpu_space: KnobSpace) -> None:
    configs = _configs(cpu_space)
    np.testing.assert_array_equal(encode_configs(cpu_space, configs), encode_configs(cpu_space, configs))


@pytest.mark.heavy
def test_deterministic_across_processes(cpu_space: KnobSpace) -> None:
    configs = [cpu_space.config(i) for i in (0, 7, 42, cpu_space.size - 1)]
    here = hashlib.sha256(encode_configs(cpu_space, configs).tobytes()).hexdigest()
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # str hash() differs; features must not
    out = subprocess.run([sys.executable, "-c", _DIGEST_SCRIPT], capture_output=True, text=True,
                         env=env, timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == here


def test_tokens_are_fixed() -> None:
    assert token_id("root") == 1 and token_id("global") == 2
    assert token_id("T_add") == 87  # CRC-32 bucket: pinned so a change of scheme is noticed
    assert token_id("conv2d_nchw/CacheWrite/0/global") == 253
    assert all(token_id(s) == i + 1 for i, s in enumerate(KNOWN_TOKENS))
    assert token_id("anything else") > len(KNOWN_TOKENS)


def test_different_split_factors_differ(cpu_space: KnobSpace) -> None:
    config = _configs(cpu_space)[0]
    knob = next(i for i in cpu_space.active(config)
                if cpu_space.knobs[i].kind == "split" and len(cpu_space.knobs[i]) > 1)
    other = list(config)
    other[knob] = (config[knob] + 1) % len(cpu_space.knobs[knob])
    a, b = encode_configs(cpu_space, [config, tuple(other)])
    assert not np.array_equal(a, b)
    split = PRIMITIVE_KINDS.index("Split")
    changed = np.flatnonzero((a != b).any(axis=1))
    assert all(a[r, split] == 1 for r in changed)


def test_every_knob_is_visible_on_cpu(conv_space: KnobSpace) -> None:
    config = _configs(conv_space, 1)[0]
    base = encode_configs(conv_space, [config])[0]
    checked = set()
    for i in conv_space.active(config):
        knob = conv_space.knobs[i]
        if knob.kind == "sketch" or len(knob) < 2:
            continue
        other = list(config)
        other[i] = (config[i] + 1) % len(knob)
        assert not np.array_equal(encode_configs(conv_space, [tuple(other)])[0], base), knob.name
        checked.add(knob.kind)
    assert {"split", "categorical"} <= checked


def test_gpu_default_shape() -> None:
    assert default_shape("llvm") == default_shape("cpu") == (25, 22)
    assert default_shape("cuda") == default_shape("gpu") == (20, 40)
    with pytest.raises(ValueError):
        default_shape("metal")
    space = KnobSpace.for_task(Task.make("dense", target="cuda", m=16, n=16, k=16), "compact")
    x = encode_configs(space, _configs(space, 3))
    assert x.shape == (3, 20, 40)
    assert x[:, :, PRIMITIVE_KINDS.index("Bind")].any()


@pytest.mark.parametrize("target", ["llvm", "cuda"])
def test_sequence_encoder_equals_exact_encoding(conv_space: KnobSpace, target: str) -> None:
    space = conv_space if target == "llvm" else KnobSpace.for_task(
        Task.make("dense", target="cuda", m=16, n=16, k=16), "full")
    encoder = SequenceEncoder(space)
    assert not encoder.exact  # the vectorised path, not the fallback
    configs = np.asarray(space.sample(np.random.default_rng(3), 200))
    assert np.array_equal(encoder(configs), encode_configs(space, configs))
    assert encoder(configs[:1]).shape == (1, *default_shape(target))
