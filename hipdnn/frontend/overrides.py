"""Execute-time shape overrides (spec 4.2): the map form's entry type.

Both call forms are lowered, and the eight rules of spec 4.2.1 checked, by the compiled execute
core (hipdnn.backend.execute_core), the one place every execute path passes through."""

from __future__ import annotations

from collections.abc import Sequence, Sized
from dataclasses import dataclass, field

import numpy as np

from hipdnn.frontend.args import as_int, is_int
from hipdnn.frontend.tensor import compact_strides


@dataclass
class OverrideEntry:
    """The shape and strides one tensor takes for one execute call. Without ``stride``, the strides
    are compact (row-major) for ``shape``, filled in here so that every reader, the compiled core
    included, sees them. A stride of the wrong length is refused at execute, naming the tensor."""

    shape: Sequence[int] = field(default_factory=list)
    stride: Sequence[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Only a well-formed shape gets defaults: anything else reaches the core, whose messages
        # name the tensor and the rule.
        if self.stride is None or (isinstance(self.stride, Sized) and len(self.stride) == 0):
            dims = _ints(self.shape)
            self.stride = compact_strides(dims) if dims else []


def _ints(value: object) -> list[int] | None:
    # sequences and arrays only: iterating a one-shot iterator here would empty it for the core
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        return None
    items = list(value)
    return [as_int(v) for v in items] if all(is_int(v) for v in items) else None


__all__ = ["OverrideEntry"]
