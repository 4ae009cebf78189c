"""The two GPU runtimes hipdnn.device drives, behind one small interface.

cuda-bindings (``hipdnn[cuda]``) on NVIDIA and hip-python (``hipdnn[rocm]``) on AMD. Each is imported
only when first asked for; neither is needed on the CPU path. Every failed runtime call becomes a
HipdnnError naming the call and the runtime's error name.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol

from hipdnn.backend.errors import ErrorCode, HipdnnError

#: stream flag: no implicit synchronization with the legacy default stream
NON_BLOCKING = 0x1
#: event flag: the event only orders work, it never times it
DISABLE_TIMING = 0x2


@dataclass(frozen=True)
class DeviceInfo:
    """One GPU as its runtime reports it."""

    index: int
    name: str
    runtime: str
    total_memory: int  # bytes; 0 when the runtime did not say
    arch: str  # "sm_90" on NVIDIA, "gfx90a" on AMD; "" when the runtime did not say


class Runtime(Protocol):
    name: str  # "cuda" or "hip"
    package: str  # the pip extra's distribution: "cuda-bindings" or "hip-python"
    dlpack_device_type: int  # kDLCUDA or kDLROCM

    def device_count(self) -> tuple[int, str]: ...
    def device_info(self, index: int) -> DeviceInfo: ...
    def set_device(self, index: int) -> None: ...
    def malloc(self, nbytes: int) -> int: ...
    def free(self, ptr: int) -> None: ...
    def copy_to_device(self, dst: int, src: int, nbytes: int, stream: int | None) -> None: ...
    def copy_to_host(self, dst: int, src: int, nbytes: int, stream: int | None) -> None: ...
    def memset(self, ptr: int, byte: int, nbytes: int, stream: int | None) -> None: ...
    def stream_create(self) -> int: ...
    def stream_destroy(self, stream: int) -> None: ...
    def stream_synchronize(self, stream: int) -> None: ...
    def stream_wait(self, producer: int, consumer: int) -> None: ...


def _code(err: Any) -> int:
    return int(getattr(err, "value", err))


def _text(value: Any) -> str:
    # hip-python returns some strings inside a (status, value) tuple; cuda-bindings returns bytes
    if isinstance(value, tuple):
        value = value[-1]
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


class _Base:
    name = ""
    package = ""
    dlpack_device_type = 0
    _mod: Any

    def _call(self, fn: str, *args: Any) -> Any:
        """Call ``fn`` of the runtime module, raise on failure, return what it returned after the status."""
        try:
            result = getattr(self._mod, fn)(*args)
        except HipdnnError:
            raise
        except Exception as exc:
            raise HipdnnError(
                ErrorCode.HIPDNN_BACKEND_ERROR, f"{self.package}: {fn} failed ({type(exc).__name__}: {exc})"
            ) from exc
        status, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
        if _code(status) != 0:
            raise HipdnnError(
                ErrorCode.HIPDNN_BACKEND_ERROR, f"{self.package}: {fn} returned {self._error_name(status)}"
            )
        return rest[0] if len(rest) == 1 else rest

    def _error_name(self, status: Any) -> str:
        return getattr(status, "name", None) or f"error {_code(status)}"

    def _stream(self, stream: int | None) -> Any:
        return 0 if stream is None else stream


class CudaRuntime(_Base):
    """cuda-bindings' runtime API (cudart)."""

    name = "cuda"
    package = "cuda-bindings"
    dlpack_device_type = 2  # kDLCUDA

    def __init__(self, module: Any) -> None:
        self._mod = module
        self._h2d = module.cudaMemcpyKind.cudaMemcpyHostToDevice
        self._d2h = module.cudaMemcpyKind.cudaMemcpyDeviceToHost

    def device_count(self) -> tuple[int, str]:
        try:
            status, count = self._mod.cudaGetDeviceCount()
        except Exception as exc:  # the binding could not load the runtime library
            return 0, f"cudaGetDeviceCount failed ({type(exc).__name__}: {exc})"
        if _code(status) != 0:
            return 0, f"cudaGetDeviceCount returned {self._error_name(status)}"
        return int(count), ""

    def device_info(self, index: int) -> DeviceInfo:
        prop = self._call("cudaGetDeviceProperties", index)
        return DeviceInfo(
            index, _text(prop.name).rstrip("\0"), self.name, int(prop.totalGlobalMem), f"sm_{prop.major}{prop.minor}"
        )

    def set_device(self, index: int) -> None:
        self._call("cudaSetDevice", index)

    def malloc(self, nbytes: int) -> int:
        return int(self._call("cudaMalloc", nbytes))

    def free(self, ptr: int) -> None:
        self._call("cudaFree", ptr)

    def copy_to_device(self, dst: int, src: int, nbytes: int, stream: int | None) -> None:
        if stream is None:
            self._call("cudaMemcpy", dst, src, nbytes, self._h2d)
        else:
            self._call("cudaMemcpyAsync", dst, src, nbytes, self._h2d, stream)

    def copy_to_host(self, dst: int, src: int, nbytes: int, stream: int | None) -> None:
        if stream is None:
            self._call("cudaMemcpy", dst, src, nbytes, self._d2h)
        else:
            self._call("cudaMemcpyAsync", dst, src, nbytes, self._d2h, stream)
            self._call("cudaStreamSynchronize", stream)

    def memset(self, ptr: int, byte: int, nbytes: int, stream: int | None) -> None:
        if stream is None:
            self._call("cudaMemset", ptr, byte, nbytes)
        else:
            self._call("cudaMemsetAsync", ptr, byte, nbytes, stream)

    def stream_create(self) -> int:
        return int(self._call("cudaStreamCreateWithFlags", NON_BLOCKING))

    def stream_destroy(self, stream: int) -> None:
        self._call("cudaStreamDestroy", stream)

    def stream_synchronize(self, stream: int) -> None:
        self._call("cudaStreamSynchronize", stream)

    def stream_wait(self, producer: int, consumer: int) -> None:
        event = self._call("cudaEventCreateWithFlags", DISABLE_TIMING)
        try:
            self._call("cudaEventRecord", event, producer)
            self._call("cudaStreamWaitEvent", consumer, event, 0)
        finally:
            self._call("cudaEventDestroy", event)


class HipRuntime(_Base):
    """hip-python's HIP runtime API."""

    name = "hip"
    package = "hip-python"
    dlpack_device_type = 10  # kDLROCM

    def __init__(self, module: Any) -> None:
        self._mod = module
        self._h2d = module.hipMemcpyKind.hipMemcpyHostToDevice
        self._d2h = module.hipMemcpyKind.hipMemcpyDeviceToHost

    def device_count(self) -> tuple[int, str]:
        try:
            status, count = self._mod.hipGetDeviceCount()
        except Exception as exc:  # the binding could not load the runtime library
            return 0, f"hipGetDeviceCount failed ({type(exc).__name__}: {exc})"
        if _code(status) != 0:
            return 0, f"hipGetDeviceCount returned {self._error_name(status)}"
        return int(count), ""

    def device_info(self, index: int) -> DeviceInfo:
        try:
            prop = self._call("hipGetDeviceProperties", index)
            return DeviceInfo(
                index, _text(prop.name).rstrip("\0"), self.name, int(prop.totalGlobalMem), _text(prop.gcnArchName)
            )
        except HipdnnError:
            # an older HIP runtime lacks the properties entry point hip-python binds: the name alone
            name = self._call("hipDeviceGetName", 256, index)
            return DeviceInfo(index, _text(name).rstrip("\0"), self.name, 0, "")

    def set_device(self, index: int) -> None:
        self._call("hipSetDevice", index)

    def malloc(self, nbytes: int) -> int:
        return int(self._call("hipMalloc", nbytes))

    def free(self, ptr: int) -> None:
        self._call("hipFree", ptr)

    def copy_to_device(self, dst: int, src: int, nbytes: int, stream: int | None) -> None:
        if stream is None:
            self._call("hipMemcpy", dst, src, nbytes, self._h2d)
        else:
            self._call("hipMemcpyAsync", dst, src, nbytes, self._h2d, stream)

    def copy_to_host(self, dst: int, src: int, nbytes: int, stream: int | None) -> None:
        if stream is None:
            self._call("hipMemcpy", dst, src, nbytes, self._d2h)
        else:
            self._call("hipMemcpyAsync", dst, src, nbytes, self._d2h, stream)
            self._call("hipStreamSynchronize", stream)

    def memset(self, ptr: int, byte: int, nbytes: int, stream: int | None) -> None:
        if stream is None:
            self._call("hipMemset", ptr, byte, nbytes)
        else:
            self._call("hipMemsetAsync", ptr, byte, nbytes, stream)

    def stream_create(self) -> int:
        return int(self._call("hipStreamCreateWithFlags", NON_BLOCKING))

    def stream_destroy(self, stream: int) -> None:
        self._call("hipStreamDestroy", stream)

    def stream_synchronize(self, stream: int) -> None:
        self._call("hipStreamSynchronize", stream)

    def stream_wait(self, producer: int, consumer: int) -> None:
        event = self._call("hipEventCreateWithFlags", DISABLE_TIMING)
        try:
            self._call("hipEventRecord", event, producer)
            self._call("hipStreamWaitEvent", consumer, event, 0)
        finally:
            self._call("hipEventDestroy", event)


#: runtime name -> (modules to try in order, class, pip extra). A "module:attr" entry imports module
#: and takes its attribute: hip-python 7+ binds hip.hip as an alias of rocm.bindings.hip, not a submodule.
RUNTIMES: dict[str, tuple[tuple[str, ...], type[CudaRuntime] | type[HipRuntime], str]] = {
    "cuda": (("cuda.bindings.runtime", "cuda.cudart"), CudaRuntime, "hipdnn[cuda]"),
    "hip": (("rocm.bindings.hip", "hip:hip"), HipRuntime, "hipdnn[rocm]"),
}


def load(name: str) -> tuple[Runtime | None, str]:
    """The runtime ``name`` ("cuda" or "hip"), or None and why it could not be imported."""
    modules, cls, extra = RUNTIMES[name]
    reasons = []
    for spec in modules:
        module, _, attr = spec.partition(":")
        try:
            mod = importlib.import_module(module)
            return cls(getattr(mod, attr) if attr else mod), ""
        except Exception as exc:  # ImportError, or a binding that fails while loading its library
            reasons.append(f"{module}: {type(exc).__name__}: {exc}")
    return None, f"{cls.package} is not usable ({'; '.join(reasons)}); pip install '{extra}'"
