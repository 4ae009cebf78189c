"""Execute-time shape overrides (spec 4.2): the map form's entry type.

Both call forms are lowered, and the eight rules of spec 4.2.1 checked, by the compiled execute
core (hipdnn.backend.execute_core), the one place every execute path passes through."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class OverrideEntry:
    """The shape and strides one tensor takes for one execute call."""

    shape: list[int] = field(default_factory=list)
    stride: list[int] = field(default_factory=list)


__all__ = ["OverrideEntry"]
