"""Device-memory variant-pack values, without a GPU: objects shaped like torch CUDA tensors and
``__cuda_array_interface__`` providers are reduced to pointers and bounds-checked."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import hipdnn
from hipdnn.frontend import memory


class FakeCudaTensor:
    """Just the accessors hipdnn reads from a torch tensor; bfloat16 (2-byte) elements."""

    def __init__(self, ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int = 2) -> None:
        self.device = SimpleNamespace(type="cuda", index=0)
        self.shape = shape
        self._ptr, self._strides, self._itemsize = ptr, strides, itemsize

    def data_ptr(self) -> int:
        return self._ptr

    def element_size(self) -> int:
        return self._itemsize

    def stride(self) -> tuple[int, ...]:
        return self._strides

    def is_contiguous(self) -> bool:
        return True

    @property
    def __cuda_array_interface__(self) -> dict[str, object]:  # torch refuses it for bfloat16
        raise TypeError("Got unsupported ScalarType BFloat16")


def test_torch_like_bf16_tensor_is_read_through_its_accessors() -> None:
    t = FakeCudaTensor(0x10000, (1, 2, 8, 4), (64, 32, 4, 1))
    buf = memory.to_buffer(t, "tensor 'q'")
    assert buf.on_device and buf.ptr == 0x10000 and buf.itemsize == 2
    assert buf.high is not None and buf.high - buf.ptr == 64 * 2
    memory.check_buffer(
        buf, where="q", data_type=hipdnn.DataType.BFLOAT16, dims=[1, 2, 8, 4], strides=[64, 32, 4, 1], overridden=False
    )
    with pytest.raises(hipdnn.HipdnnError, match="item size 2 disagrees with FLOAT"):
        memory.check_buffer(
            buf, where="q", data_type=hipdnn.DataType.FLOAT, dims=[1, 2, 8, 4], strides=[64, 32, 4, 1], overridden=False
        )
    # a sized value must state the call's (overridden) shape: one larger than the tensor is refused
    with pytest.raises(
        hipdnn.HipdnnError,
        match=r"q: buffer shape \[1, 2, 8, 4\] disagrees with the call's \(overridden\) dims \[1, 2, 8, 8\]",
    ):
        memory.check_buffer(
            buf,
            where="q",
            data_type=hipdnn.DataType.BFLOAT16,
            dims=[1, 2, 8, 8],
            strides=[128, 64, 8, 1],
            overridden=True,
        )
    # and so is one smaller (no longer read as a block at its start), with the view to pass named
    with pytest.raises(
        hipdnn.HipdnnError, match=r"dims \[1, 2, 8, 2\]; pass a view of that shape \(x\[:, :, :, :2\]\)"
    ):
        memory.check_buffer(
            buf,
            where="q",
            data_type=hipdnn.DataType.BFLOAT16,
            dims=[1, 2, 8, 2],
            strides=[64, 32, 4, 1],
            overridden=True,
        )


def test_cuda_array_interface_values_are_on_device_and_bounded() -> None:
    holder = SimpleNamespace(
        __cuda_array_interface__={
            "data": (0x20000, False),
            "shape": (4, 8),
            "strides": None,
            "typestr": "<f2",
            "version": 3,
        }
    )
    buf = memory.to_buffer(holder, "tensor 'k'")
    assert buf.on_device and buf.ptr == 0x20000 and buf.high == 0x20000 + 64
    memory.check_buffer(buf, where="k", data_type=hipdnn.DataType.HALF, dims=[4, 8], strides=[8, 1], overridden=False)
    with pytest.raises(hipdnn.HipdnnError, match="disagrees"):
        memory.check_buffer(
            buf, where="k", data_type=hipdnn.DataType.FLOAT, dims=[4, 8], strides=[8, 1], overridden=False
        )


def test_gpu_engine_declares_device_memory_in_its_engine_details(hip_plugin: Path) -> None:
    """Checked without a GPU: the HIP engine's details carry the device-memory note."""
    from hipdnn.backend.placement import BEHAVIOR_NOTE_DEVICE_MEMORY, read_behavior_notes

    with hipdnn.Handle(plugin_paths=[hip_plugin], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE) as handle:
        hip = [p for p in handle.backend.plugins if p.name == "hipdnn_hip_engine"]
        assert hip, f"the HIP engine at {hip_plugin} did not load: {handle.skipped_plugins()}"
        g = hipdnn.Graph(name="bf16", io_data_type=hipdnn.DataType.BFLOAT16)
        dims, strides = [1, 2, 64, 64], [8192, 4096, 64, 1]
        q, k, v = (g.tensor(name=n, dim=dims, stride=strides, data_type=hipdnn.DataType.BFLOAT16) for n in "qkv")
        g.sdpa(q, k, v, attn_scale=0.125)[0].set_output(True)
        notes = read_behavior_notes(hip[0].engine_details(hip[0].engine_ids[0], g.serialize()))
        assert BEHAVIOR_NOTE_DEVICE_MEMORY in notes


def test_host_arrays_are_refused_by_a_device_engine_plan(fakes, fake_handle_factory) -> None:  # type: ignore[no-untyped-def]
    """A plan whose engine declared device memory refuses numpy arrays before the plugin is called."""
    import numpy as np

    h = fake_handle_factory("fake_plain_v100")
    g = hipdnn.Graph(name="dev", io_data_type=hipdnn.DataType.FLOAT)
    x = g.tensor(name="x", dim=[4], stride=[1], data_type=hipdnn.DataType.FLOAT)
    y = g.pointwise(hipdnn.PointwiseMode.RELU_FWD, x)
    y.set_output(True)
    g.build(h)
    g._require_plan().memory_location = "device"  # what a GPU engine's behavior note sets
    with pytest.raises(hipdnn.HipdnnError, match="runs on a GPU"):
        g.execute(h, {x: np.zeros(4, np.float32), y: np.zeros(4, np.float32)})
    assert fakes["fake_plain_v100"].calls("ExecuteOpGraph") == []
    # bare pointers say nothing about where they point: they are passed through
    g.execute(h, {x: 0x1000, y: 0x2000})
    assert len(fakes["fake_plain_v100"].calls("ExecuteOpGraph")) == 1
