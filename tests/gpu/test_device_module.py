"""hipdnn.device on a real GPU, without torch: cuda-bindings where an NVIDIA GPU is visible, hip-python
where ROCm is (HIPDNN_DEVICE_RUNTIME=cuda|hip picks one). Skipped, with the reason, where no runtime
is installed or it sees no GPU; tests/unit/test_device_module.py covers what runs without one."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import hipdnn
import hipdnn.device as hd
from hipdnn.backend import values
from hipdnn.device import _dlpack

try:
    RUNTIME = hd.runtime()
except hipdnn.HipdnnError as exc:
    pytest.skip(f"no GPU runtime: {exc.message}", allow_module_level=True)
_count, _why = RUNTIME.device_count()
if _count == 0:
    pytest.skip(f"{RUNTIME.package} sees no GPU ({_why})", allow_module_level=True)

HAVE_ML_DTYPES = importlib.util.find_spec("ml_dtypes") is not None


@pytest.fixture
def stream() -> Iterator[hd.Stream]:
    with hd.Stream() as s:
        yield s


def test_devices_are_listed() -> None:
    gpus = hd.devices()
    assert len(gpus) == _count
    for i, g in enumerate(gpus):
        assert g.index == i and g.name and g.runtime == RUNTIME.name
        assert g.total_memory > 1 << 30


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "uint8"])
def test_round_trip(dtype: str, stream: hd.Stream) -> None:
    host = (np.arange(3 * 5 * 7) % 251).astype(dtype).reshape(3, 5, 7)
    np.testing.assert_array_equal(hd.to_device(host).to_numpy(), host)  # synchronous copies
    buf = hd.to_device(host, stream=stream)  # queued on the stream
    assert buf.stream == stream.handle
    np.testing.assert_array_equal(buf.to_numpy(stream=stream), host)
    assert np.isnan(hd.empty(16, np.float32).fill_bytes(0xFF, stream=stream).to_numpy(stream=stream)).all()


def test_cuda_array_interface_and_dlpack_reach_the_values_reader(stream: hd.Stream) -> None:
    buf = hd.to_device(np.ones((4, 8), np.float16), stream=stream)
    iface = buf.__cuda_array_interface__
    assert iface["version"] == 3 and iface["data"] == (buf.ptr, False) and iface["stream"] == stream.handle
    # the handle's stream is the producer's: no wait needed
    r = values.resolve(buf, "x", stream=stream.handle)
    assert (r.ptr, r.shape, r.on_device, r.dtype_code) == (buf.ptr, (4, 8), True, int(hipdnn.DataType.HALF))
    # another consumer stream is made to wait on the GPU (a real event, no host block)
    with hd.Stream() as other:
        assert values.resolve(buf, "x", stream=other.handle).ptr == buf.ptr
        before = _dlpack.live_exports()
        capsule_reader = type("D", (), {"__dlpack__": buf.__dlpack__, "__dlpack_device__": buf.__dlpack_device__})()
        r = values.resolve(capsule_reader, "x", stream=other.handle)
        assert r.ptr == buf.ptr and r.on_device
        assert r.release is not None
        r.release()
        assert _dlpack.live_exports() == before
        other.synchronize()


@pytest.mark.skipif(not HAVE_ML_DTYPES, reason="ml_dtypes is not installed")
def test_bfloat16_round_trip_and_dlpack() -> None:
    import ml_dtypes

    host = np.linspace(-4, 4, 64, dtype=np.float32).astype(ml_dtypes.bfloat16)
    buf = hd.to_device(host)
    np.testing.assert_array_equal(buf.to_numpy(), host)
    r = values.resolve(buf, "x")
    assert r.dtype_code == int(hipdnn.DataType.BFLOAT16)
    assert r.release is not None
    r.release()


def test_freed_buffer_and_closed_stream_are_errors() -> None:
    buf = hd.empty(4, np.float32)
    buf.free()
    buf.free()  # twice is harmless
    with pytest.raises(hipdnn.HipdnnError, match="freed"):
        buf.to_numpy()
    s = hd.Stream()
    s.close()
    with pytest.raises(hipdnn.HipdnnError, match="closed"):
        s.synchronize()


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_sdpa_on_the_hip_engine_from_device_buffers(
    dtype: str, hip_plugin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``hipdnn demo --device gpu``: the max-shape plan served at several lengths from hipdnn.device
    buffers on the handle's stream, each checked against float64 on the host."""
    if dtype == "bf16" and not HAVE_ML_DTYPES:
        pytest.skip("ml_dtypes is not installed")
    from hipdnn.cli import main

    monkeypatch.setenv("HIPDNN_PLUGIN_DIR", str(hip_plugin.parent))
    args = ["--max-seq-len", "300", "--seq-lens", "1", "77", "300"]
    assert main(["demo", "--device", "gpu", "--dtype", dtype, *args]) == 0
