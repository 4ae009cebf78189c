"""Fixtures of the CPU engine's tests: a handle per ISA build this machine has."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import hipdnn
from tests.cpu.test_sdpa_isa import HAVE


@pytest.fixture(scope="module", params=HAVE)
def isa_handle(request: pytest.FixtureRequest) -> Iterator[hipdnn.Handle]:
    """A handle whose plans are built with HIPDNN_CPU_ISA=<param> (kept set while its tests run), one
    per ISA build this CPU has; a fresh handle keeps plans of another ISA out of its caches."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HIPDNN_CPU_ISA", request.param)
        h = hipdnn.Handle()
        if not any(p.name == "hipdnn_cpu_engine" for p in h.loaded_plugins()):
            pytest.fail(f"the CPU engine did not load: {h.skipped_plugins()}")
        yield h
        h.close()
