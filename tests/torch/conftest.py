"""Fixtures of tests/torch/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import hipdnn.torch as ht


@pytest.fixture
def cache() -> Iterator[ht.PlanCache]:
    """hipdnn.torch's plan cache, emptied before and after the test (in tests/torch/ it stands in
    for pytest's own ``cache`` fixture, which none of these tests use). Imported here, not at module
    level: without torch every module of tests/torch/ skips itself."""
    import hipdnn.torch as ht

    c = ht.plan_cache()
    c.clear()
    yield c
    c.clear()
