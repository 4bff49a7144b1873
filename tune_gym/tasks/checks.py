"""Small helpers shared by the task modules' input checks."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from tune_gym.errors import TaskError

__all__ = ["fields", "pairs", "show"]


def show(value: Any, limit: int = 80) -> str:
    """``repr(value)`` kept short; huge ints (whose ``repr`` may fail) are described instead."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18:
        return f"<{value.bit_length()}-bit integer>"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def pairs(items: Any, what: str) -> list[tuple[Any, Any]]:
    """``items`` (a mapping or an iterable of 2-sequences) as a list of pairs.

    Raises:
        TaskError: ``items`` is not such a collection; the message names ``what``.
    """
    if isinstance(items, Mapping):
        return list(items.items())
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise TaskError(f"{what} must be (name, value) pairs, got {type(items).__name__} {show(items)}")
    out = []
    for pair in items:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TaskError(f"{what} must be (name, value) pairs, got {show(pair)}")
        out.append((pair[0], pair[1]))
    return out


_KEY = re.compile(r"[a-z_]{1,64}", re.ASCII)
_VALUE = re.compile(r"[A-Za-z0-9_.-]{1,64}", re.ASCII)


def fields(text: str, where: str) -> dict[str, str]:
    """Parse ``name=value&name=value`` (no percent-decoding); an empty text has no fields.

    Raises:
        TaskError: a field is malformed or given twice; the message starts with ``where``.
    """
    out: dict[str, str] = {}
    if not text:
        return out
    for part in text.split("&"):
        key, eq, value = part.partition("=")
        if not eq or not _KEY.fullmatch(key) or not _VALUE.fullmatch(value):
            raise TaskError(
                f"{where}: malformed field {show(part)}; want <name>=<value> fields joined by '&', "
                "names of a-z and '_', values of letters, digits, '_', '.' and '-' (e.g. target=llvm&cores=4)"
            )
        if key in out:
            raise TaskError(f"{where}: {key!r} given twice; give each field once")
        out[key] = value
    return out
