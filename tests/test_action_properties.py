"""Property tests of ``tune_gym/Tune-v0``'s action space, on a replay backend (no hardware).

Only the public API is used: ``gymnasium.make``, ``reset``, ``step``, ``action_space``,
``unwrapped.space`` (names, dims, size of the knob space) and the documented error type
:class:`tune_gym.errors.SpaceError`. Properties, for every ``action_format``:

* any sample of ``env.action_space`` (and any in-range integer table, of any integer dtype,
  as an array or a list) steps fine;
* a wrong shape, an out-of-range or negative index, a float, NaN or bool array raises
  ``SpaceError`` (a ``ValueError``) whose message names the row and the knob (or the flat
  index range), or the expected shape / dtype;
* a refused action changes nothing: the env steps on, and the budget is untouched.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tune_gym  # noqa: F401  (registers the environments)
from tune_gym.errors import SpaceError

FORMATS = ("flat", "knobs", "index")
TASK = "op://dense-v1/m32_n32_k32?weights=given&target=llvm"
BATCH = 4
PROPS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def envs():
    out = {
        fmt: gym.make("tune_gym/Tune-v0", task=TASK, backend="replay",
                      backend_options={"dataset": "tests/data/tiny_compact.jsonl"}, preset="compact",
                      reward_norm="none", batch_size=BATCH, budget=16, action_format=fmt)
        for fmt in FORMATS
    }
    for env in out.values():
        env.reset(seed=0)
    yield out
    for env in out.values():
        env.close()


def nvec(env: Any) -> np.ndarray:
    """Per-entry number of choices, in the action's own shape."""
    return np.asarray(env.action_space.nvec)


def step_ok(env: Any, action: Any) -> dict[str, Any]:
    """Step a valid action; reset when the episode ends. Returns ``info``."""
    obs, reward, terminated, truncated, info = env.step(action)
    assert env.observation_space.contains(obs)
    assert np.isfinite(reward) and reward >= 0
    if terminated or truncated:
        env.reset()
    return info


def refused(env: Any, bad: Any, valid: np.ndarray) -> str:
    """Assert ``bad`` raises SpaceError and leaves the env as it was; return the message."""
    _, _, terminated, truncated, before = env.step(valid)
    with pytest.raises(SpaceError) as err:
        env.step(bad)
    assert isinstance(err.value, ValueError)
    _, _, _, _, after = env.step(valid)  # the same configs again: cached, so free
    assert after["trials_used"] == before["trials_used"]
    if terminated or truncated:
        env.reset()
    return str(err.value)


def where(env: Any, position: int) -> tuple[int, str | None]:
    """(row, knob name or None for flat indices) of a position in the flattened action."""
    if env.unwrapped.action_format == "index":
        return position, None
    k = len(env.unwrapped.space.names)
    return position // k, env.unwrapped.space.names[position % k]


@st.composite
def valid_actions(draw: st.DrawFn, env: Any) -> np.ndarray:
    dims = nvec(env)
    values = [draw(st.integers(0, int(n) - 1)) for n in dims.ravel()]
    dtype = draw(st.sampled_from([np.int64, np.int32, np.uint16]) if dims.max() < 2**15 else st.just(np.int64))
    return np.asarray(values, dtype=dtype).reshape(dims.shape)


# ---------------------------------------------------------------------------- valid actions
@pytest.mark.parametrize("fmt", FORMATS)
@given(seed=st.integers(0, 2**32 - 1))
@PROPS
def test_any_sample_of_the_action_space_steps(envs, fmt, seed):
    env = envs[fmt]
    env.action_space.seed(seed)
    action = env.action_space.sample()
    assert env.action_space.contains(action)
    assert step_ok(env, action)["trials_used"] <= 16


@pytest.mark.parametrize("fmt", FORMATS)
@given(data=st.data())
@PROPS
def test_in_range_tables_of_any_int_dtype_and_either_table_shape_step(envs, fmt, data):
    env = envs[fmt]
    action = data.draw(valid_actions(env))
    step_ok(env, action)
    step_ok(env, action.tolist())
    if fmt != "index":  # the table forms accept both the 2-D and the flat shape
        step_ok(env, action.reshape(-1) if action.ndim == 2 else action.reshape(BATCH, -1))


# ---------------------------------------------------------------------------- refused actions
@pytest.mark.parametrize("fmt", FORMATS)
@given(data=st.data(), excess=st.one_of(st.integers(0, 3), st.integers(4, 2**62)), negative=st.booleans())
@PROPS
def test_out_of_range_and_negative_indices_name_row_knob_and_range(envs, fmt, data, excess, negative):
    env = envs[fmt]
    valid = data.draw(valid_actions(env)).astype(np.int64)
    dims = nvec(env).ravel()
    position = data.draw(st.integers(0, dims.size - 1))
    bad = valid.reshape(-1).copy()
    bad[position] = -1 - excess if negative else dims[position] + excess
    message = refused(env, bad.reshape(valid.shape), valid)
    row, knob = where(env, position)
    assert f"row {row}" in message and f"[0, {dims[position] - 1}]" in message, message
    assert (f"knob {knob!r}" if knob else "flat index") in message, message


@pytest.mark.parametrize("fmt", FORMATS)
@given(data=st.data(), shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=20))
@PROPS
def test_wrong_shapes_name_the_expected_shape(envs, fmt, data, shape):
    env = envs[fmt]
    accepted = {(BATCH,)} if fmt == "index" else {(BATCH, 4), (BATCH * 4,)}
    if shape in accepted:
        shape = (*shape, 1)
    bad = np.zeros(shape, dtype=np.int64)
    message = refused(env, bad, data.draw(valid_actions(env)))
    assert "shape" in message and str(shape) in message and f"({BATCH}" in message, message


@pytest.mark.parametrize("fmt", FORMATS)
@given(data=st.data(), integral=st.booleans())
@PROPS
def test_finite_floats_are_refused_naming_the_dtype(envs, fmt, data, integral):
    env = envs[fmt]
    valid = data.draw(valid_actions(env))
    bad = valid.astype(np.float64) + (0.0 if integral else 0.5)
    message = refused(env, bad, valid)
    assert "float64" in message and "integer" in message, message


@pytest.mark.parametrize("fmt", FORMATS)
@given(data=st.data(), value=st.sampled_from([np.nan, np.inf, -np.inf]))
@PROPS
def test_nan_and_inf_name_row_and_knob(envs, fmt, data, value):
    env = envs[fmt]
    valid = data.draw(valid_actions(env))
    bad = valid.astype(np.float64).reshape(-1)
    position = data.draw(st.integers(0, bad.size - 1))
    bad[position] = value
    message = refused(env, bad.reshape(valid.shape), valid)
    row, knob = where(env, position)
    assert "non-finite" in message and f"row {row}" in message, message
    if knob:
        assert f"knob {knob!r}" in message, message


@pytest.mark.parametrize("fmt", FORMATS)
@given(data=st.data(), as_list=st.booleans())
@PROPS
def test_bool_arrays_are_refused(envs, fmt, data, as_list):
    env = envs[fmt]
    valid = data.draw(valid_actions(env))
    bad = data.draw(hnp.arrays(np.bool_, valid.shape))
    message = refused(env, bad.tolist() if as_list else bad, valid)
    assert "bool" in message and "integer" in message, message


@pytest.mark.parametrize("fmt", FORMATS)
def test_other_non_integer_actions_are_refused(envs, fmt):
    env = envs[fmt]
    valid = np.zeros(nvec(env).shape, dtype=np.int64)
    for bad in (valid.astype(str), np.full(valid.shape, None), [[2**70] * 4] * BATCH, "0", None):
        refused(env, bad, valid)


# ---------------------------------------------------------------------------- list and index edge cases
def test_index_format_nan_names_its_row(envs):
    env = envs["index"]
    valid = np.arange(BATCH, dtype=np.int64)
    bad = valid.astype(np.float64)
    bad[1] = np.nan
    assert "row 1" in refused(env, bad, valid)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_bool_inside_an_int_list_is_refused(envs, fmt):
    env = envs[fmt]
    valid = np.zeros(nvec(env).shape, dtype=np.int64)
    bad = valid.reshape(-1).tolist()
    bad[1] = True
    try:
        env.step(bad)
    except SpaceError:
        return
    env.reset()
    raise AssertionError(f"{fmt}: a list holding True was accepted")


@pytest.mark.parametrize("fmt", ["flat", "knobs"])
def test_a_ragged_list_raises_space_error(envs, fmt):
    env = envs[fmt]
    bad: list[list[int]] = [[0, 0, 0, 0], [0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    try:
        env.step(bad)
    except SpaceError:
        return
    except ValueError as err:
        raise AssertionError(f"{fmt}: {type(err).__name__}: {err}") from None
    raise AssertionError(f"{fmt}: a ragged list was accepted")
