"""hipdnn.device without a GPU: what happens with no runtime installed, and the buffer logic
(copies, __cuda_array_interface__, DLPack export read by hipdnn's own values reader) over a fake
runtime whose "device memory" is host memory. tests/gpu/test_device_module.py runs the real runtimes."""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import hipdnn
import hipdnn.device as hd
from hipdnn.backend import values
from hipdnn.device import _dlpack


@pytest.fixture(autouse=True)
def fresh_choice() -> Iterator[None]:
    hd._reset_for_tests()
    yield
    hd._reset_for_tests()


class HostRuntime:
    """The Runtime interface over malloc'd host memory; streams are counters, copies happen at once.
    Records stream waits so the protocols' ordering can be checked."""

    name = "cuda"
    package = "fake-runtime"
    dlpack_device_type = 2

    def __init__(self, count: int = 1) -> None:
        self.count = count
        self.blocks: dict[int, Any] = {}
        self.waits: list[tuple[int, int]] = []
        self.next_stream = 0x1000

    def device_count(self) -> tuple[int, str]:
        return self.count, "" if self.count else "no device here"

    def device_info(self, index: int) -> hd.DeviceInfo:
        return hd.DeviceInfo(index, "fake", self.name, 1 << 30, "sm_00")

    def set_device(self, index: int) -> None:
        pass

    def malloc(self, nbytes: int) -> int:
        block = ctypes.create_string_buffer(nbytes)
        self.blocks[ctypes.addressof(block)] = block
        return ctypes.addressof(block)

    def free(self, ptr: int) -> None:
        del self.blocks[ptr]

    def copy_to_device(self, dst: int, src: int, nbytes: int, stream: int | None) -> None:
        ctypes.memmove(dst, src, nbytes)

    copy_to_host = copy_to_device

    def memset(self, ptr: int, byte: int, nbytes: int, stream: int | None) -> None:
        ctypes.memset(ptr, byte, nbytes)

    def stream_create(self) -> int:
        self.next_stream += 0x10
        return self.next_stream

    def stream_destroy(self, stream: int) -> None:
        pass

    def stream_synchronize(self, stream: int) -> None:
        pass

    def stream_wait(self, producer: int, consumer: int) -> None:
        self.waits.append((producer, consumer))


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> HostRuntime:
    rt = HostRuntime()
    monkeypatch.setattr(hd, "_chosen", rt)
    return rt


def block_runtimes(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes the import fail as if the package were not installed
    # (the leaves too: a module imported earlier in the session is found in sys.modules directly)
    names = ("cuda", "cuda.bindings", "cuda.bindings.runtime", "cuda.cudart", "hip", "hip.hip")
    for name in (*names, "rocm", "rocm.bindings", "rocm.bindings.hip"):
        monkeypatch.setitem(sys.modules, name, None)


def test_no_runtime_installed_is_a_hipdnn_error_naming_both_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    block_runtimes(monkeypatch)
    monkeypatch.delenv(hd.ENV_RUNTIME, raising=False)
    for call in (hd.runtime, hd.devices, lambda: hd.empty((2,), np.float32), lambda: hd.Stream()):
        with pytest.raises(hipdnn.HipdnnError) as err:
            call()
        assert err.value.code == hipdnn.ErrorCode.HIPDNN_BACKEND_ERROR
        assert "hipdnn[cuda]" in err.value.message and "hipdnn[rocm]" in err.value.message
    assert [(name, ok) for name, ok, _ in hd.availability()] == [("cuda", False), ("hip", False)]


def test_forced_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    block_runtimes(monkeypatch)
    monkeypatch.setenv(hd.ENV_RUNTIME, "opencl")
    with pytest.raises(hipdnn.HipdnnError, match="expected 'cuda' or 'hip'") as err:
        hd.runtime()
    assert err.value.code == hipdnn.ErrorCode.INVALID_VALUE
    monkeypatch.setenv(hd.ENV_RUNTIME, "hip")
    with pytest.raises(
        hipdnn.HipdnnError, match=r"HIPDNN_DEVICE_RUNTIME=hip: hip-python is not usable.*hipdnn\[rocm\]"
    ):
        hd.runtime()


def test_importing_hipdnn_does_not_import_the_device_module_or_a_runtime() -> None:
    import subprocess

    code = "import sys, hipdnn; hipdnn.Handle(); print(sorted(m for m in sys.modules if m.split('.')[0] in "
    code += "('cuda', 'hip', 'rocm') or m == 'hipdnn.device'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_device_is_reported_not_allocated(fake: HostRuntime) -> None:
    fake.count = 0
    assert hd.devices() == []
    with pytest.raises(hipdnn.HipdnnError, match="fake-runtime sees no GPU") as err:
        hd.empty((4,), np.float32)
    assert err.value.code == hipdnn.ErrorCode.HIPDNN_BACKEND_ERROR
    fake.count = 1
    with pytest.raises(hipdnn.HipdnnError, match="device 3 does not exist"):
        hd.empty((4,), np.float32, device=3)


def test_round_trip_and_argument_errors(fake: HostRuntime) -> None:
    host = np.arange(24, dtype=np.float16).reshape(2, 3, 4)
    buf = hd.to_device(host)
    assert buf.shape == (2, 3, 4) and buf.strides == (12, 4, 1) and buf.nbytes == 48
    np.testing.assert_array_equal(buf.to_numpy(), host)
    buf.copy_from(host[:, :, ::-1])  # non-contiguous host arrays are copied contiguously first
    np.testing.assert_array_equal(buf.to_numpy(), host[:, :, ::-1])
    assert np.isnan(buf.fill_bytes(0xFF).to_numpy()).all()
    for bad in (lambda: buf.copy_from(host.astype(np.float32)), lambda: buf.copy_from([1, 2])):
        with pytest.raises(hipdnn.HipdnnError) as err:
            bad()
        assert err.value.code == hipdnn.ErrorCode.INVALID_VALUE
    with pytest.raises(hipdnn.HipdnnError, match="not a list of non-negative integers"):
        hd.empty((2, -1), np.float32)
    with pytest.raises(hipdnn.HipdnnError, match="cannot live in a device buffer"):
        hd.empty((2,), object)
    with pytest.raises(hipdnn.HipdnnError, match="not a Stream or a stream handle"):
        buf.to_numpy(stream="s")  # type: ignore[arg-type]
    buf.free()
    with pytest.raises(hipdnn.HipdnnError, match="was freed"):
        buf.to_numpy()


def test_cuda_array_interface_reports_the_pending_stream(fake: HostRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    host = np.ones((2, 8), np.float16)
    stream = hd.Stream()
    buf = hd.to_device(host, stream=stream)
    iface = buf.__cuda_array_interface__
    assert iface == {
        "shape": (2, 8),
        "typestr": "<f2",
        "data": (buf.ptr, False),
        "strides": None,
        "version": 3,
        "stream": stream.handle,
    }
    assert hd.to_device(host).__cuda_array_interface__["stream"] is None  # synchronous copy: nothing pending
    # hipdnn's reader takes it and orders the handle's stream after the producer's
    waited: list[tuple[int, int]] = []
    monkeypatch.setattr(values.device_sync, "wait_for_producer", lambda p, c: waited.append((p, c)))
    resolved = values.resolve(buf, "q", stream=0x77)
    assert (resolved.ptr, resolved.shape, resolved.on_device) == (buf.ptr, (2, 8), True)
    assert resolved.dtype_code == int(hipdnn.DataType.HALF)
    assert waited == [(stream.handle, 0x77)]


def test_dlpack_export_is_read_by_hipdnn_and_released(fake: HostRuntime) -> None:
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    buf = hd.to_device(host)
    before = _dlpack.live_exports()
    assert buf.__dlpack_device__() == (2, 0)
    # only DLPack: hide the array interface
    only_dlpack = type("OnlyDLPack", (), {"__dlpack__": buf.__dlpack__, "__dlpack_device__": buf.__dlpack_device__})()
    resolved = values.resolve(only_dlpack, "q", stream=0)
    assert (resolved.ptr, resolved.shape, resolved.strides, resolved.on_device) == (buf.ptr, (2, 3), (3, 1), True)
    assert resolved.dtype_code == int(hipdnn.DataType.FLOAT)
    assert _dlpack.live_exports() == before + 1  # held by the consumer
    assert resolved.release is not None
    resolved.release()
    assert _dlpack.live_exports() == before
    # a capsule nobody consumes is released by its own destructor
    capsule = buf.__dlpack__()
    assert _dlpack.live_exports() == before + 1
    del capsule
    gc.collect()
    assert _dlpack.live_exports() == before
    with pytest.raises(BufferError):
        buf.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        buf.__dlpack__(dl_device=(10, 0))


def test_dlpack_consumer_stream_waits_for_the_producer(fake: HostRuntime) -> None:
    stream = hd.Stream()
    buf = hd.to_device(np.zeros(4, np.float32), stream=stream)
    capsule = buf.__dlpack__(stream=0x5000)
    assert fake.waits == [(stream.handle, 0x5000)]
    del capsule
    buf.__dlpack__(stream=stream.handle)  # the same stream: no wait
    buf.__dlpack__(stream=-1)  # the consumer asks for none
    assert len(fake.waits) == 1


@pytest.mark.skipif(importlib.util.find_spec("ml_dtypes") is None, reason="ml_dtypes is not installed")
def test_bfloat16_goes_through_dlpack(fake: HostRuntime) -> None:
    import ml_dtypes

    host = np.arange(8, dtype=np.float32).astype(ml_dtypes.bfloat16)
    buf = hd.to_device(host)
    assert not hasattr(buf, "__cuda_array_interface__")  # no typestr names bfloat16
    resolved = values.resolve(buf, "q", stream=0)  # the reader falls through to DLPack
    assert resolved.dtype_code == int(hipdnn.DataType.BFLOAT16)
    assert resolved.release is not None
    resolved.release()
    np.testing.assert_array_equal(buf.to_numpy(), host)


@pytest.mark.skipif(importlib.util.find_spec("hip") is None, reason="hip-python is not installed (hipdnn[rocm])")
def test_hip_python_imports_and_reports_no_device_without_rocm(monkeypatch: pytest.MonkeyPatch) -> None:
    """As far as a machine without an AMD GPU goes: hip-python loads and its runtime (Debian's
    libamdhip64 where hipcc is installed) reports no device; allocation is refused with that reason."""
    monkeypatch.setenv(hd.ENV_RUNTIME, "hip")
    rt = hd.runtime()
    assert rt.name == "hip" and rt.dlpack_device_type == 10
    count, why = rt.device_count()
    if count:
        pytest.skip("this machine has an AMD GPU: tests/gpu/test_device_module.py covers it")
    assert hd.devices() == []
    assert why
    with pytest.raises(hipdnn.HipdnnError, match="hip-python sees no GPU"):
        hd.empty((4,), np.float16)


def test_cli_gpu_demo_and_doctor_without_a_runtime(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hipdnn.cli import main

    block_runtimes(monkeypatch)
    monkeypatch.delenv(hd.ENV_RUNTIME, raising=False)
    assert main(["demo", "--device", "gpu", "--max-seq-len", "64", "--seq-lens", "1"]) == 2
    err = capsys.readouterr().err
    assert "no GPU runtime for hipdnn.device" in err and "hipdnn[cuda]" in err and "Traceback" not in err
    main(["doctor"])
    out = capsys.readouterr().out
    # said plainly: a fact with no GPU engine loaded, a warning (GPUs cannot be listed) with one
    assert "no GPU runtime for hipdnn.device" in out and "GPU devices: none" not in out


def test_cli_gpu_demo_and_doctor_without_a_device(fake: HostRuntime, capsys: pytest.CaptureFixture[str]) -> None:
    from hipdnn.cli import main

    fake.count = 0
    assert main(["demo", "--device", "gpu", "--max-seq-len", "64", "--seq-lens", "1"]) == 2
    assert "error: fake-runtime sees no GPU (no device here)" in capsys.readouterr().err
    main(["doctor"])
    assert "[INFO] no GPU: the CPU engine serves every graph (fake-runtime: no device here" in capsys.readouterr().out
    fake.count = 1
    main(["doctor"])
    assert "[OK  ] GPU 0: fake (sm_00, 1 GiB) via fake-runtime" in capsys.readouterr().out
