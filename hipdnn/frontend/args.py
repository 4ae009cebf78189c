"""Checking what a caller passes to the public API.

Every refusal is ``HipdnnError(INVALID_VALUE)`` whose message names the argument and repeats the value,
so that a wrong enum number, a string where a number belongs or an infinite option never surfaces as
a bare ``ValueError``/``TypeError`` from deep inside (an enum constructor, ``float()``, the wire
packer). ``what`` is the argument's name as the caller wrote it, with any context in front
("pointwise node 'p': mode").
"""

from __future__ import annotations

import math
import numbers
import operator
import os
from collections.abc import Sequence
from enum import Enum, IntEnum
from typing import SupportsIndex, TypeVar, cast

import numpy as np

from hipdnn.backend.errors import ErrorCode, HipdnnError

E = TypeVar("E", bound=IntEnum)

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
#: the largest finite float32: float options travel as float32 on the wire
FLOAT32_MAX = 3.4028234663852886e38


def refuse(what: str, message: str) -> HipdnnError:
    return HipdnnError(ErrorCode.INVALID_VALUE, f"{what} {message}")


def show(value: object) -> str:
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__ must not replace the error being reported
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= 80 else text[:77] + "..."


def is_int(value: object) -> bool:
    """An integer in the sense of the API: int or numpy integer, never bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, Enum))


def as_int(value: object) -> int:
    """The int of a value :func:`is_int` accepted (numbers.Integral supports __index__)."""
    return operator.index(cast(SupportsIndex, value))


def enum_arg(cls: type[E], value: object, what: str) -> E:
    """``value`` as a member of ``cls``: a member, or an int naming one. Members of other enums are
    refused even when their number exists here (ReductionMode.ADD is not PointwiseMode.ABS)."""
    if isinstance(value, cls):
        return value
    if is_int(value):
        try:
            return cls(as_int(value))
        except ValueError:
            pass
    names = ", ".join(m.name for m in cls)
    raise refuse(what, f"{show(value)} is not a {cls.__name__} (one of {names})")


def int_arg(value: object, what: str, low: int | None = None, high: int | None = None) -> int:
    """An integer (in [low, high] when given); bools, floats and strings are refused, not converted."""
    if not is_int(value):
        raise refuse(what, f"{show(value)} must be an int, not {type(value).__name__}")
    v = as_int(value)
    if (low is not None and v < low) or (high is not None and v > high):
        raise refuse(what, f"{v} is outside [{low}, {high}]")
    return v


def optional_int_arg(value: object, what: str, low: int | None = None, high: int | None = None) -> int | None:
    return None if value is None else int_arg(value, what, low, high)


def number_arg(value: object, what: str) -> float:
    """A real number as a float. Its value (finite, float32) is the node's to check at validation,
    which graphs read back from the wire pass through too."""
    if not isinstance(value, numbers.Real) or isinstance(value, (bool, Enum)):
        raise refuse(what, f"{show(value)} must be a number, not {type(value).__name__}")
    try:
        return float(value)
    except (OverflowError, ValueError):  # an int too large for a float
        raise refuse(what, f"{show(value)} is outside the float32 range the wire format stores") from None


def check_float(v: float, what: str) -> None:
    """Refuse NaN, infinities and magnitudes float32 cannot hold (the wire format stores float options
    as float32: they would arrive infinite)."""
    if math.isnan(v):
        raise refuse(what, "is NaN: it must be a finite number")
    if math.isinf(v):
        raise refuse(what, f"{v} is infinite: it must be a finite number")
    if abs(v) > FLOAT32_MAX:
        raise refuse(what, f"{v} is outside the float32 range the wire format stores (|x| <= {FLOAT32_MAX:.7g})")


def check_int64(v: int, what: str) -> None:
    if not INT64_MIN <= v <= INT64_MAX:
        raise refuse(what, f"{v} is outside the int64 range the wire format stores")


def bool_arg(value: object, what: str) -> bool:
    """True or False (numpy's bool too). Other values are refused: ``bool("false")`` is True."""
    if isinstance(value, bool):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise refuse(what, f"{show(value)} must be True or False, not {type(value).__name__}")


def optional_bool_arg(value: object, what: str) -> bool | None:
    return None if value is None else bool_arg(value, what)


def str_arg(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise refuse(what, f"{show(value)} must be a str, not {type(value).__name__}")
    return value


def sequence_arg(value: object, what: str) -> list[object]:
    """A list or tuple (or other sequence), never a str or bytes, as a list."""
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, Sequence):
        raise refuse(what, f"{show(value)} must be a sequence, not {type(value).__name__}")
    return list(value)


def path_list_arg(value: object, what: str) -> list[str | os.PathLike[str]] | None:
    """None, or a sequence of str or os.PathLike paths."""
    if value is None:
        return None
    items = sequence_arg(value, what)
    for i, p in enumerate(items):
        if not isinstance(p, (str, os.PathLike)):
            raise refuse(f"{what}[{i}]", f"{show(p)} must be a str or os.PathLike path, not {type(p).__name__}")
    return items  # type: ignore[return-value]


__all__ = [
    "FLOAT32_MAX",
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "bool_arg",
    "check_float",
    "check_int64",
    "enum_arg",
    "number_arg",
    "int_arg",
    "as_int",
    "is_int",
    "optional_bool_arg",
    "optional_int_arg",
    "path_list_arg",
    "refuse",
    "show",
    "sequence_arg",
    "str_arg",
]
