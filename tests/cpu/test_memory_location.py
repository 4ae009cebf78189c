"""The CPU engine declares where its memory lives: its EngineDetails carry the host-memory behavior
note, the plan reports ``memory_location == "host"``, and the host refuses device memory for it
before the plugin is called (a fake device pointer reaching the plugin would crash the process)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import numpy as np
import pytest

import hipdnn
from tests.test_device_buffers import FakeCudaTensor

F32 = hipdnn.DataType.FLOAT


@pytest.fixture(scope="module")
def handle() -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle()
    if not any(p.name == "hipdnn_cpu_engine" for p in h.loaded_plugins()):
        pytest.fail(f"the CPU engine did not load: {h.skipped_plugins()}")
    yield h
    h.close()


def relu_graph(handle: hipdnn.Handle) -> tuple[hipdnn.Graph, hipdnn.TensorAttributes, hipdnn.TensorAttributes]:
    g = hipdnn.Graph(name="relu", io_data_type=F32)
    x = g.tensor(name="x", dim=[4, 8], stride=[8, 1], data_type=F32)
    y = g.pointwise(hipdnn.PointwiseMode.RELU_FWD, x)
    y.set_output(True)
    g.build(handle)
    return g, x, y


def test_cpu_plan_is_a_host_plan(handle: hipdnn.Handle) -> None:
    g, x, y = relu_graph(handle)
    plan = g._require_plan()
    assert plan.engine_id == 101 and plan.memory_location == "host"
    xv = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    yv = np.full((4, 8), np.nan, np.float32)
    g.execute(handle, {x: xv, y: yv})  # host arrays are what it takes
    assert (yv == np.maximum(xv, 0)).all()


def cuda_array_interface(ptr: int) -> SimpleNamespace:
    return SimpleNamespace(
        __cuda_array_interface__={
            "data": (ptr, False),
            "shape": (4, 8),
            "strides": None,
            "typestr": "<f4",
            "version": 3,
        }
    )


class FakeCudaF32(FakeCudaTensor):
    def __init__(self, ptr: int) -> None:
        super().__init__(ptr, (4, 8), (8, 1), itemsize=4)


@pytest.mark.parametrize("device_value", [cuda_array_interface, FakeCudaF32], ids=["cuda_array_interface", "torch"])
@pytest.mark.parametrize("which", ["input", "output"])
def test_device_memory_is_refused_before_the_plugin_runs(handle: hipdnn.Handle, device_value, which: str) -> None:  # type: ignore[no-untyped-def]
    g, x, y = relu_graph(handle)
    host = np.zeros((4, 8), np.float32)
    dev = device_value(0x7F0000001000)  # never dereferenced: the host stops the call first
    vp = {x: dev, y: host} if which == "input" else {x: host, y: dev}
    with pytest.raises(hipdnn.HipdnnError) as err:
        g.execute(handle, vp)
    assert err.value.code == hipdnn.ErrorCode.INVALID_VALUE
    assert "runs on the host" in err.value.message
    assert 'hipdnn.Handle(device="cuda")' in err.value.message  # the fix, not only the engine id
    assert (host == 0).all()
