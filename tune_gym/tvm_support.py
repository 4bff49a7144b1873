"""One place that imports TVM, with the fixes tune_gym needs on apache-tvm 0.27.

Importing ``tvm.s_tir.tensor_intrin`` (which MetaSchedule's TuneContext does on first use)
parses a few hundred TVMScript functions. The parser calls ``inspect.stack()`` for each one,
and on a process with many modules loaded ``inspect.getmodule`` makes that take 40-140 s.
:func:`tvm` patches ``inspect.stack``/``inspect.getouterframes`` with a source-free
equivalent for the duration of that one import (measured: 46 s -> 4.5 s on the dev machine).
"""

from __future__ import annotations

import contextlib
import inspect
import linecache
import sys
import threading
from collections.abc import Iterator
from types import FrameType, ModuleType
from typing import Any

__all__ = ["fast_frame_inspection", "ms", "tvm"]

_lock = threading.Lock()
_ready = False


def _outer_frames(frame: FrameType | None, context: int = 1) -> list[inspect.FrameInfo]:
    out = []
    while frame is not None:
        filename = frame.f_code.co_filename
        lineno = frame.f_lineno
        line = linecache.getline(filename, lineno) if context > 0 else ""
        out.append(
            inspect.FrameInfo(frame, filename, lineno, frame.f_code.co_name, [line] if line else None, 0)
        )
        frame = frame.f_back
    return out


def _stack(context: int = 1) -> list[inspect.FrameInfo]:
    return _outer_frames(sys._getframe(1), context)


@contextlib.contextmanager
def fast_frame_inspection() -> Iterator[None]:
    """Temporarily replace ``inspect.stack`` with a version that never calls ``getmodule``."""
    saved = (inspect.stack, inspect.getouterframes)
    inspect.stack, inspect.getouterframes = _stack, _outer_frames  # type: ignore[assignment]
    try:
        yield
    finally:
        inspect.stack, inspect.getouterframes = saved  # type: ignore[assignment]


def tvm() -> ModuleType:
    """Return the ``tvm`` module, imported once with the tensor intrinsics preloaded quickly."""
    global _ready
    with _lock:
        import tvm as _tvm

        if not _ready:
            with fast_frame_inspection():
                import tvm.s_tir.tensor_intrin
                from tvm.s_tir import meta_schedule  # noqa: F401
            _ready = True
    return _tvm


def ms() -> Any:
    """Return ``tvm.s_tir.meta_schedule``."""
    tvm()
    from tvm.s_tir import meta_schedule

    return meta_schedule
