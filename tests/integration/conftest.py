"""Fixtures of the override integration suite (the fake-plugin fixtures live in tests/conftest.py)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

import hipdnn.frontend.graph  # noqa: F401  (make sure the module is in sys.modules)
from hipdnn.backend import descriptors
from hipdnn.backend.enums import AttributeName


@dataclass
class Spy:
    """Records Descriptor.set_attribute, VariantPackDescriptor.finalize and the backend execute that
    Graph.execute calls, passing every call through to the real implementation."""

    set_attribute: list[tuple[str, int, Any]] = field(default_factory=list)
    vp_finalize: list[Any] = field(default_factory=list)
    backend_execute: list[Any] = field(default_factory=list)

    def clear(self) -> None:
        self.set_attribute.clear()
        self.vp_finalize.clear()
        self.backend_execute.clear()

    def attribute_ids(self, descriptor: str | None = None) -> set[int]:
        return {int(n) for d, n, _ in self.set_attribute if descriptor is None or d == descriptor}

    def values_of(self, name: AttributeName) -> list[Any]:
        return [v for _, n, v in self.set_attribute if int(n) == int(name)]

    @property
    def nothing_called(self) -> bool:
        return not (self.set_attribute or self.vp_finalize or self.backend_execute)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Spy:
    s = Spy()
    graph_module = sys.modules["hipdnn.frontend.graph"]
    real_set = descriptors.Descriptor.set_attribute
    real_finalize = descriptors.VariantPackDescriptor.finalize
    real_execute = graph_module.backend_execute

    def set_attribute(self: Any, name: Any, attr_type: Any, values: Any) -> None:
        s.set_attribute.append((type(self).__name__, int(name), values))
        real_set(self, name, attr_type, values)

    def finalize(self: Any) -> None:
        s.vp_finalize.append(self)
        real_finalize(self)

    def backend_execute(*args: Any, **kwargs: Any) -> None:
        s.backend_execute.append(args)
        real_execute(*args, **kwargs)

    monkeypatch.setattr(descriptors.Descriptor, "set_attribute", set_attribute)
    monkeypatch.setattr(descriptors.VariantPackDescriptor, "finalize", finalize)
    monkeypatch.setattr(graph_module, "backend_execute", backend_execute)
    return s
