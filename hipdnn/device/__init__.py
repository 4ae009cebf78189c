"""GPU memory, streams and copies for hipdnn without torch: ``import hipdnn.device``.

Works through whichever GPU runtime is installed: cuda-bindings on NVIDIA (``pip install
'hipdnn[cuda]'``) or hip-python on AMD (``pip install 'hipdnn[rocm]'``), imported on first use. The
CPU path never imports this module. A :class:`DeviceBuffer` exposes ``__cuda_array_interface__``
(v3, for dtypes numpy can name) and DLPack (``__dlpack__`` / ``__dlpack_device__``, every dtype
including bfloat16), so it goes straight into a variant pack::

    import hipdnn.device as hd
    stream = hd.Stream()
    q = hd.to_device(q_host, stream=stream)
    out = hd.empty(q_host.shape, q_host.dtype)
    g.execute(hipdnn.Handle(stream=stream.handle), {q_t: q, ..., o_t: out}, workspace)
    result = out.to_numpy(stream=stream)

Runtime choice: ``HIPDNN_DEVICE_RUNTIME=cuda|hip`` forces one; otherwise the first of cuda-bindings
and hip-python that sees a device, else the first that imports. With neither installed, every call
raises HipdnnError saying which extra to install.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from hipdnn.backend.errors import ErrorCode, HipdnnError
from hipdnn.device import _dlpack
from hipdnn.device._runtimes import DeviceInfo, Runtime, load

__all__ = [
    "DeviceBuffer",
    "DeviceInfo",
    "Stream",
    "availability",
    "devices",
    "empty",
    "runtime",
    "to_device",
]

ENV_RUNTIME = "HIPDNN_DEVICE_RUNTIME"

_lock = threading.Lock()
_chosen: Runtime | None = None


def availability() -> list[tuple[str, bool, str]]:
    """(runtime, importable, why not) for cuda-bindings and hip-python; imports them, uses no device."""
    out = []
    for name in ("cuda", "hip"):
        rt, why = load(name)
        out.append((name, rt is not None, why))
    return out


def runtime() -> Runtime:
    """The runtime this process uses (chosen once). Raises HipdnnError when none is installed."""
    global _chosen
    with _lock:
        if _chosen is not None:
            return _chosen
        forced = os.environ.get(ENV_RUNTIME, "")
        if forced:
            if forced not in ("cuda", "hip"):
                raise HipdnnError(ErrorCode.INVALID_VALUE, f"{ENV_RUNTIME}={forced!r}: expected 'cuda' or 'hip'")
            rt, why = load(forced)
            if rt is None:
                raise HipdnnError(ErrorCode.HIPDNN_BACKEND_ERROR, f"{ENV_RUNTIME}={forced}: {why}")
            _chosen = rt
            return rt
        usable: list[Runtime] = []
        reasons = []
        for name in ("cuda", "hip"):
            rt, why = load(name)
            if rt is None:
                reasons.append(why)
                continue
            if rt.device_count()[0] > 0:
                _chosen = rt
                return rt
            usable.append(rt)
        if usable:
            _chosen = usable[0]
            return _chosen
        raise HipdnnError(
            ErrorCode.HIPDNN_BACKEND_ERROR,
            "no GPU runtime for hipdnn.device: " + "; ".join(reasons),
        )


def _reset_for_tests() -> None:
    global _chosen
    with _lock:
        _chosen = None


def devices() -> list[DeviceInfo]:
    """The GPUs the runtime sees ([] when it sees none). Raises HipdnnError when no runtime is installed."""
    rt = runtime()
    count, _ = rt.device_count()
    return [rt.device_info(i) for i in range(count)]


def _require_device(rt: Runtime, device: int) -> None:
    count, why = rt.device_count()
    if count == 0:
        raise HipdnnError(ErrorCode.HIPDNN_BACKEND_ERROR, f"{rt.package} sees no GPU ({why or 'device count 0'})")
    if not 0 <= device < count:
        raise HipdnnError(ErrorCode.INVALID_VALUE, f"device {device} does not exist ({count} visible)")


def _stream_handle(stream: Stream | int | None, what: str) -> int | None:
    if stream is None or isinstance(stream, Stream):
        return None if stream is None else stream.handle
    if isinstance(stream, bool) or not isinstance(stream, int) or not 0 <= stream < 1 << 64:
        raise HipdnnError(ErrorCode.INVALID_VALUE, f"{what}: stream {stream!r} is not a Stream or a stream handle")
    return stream


class Stream:
    """A GPU stream created by the runtime (non-blocking: it does not wait for the legacy default
    stream). ``handle`` is what ``hipdnn.Handle(stream=...)`` takes."""

    def __init__(self, device: int = 0) -> None:
        self._rt = runtime()
        _require_device(self._rt, device)
        self._rt.set_device(device)
        self.device = device
        self.handle: int = self._rt.stream_create()

    def synchronize(self) -> None:
        """Block until all work queued on this stream has finished."""
        self._check_open()
        self._rt.stream_synchronize(self.handle)

    def wait_for(self, other: Stream | int) -> None:
        """Make work queued on this stream from now on wait for the work queued so far on ``other``."""
        self._check_open()
        producer = _stream_handle(other, "Stream.wait_for")
        self._rt.stream_wait(producer or 0, self.handle)

    def close(self) -> None:
        if self.handle:
            handle, self.handle = self.handle, 0
            self._rt.stream_destroy(handle)

    def _check_open(self) -> None:
        if not self.handle:
            raise HipdnnError(ErrorCode.INVALID_VALUE, "the stream is closed")

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __int__(self) -> int:
        return self.handle

    def __repr__(self) -> str:
        return f"Stream({self._rt.name}, device {self.device}, handle {self.handle:#x})"


def _dtype(dtype: Any) -> np.dtype[Any]:
    try:
        dt: np.dtype[Any] = np.dtype(dtype)
    except TypeError as exc:
        raise HipdnnError(ErrorCode.INVALID_VALUE, f"dtype {dtype!r} is not a numpy dtype ({exc})") from exc
    if dt.itemsize == 0 or dt.hasobject or dt.fields is not None:
        raise HipdnnError(ErrorCode.INVALID_VALUE, f"dtype {dt} cannot live in a device buffer")
    return dt


def _shape(shape: Sequence[int] | int) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0 for d in dims):
        raise HipdnnError(ErrorCode.INVALID_VALUE, f"shape {list(dims)} is not a list of non-negative integers")
    return tuple(int(d) for d in dims)


class DeviceBuffer:
    """A C-contiguous array in GPU memory, freed by :meth:`free` or when garbage collected.

    ``stream`` is the stream that last wrote it without being waited for (None: nothing pending).
    Consumers that honour the protocols (hipdnn's variant packs among them) order their own stream
    after it: ``__cuda_array_interface__`` reports it, ``__dlpack__(stream=...)`` waits for it."""

    def __init__(self, shape: Sequence[int] | int, dtype: Any, device: int = 0) -> None:
        self._rt = runtime()
        _require_device(self._rt, device)
        self.shape = _shape(shape)
        self.dtype = _dtype(dtype)
        self.device = device
        self.nbytes = math.prod(self.shape) * self.dtype.itemsize
        self.stream: int | None = None
        self._rt.set_device(device)
        # a zero-byte buffer still gets a distinct address (consumers refuse NULL)
        self.ptr: int = self._rt.malloc(max(self.nbytes, 1))

    @property
    def strides(self) -> tuple[int, ...]:
        """Element strides (row-major)."""
        return tuple(math.prod(self.shape[i + 1 :]) for i in range(len(self.shape)))

    def _check_open(self) -> None:
        if not self.ptr:
            raise HipdnnError(ErrorCode.INVALID_VALUE, "the device buffer was freed")

    def copy_from(self, array: np.ndarray[Any, Any], stream: Stream | int | None = None) -> DeviceBuffer:
        """Copy a host array of this buffer's shape and dtype in. Without a stream the copy is finished on
        return; with one it is queued there (and the buffer remembers the stream)."""
        self._check_open()
        if not isinstance(array, np.ndarray):
            raise HipdnnError(ErrorCode.INVALID_VALUE, f"copy_from takes a numpy array, not {type(array).__name__}")
        if array.shape != self.shape or array.dtype != self.dtype:
            raise HipdnnError(
                ErrorCode.INVALID_VALUE,
                f"host array {array.dtype}{list(array.shape)} does not match the buffer {self.dtype}{list(self.shape)}",
            )
        host = np.ascontiguousarray(array)
        handle = _stream_handle(stream, "copy_from")
        if self.nbytes:
            self._rt.copy_to_device(self.ptr, host.ctypes.data, self.nbytes, handle)
        self.stream = handle
        return self

    def to_numpy(self, stream: Stream | int | None = None) -> np.ndarray[Any, Any]:
        """A host copy. With a stream, the copy is queued there (after what that stream already holds)
        and waited for; without one it runs on the legacy default stream."""
        self._check_open()
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            self._rt.copy_to_host(out.ctypes.data, self.ptr, self.nbytes, _stream_handle(stream, "to_numpy"))
        return out

    def fill_bytes(self, byte: int, stream: Stream | int | None = None) -> DeviceBuffer:
        """Set every byte to ``byte`` (0xFF makes every float NaN)."""
        self._check_open()
        if isinstance(byte, bool) or not isinstance(byte, int) or not 0 <= byte <= 255:
            raise HipdnnError(ErrorCode.INVALID_VALUE, f"fill_bytes: {byte!r} is not a byte value")
        handle = _stream_handle(stream, "fill_bytes")
        if self.nbytes:
            self._rt.memset(self.ptr, byte, self.nbytes, handle)
        self.stream = handle
        return self

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        self._check_open()
        if self.dtype.kind == "V" or self.dtype.name == "bfloat16":
            # no typestr names bfloat16 (ml_dtypes reports raw bytes): consumers use DLPack instead
            raise AttributeError(f"{self.dtype} has no array-interface typestr; use __dlpack__")
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "strides": None,
            "version": 3,
            # v3: the producer's stream (1 = the legacy default), None = nothing pending
            "stream": None if self.stream is None else (self.stream or 1),
        }

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self._rt.dlpack_device_type, self.device)

    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> object:
        self._check_open()
        if copy:
            raise BufferError("hipdnn.device buffers are exported without copying")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"cannot export to device {dl_device}; the buffer is on {self.__dlpack_device__()}")
        # the consumer's stream waits for ours (-1: the consumer asks for no synchronization)
        if stream is not None and stream != -1 and self.stream is not None and stream != (self.stream or 1):
            consumer = 0 if stream == 1 and self._rt.name == "cuda" else stream
            self._rt.stream_wait(self.stream, consumer)
        return _dlpack.export(self, self.ptr, self.__dlpack_device__(), self.shape, self.strides, self.dtype)

    def free(self) -> None:
        """Release the memory now (later use raises HipdnnError). Exported DLPack views keep the buffer
        alive, so free only when none is in use."""
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            self._rt.free(ptr)

    def __del__(self) -> None:
        # interpreter shutdown, or a runtime already gone: nothing to report to
        with contextlib.suppress(Exception):
            self.free()

    def __repr__(self) -> str:
        return f"DeviceBuffer({self.dtype}{list(self.shape)}, {self._rt.name} device {self.device}, ptr {self.ptr:#x})"


def empty(shape: Sequence[int] | int, dtype: Any, device: int = 0) -> DeviceBuffer:
    """An uninitialized device buffer."""
    return DeviceBuffer(shape, dtype, device)


def to_device(array: np.ndarray[Any, Any], stream: Stream | int | None = None, device: int = 0) -> DeviceBuffer:
    """A device copy of a host array (see :meth:`DeviceBuffer.copy_from` for the stream)."""
    if not isinstance(array, np.ndarray):
        raise HipdnnError(ErrorCode.INVALID_VALUE, f"to_device takes a numpy array, not {type(array).__name__}")
    return DeviceBuffer(array.shape, array.dtype, device).copy_from(array, stream)
