"""Making one GPU stream wait for the work another stream has queued, without blocking the host.

Used for ``__cuda_array_interface__`` v3 values that name the ``stream`` their producer wrote them
on: before an engine reads the memory on the handle's stream, that stream must wait for the
producer's. The driver is reached through cffi's ABI mode, loaded on first use: the CUDA driver
(``libcuda.so.1``) when present, else the HIP runtime (``libamdhip64.so``).

Stream numbers follow the CUDA array interface: 1 is the legacy default stream, 2 the per-thread
default stream, anything larger a stream handle. The consumer may also be 0, which (as for a
hipdnn handle) means the legacy default stream.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from hipdnn.backend.errors import ErrorCode, HipdnnError

#: cuEventCreate / hipEventCreateWithFlags flag: the event only orders work, it never times it
EVENT_DISABLE_TIMING = 0x2
#: CUDA's special stream handles
CU_STREAM_LEGACY = 0x1
CU_STREAM_PER_THREAD = 0x2

CUDA_LIBRARY = "libcuda.so.1"
HIP_LIBRARIES: tuple[str, ...] = ("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.7")

_CUDA_CDEF = """
typedef int CUresult;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef struct CUctx_st* CUcontext;
CUresult cuInit(unsigned int flags);
CUresult cuGetErrorName(CUresult error, const char** name);
CUresult cuCtxGetCurrent(CUcontext* ctx);
CUresult cuCtxPushCurrent_v2(CUcontext ctx);
CUresult cuCtxPopCurrent_v2(CUcontext* ctx);
CUresult cuStreamGetCtx(CUstream stream, CUcontext* ctx);
CUresult cuEventCreate(CUevent* event, unsigned int flags);
CUresult cuEventRecord(CUevent event, CUstream stream);
CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags);
CUresult cuEventDestroy_v2(CUevent event);
"""

_HIP_CDEF = """
typedef int hipError_t;
typedef struct ihipStream_t* hipStream_t;
typedef struct ihipEvent_t* hipEvent_t;
const char* hipGetErrorName(hipError_t error);
hipError_t hipEventCreateWithFlags(hipEvent_t* event, unsigned int flags);
hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream);
hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int flags);
hipError_t hipEventDestroy(hipEvent_t event);
"""


class Runtime(Protocol):
    """One GPU runtime's way of ordering a consumer stream after a producer stream."""

    name: str

    def wait(self, producer: int, consumer: int) -> None: ...


def same_stream(producer: int, consumer: int) -> bool:
    """True when both numbers name one stream (consumer 0 and producer 1 are both the legacy default)."""
    return producer == (consumer or CU_STREAM_LEGACY)


def wait_for_producer(producer: int, consumer: int) -> None:
    """Make all work later queued on ``consumer`` wait for the work queued so far on ``producer``.

    Does nothing when they are one stream. Raises HipdnnError(GRAPH_EXECUTION_FAILED) when no GPU
    runtime can be loaded or a runtime call fails: skipping the wait would let an engine read
    memory its producer has not finished writing."""
    if same_stream(producer, consumer):
        return
    runtime().wait(producer, consumer)


def _fail(message: str) -> HipdnnError:
    return HipdnnError(ErrorCode.GRAPH_EXECUTION_FAILED, message)


class CudaRuntime:
    """The CUDA driver API. ``lib`` is the dlopened driver (a stand-in in tests)."""

    name = "CUDA driver"

    def __init__(self, ffi: Any, lib: Any) -> None:
        self._ffi = ffi
        self._lib = lib

    def _check(self, result: int, call: str) -> None:
        if result != 0:
            name = self._ffi.new("const char**")
            known = self._lib.cuGetErrorName(result, name) == 0 and name[0] != self._ffi.NULL
            text = self._ffi.string(name[0]).decode() if known else "unknown error"
            raise _fail(f"{call} failed with CUDA error {result} ({text})")

    def _stream(self, number: int) -> Any:
        # 0 is spelled as CU_STREAM_LEGACY: the driver reads NULL the same way, but explicit is clearer
        return self._ffi.cast("CUstream", number or CU_STREAM_LEGACY)

    def wait(self, producer: int, consumer: int) -> None:
        ffi, lib = self._ffi, self._lib
        # Events belong to a context: work in the context of whichever stream is a real handle
        # (its device), and only fall back on the thread's current context for the special handles.
        owner = producer if producer > CU_STREAM_PER_THREAD else consumer if consumer > CU_STREAM_PER_THREAD else 0
        pushed = False
        if owner:
            ctx = ffi.new("CUcontext*")
            self._check(lib.cuStreamGetCtx(self._stream(owner), ctx), "cuStreamGetCtx")
            self._check(lib.cuCtxPushCurrent_v2(ctx[0]), "cuCtxPushCurrent")
            pushed = True
        else:
            ctx = ffi.new("CUcontext*")
            self._check(lib.cuCtxGetCurrent(ctx), "cuCtxGetCurrent")
            if ctx[0] == ffi.NULL:
                raise _fail("no CUDA context is current on this thread, so the default streams name nothing")
        try:
            event = ffi.new("CUevent*")
            self._check(lib.cuEventCreate(event, EVENT_DISABLE_TIMING), "cuEventCreate")
            try:
                self._check(lib.cuEventRecord(event[0], self._stream(producer)), "cuEventRecord")
                self._check(lib.cuStreamWaitEvent(self._stream(consumer), event[0], 0), "cuStreamWaitEvent")
            finally:
                # legal right away: the wait already enqueued keeps the event's state
                lib.cuEventDestroy_v2(event[0])
        finally:
            if pushed:
                lib.cuCtxPopCurrent_v2(ffi.new("CUcontext*"))


class HipRuntime:
    """The HIP runtime (ROCm). Not exercised on a real GPU here: no AMD GPU was at hand, so only
    the call sequence is tested, against a stand-in library. HIP has no legacy-stream handle: 0
    and 1 both mean the null (default) stream, 2 is hipStreamPerThread."""

    name = "HIP runtime"

    def __init__(self, ffi: Any, lib: Any) -> None:
        self._ffi = ffi
        self._lib = lib

    def _check(self, result: int, call: str) -> None:
        if result != 0:
            text = self._lib.hipGetErrorName(result)
            name = self._ffi.string(text).decode() if text != self._ffi.NULL else "unknown error"
            raise _fail(f"{call} failed with HIP error {result} ({name})")

    def _stream(self, number: int) -> Any:
        return self._ffi.cast("hipStream_t", 0 if number == CU_STREAM_LEGACY else number)

    def wait(self, producer: int, consumer: int) -> None:
        ffi, lib = self._ffi, self._lib
        event = ffi.new("hipEvent_t*")
        self._check(lib.hipEventCreateWithFlags(event, EVENT_DISABLE_TIMING), "hipEventCreateWithFlags")
        try:
            self._check(lib.hipEventRecord(event[0], self._stream(producer)), "hipEventRecord")
            self._check(lib.hipStreamWaitEvent(self._stream(consumer), event[0], 0), "hipStreamWaitEvent")
        finally:
            lib.hipEventDestroy(event[0])


def cuda_ffi() -> Any:
    """A cffi FFI declaring the CUDA driver calls used here."""
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(_CUDA_CDEF)
    return ffi


def hip_ffi() -> Any:
    """A cffi FFI declaring the HIP runtime calls used here."""
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(_HIP_CDEF)
    return ffi


def load_runtime() -> Runtime:
    """dlopen the CUDA driver, else the HIP runtime; HipdnnError naming every failure if neither loads."""
    problems: list[str] = []
    try:
        ffi = cuda_ffi()
        lib = ffi.dlopen(CUDA_LIBRARY)
        cuda = CudaRuntime(ffi, lib)
        cuda._check(lib.cuInit(0), "cuInit")
        return cuda
    except (OSError, HipdnnError) as exc:
        problems.append(f"{CUDA_LIBRARY}: {exc}")
    ffi = hip_ffi()
    for library in HIP_LIBRARIES:
        try:
            return HipRuntime(ffi, ffi.dlopen(library))
        except OSError as exc:
            problems.append(f"{library}: {exc}")
    raise _fail(
        "cannot order the consumer stream after the producer's stream: no GPU runtime could be loaded ("
        + "; ".join(problems)
        + ")"
    )


class _State:
    """The loaded runtime, or why none loaded (kept: a missing library does not appear later)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runtime: Runtime | None = None
        self.failure: HipdnnError | None = None


_state = _State()


def runtime() -> Runtime:
    """The process's GPU runtime, loaded on first use."""
    state = _state
    if state.runtime is not None:
        return state.runtime
    with state.lock:
        if state.runtime is None:
            if state.failure is not None:
                raise HipdnnError(state.failure.code, state.failure.message)
            try:
                state.runtime = load_runtime()
            except HipdnnError as exc:
                state.failure = exc
                raise
        return state.runtime
