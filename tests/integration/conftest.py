"""Fixtures of the override integration suite (the fake-plugin fixtures live in tests/conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from hipdnn.backend import descriptors
from hipdnn.backend.enums import AttributeName

EXECUTE_ENTRIES = ("ExecuteOpGraph", "ExecuteOpGraphWithOverrides")


@dataclass
class Spy:
    """Records what reaches the backend: descriptor attributes and variant-pack finalizes (the
    descriptor API, for callers that use it) and every call that reaches a plugin's execute entry
    (Graph.execute goes straight from the compiled core to the plugin; the fakes record each call).
    Every call passes through to the real implementation."""

    fakes: dict[str, Any]
    set_attribute: list[tuple[str, int, Any]] = field(default_factory=list)
    vp_finalize: list[Any] = field(default_factory=list)
    _baseline: dict[str, int] = field(default_factory=dict)

    def clear(self) -> None:
        self.set_attribute.clear()
        self.vp_finalize.clear()
        self._baseline = {n: len(self._executes(c)) for n, c in self.fakes.items()}

    @staticmethod
    def _executes(control: Any) -> list[dict[str, Any]]:
        return [r for r in control.calls() if r["entry"] in EXECUTE_ENTRIES]

    @property
    def backend_execute(self) -> list[dict[str, Any]]:
        """Execute calls that reached a plugin since the last clear()."""
        out = []
        for name, control in self.fakes.items():
            out += self._executes(control)[self._baseline.get(name, 0) :]
        return out

    def attribute_ids(self, descriptor: str | None = None) -> set[int]:
        return {int(n) for d, n, _ in self.set_attribute if descriptor is None or d == descriptor}

    def values_of(self, name: AttributeName) -> list[Any]:
        return [v for _, n, v in self.set_attribute if int(n) == int(name)]

    @property
    def nothing_called(self) -> bool:
        return not (self.set_attribute or self.vp_finalize or self.backend_execute)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch, fakes: dict[str, Any]) -> Spy:
    s = Spy(fakes)
    real_set = descriptors.Descriptor.set_attribute
    real_finalize = descriptors.VariantPackDescriptor.finalize

    def set_attribute(self: Any, name: Any, attr_type: Any, values: Any) -> None:
        s.set_attribute.append((type(self).__name__, int(name), values))
        real_set(self, name, attr_type, values)

    def finalize(self: Any) -> None:
        s.vp_finalize.append(self)
        real_finalize(self)

    monkeypatch.setattr(descriptors.Descriptor, "set_attribute", set_attribute)
    monkeypatch.setattr(descriptors.VariantPackDescriptor, "finalize", finalize)
    s.clear()
    return s
