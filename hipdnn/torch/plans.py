"""Plans for torch tensors: one hipdnn graph per attention *kind*, built at a capacity that grows
geometrically, every call served through shape overrides (rfcs/0010-torch-integration.md).

A kind is everything a plan bakes in: the op, device, element types, heads, KV heads, head dims, the
axis order of every tensor, the masks and the scale. The lengths that change from call to call
(batch, query length, key length) are not part of it: a kind's plan is built at a capacity of at
least the call's lengths, each rounded up to a power of two, and every later call that fits is
served by that plan with the call's shapes and strides as overrides. A call that does not fit builds
the kind's next plan, each length grown to ``max(capacity, next power of two)``; the old plan stays
alive for calls still running on it.

Calls go through the plan's bound call (``Graph.bind``: int pointers, nothing resolved per call).
The bound call trusts each pointer to hold its tensor at the plan's declared maximum, so the one
proof it does not make is made here: every input must span no more elements than the plan's maximum
does (``1 + sum((d - 1) * stride)`` against the declared extent). Plans declare tensors dense, so a
view with larger strides (a slice of a packed QKV tensor, or of a KV cache) makes the kind's next
plan declare that input with per-axis stride floors that cover it (``Plan.floors``, grown to powers
of two like the lengths). Outputs are allocated by the caller, fresh and dense in the layout the kind
declares, so they overlap nothing.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from hipdnn.frontend import (
    DataType,
    DiagonalAlignment,
    ErrorCode,
    Graph,
    Handle,
    HipdnnError,
    TensorAttributes,
)
from hipdnn.frontend.bound import SdpaCalls, thread_workspace
from hipdnn.torch.masks import additive_bias

#: torch element type -> hipdnn DataType, for every type a plan may hold
DATA_TYPES: dict[torch.dtype, DataType] = {
    torch.float32: DataType.FLOAT,
    torch.float16: DataType.HALF,
    torch.bfloat16: DataType.BFLOAT16,
    torch.int32: DataType.INT32,
    torch.int64: DataType.INT64,
}

#: element types q, k, v (and o) may have
ATTENTION_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.float16, torch.bfloat16)

#: the smallest capacity a sequence length is built at (the batch starts at 1)
MIN_SEQ_CAPACITY = 16

#: kinds kept before the oldest is dropped (its plan stays alive while calls hold it)
MAX_KINDS = 256

#: axes from outermost to innermost
Order = tuple[int, ...]

#: capacity axis names: batch, query length, key length
AXES = ("B", "SQ", "SKV")


def next_capacity(n: int, floor: int) -> int:
    """The power of two at or above ``max(n, floor)``."""
    n = max(n, floor, 1)
    return 1 << (n - 1).bit_length()


def compact_in_order(dims: Sequence[int], order: Order) -> list[int]:
    """Strides of a dense tensor of ``dims`` laid out in ``order`` (outermost first)."""
    strides = [0] * len(dims)
    step = 1
    for a in reversed(order):
        strides[a] = step
        step *= max(int(dims[a]), 1)
    return strides


def extent(shape: Sequence[int], strides: Sequence[int]) -> int:
    """Elements spanned from the first one addressed to the last, plus one (0 when empty)."""
    total = 1
    for d, s in zip(shape, strides):
        if d == 0:
            return 0
        total += (d - 1) * s
    return total


def needs_copy(t: torch.Tensor) -> bool:
    """Whether a plan cannot read ``t`` in place: an axis longer than 1 with stride 0 (an expanded
    tensor; hipdnn takes positive strides only) or a last axis that is not contiguous."""
    strides = t.stride()
    if strides[-1] == 1 and 0 not in strides:
        return False
    shape = t.shape
    if shape[-1] > 1 and strides[-1] != 1:
        return True
    return any(d > 1 and s <= 0 for d, s in zip(shape, strides))


def readable(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself when a plan can read it in place, else a contiguous copy."""
    return t.contiguous() if needs_copy(t) else t


def dispatches(t: torch.Tensor) -> bool:
    """Whether ``t`` is a tensor subclass with its own ``__torch_dispatch__`` (``FakeTensor``, wrapper
    subclasses such as ``TwoTensor``): its memory, if it has any, is not what it stands for, so only
    the custom op (through which the subclass sees the call, as for any torch op) may run it."""
    return type(t) is not torch.Tensor and type(t).__torch_dispatch__ is not torch.Tensor.__torch_dispatch__


def plain(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a plain ``torch.Tensor`` over the same memory. The bound call reads each tensor's
    ``data_ptr()``, ``shape`` and ``stride()`` through Python, which a subclass may override; one
    that misreported them would have the engines read and write outside its memory. torch's own
    accessors on the plain alias report what the memory is."""
    if type(t) is torch.Tensor:
        return t
    if dispatches(t):
        raise HipdnnError(
            ErrorCode.INVALID_VALUE,
            f"hipdnn.torch: a {type(t).__name__} (a tensor subclass with __torch_dispatch__) has no memory "
            "hipdnn's engines can read; call the custom op torch.ops.hipdnn.sdpa, which the subclass dispatches",
        )
    return torch.Tensor.as_subclass(t, torch.Tensor)


#: the layouts of a 4-D tensor whose last axis is innermost, by order code (see ``order_code``)
LAYOUTS: tuple[Order, ...] = ((0, 1, 2, 3), (0, 2, 1, 3), (1, 0, 2, 3), (1, 2, 0, 3), (2, 0, 1, 3), (2, 1, 0, 3))


def order_code(strides: Sequence[int]) -> int:
    """Index into ``LAYOUTS`` of a 4-D tensor's axis order, its last axis taken as innermost: axes 0-2
    by stride, larger first, ties by axis index (the order hipdnn's rule 8 reads from declared
    strides), as comparisons: this runs on every call."""
    a, b, c = strides[0], strides[1], strides[2]
    if a >= b:
        return 0 if b >= c else 1 if a >= c else 4
    return 2 if a >= c else 3 if b >= c else 5


class Masking(NamedTuple):
    """The mask and scale options a plan bakes in (the sequence-length and bias tensors aside). A
    tuple, so that hashing it as part of a cache key costs nothing."""

    scale: float
    causal: bool = False
    bottom_right: bool = False
    left_bound: int | None = None
    right_bound: int | None = None
    #: score softcapping c (None: off), applied before every mask
    softcap: float | None = None

    def normalized(self) -> Masking:
        """The alignment matters only with a causal mask or a band: dropped otherwise."""
        banded = self.causal or self.left_bound is not None or self.right_bound is not None
        return self if banded or not self.bottom_right else self._replace(bottom_right=False)

    def sdpa_options(self) -> dict[str, Any]:
        return {
            "attn_scale": self.scale,
            "use_causal_mask": self.causal,
            "diagonal_alignment": DiagonalAlignment.BOTTOM_RIGHT if self.bottom_right else DiagonalAlignment.TOP_LEFT,
            "diagonal_band_left_bound": self.left_bound,
            "diagonal_band_right_bound": self.right_bound,
            "softcap": self.softcap,
        }


@dataclass(frozen=True)
class Slot:
    """One tensor of a plan: its role, element type, axis order (outermost first), whether the plan
    writes it, and its dims at capacity: per axis a capacity axis name (``AXES``) or a fixed size."""

    role: str
    dtype: torch.dtype
    order: Order
    dims: tuple[int | str, ...]
    output: bool = False

    def capacity_dims(self, caps: dict[str, int]) -> list[int]:
        return [caps[d] if isinstance(d, str) else d for d in self.dims]


@dataclass(frozen=True)
class Kind:
    """Everything a plan bakes in, spelled out for building it (the cache key says the same in a flat
    tuple, cheap to hash per call). ``slots`` lists the plan's tensors in the order calls pass them."""

    op: str  # "sdpa" or "sdpa_backward"
    device: torch.device
    heads: int
    kv_heads: int
    head_dim: int
    value_dim: int
    masking: Masking
    padding: bool
    slots: tuple[Slot, ...]


#: per input slot, the smallest stride each axis is declared with (1: dense)
Floors = tuple[tuple[int, ...], ...]

#: one call: its tensors in slot order, their shapes and their strides
Call = tuple[Sequence[torch.Tensor], Sequence[Sequence[int]], Sequence[Sequence[int]]]


def call_of(values: Sequence[torch.Tensor]) -> Call:
    """``values`` with their shapes and strides, read once."""
    return values, [v.shape for v in values], [v.stride() for v in values]


def declared_strides(dims: Sequence[int], order: Order, floors: Sequence[int]) -> list[int]:
    """Strides of a tensor of ``dims`` laid out in ``order`` (outermost first): dense, except that
    each axis's stride is at least its floor (then the axes outside it step over the padding). The
    layout stays non-overlapping and keeps the order."""
    strides = [0] * len(dims)
    step = 1
    for a in reversed(order):
        strides[a] = max(step, floors[a])
        step = strides[a] * max(int(dims[a]), 1)
    return strides


class Plan:
    """One built graph at one capacity, with its bound call. Immutable once built: a kind that
    outgrows it gets a new Plan, and calls holding this one finish on it.

    The capacity is the lengths (``caps``) and, per input, a stride floor per axis (``floors``): a
    view whose strides are larger than dense (a slice of a packed QKV tensor, of a KV cache) needs
    the plan's declared maximum to span at least as much as it does, since the bound call trusts
    pointers to hold that maximum (``reaches``)."""

    def __init__(self, handle: Handle, kind: Kind, caps: dict[str, int], floors: Floors, number: int) -> None:
        self.kind = kind
        self.caps = dict(caps)
        self.cap_b, self.cap_sq, self.cap_skv = caps["B"], caps["SQ"], caps["SKV"]
        self.floors = floors
        #: how many plans this kind had before this one (0: its first)
        self.number = number
        self.handle = handle
        self.graph, self.tensors = build_graph(handle, kind, caps, floors)
        self.workspace_size = self.graph.get_workspace_size()
        self.bound = self.graph.bind(handle, self.tensors, override_uids=self.tensors)
        #: the CUDA (or ROCm) device index calls launch on; None for a CPU plan
        self.gpu_index: int | None = kind.device.index if kind.device.type == "cuda" else None
        if self.gpu_index is None and kind.device.type == "cuda":
            self.gpu_index = torch.cuda.current_device()
        #: (slot index, elements the slot's declared maximum spans) per input: what a bound pointer is trusted to hold
        self.input_extents = [
            (i, extent(t.get_dim(), t.get_stride()))
            for i, (s, t) in enumerate(zip(kind.slots, self.tensors))
            if not s.output
        ]

    def fits(self, batch: int, sq: int, skv: int) -> bool:
        return batch <= self.cap_b and sq <= self.cap_sq and skv <= self.cap_skv

    def reaches(self, shapes: Sequence[Sequence[int]], strides: Sequence[Sequence[int]]) -> bool:
        """Whether every input (its shape and strides, in slot order) spans no more elements than the
        plan's declared maximum for it: the proof the bound call leaves to its caller. Outputs are
        allocated dense, within their maximum."""
        for i, most in self.input_extents:
            (d0, d1, d2, d3), (s0, s1, s2, s3) = shapes[i], strides[i]
            if 1 + (d0 - 1) * s0 + (d1 - 1) * s1 + (d2 - 1) * s2 + (d3 - 1) * s3 > most:
                return False
        return True

    def run(self, values: Sequence[torch.Tensor]) -> bool:
        """Execute one call on ``values`` (its tensors in slot order, their shapes and strides the
        overrides) through the bound call's compiled tensor path, which reads each tensor's pointer,
        shape and strides itself. True when it ran; False, having launched nothing, when a tensor
        exceeds what the plan declares (a view wider than its maximum): the kind needs its next plan."""
        index = self.gpu_index
        if index is None:
            return bool(self.bound.call_tensors(values, self.host_workspace()))
        # One lock for the stream switch and the launch: the handle holds one stream, and two threads
        # on different streams must not launch on each other's.
        with _launch_lock:
            if _current_device is not None and _current_device() != index:
                with torch.cuda.device(index):  # launch on the tensors' GPU, not the current one
                    return self._launch_gpu(values, index)
            return self._launch_gpu(values, index)

    def _launch_gpu(self, values: Sequence[torch.Tensor], index: int) -> bool:
        stream = current_stream(index)
        if self.handle.get_stream() != stream:
            self.handle.set_stream(stream)
        if self.workspace_size:
            workspace = gpu_workspace(index, stream, self.workspace_size)  # held until the launch is queued
            return bool(self.bound.call_tensors(values, workspace.data_ptr()))
        return bool(self.bound.call_tensors(values, 0))

    def host_workspace(self) -> int:
        """The CPU call's workspace pointer (0: none needed): calls are synchronous, so one buffer
        per thread serves them all, grown as plans need; the execute core's, which its compiled short
        path (``cpu_calls``) takes too."""
        return thread_workspace(self.workspace_size)


def build_graph(
    handle: Handle, kind: Kind, caps: dict[str, int], floors: Floors
) -> tuple[Graph, list[TensorAttributes]]:
    """The hipdnn graph of ``kind`` at capacity ``caps`` and stride ``floors``, built on ``handle``,
    and its tensors in slot order."""
    g = Graph(
        name=f"hipdnn.torch {kind.op}",
        io_data_type=DATA_TYPES[kind.slots[0].dtype],
        intermediate_data_type=DataType.FLOAT,
        compute_data_type=DataType.FLOAT,
        is_override_shape_enabled=True,
    )
    r: dict[str, TensorAttributes] = {}
    for slot, floor in zip(kind.slots, floors):
        if not slot.output:
            dims = slot.capacity_dims(caps)
            r[slot.role] = g.tensor(
                name=slot.role,
                dim=dims,
                stride=declared_strides(dims, slot.order, floor),
                data_type=DATA_TYPES[slot.dtype],
            )
    options = kind.masking.sdpa_options()
    if "bias" in r:
        options["bias"] = r["bias"]
    if kind.padding:
        options.update(use_padding_mask=True, seq_len_q=r["seq_len_q"], seq_len_kv=r["seq_len_kv"])
    made: dict[str, TensorAttributes | None]
    if kind.op == "sdpa":
        stats_wanted = any(s.role == "stats" for s in kind.slots)
        o, stats = g.sdpa(r["q"], r["k"], r["v"], generate_stats=stats_wanted, **options)
        made = {"o": o, "stats": stats}
    else:
        dq, dk, dv = g.sdpa_backward(r["q"], r["k"], r["v"], r["o"], r["do"], r["stats"], **options)
        made = {"dq": dq, "dk": dk, "dv": dv}
    for slot in kind.slots:
        if slot.output:
            t = made[slot.role]
            assert t is not None
            dims = slot.capacity_dims(caps)
            t.set_output(True).set_dim(dims).set_stride(compact_in_order(dims, slot.order))
            t.set_data_type(DATA_TYPES[slot.dtype])
            r[slot.role] = t
    try:
        g.build(handle)
    except HipdnnError as exc:
        raise HipdnnError(exc.code, f"hipdnn.torch: no plan for {describe(kind)}: {exc.message}") from None
    return g, [r[s.role] for s in kind.slots]


def describe(kind: Kind) -> str:
    """The kind in words, for messages and stats."""
    m = kind.masking
    parts = [
        f"{kind.op} on {kind.device}",
        str(kind.slots[0].dtype).replace("torch.", ""),
        f"heads {kind.heads}/{kind.kv_heads}",
        f"head dims {kind.head_dim}/{kind.value_dim}",
        f"scale {m.scale:g}",
    ]
    if m.causal:
        parts.append("causal " + ("bottom-right" if m.bottom_right else "top-left"))
    if m.left_bound is not None or m.right_bound is not None:
        parts.append(f"band left {m.left_bound} right {m.right_bound}" + (" bottom-right" if m.bottom_right else ""))
    if m.softcap is not None:
        parts.append(f"softcap {m.softcap:g}")
    if kind.padding:
        parts.append("sequence lengths")
    if any(s.role == "bias" for s in kind.slots):
        parts.append("additive mask")
    parts.append("layouts " + " ".join(f"{s.role}{''.join('BHSD'[a] for a in s.order)}" for s in kind.slots))
    return ", ".join(parts)


@dataclass
class Counters:
    builds: int = 0
    hits: int = 0
    bound_calls: int = 0


@dataclass(frozen=True)
class CacheStats:
    """What the plan cache did. ``builds``: graphs built (one per kind and capacity step); ``hits``:
    calls served by a plan already built; ``bound_calls``: calls run (each through its plan's bound
    call); ``capacities``: per kind, in words, the lengths its current plan holds."""

    builds: int
    hits: int
    bound_calls: int
    capacities: list[tuple[str, dict[str, int]]] = field(default_factory=list)


class PlanCache:
    """Plans by key, each at its kind's current capacity. Thread-safe: a lookup reads a dict whose
    values are immutable plans; building (a new kind, or one outgrowing its capacity) holds a lock.
    The counters are updated without it (exact in single-threaded use)."""

    def __init__(self) -> None:
        self._plans: dict[Hashable, Plan] = {}
        #: per key, the capacity no engine would build a plan at, and the refusal's message
        self._refused: dict[Hashable, tuple[dict[str, int], str]] = {}
        self._lock = threading.Lock()
        self.counters = Counters()
        #: the compiled short path of plain CPU attention calls (kernels.cached_forward): every plan
        #: of such a kind, kept in step with the plans here
        self.cpu_calls = SdpaCalls(
            torch.Tensor, torch.empty_permuted, torch.is_grad_enabled, torch.device("cpu"), LAYOUTS,
            _mask_bias, torch.bool, torch.float32,
            torch._C._is_torch_function_mode_enabled, torch._C._len_torch_dispatch_stack,
        )  # fmt: skip

    def run(
        self, key: Hashable, batch: int, sq: int, skv: int, values: Sequence[torch.Tensor], kind: Callable[[], Kind]
    ) -> None:
        """Run one call (``values``: its tensors in slot order) on ``key``'s plan when its capacity
        holds the call's lengths and its declared maxima hold the tensors; else on the kind's next
        plan, built now (``kind`` spells the kind out; called only for a kind's first plan)."""
        plan = self._plans.get(key)
        fits = plan is not None and batch <= plan.cap_b and sq <= plan.cap_sq and skv <= plan.cap_skv
        if fits and plan is not None and plan.run(values):
            self.counters.hits += 1
            self.counters.bound_calls += 1
            return
        plan = self.grow(key, batch, sq, skv, call_of(values), kind)
        if not plan.run(values):
            raise HipdnnError(
                ErrorCode.HIPDNN_BACKEND_ERROR,
                f"hipdnn.torch: the plan built for this call does not hold it ({describe(plan.kind)})",
            )
        self.counters.bound_calls += 1

    def grow(self, key: Hashable, batch: int, sq: int, skv: int, call: Call, kind: Callable[[], Kind]) -> Plan:
        """The plan serving one call that the current one (if any) cannot: another thread's, when it
        grew the kind meanwhile; else the kind's next plan, built now."""
        _, shapes, strides = call
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None and plan.fits(batch, sq, skv) and plan.reaches(shapes, strides):
                self.counters.hits += 1  # another thread grew the kind meanwhile
                return plan
            described = plan.kind if plan is not None else kind()
            old = plan.caps if plan is not None else dict.fromkeys(AXES, 0)
            caps = {
                "B": max(old["B"], next_capacity(batch, 1)),
                "SQ": max(old["SQ"], next_capacity(sq, MIN_SEQ_CAPACITY)),
                "SKV": max(old["SKV"], next_capacity(skv, MIN_SEQ_CAPACITY)),
            }
            floors = plan.floors if plan is not None else tuple((1,) * 4 for _ in described.slots)
            floors = _grown_floors(described, caps, floors, shapes, strides)
            refused = self._refused.get(key)
            if refused is not None and all(caps[a] >= refused[0][a] for a in AXES):
                # the engines refused this kind at this capacity or a smaller one: no new build
                raise HipdnnError(ErrorCode.GRAPH_NOT_SUPPORTED, refused[1])
            try:
                new = Plan(
                    handle_for(described.device), described, caps, floors, plan.number + 1 if plan is not None else 0
                )
            except HipdnnError as exc:
                if exc.code == ErrorCode.GRAPH_NOT_SUPPORTED:
                    while len(self._refused) >= MAX_KINDS:
                        del self._refused[next(iter(self._refused))]
                    self._refused[key] = (caps, exc.message)
                raise
            self.counters.builds += 1
            if plan is None:
                while len(self._plans) >= MAX_KINDS:
                    del self._plans[next(iter(self._plans))]
            self._plans[key] = new
            self._sync_cpu_calls()
            return new

    def _sync_cpu_calls(self) -> None:
        """Hand ``cpu_calls`` every current plan it can serve (with the lock held: plans change only
        when one is built, so this runs once per build)."""
        calls = self.cpu_calls
        calls.clear()
        for plan in self._plans.values():
            kind = plan.kind
            m = kind.masking
            if (
                kind.op != "sdpa"
                or kind.device.type != "cpu"
                or kind.padding
                or m.left_bound is not None
                or m.right_bound is not None
                or m.softcap is not None
                or [s.role for s in kind.slots] not in (["q", "k", "v", "o"], ["q", "k", "v", "bias", "o"])
            ):
                continue
            q, k, v = kind.slots[:3]
            codes = LAYOUTS.index(q.order) + 6 * LAYOUTS.index(k.order) + 36 * LAYOUTS.index(v.order)
            # the additive bias slot, when the kind has one: its type, batch and head axes, axis order
            bias = kind.slots[3] if len(kind.slots) == 5 else None
            calls.put(
                plan.bound, q.dtype, kind.heads, kind.kv_heads, kind.head_dim, kind.value_dim, m.scale,
                m.causal, m.bottom_right, codes, plan.cap_b, plan.cap_sq, plan.cap_skv,
                None if bias is None else bias.dtype, bias is not None and bias.dims[0] != 1,
                bias is not None and bias.dims[1] != 1, 0 if bias is None else LAYOUTS.index(bias.order),
            )  # fmt: skip

    def peek(self, key: Hashable) -> Plan | None:
        """``key``'s current plan, if any (no building, no counting)."""
        return self._plans.get(key)

    def plans(self) -> list[Plan]:
        """The current plan of every kind."""
        with self._lock:
            return list(self._plans.values())

    def stats(self) -> CacheStats:
        c = self.counters
        short = self.cpu_calls.hits  # calls the compiled short path served: hits, each a bound call
        caps = [(describe(p.kind), dict(p.caps)) for p in self.plans()]
        return CacheStats(c.builds, c.hits + short, c.bound_calls + short, caps)

    def clear(self) -> None:
        """Drop every plan (calls running on one finish on it) and zero the counters."""
        with self._lock:
            self._plans.clear()
            self._refused.clear()
            self.cpu_calls.clear()
            self.cpu_calls.hits = 0
            self.counters = Counters()


def _grown_floors(
    kind: Kind, caps: dict[str, int], floors: Floors, shapes: Sequence[Sequence[int]], strides: Sequence[Sequence[int]]
) -> Floors:
    """``floors``, raised where an input spans more than its declared maximum at ``caps`` would: for
    each such input, every axis longer than 1 gets at least the call's stride, rounded up to a power
    of two (so that strides growing call by call rebuild O(log) times)."""
    grown = list(floors)
    for i, slot in enumerate(kind.slots):
        if slot.output:
            continue
        dims = slot.capacity_dims(caps)
        if extent(shapes[i], strides[i]) <= extent(dims, declared_strides(dims, slot.order, floors[i])):
            continue
        grown[i] = tuple(
            max(f, next_capacity(st, 1)) if n > 1 else f for f, st, n in zip(floors[i], strides[i], shapes[i])
        )
    return tuple(grown)


def _mask_bias(mask: torch.Tensor, query: torch.Tensor, b: int, hq: int, sq: int, skv: int) -> torch.Tensor:
    """A boolean ``attn_mask`` [B|1, Hq|1, Sq|1, Skv|1] of a 4-D call as the additive bias its plan takes:
    the general path's conversion, for ``PlanCache.cpu_calls`` (which remembers the result while the
    same mask comes back unmodified)."""
    return additive_bias(mask, query, 4, "4d", (b,), hq, sq, skv)


# -- handles and streams ------------------------------------------------------------------------

_handles: dict[tuple[str, int | None], Handle] = {}
_handles_lock = threading.Lock()


#: overrides how the CPU handle runs the attention forward's parallel work: "pool", "openmp" or
#: "auto" (unset: auto, see cpu_threading)
CPU_THREADING_ENV = "HIPDNN_TORCH_CPU_THREADING"

#: file names of OpenMP runtimes (GNU, LLVM, Intel)
_OPENMP_RUNTIMES = ("libgomp", "libomp.", "libomp-", "libiomp5")


def openmp_runtimes() -> set[str]:
    """The OpenMP runtime files mapped into this process (read from /proc/self/maps; empty where
    that cannot be read)."""
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            paths = {line.split(maxsplit=5)[-1].strip() for line in maps if ".so" in line}
    except OSError:
        return set()
    return {p for p in paths if p.rsplit("/", 1)[-1].startswith(_OPENMP_RUNTIMES)}


def torch_shares_engine_openmp() -> bool:
    """Whether torch's CPU threads are the ones the CPU engine's OpenMP team would run on: torch's
    parallel backend is OpenMP and the process holds one OpenMP runtime, GNU's ``libgomp.so.1``,
    the library the engine links (the dynamic loader binds the engine to the copy already loaded,
    torch's, rather than load a second)."""
    if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        return False
    runtimes = openmp_runtimes()
    return len(runtimes) == 1 and next(iter(runtimes)).rsplit("/", 1)[-1] == "libgomp.so.1"


def cpu_threading() -> str:
    """How the CPU handle runs the attention forward's parallel work (``Handle(cpu_threading=)``).
    ``HIPDNN_TORCH_CPU_THREADING`` set to "pool" or "openmp" decides; otherwise "openmp" where torch
    shares the engine's OpenMP runtime (torch_shares_engine_openmp), else "pool". On torch's own
    threads a call starts at once on threads still spinning from torch's last op; the engine's own
    workers would have to be woken and then fight those threads for the cores (decode calls right
    after a torch matmul took 0.50-2.37x torch's SDPA time that way, 0.38-1.27x on torch's threads:
    rfcs/0010-torch-integration.md)."""
    choice = os.environ.get(CPU_THREADING_ENV, "auto").strip().lower() or "auto"
    if choice in ("pool", "openmp"):
        return choice
    if choice != "auto":
        raise HipdnnError(ErrorCode.INVALID_VALUE, f"{CPU_THREADING_ENV}={choice!r} is not one of auto, pool, openmp")
    return "openmp" if torch_shares_engine_openmp() else "pool"


def handle_for(device: torch.device) -> Handle:
    """The handle plans for ``device`` are built on, one per device type and index, created on first
    use: ``Handle(device="cpu")`` for CPU tensors, ``Handle(device="cuda")`` for CUDA (and ROCm)
    tensors."""
    key = (device.type, device.index)
    handle = _handles.get(key)
    if handle is not None:
        return handle
    with _handles_lock:
        handle = _handles.get(key)
        if handle is None:
            if device.type not in ("cpu", "cuda"):
                raise HipdnnError(
                    ErrorCode.INVALID_VALUE, f"hipdnn.torch: tensors on {device} are not served (CPU and CUDA only)"
                )
            handle = (
                Handle(device="cpu", cpu_threading=cpu_threading()) if device.type == "cpu" else Handle(device="cuda")
            )
            _handles[key] = handle
        return handle


#: torch's C accessors of the current CUDA stream and device (a CUDA build's; about 10 us cheaper per
#: call than ``torch.cuda.current_stream``), None in a CPU-only build
_current_raw_stream: Callable[[int], int] | None = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_current_device: Callable[[], int] | None = getattr(torch._C, "_cuda_getDevice", None)


#: held while a GPU plan points its handle at a stream and launches (Plan.run)
_launch_lock = threading.Lock()

#: the largest workspace (bytes) kept between calls
MAX_KEPT_WORKSPACE = 16 << 20

#: per device index, the workspace kept for eager calls on its default stream (gpu_workspace)
_gpu_workspaces: dict[int, torch.Tensor] = {}


def current_stream(index: int) -> int:
    """torch's current stream on CUDA device ``index``, as an int."""
    if _current_raw_stream is not None:
        return int(_current_raw_stream(index))
    return int(torch.cuda.current_stream(index).cuda_stream)


def gpu_workspace(index: int, stream: int, size: int) -> torch.Tensor:
    """A workspace of ``size`` bytes for a call on ``stream`` of device ``index`` (the current one).
    Calls on one stream run one after the other, so on the default stream (stream 0: eager models)
    one buffer serves them all, grown as plans need (the caching allocator frees the old one in
    stream order). Every other call takes a fresh tensor from torch's caching allocator: under
    CUDA-graph capture (``torch.cuda.graph``, on a side stream) and in the warm-up runs of
    ``torch.compile``'s CUDA graph trees (on their own stream, allocating from the graph's private
    pool, which must hold no allocation but the graph's outputs), a kept buffer would be memory the
    graph does not own. (CUDA cannot capture the legacy default stream, so a call on stream 0 is
    never being captured.) Larger workspaces than ``MAX_KEPT_WORKSPACE`` are not kept either (calls
    that need them run long enough that an allocation does not show)."""
    if stream != 0 or size > MAX_KEPT_WORKSPACE:
        return torch.empty(size, dtype=torch.uint8, device=torch.device("cuda", index))
    buffer = _gpu_workspaces.get(index)
    if buffer is None or buffer.numel() < size:
        buffer = _gpu_workspaces[index] = torch.empty(size, dtype=torch.uint8, device=torch.device("cuda", index))
    return buffer


__all__ = [
    "ATTENTION_DTYPES",
    "AXES",
    "Call",
    "DATA_TYPES",
    "LAYOUTS",
    "CacheStats",
    "Kind",
    "Masking",
    "Plan",
    "PlanCache",
    "Slot",
    "call_of",
    "compact_in_order",
    "cpu_threading",
    "declared_strides",
    "extent",
    "current_stream",
    "gpu_workspace",
    "handle_for",
    "next_capacity",
    "openmp_runtimes",
    "dispatches",
    "order_code",
    "plain",
    "readable",
    "torch_shares_engine_openmp",
]
