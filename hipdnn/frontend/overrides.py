"""Execute-time shape overrides (spec 4.2): both call forms, lowered to one, validated in order."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hipdnn.frontend.tensor import TensorAttributes
from hipdnn.frontend.types import ErrorCode, HipdnnError


@dataclass
class OverrideEntry:
    """The shape and strides one tensor takes for one execute call."""

    shape: list[int] = field(default_factory=list)
    stride: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Overrides:
    """The parallel-array form every call is lowered to."""

    uids: tuple[int, ...]
    shapes: tuple[tuple[int, ...], ...]
    strides: tuple[tuple[int, ...], ...]
    #: per entry, the tensor object the caller used as its key (None for a bare uid); rule 3 checks
    #: that such a tensor is the graph's own and not another graph's tensor sharing the uid
    key_tensors: tuple[Any, ...] = field(default=(), compare=False, repr=False)

    def __bool__(self) -> bool:
        return bool(self.uids)

    def as_dict(self) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
        return {u: (s, t) for u, s, t in zip(self.uids, self.shapes, self.strides)}


NO_OVERRIDES = Overrides((), (), ())


def _invalid(message: str) -> HipdnnError:
    return HipdnnError(ErrorCode.INVALID_VALUE, message)


_INT_ONLY = frozenset({int})


def _ints(values: Any, what: str) -> tuple[int, ...]:
    if type(values) in (list, tuple) and set(map(type, values)) <= _INT_ONLY:
        return tuple(values)  # the common case, checked in C rather than per element
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        try:
            values = list(values)
        except TypeError:
            raise _invalid(f"{what} must be a sequence of ints, got {values!r}") from None
    out = []
    for v in values:
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise _invalid(f"{what} must hold ints, got {v!r}")
        out.append(int(v))
    return tuple(out)


def _key_uid(key: Any) -> int:
    if isinstance(key, TensorAttributes):
        uid = key.get_uid()
        if uid is None:
            raise _invalid(f"override key tensor {key.get_name()!r} has no uid (validate the graph first)")
        return uid
    if isinstance(key, bool) or not hasattr(key, "__index__"):
        raise _invalid(f"override key {key!r} is neither a tensor nor a uid")
    return int(key)


def lower(
    override_uids: Sequence[Any] | None,
    override_shapes: Sequence[Sequence[int]] | None,
    override_strides: Sequence[Sequence[int]] | None,
    overrides: Mapping[Any, OverrideEntry] | None,
) -> tuple[Overrides, bool]:
    """Lower either call form to :class:`Overrides`; the bool says whether the parallel form was used.

    Rule 1 (length consistency) is checked here because only the parallel form can break it."""
    parallel_given = any(x is not None for x in (override_uids, override_shapes, override_strides))
    if overrides is not None and parallel_given:
        raise _invalid("pass overrides either as override_uids/shapes/strides or as overrides={...}, not both")
    if overrides is not None:
        if not isinstance(overrides, Mapping):
            raise _invalid("overrides must be a mapping {tensor or uid: OverrideEntry}")
        uids, shapes, strides, keys = [], [], [], []
        for key, entry in overrides.items():
            if not isinstance(entry, OverrideEntry):
                raise _invalid(f"override for {key!r} must be an OverrideEntry, got {type(entry).__name__}")
            uid = _key_uid(key)
            uids.append(uid)
            keys.append(key if isinstance(key, TensorAttributes) else None)
            shapes.append(_ints(entry.shape, f"override shape of uid {uid}"))
            strides.append(_ints(entry.stride, f"override stride of uid {uid}"))
        seen: set[int] = set()
        for uid in uids:
            if uid in seen:
                raise _invalid(
                    f"rule 2 (duplicate uids): uid {uid} is overridden more than once "
                    "(a tensor and its uid both appear as override keys)"
                )
            seen.add(uid)
        return Overrides(tuple(uids), tuple(shapes), tuple(strides), tuple(keys)), False
    u = list(override_uids or [])
    sh = list(override_shapes or [])
    st = list(override_strides or [])
    if not (len(u) == len(sh) == len(st)):
        raise _invalid(
            f"rule 1 (length consistency): {len(u)} override_uids, {len(sh)} override_shapes, "
            f"{len(st)} override_strides"
        )
    lowered = Overrides(
        tuple(_key_uid(x) for x in u),
        tuple(_ints(s, f"override_shapes[{i}]") for i, s in enumerate(sh)),
        tuple(_ints(s, f"override_strides[{i}]") for i, s in enumerate(st)),
        tuple(x if isinstance(x, TensorAttributes) else None for x in u),
    )
    return lowered, True


def axis_order(strides: Sequence[int]) -> list[int]:
    """Axes from outermost to innermost: larger stride first, ties by axis index."""
    return list(_axis_order(tuple(strides)))


@functools.lru_cache(maxsize=1024)
def _axis_order(strides: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted(range(len(strides)), key=lambda i: (-strides[i], i)))


def check_order_preserved(declared_strides: Sequence[int], dims: Sequence[int], strides: Sequence[int]) -> bool:
    """Rule 8: walking the declared axis order outermost to innermost, the override strides of axes
    longer than 1 never grow (a size-1 axis has no meaningful stride)."""
    return _non_increasing_in(_axis_order(tuple(declared_strides)), dims, strides)


def check_axis_order(declared_order: Sequence[int], dims: Sequence[int], strides: Sequence[int]) -> bool:
    """Rule 8 for a dynamic tensor, whose declared strides are an axis order (0 = innermost, spec 6.3):
    the execute-time strides must not grow from outer to inner axes (axes of length 1 ignored)."""
    return _non_increasing_in(_axis_order(tuple(declared_order)), dims, strides)


def _non_increasing_in(outer_first: Sequence[int], dims: Sequence[int], strides: Sequence[int]) -> bool:
    previous: int | None = None
    for axis in outer_first:
        if dims[axis] == 1:
            continue
        if previous is not None and strides[axis] > previous:
            return False
        previous = strides[axis]
    return True


def validate(overrides: Overrides, tensors: Mapping[int, TensorAttributes], used_parallel_form: bool) -> None:
    """Rules 2-8 of spec 4.2.1, in order, per entry; the first failure raises INVALID_VALUE."""
    if used_parallel_form:
        seen: set[int] = set()
        for uid in overrides.uids:
            if uid in seen:
                raise _invalid(f"rule 2 (duplicate uids): uid {uid} is overridden more than once")
            seen.add(uid)
    keys = overrides.key_tensors or (None,) * len(overrides.uids)
    for uid, shape, stride, key in zip(overrides.uids, overrides.shapes, overrides.strides, keys):
        tensor = tensors.get(uid)
        if tensor is None:
            raise _invalid(f"rule 3 (unknown uid): uid {uid} is not a tensor of this graph")
        if key is not None and key is not tensor:
            raise _invalid(f"rule 3 (unknown uid): tensor {key.get_name()!r} (uid {uid}) belongs to another graph")
        if tensor.get_is_virtual():
            raise _invalid(
                f"rule 3 (unknown uid): uid {uid} ({tensor.get_name()!r}) is virtual; its shape follows "
                "from its inputs and cannot be overridden"
            )
        declared = tensor._dim  # read without copying: this runs on every execute
        rank = len(declared)
        if len(shape) != rank or len(stride) != rank:
            raise _invalid(
                f"rule 4 (rank mismatch): uid {uid} has rank {rank}, override gives {len(shape)} dims "
                f"and {len(stride)} strides"
            )
        if min(shape) <= 0:
            raise _invalid(f"rule 5 (positive shape): uid {uid} override shape {list(shape)} has a value <= 0")
        if min(stride) <= 0:
            raise _invalid(f"rule 6 (positive stride): uid {uid} override stride {list(stride)} has a value <= 0")
        for axis, (d, m) in enumerate(zip(shape, declared)):
            if m != -1 and d > m:
                raise _invalid(
                    f"rule 7 (max shape exceeded): uid {uid} override shape {list(shape)} exceeds the declared "
                    f"maximum {list(declared)} at axis {axis}"
                )
        declared_strides = tensor._stride
        ordered = (
            check_axis_order(declared_strides, shape, stride)
            if tensor._is_dynamic
            else check_order_preserved(declared_strides, shape, stride)
        )
        if not ordered:
            raise _invalid(
                f"rule 8 (stride order): uid {uid} override strides {list(stride)} reorder the declared "
                f"layout {tensor.get_stride()}"
            )
