"""The cases of ``test_hostile_objects.py`` (issue #26): hostile Python objects handed to the execute core.

Every case is a function that takes no argument and either returns (the call ran, and the case checked
its result) or raises: a ``HipdnnError`` is a refusal, an ``AssertionError`` a wrong result, anything
else an exception that escaped the core. A case may crash the interpreter, so each one runs in a child
process of its own::

    python -m tests.adversarial.hostile_cases CASE_NAME

which prints one line ``HOSTILE-RESULT {json}`` (outcome, exception type, error code, message) and
exits 0; a crash shows as the child's exit status and a hang as its timeout. ``CASES`` maps each name
to its :class:`Case`: the bug kind of issue #26 it belongs to, what the fixed core must do
(``refused``, ``ok``, or ``either``: a right result or a refusal) and the words one of which a refusal
must name (the tensor or the argument at fault).

Graphs are small fp32 graphs on the CPU engine with odd sizes (SDPA, or ``z = x + y``), filled with
random non-zero data; results are checked against float64 references written from the definitions,
outputs start as NaN, and refused calls must leave canary bytes untouched.
"""

from __future__ import annotations

import gc
import json
import math
import sys
import threading
import time
import traceback
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

import numpy as np
from numpy.lib.stride_tricks import as_strided
from numpy.typing import NDArray

import hipdnn
from hipdnn import DataType, HipdnnError, OverrideEntry, TensorAttributes

F = DataType.FLOAT
F32 = NDArray[np.float32]
MARKER = "HOSTILE-RESULT "
SCALE = 0.25  # exact in float32
TOL = 2e-5  # relative to the largest reference value: float32 compute against float64

Expect = Literal["refused", "ok", "either"]


@dataclass(frozen=True)
class Case:
    name: str
    kind: int
    run: Callable[[], None]
    expect: Expect
    names: tuple[str, ...] = ()  # a refusal's message must hold one of these
    timeout: float = 60.0


CASES: dict[str, Case] = {}


class Skip(Exception):
    """The case cannot run on this build (the parent skips it, with the reason)."""


def register(
    kind: int, name: str, run: Callable[[], None], expect: Expect, names: tuple[str, ...] = (), timeout: float = 60.0
) -> None:
    full = f"k{kind}-{name}"
    assert full not in CASES, full
    CASES[full] = Case(full, kind, run, expect, names, timeout)


# -- building blocks ------------------------------------------------------------------------------
_rng = np.random.default_rng(26)


def rand(*shape: int) -> F32:
    """Random float32 in ±[0.25, 1): never zero, never tiny."""
    mag = _rng.uniform(0.25, 1.0, shape)
    sign = _rng.choice(np.array([-1.0, 1.0]), shape)
    return np.ascontiguousarray((mag * sign).astype(np.float32))


def nan(*shape: int) -> F32:
    return np.full(shape, np.nan, np.float32)


def compact(dims: list[int]) -> list[int]:
    return [math.prod(dims[i + 1 :]) for i in range(len(dims))]


def uid_of(t: TensorAttributes) -> int:
    uid = t.get_uid()
    assert uid is not None, t
    return uid


def elem_strides(a: np.ndarray) -> list[int]:
    return [s // a.itemsize for s in a.strides]


@lru_cache(maxsize=1)
def handle() -> hipdnn.Handle:
    return hipdnn.Handle(device="cpu")


def sdpa_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float = SCALE) -> NDArray[np.float64]:
    """softmax(scale * q k^T) v over the last two axes, in float64, from the definition."""
    q64, k64, v64 = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    scores = scale * np.einsum("bhqd,bhkd->bhqk", q64, k64)
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    out: NDArray[np.float64] = np.einsum("bhqk,bhkd->bhqd", weights, v64)
    return out


def sdpa_stats(q: np.ndarray, k: np.ndarray, scale: float = SCALE) -> NDArray[np.float64]:
    """The natural-log log-sum-exp of each row of scale * q k^T, shape [B, H, S, 1]."""
    scores = scale * np.einsum("bhqd,bhkd->bhqk", np.asarray(q, np.float64), np.asarray(k, np.float64))
    top = scores.max(axis=-1, keepdims=True)
    lse: NDArray[np.float64] = top + np.log(np.exp(scores - top).sum(axis=-1, keepdims=True))
    return lse


def assert_close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    got64 = np.asarray(got, dtype=np.float64)
    assert not np.isnan(got64).any(), f"{what}: elements left unwritten (NaN)"
    err = float(np.abs(got64 - want).max()) / max(1e-30, float(np.abs(want).max()))
    assert err < TOL, f"{what}: relative error {err:.2e}"


@dataclass
class Attn:
    """A built SDPA graph o = sdpa(q, k, v), all four [B, H, S, D] compact fp32."""

    g: hipdnn.Graph
    q: TensorAttributes
    k: TensorAttributes
    v: TensorAttributes
    o: TensorAttributes
    dims: list[int]
    ws: NDArray[np.uint8] = field(init=False)

    def __post_init__(self) -> None:
        self.ws = np.empty(max(1, self.g.get_workspace_size()), np.uint8)

    @property
    def tensors(self) -> tuple[TensorAttributes, TensorAttributes, TensorAttributes, TensorAttributes]:
        return self.q, self.k, self.v, self.o

    def shape(self, s: int | None = None) -> list[int]:
        b, h, smax, d = self.dims
        return [b, h, smax if s is None else s, d]

    def inputs(self, s: int | None = None) -> tuple[F32, F32, F32]:
        shape = self.shape(s)
        return rand(*shape), rand(*shape), rand(*shape)

    def execute(self, pack: Any, *args: Any, **kwargs: Any) -> None:
        self.g.execute(handle(), pack, self.ws, *args, **kwargs)


def build_sdpa(dims: tuple[int, int, int, int] = (1, 3, 13, 7), flag: bool = True, name: str = "attn") -> Attn:
    g = hipdnn.Graph(
        name=name,
        io_data_type=F,
        intermediate_data_type=F,
        compute_data_type=F,
        is_override_shape_enabled=flag,
    )
    d = list(dims)
    q, k, v = (g.tensor(name=n, dim=d, stride=compact(d), data_type=F) for n in "qkv")
    o, _ = g.sdpa(q, k, v, attn_scale=SCALE)
    o.set_name("o").set_output(True)
    g.build(handle())
    return Attn(g, q, k, v, o, d)


@dataclass
class Add:
    """A built graph z = x + y, all [3, 7] fp32 with strides ``strides``."""

    g: hipdnn.Graph
    x: TensorAttributes
    y: TensorAttributes
    z: TensorAttributes
    dims: list[int]
    strides: list[int]

    def pack(self) -> tuple[dict[Any, Any], F32, F32, F32]:
        xa, ya = rand(*self.dims), rand(*self.dims)
        za = nan(*self.dims)
        return {self.x: xa, self.y: ya, self.z: za}, xa, ya, za

    def entries(self) -> dict[Any, OverrideEntry]:
        return {t: OverrideEntry(shape=list(self.dims), stride=list(self.strides)) for t in (self.x, self.y, self.z)}


def build_add(strides: tuple[int, int] = (7, 1), flag: bool = True) -> Add:
    dims = [3, 7]
    g = hipdnn.Graph(name="add", io_data_type=F, is_override_shape_enabled=flag)
    x = g.tensor(name="x", dim=dims, stride=list(strides), data_type=F)
    y = g.tensor(name="y", dim=dims, stride=list(strides), data_type=F)
    z = g.add(x, y)
    z.set_name("z").set_output(True).set_stride(list(strides))
    g.build(handle())
    return Add(g, x, y, z, dims, list(strides))


class Iface:
    """A value exposing exactly the ``__array_interface__`` it was given (keeping ``keep`` alive)."""

    def __init__(self, interface: dict[str, Any], keep: Any = None) -> None:
        self._interface = interface
        self._keep = keep

    @property
    def __array_interface__(self) -> dict[str, Any]:
        return dict(self._interface)


def iface_of(a: np.ndarray, **change: Any) -> Iface:
    """``a``'s array interface (strides spelled out) with some fields changed."""
    d = dict(a.__array_interface__)
    d["strides"] = tuple(a.strides)
    d.update(change)
    return Iface(d, keep=a)


class RaisingInt64(np.int64):
    """A numpy integer whose ``__index__`` raises."""

    def __index__(self) -> int:
        raise RuntimeError("marker: RaisingInt64.__index__")


class StrInt64(np.int64):
    """A numpy integer whose ``__index__`` returns a str."""

    def __index__(self) -> int:
        return "7"  # type: ignore[return-value]


class Mutator:
    """An int-like whose ``__index__`` first runs ``act`` (once), then returns ``value``."""

    def __init__(self, value: int, act: Callable[[], object] | None = None) -> None:
        self.value = value
        self.act = act

    def __index__(self) -> int:
        act, self.act = self.act, None
        if act is not None:
            act()
        return self.value

    def __repr__(self) -> str:
        return f"Mutator({self.value})"


class Uid:
    """An override key that is an int-like (``__index__``), not an int."""

    def __init__(self, uid: int) -> None:
        self.uid = uid

    def __index__(self) -> int:
        return self.uid

    def __repr__(self) -> str:
        return f"Uid({self.uid})"


# -- kind 1: a Mapping whose items() yields things that are not (key, value) pairs -------------------
Pair = namedtuple("Pair", "key value")


class ItemsLiar(Mapping[Any, Any]):
    """Reads like ``real`` by key, but ``items()`` returns ``junk(real)``."""

    def __init__(self, real: dict[Any, Any], junk: Callable[[dict[Any, Any]], Any]) -> None:
        self._real = real
        self._junk = junk

    def __getitem__(self, key: Any) -> Any:
        return self._real[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._real)

    def __len__(self) -> int:
        return len(self._real)

    def items(self) -> Any:
        return self._junk(self._real)


JUNK: dict[str, tuple[Callable[[dict[Any, Any]], Any], Expect]] = {
    "ints": (lambda r: [1, 2, 3], "refused"),
    "big-ints": (lambda r: [2**40 + i for i in range(len(r))], "refused"),
    "one-tuples": (lambda r: [(k,) for k in r], "refused"),
    "empty-tuples": (lambda r: [() for _ in r], "refused"),
    "three-tuples": (lambda r: [(k, v, None) for k, v in r.items()], "refused"),
    "strings": (lambda r: ["xy", "yz", "zx"], "refused"),
    "long-strings": (lambda r: ["query", "key", "value"], "refused"),
    "nones": (lambda r: [None] * len(r), "refused"),
    "generator-of-ints": (lambda r: (i for i in range(3)), "refused"),
    "not-iterable": (lambda r: 5, "refused"),
    "half-pairs": (lambda r: [*r.items()][:1] + [7], "refused"),
    # pair-shaped, not tuples: a right result or a refusal, never a crash
    "two-lists": (lambda r: [[k, v] for k, v in r.items()], "either"),
    "namedtuple-pairs": (lambda r: [Pair(k, v) for k, v in r.items()], "either"),
}


def _k1_pack(junk: Callable[[dict[Any, Any]], Any]) -> Callable[[], None]:
    def run() -> None:
        a = build_add()
        pack, xa, ya, za = a.pack()
        a.g.execute(handle(), ItemsLiar(pack, junk))
        assert_close(za, xa.astype(np.float64) + ya, "z")

    return run


def _k1_overrides(junk: Callable[[dict[Any, Any]], Any], positional: bool) -> Callable[[], None]:
    def run() -> None:
        a = build_add()
        pack, xa, ya, za = a.pack()
        liar = ItemsLiar(dict(a.entries()), junk)
        if positional:
            a.g.execute(handle(), pack, None, liar)
        else:
            a.g.execute(handle(), pack, overrides=liar)
        assert_close(za, xa.astype(np.float64) + ya, "z")

    return run


for _label, (_junk, _expect) in JUNK.items():
    register(1, f"pack-{_label}", _k1_pack(_junk), _expect, ("variant pack",))
    register(1, f"overrides-{_label}", _k1_overrides(_junk, False), _expect, ("override",))
    register(1, f"overrides-positional-{_label}", _k1_overrides(_junk, True), _expect, ("override",))


# -- kind 2: lists changed while the core reads them ---------------------------------------------
S_SHORT = 9  # the override's sequence length in kinds 2 and 4


@dataclass
class Call:
    """One SDPA call at sequence length S_SHORT, overriding q, k, v and o, in the parallel form: the
    lists the hostile int-likes act on."""

    a: Attn
    qa: F32
    ka: F32
    va: F32
    oa: F32
    uids: list[Any]
    shapes: list[list[Any]]
    strides: list[list[Any]]

    @property
    def pack(self) -> dict[Any, Any]:
        return {self.a.q: self.qa, self.a.k: self.ka, self.a.v: self.va, self.a.o: self.oa}

    def check(self) -> None:
        assert_close(self.oa, sdpa_reference(self.qa, self.ka, self.va), "o")

    def ptrs(self) -> list[int]:
        return [int(x.ctypes.data) for x in (self.qa, self.ka, self.va, self.oa)]


def short_call(a: Attn | None = None) -> Call:
    a = a or build_sdpa()
    qa, ka, va = a.inputs(S_SHORT)
    shape = a.shape(S_SHORT)
    n = len(a.tensors)
    return Call(
        a, qa, ka, va, nan(*shape), list(a.tensors), [list(shape) for _ in range(n)], [compact(shape) for _ in range(n)]
    )


SEQ_AXIS = 2


def _k2_parallel(edit: Callable[[Call], None], target: str = "shapes", slot: int = 0) -> Callable[[], None]:
    """Put a Mutator running ``edit(call)`` into override_{target}[slot] (the sequence axis), then
    execute in the parallel form."""

    def run() -> None:
        c = short_call()
        lst = c.shapes if target == "shapes" else c.strides
        lst[slot][SEQ_AXIS] = Mutator(int(lst[slot][SEQ_AXIS]), lambda: edit(c))
        c.a.execute(c.pack, c.uids, c.shapes, c.strides)
        c.check()

    return run


def _k2_bound(
    edit: Callable[[Call], None], target: str = "shapes", slot: int = 0, as_tuple: bool = False
) -> Callable[[], None]:
    def run() -> None:
        c = short_call()
        bound = c.a.g.bind(handle(), list(c.a.tensors), override_uids=list(c.a.tensors))
        lst = c.shapes if target == "shapes" else c.strides
        lst[slot][SEQ_AXIS] = Mutator(int(lst[slot][SEQ_AXIS]), lambda: edit(c))
        shapes: Any = tuple(c.shapes) if as_tuple else c.shapes
        # pointers are trusted to hold the maximum shape: back them with max-size arrays
        full = [np.zeros(c.a.shape(), np.float32) for _ in range(4)]
        for f, small in zip(full, (c.qa, c.ka, c.va, c.oa)):
            f.reshape(-1)[: small.size] = small.reshape(-1)
        bound([int(f.ctypes.data) for f in full], int(c.a.ws.ctypes.data), shapes, c.strides)
        got = full[3].reshape(-1)[: c.oa.size].reshape(c.oa.shape)
        assert_close(got, sdpa_reference(c.qa, c.ka, c.va), "o")

    return run


def _k2_map(edit: Callable[[Call, dict[Any, OverrideEntry]], object], keys: str = "tensors") -> Callable[[], None]:
    def run() -> None:
        c = short_call()
        ts = list(c.a.tensors)
        key_of: list[Any] = ts if keys == "tensors" else [Uid(uid_of(t)) for t in ts]
        overrides = {
            key: OverrideEntry(shape=list(sh), stride=list(st)) for key, sh, st in zip(key_of, c.shapes, c.strides)
        }
        del key_of  # Uid keys now live in the dict only
        first = next(iter(overrides.values()))
        first.shape[SEQ_AXIS] = Mutator(S_SHORT, lambda: edit(c, overrides))  # type: ignore[index]
        c.a.execute(c.pack, overrides=overrides)
        c.check()

    return run


def _drop_inner(c: Call) -> None:
    c.shapes[:] = [list(c.a.shape(S_SHORT)) for _ in c.shapes]  # the list being read loses its last reference


for _label, _edit, _target in (
    ("inner-shape-clear", lambda c: c.shapes[0].clear(), "shapes"),
    ("inner-shape-extend", lambda c: c.shapes[0].extend([1] * 4096), "shapes"),
    ("inner-shape-replaced", _drop_inner, "shapes"),
    ("inner-stride-clear", lambda c: c.strides[0].clear(), "strides"),
    ("inner-stride-extend", lambda c: c.strides[0].extend([1] * 4096), "strides"),
    ("outer-shapes-clear", lambda c: c.shapes.clear(), "shapes"),
    ("outer-shapes-extend", lambda c: c.shapes.extend([[1, 1, 1, 1]] * 4096), "shapes"),
    ("outer-strides-clear-from-shape", lambda c: c.strides.clear(), "shapes"),
    ("outer-uids-clear", lambda c: c.uids.clear(), "shapes"),
    ("outer-strides-clear", lambda c: c.strides.clear(), "strides"),
):
    register(2, f"parallel-{_label}", _k2_parallel(_edit, _target), "either", ("override",))
    if _label != "outer-uids-clear":  # the bound call has no override_uids list
        register(2, f"bound-{_label}", _k2_bound(_edit, _target), "either", ("override",))


def _k2_parallel_last_slot() -> None:
    """The outer list is cleared while its last entry is read."""
    _k2_parallel(lambda c: c.shapes.clear(), "shapes", slot=3)()


register(2, "parallel-outer-shapes-clear-last-slot", _k2_parallel_last_slot, "either", ("override",))
register(
    2,
    "bound-tuple-of-lists-inner-clear",
    _k2_bound(lambda c: c.shapes[0].clear(), as_tuple=True),
    "either",
    ("override",),
)


def _k2_uid_keys_die() -> None:
    """override_uids holds int-like uid keys referenced by that list only; it is cleared mid-read."""
    c = short_call()
    c.uids[:] = [Uid(uid_of(t)) for t in c.a.tensors]
    c.shapes[0][SEQ_AXIS] = Mutator(S_SHORT, c.uids.clear)
    c.a.execute(c.pack, c.uids, c.shapes, c.strides)
    c.check()


def _k2_foreign_key_dies() -> None:
    """A tensor of no graph (uid 99), held by override_uids only, which is cleared mid-read: refused
    (rule 3), and the refusal must not read the dead key."""
    c = short_call()
    stray = TensorAttributes("stray")
    stray.set_uid(99)
    c.uids[0] = stray
    del stray
    c.shapes[1][SEQ_AXIS] = Mutator(S_SHORT, c.uids.clear)
    c.a.execute(c.pack, c.uids, c.shapes, c.strides)


register(2, "parallel-uid-keys-die", _k2_uid_keys_die, "either", ("override",))
register(2, "parallel-foreign-key-dies", _k2_foreign_key_dies, "refused", ("override", "uid", "stray"))


def _first_shape(m: dict[Any, OverrideEntry]) -> list[Any]:
    shape = next(iter(m.values())).shape
    assert isinstance(shape, list)
    return shape


register(2, "map-entry-shape-clear", _k2_map(lambda c, m: _first_shape(m).clear()), "either", ("override",))
register(2, "map-entry-shape-extend", _k2_map(lambda c, m: _first_shape(m).extend([1] * 4096)), "either", ("override",))
register(
    2,
    "map-entry-replaced",
    _k2_map(lambda c, m: setattr(next(iter(m.values())), "shape", list(c.a.shape(S_SHORT)))),
    "either",
    ("override",),
)
register(2, "map-dict-clear", _k2_map(lambda c, m: m.clear()), "either", ("override",))
register(2, "map-del-key", _k2_map(lambda c, m: m.pop(c.a.q)), "either", ("override",))
register(2, "map-uid-keys-die", _k2_map(lambda c, m: m.clear(), keys="uids"), "either", ("override",))


# -- kind 3: values the core reads must stay alive for the call ------------------------------------
DECOY = np.float32(12345.0)


class Clearing:
    """A variant-pack value (``keep``'s memory) whose ``__array_interface__`` first runs ``act`` on the
    pack, then allocates decoys of ``decoy_shape`` (so that freed memory is reused) and keeps them."""

    def __init__(self, keep: np.ndarray, act: Callable[[], object], decoy_shape: list[int]) -> None:
        self.keep = keep
        self.act: Callable[[], object] | None = act
        self.decoy_shape = decoy_shape
        self.decoys: list[F32] = []

    @property
    def __array_interface__(self) -> dict[str, Any]:
        act, self.act = self.act, None
        if act is not None:
            act()
            gc.collect()
            self.decoys = [np.full(self.decoy_shape, DECOY, np.float32) for _ in range(16)]
        return self.keep.__array_interface__

    def decoys_intact(self) -> bool:
        return all(bool((d == DECOY).all()) for d in self.decoys)


def _k3_inputs_dropped() -> None:
    """q and k live in the pack only; v's value clears the pack: the result must be right (the core
    kept q and k alive) or the call refused."""
    a = build_sdpa(flag=False)
    qa, ka, va = a.inputs()
    qc, kc = qa.copy(), ka.copy()
    oa = nan(*a.shape())
    pack: dict[Any, Any] = {a.q: qa, a.k: ka, a.o: oa}
    del qa, ka
    evil = Clearing(va, pack.clear, a.shape())
    pack[a.v] = evil
    a.execute(pack)
    assert_close(oa, sdpa_reference(qc, kc, va), "o")


def _k3_output_dropped(act: str) -> Callable[[], None]:
    """o lives in the pack only; v's value clears the pack (or replaces pack[o]): the output must not
    land in memory that is freed and reused (the decoys)."""

    def run() -> None:
        a = build_sdpa(flag=False)
        qa, ka, va = a.inputs()
        pack: dict[Any, Any] = {a.q: qa, a.k: ka, a.o: nan(*a.shape())}

        def replace() -> None:
            pack[a.o] = nan(*a.shape())

        evil = Clearing(va, pack.clear if act == "clear" else replace, a.shape())
        pack[a.v] = evil
        a.execute(pack)
        assert evil.decoys_intact(), "the output was written into freed memory (a decoy changed)"

    return run


class PackMapping(Mapping[Any, Any]):
    """A Mapping over a dict (the pack), so the core takes the items() path."""

    def __init__(self, real: dict[Any, Any]) -> None:
        self.real = real

    def __getitem__(self, key: Any) -> Any:
        return self.real[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.real)

    def __len__(self) -> int:
        return len(self.real)


def _k3_mapping_cleared() -> None:
    a = build_sdpa(flag=False)
    qa, ka, va = a.inputs()
    qc, kc = qa.copy(), ka.copy()
    oa = nan(*a.shape())
    real: dict[Any, Any] = {a.q: qa, a.k: ka, a.o: oa}
    del qa, ka
    real[a.v] = Clearing(va, real.clear, a.shape())
    a.execute(PackMapping(real))
    assert_close(oa, sdpa_reference(qc, kc, va), "o")


def _k3_threads(resize: bool) -> Callable[[], None]:
    """Two threads execute one graph with one pack dict while a third keeps replacing pack[o] (and,
    with ``resize``, removing and re-adding it, while v's value runs Python code mid-read)."""

    def run() -> None:
        a = build_sdpa(flag=False)
        qa, ka, va = a.inputs()
        pack: dict[Any, Any] = {a.q: qa, a.k: ka, a.v: iface_of(va) if resize else va, a.o: nan(*a.shape())}
        stop = threading.Event()
        foreign: list[BaseException] = []
        counts = {"ok": 0, "refused": 0}
        lock = threading.Lock()

        def worker() -> None:
            ws = np.empty(max(1, a.g.get_workspace_size()), np.uint8)
            while not stop.is_set():
                try:
                    a.g.execute(handle(), pack, ws)
                    key = "ok"
                except HipdnnError:
                    key = "refused"
                except BaseException as e:  # noqa: BLE001 - reported to the parent
                    foreign.append(e)
                    return
                with lock:
                    counts[key] += 1

        def churn() -> None:
            while not stop.is_set():
                if resize:
                    pack.pop(a.o, None)
                    time.sleep(0)
                pack[a.o] = nan(*a.shape())
                _ = [np.full(a.shape(), DECOY, np.float32) for _ in range(4)]

        old = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)
        try:
            threads = [threading.Thread(target=worker), threading.Thread(target=worker), threading.Thread(target=churn)]
            for t in threads:
                t.start()
            time.sleep(2.0)
            stop.set()
            for t in threads:
                t.join(30)
        finally:
            sys.setswitchinterval(old)
        if foreign:
            raise foreign[0]
        assert counts["ok"] + counts["refused"] > 0, "no call completed"

    return run


register(3, "clear-drops-inputs", _k3_inputs_dropped, "either", ("variant pack", "'q'", "'k'", "'v'"))
register(3, "clear-drops-output", _k3_output_dropped("clear"), "either", ("variant pack", "'o'", "'v'"))
register(3, "replace-drops-output", _k3_output_dropped("replace"), "either", ("variant pack", "'o'", "'v'"))
register(3, "mapping-cleared", _k3_mapping_cleared, "either", ("variant pack", "'q'", "'k'", "'v'"))
register(3, "threads-replace-output", _k3_threads(False), "ok")
register(3, "threads-pop-and-readd-output", _k3_threads(True), "ok")


# -- kind 4: exceptions that must not escape as anything but HipdnnError ----------------------------
def _k4_pack_value(name: str, make: Callable[[np.ndarray], Any]) -> Callable[[], None]:
    """Tensor ``name`` ('q' or 'o') of the plain SDPA graph gets ``make(its array)``."""

    def run() -> None:
        a = build_sdpa(flag=False)
        qa, ka, va = a.inputs()
        oa = nan(*a.shape())
        arrays = {"q": qa, "k": ka, "v": va, "o": oa}
        arrays[name] = make(arrays[name])
        a.execute({a.q: arrays["q"], a.k: arrays["k"], a.v: arrays["v"], a.o: arrays["o"]})

    return run


def _with_stride(x: np.ndarray, axis: int, stride: int) -> tuple[int, ...]:
    """x's byte strides with axis ``axis`` (of extent > 1) set to ``stride``."""
    assert x.shape[axis] > 1
    strides = list(x.strides)
    strides[axis] = stride
    return tuple(strides)


def _neg_strides(x: np.ndarray) -> Iface:
    last = int(x.ctypes.data) + x.nbytes - x.itemsize
    return iface_of(x, data=(last, False), strides=tuple(-s for s in x.strides))


ARRAY_INTERFACES: dict[str, Callable[[np.ndarray], Any]] = {
    "negative-strides": _neg_strides,
    "huge-strides": lambda x: iface_of(x, strides=(2**70,) + tuple(x.strides[1:])),
    "huge-strides-axis-1": lambda x: iface_of(x, strides=_with_stride(x, 1, 2**70)),
    "stride-2**63-axis-1": lambda x: iface_of(x, strides=_with_stride(x, 1, 2**63)),
    "stride-2**62-axis-1": lambda x: iface_of(x, strides=_with_stride(x, 1, 2**62)),
    "stride-minus-2**63-axis-1": lambda x: iface_of(x, strides=_with_stride(x, 1, -(2**63))),
    "stride-2**64": lambda x: iface_of(x, strides=tuple(x.strides[:-1]) + (2**64,)),
    "data-near-2**64": lambda x: iface_of(x, data=(2**64 - 8, False)),
    "data-2**64": lambda x: iface_of(x, data=(2**64, False)),
    "data-negative": lambda x: iface_of(x, data=(-64, False)),
    "data-huge": lambda x: iface_of(x, data=(2**70, False)),
    "span-leaves-address-space": lambda x: iface_of(x, data=(2**64 - 2**20, False), shape=(2**10, 2**10), strides=None),
    "shape-2**62": lambda x: iface_of(x, shape=(2**62, 4), strides=None),
    "shape-2**70": lambda x: iface_of(x, shape=(2**70,), strides=None),
    "data-raising-int64": lambda x: iface_of(x, data=(RaisingInt64(int(x.ctypes.data)), False)),
    "data-str-int64": lambda x: iface_of(x, data=(StrInt64(int(x.ctypes.data)), False)),
    "shape-raising-int64": lambda x: iface_of(x, shape=(RaisingInt64(1),) + tuple(x.shape[1:])),
    "raising-int64-pointer": lambda x: RaisingInt64(int(x.ctypes.data)),
    "str-int64-pointer": lambda x: StrInt64(int(x.ctypes.data)),
}

for _label, _make in ARRAY_INTERFACES.items():
    register(4, f"input-{_label}", _k4_pack_value("q", _make), "refused", ("'q'",))
    register(4, f"output-{_label}", _k4_pack_value("o", _make), "refused", ("'o'",))


def _k4_workspace(make: Callable[[NDArray[np.uint8]], Any]) -> Callable[[], None]:
    def run() -> None:
        a = build_sdpa(flag=False)
        if a.g.get_workspace_size() == 0:
            raise Skip("the SDPA plan on the CPU engine needs no workspace")
        qa, ka, va = a.inputs()
        a.g.execute(handle(), {a.q: qa, a.k: ka, a.v: va, a.o: nan(*a.shape())}, make(a.ws))

    return run


for _label in (
    "raising-int64-pointer",
    "str-int64-pointer",
    "huge-strides",
    "data-near-2**64",
    "shape-2**70",
    "data-raising-int64",
):
    register(4, f"workspace-{_label}", _k4_workspace(ARRAY_INTERFACES[_label]), "refused", ("workspace",))


def _k4_key(make: Callable[[int], Any]) -> Callable[[], None]:
    def run() -> None:
        a = build_sdpa(flag=False)
        qa, ka, va = a.inputs()
        a.execute({make(uid_of(a.q)): qa, a.k: ka, a.v: va, a.o: nan(*a.shape())})

    return run


register(4, "pack-key-raising-int64", _k4_key(RaisingInt64), "refused", ("variant pack", "key", "uid"))
register(4, "pack-key-str-int64", _k4_key(StrInt64), "refused", ("variant pack", "key", "uid"))


def _k4_override(form: str, where: str, bad: Callable[[int], Any]) -> Callable[[], None]:
    """An override shape (or stride) entry that is a hostile numpy integer, in ``form``: parallel,
    map, positional map or the bound call."""

    def run() -> None:
        c = short_call()
        lst = c.shapes if where == "shape" else c.strides
        lst[0][SEQ_AXIS] = bad(int(lst[0][SEQ_AXIS]))
        if form == "parallel":
            c.a.execute(c.pack, override_uids=c.uids, override_shapes=c.shapes, override_strides=c.strides)
        elif form in ("map", "positional-map"):
            m = {t: OverrideEntry(shape=sh, stride=st) for t, sh, st in zip(c.uids, c.shapes, c.strides)}
            if form == "map":
                c.a.execute(c.pack, overrides=m)
            else:
                c.a.execute(c.pack, m)
        else:
            bound = c.a.g.bind(handle(), list(c.a.tensors), override_uids=list(c.a.tensors))
            full = [np.zeros(c.a.shape(), np.float32) for _ in range(4)]
            bound([int(f.ctypes.data) for f in full], int(c.a.ws.ctypes.data), c.shapes, c.strides)

    return run


for _form in ("parallel", "map", "positional-map", "bound"):
    for _where in ("shape", "stride"):
        for _bad_label, _bad in (("raising-int64", RaisingInt64), ("str-int64", StrInt64)):
            register(
                4,
                f"{_form}-override-{_where}-{_bad_label}",
                _k4_override(_form, _where, _bad),
                "refused",
                ("override",),
            )


def _k4_bound_pointer(slot: int, bad: Callable[[int], Any], workspace: bool = False) -> Callable[[], None]:
    def run() -> None:
        a = build_sdpa(flag=False)
        bound = a.g.bind(handle(), list(a.tensors))
        arrays = [*a.inputs(), nan(*a.shape())]
        ptrs: list[Any] = [int(x.ctypes.data) for x in arrays]
        ws: Any = int(a.ws.ctypes.data)
        if workspace:
            ws = bad(ws)
        else:
            ptrs[slot] = bad(ptrs[slot])
        bound(ptrs, ws)

    return run


for _bad_label, _bad in (("raising-int64", RaisingInt64), ("str-int64", StrInt64)):
    register(4, f"bound-input-pointer-{_bad_label}", _k4_bound_pointer(0, _bad), "refused", ("'q'",))
    register(4, f"bound-output-pointer-{_bad_label}", _k4_bound_pointer(3, _bad), "refused", ("'o'",))
    register(4, f"bound-workspace-{_bad_label}", _k4_bound_pointer(0, _bad, workspace=True), "refused", ("workspace",))


# -- kind 5: many override entries must be refused without quadratic work ---------------------------
def _k5(form: str, n: int) -> Callable[[], None]:
    """``n`` override entries with distinct uids no tensor has (or, for ``dups``, n - 1 distinct real-
    looking uids and one repeated at the end)."""

    def run() -> None:
        a = build_add()
        pack, _, _, _ = a.pack()
        base = 1_000_000
        uids: list[int] = list(range(base, base + n))
        if form == "parallel-dups":
            uids[-1] = base
        shape, stride = [3, 7], [7, 1]
        if form.startswith("parallel"):
            a.g.execute(handle(), pack, None, uids, [shape] * n, [stride] * n)
        elif form == "map":
            entry = OverrideEntry(shape=shape, stride=stride)
            a.g.execute(handle(), pack, overrides=dict.fromkeys(uids, entry))
        else:
            a.g.bind(handle(), [a.x, a.y, a.z], override_uids=uids)

    return run


for _n, _nlabel in ((40_000, "40k"), (1_000_000, "1M")):
    for _form in ("parallel", "parallel-dups", "map", "bind"):
        register(5, f"{_form}-{_nlabel}", _k5(_form, _n), "refused", ("override", "uid", "bind"), timeout=30.0)


# -- kind 6: byte strides that are not whole elements ---------------------------------------------
CANARY = 0xA5
GUARD_BYTES = 64


def _byte_strided(strides: tuple[int, int], fill_random: bool) -> tuple[bytearray, F32]:
    """A [3, 7] float32 view with byte ``strides`` into a bytearray of canary bytes (random floats, as
    far as they go, for an input)."""
    raw = bytearray([CANARY]) * 512
    if fill_random:
        raw[:] = rand(128).tobytes()
    whole = np.frombuffer(raw, dtype=np.float32)  # writable: a bytearray backs it
    view = as_strided(whole[GUARD_BYTES // 4 :], shape=(3, 7), strides=strides)
    return raw, view


def _k6(which: str, strides: tuple[int, int], form: str) -> Callable[[], None]:
    """x (input) or z (output) is a byte-strided view; the graph's tensors declare element strides
    [12, 1], what the byte strides read as after truncating division by 4."""

    def run() -> None:
        a = build_add(strides=(12, 1))
        raw, view = _byte_strided(strides, fill_random=which == "x")
        before = bytes(raw)
        base = np.zeros((3, 12), np.float32)
        xa, ya, za = rand(3, 12)[:, :7], rand(3, 12)[:, :7], base[:, :7]
        value: Any = view if form != "iface" else iface_of(view)
        pack: dict[Any, Any] = {a.x: xa, a.y: ya, a.z: za}
        pack[a.x if which == "x" else a.z] = value
        try:
            if form == "override":
                a.g.execute(handle(), pack, overrides=a.entries())
            else:
                a.g.execute(handle(), pack)
        finally:
            if which == "z":
                assert bytes(raw) == before, "bytes around (or under) the refused output view were written"

    return run


for _which in ("x", "z"):
    for _strides in ((48, 6), (48, 2), (50, 4)):
        for _form in ("plain", "override", "iface"):
            register(
                6,
                f"{'input' if _which == 'x' else 'output'}-{_strides[0]}-{_strides[1]}-{_form}",
                _k6(_which, _strides, _form),
                "refused",
                (f"'{_which}'",),
            )


# -- kind 7: the workspace must be one contiguous writable byte range -------------------------------
def _k7(make: Callable[[int], tuple[Any, np.ndarray | None]], expect_ok: bool = False) -> Callable[[], None]:
    """``make(size)`` gives the workspace value and the canary array to check when refused."""

    def run() -> None:
        a = build_sdpa(flag=False)
        size = a.g.get_workspace_size()
        if size == 0:
            raise Skip("the SDPA plan on the CPU engine needs no workspace")
        qa, ka, va = a.inputs()
        oa = nan(*a.shape())
        ws, canary = make(size)
        before = None if canary is None else canary.copy()
        try:
            a.g.execute(handle(), {a.q: qa, a.k: ka, a.v: va, a.o: oa}, ws)
        except HipdnnError:
            if canary is not None and before is not None:
                assert np.array_equal(canary, before), "the refused workspace's memory was written"
            assert np.isnan(oa).all(), "the refused call wrote its output"
            raise
        if expect_ok:
            assert_close(oa, sdpa_reference(qa, ka, va), "o")

    return run


def _strided_ws(n: int) -> tuple[Any, np.ndarray]:
    base = np.full(2 * n, 0x5A, np.uint8)
    return base[::2], base


def _readonly_ws(n: int) -> tuple[Any, np.ndarray]:
    w = np.full(n, 0x5A, np.uint8)
    w.flags.writeable = False
    return w, w


def _two_rows_ws(n: int) -> tuple[Any, np.ndarray]:
    base = np.full((2, n), 0x5A, np.uint8)
    return base[:, : n // 2 + 1], base


def _readonly_iface_ws(n: int) -> tuple[Any, np.ndarray]:
    w = np.full(n, 0x5A, np.uint8)
    return iface_of(w, data=(int(w.ctypes.data), True)), w


def _strided_iface_ws(n: int) -> tuple[Any, np.ndarray]:
    base = np.full(2 * n, 0x5A, np.uint8)
    return iface_of(base, shape=(n,), strides=(2,)), base


def _readonly_memoryview_ws(n: int) -> tuple[Any, np.ndarray]:
    w = np.full(n, 0x5A, np.uint8)
    return memoryview(w.data).toreadonly(), w


register(7, "strided-every-other-byte", _k7(_strided_ws), "refused", ("workspace",))
register(7, "read-only-array", _k7(_readonly_ws), "refused", ("workspace",))
register(7, "bytes-object", _k7(lambda n: (bytes(n), None)), "refused", ("workspace",))
register(7, "read-only-memoryview", _k7(_readonly_memoryview_ws), "refused", ("workspace",))
register(7, "two-row-slices", _k7(_two_rows_ws), "refused", ("workspace",))
register(7, "read-only-array-interface", _k7(_readonly_iface_ws), "refused", ("workspace",))
register(7, "strided-array-interface", _k7(_strided_iface_ws), "refused", ("workspace",))
register(7, "contiguous-writable-runs", _k7(lambda n: (np.empty(n, np.uint8), None), expect_ok=True), "ok")


# -- kind 8: pointers not aligned to the element type ---------------------------------------------
def _misaligned(shape: list[int], offset: int, values: np.ndarray | None) -> tuple[NDArray[np.uint8], F32]:
    n = math.prod(shape)
    raw = np.full(n * 4 + 8, CANARY, np.uint8)
    a = np.frombuffer(raw, dtype=np.float32, count=n, offset=offset).reshape(shape)
    assert a.flags.writeable and int(a.ctypes.data) % 4 != 0
    if values is not None:
        a[...] = values
    return raw, a


def _k8(name: str, offset: int, form: str) -> Callable[[], None]:
    def run() -> None:
        a = build_sdpa(flag=False)
        qa, ka, va = a.inputs()
        arrays: dict[str, Any] = {"q": qa, "k": ka, "v": va, "o": nan(*a.shape())}
        raw, bad = _misaligned(a.shape(), offset, arrays[name] if name != "o" else None)
        before = raw.copy()
        arrays[name] = bad if form == "array" else iface_of(bad)
        try:
            a.execute({a.q: arrays["q"], a.k: arrays["k"], a.v: arrays["v"], a.o: arrays["o"]})
        finally:
            if name == "o":
                assert np.array_equal(raw, before), "the misaligned output buffer was written"

    return run


for _name in ("q", "o"):
    for _offset in (1, 2, 3):
        for _form in ("array", "iface"):
            register(
                8,
                f"{'input' if _name == 'q' else 'output'}-offset-{_offset}-{_form}",
                _k8(_name, _offset, _form),
                "refused",
                (f"'{_name}'",),
            )


# -- kind 9: a max-size array with a smaller override --------------------------------------------
MAX9 = (1, 2, 64, 32)
S9 = 8


@lru_cache(maxsize=1)
def attn9() -> Attn:
    return build_sdpa(MAX9, flag=True, name="attn_max")


def _k9_refused(full: str, form: str) -> Callable[[], None]:
    """Override [1, 2, 8, 32] without strides (compact); the tensors in ``full`` get arrays of the
    full maximum shape (whose own shape and strides disagree), the others compact [1, 2, 8, 32]."""

    def run() -> None:
        a = attn9()
        small = a.shape(S9)
        arrays: dict[str, F32] = {}
        for n in "qkvo":
            shape = a.shape() if n in full else small
            arrays[n] = nan(*shape) if n == "o" else rand(*shape)
        before = arrays["o"].copy()
        pack = {a.q: arrays["q"], a.k: arrays["k"], a.v: arrays["v"], a.o: arrays["o"]}
        entries = {t: OverrideEntry(shape=list(small)) for t in a.tensors}
        try:
            if form == "map":
                a.execute(pack, overrides=entries)
            elif form == "positional-map":
                a.execute(pack, entries)
            else:
                ts = list(a.tensors)
                a.execute(pack, override_uids=ts, override_shapes=[small] * 4, override_strides=[compact(small)] * 4)
        finally:
            assert np.array_equal(arrays["o"], before, equal_nan=True), "a refused call wrote the output"

    return run


for _full, _flabel in (("qkvo", "all"), ("o", "output"), ("q", "input-q"), ("v", "input-v")):
    for _form in ("map", "positional-map", "parallel"):
        names9 = tuple(f"'{n}'" for n in _full)
        register(9, f"full-arrays-{_flabel}-{_form}", _k9_refused(_full, _form), "refused", names9)


def _k9_views(form: str) -> Callable[[], None]:
    """Views x[:, :, :8] of max-size arrays, overridden at [1, 2, 8, 32] with the views' own element
    strides: right against the float64 reference, and o's rows past 8 stay NaN."""

    def run() -> None:
        a = attn9()
        qf, kf, vf = a.inputs()
        of = nan(*a.shape())
        qv, kv, vv, ov = (x[:, :, :S9] for x in (qf, kf, vf, of))
        small, strides = a.shape(S9), elem_strides(qv)
        assert strides == compact(a.shape())
        pack = {a.q: qv, a.k: kv, a.v: vv, a.o: ov}
        if form == "map":
            a.execute(pack, overrides={t: OverrideEntry(shape=small, stride=strides) for t in a.tensors})
        elif form == "parallel":
            a.execute(pack, list(a.tensors), [small] * 4, [strides] * 4)
        else:
            bound = a.g.bind(handle(), list(a.tensors), override_uids=list(a.tensors))
            bound([int(x.ctypes.data) for x in (qf, kf, vf, of)], int(a.ws.ctypes.data), [small] * 4, [strides] * 4)
        assert_close(ov, sdpa_reference(qv, kv, vv), "o")
        assert np.isnan(of[:, :, S9:]).all(), "o was written past the override's sequence length"

    return run


def _k9_compact_small() -> None:
    a = attn9()
    qa, ka, va = a.inputs(S9)
    oa = nan(*a.shape(S9))
    a.execute({a.q: qa, a.k: ka, a.v: va, a.o: oa}, overrides={t: OverrideEntry(shape=a.shape(S9)) for t in a.tensors})
    assert_close(oa, sdpa_reference(qa, ka, va), "o")


for _form in ("map", "parallel", "bound"):
    register(9, f"views-{_form}-right", _k9_views(_form), "ok")
register(9, "compact-small-arrays-right", _k9_compact_small, "ok")


# -- kind 10: read-only inputs are fine, read-only outputs are not ---------------------------------
def _readonly(x: F32) -> F32:
    x.flags.writeable = False
    return x


def _k10_inputs(form: str) -> Callable[[], None]:
    def run() -> None:
        a = build_sdpa(flag=True)
        qa, ka, va = (_readonly(x) for x in a.inputs())
        oa = nan(*a.shape())
        values: tuple[Any, Any, Any] = (qa, ka, va)
        if form == "iface":
            values = tuple(iface_of(x, data=(int(x.ctypes.data), True)) for x in (qa, ka, va))  # type: ignore[assignment]
        pack = {a.q: values[0], a.k: values[1], a.v: values[2], a.o: oa}
        if form == "override":
            a.execute(pack, overrides={t: OverrideEntry(shape=a.shape()) for t in a.tensors})
        else:
            a.execute(pack)
        assert_close(oa, sdpa_reference(qa, ka, va), "o")

    return run


def _k10_output(form: str) -> Callable[[], None]:
    def run() -> None:
        a = build_sdpa(flag=False)
        qa, ka, va = a.inputs()
        oa = nan(*a.shape())
        value: Any = iface_of(oa, data=(int(oa.ctypes.data), True)) if form == "iface" else _readonly(oa)
        try:
            a.execute({a.q: qa, a.k: ka, a.v: va, a.o: value})
        finally:
            assert np.isnan(oa).all(), "the read-only output was written"

    return run


for _form in ("array", "iface", "override"):
    register(10, f"read-only-inputs-{_form}-right", _k10_inputs(_form), "ok")
register(10, "read-only-output-array", _k10_output("array"), "refused", ("'o'",))
register(10, "read-only-output-iface", _k10_output("iface"), "refused", ("'o'",))
register(10, "read-only-workspace", _k7(_readonly_ws), "refused", ("workspace",))


# -- kind 11: gradients packed in one interleaved buffer -------------------------------------------
B11, S11, H11, D11 = 2, 7, 3, 5


@dataclass
class Bwd:
    g: hipdnn.Graph
    inputs: dict[str, TensorAttributes]
    grads: tuple[TensorAttributes, TensorAttributes, TensorAttributes]


def build_bwd(grad_strides: list[int]) -> Bwd:
    dims = [B11, H11, S11, D11]
    g = hipdnn.Graph(name="bwd", io_data_type=F, intermediate_data_type=F, compute_data_type=F)
    t = {n: g.tensor(name=n, dim=dims, stride=compact(dims), data_type=F) for n in ("q", "k", "v", "o", "do")}
    sd = [B11, H11, S11, 1]
    t["stats"] = g.tensor(name="stats", dim=sd, stride=compact(sd), data_type=F)
    dq, dk, dv = g.sdpa_backward(t["q"], t["k"], t["v"], t["o"], t["do"], t["stats"], attn_scale=SCALE)
    for x, n in ((dq, "dq"), (dk, "dk"), (dv, "dv")):
        x.set_name(n).set_output(True).set_stride(list(grad_strides))
    g.build(handle())
    return Bwd(g, t, (dq, dk, dv))


def bwd_inputs() -> dict[str, F32]:
    shape = (B11, H11, S11, D11)
    q, k, v, do = rand(*shape), rand(*shape), rand(*shape), rand(*shape)
    o = sdpa_reference(q, k, v).astype(np.float32)
    stats = sdpa_stats(q, k).astype(np.float32)
    return {"q": q, "k": k, "v": v, "o": o, "do": do, "stats": stats}


INTERLEAVED = [S11 * 3 * H11 * D11, D11, 3 * H11 * D11, 1]


def interleaved() -> tuple[F32, list[F32]]:
    buf = nan(B11, S11, 3, H11, D11)
    views = [buf[:, :, i].transpose(0, 2, 1, 3) for i in range(3)]
    assert all(elem_strides(x) == INTERLEAVED for x in views)
    return buf, views


def separate_grads(vals: dict[str, F32]) -> list[F32]:
    dims = [B11, H11, S11, D11]
    sep = build_bwd(compact(dims))
    outs = [nan(*dims) for _ in range(3)]
    pack: dict[Any, Any] = {sep.inputs[n]: vals[n] for n in vals}
    pack.update(zip(sep.grads, outs))
    sep.g.execute(handle(), pack, np.empty(max(1, sep.g.get_workspace_size()), np.uint8))
    return outs


def _k11_interleaved(form: str) -> Callable[[], None]:
    def run() -> None:
        vals = bwd_inputs()
        want = separate_grads(vals)
        bwd = build_bwd(INTERLEAVED)
        buf, views = interleaved()
        ws = np.empty(max(1, bwd.g.get_workspace_size()), np.uint8)
        if form == "execute":
            pack: dict[Any, Any] = {bwd.inputs[n]: vals[n] for n in vals}
            pack.update(zip(bwd.grads, views))
            bwd.g.execute(handle(), pack, ws)
        else:
            order = [bwd.inputs[n] for n in vals] + list(bwd.grads)
            bound = bwd.g.bind(handle(), order)
            bound([int(vals[n].ctypes.data) for n in vals] + [int(x.ctypes.data) for x in views], int(ws.ctypes.data))
        assert not np.isnan(buf).any(), "the interleaved buffer has unwritten elements"
        for name, got, w in zip(("dq", "dk", "dv"), views, want):
            assert_close(got, w.astype(np.float64), name)

    return run


def _k11_overlap(how: str, form: str) -> Callable[[], None]:
    """Two gradients whose elements truly overlap: the same view twice, or views one element apart."""

    def run() -> None:
        vals = bwd_inputs()
        dims = [B11, H11, S11, D11]
        n = math.prod(dims)
        if how.startswith("interleaved"):
            bwd = build_bwd(INTERLEAVED)
            buf, views = interleaved()
            flat = buf.reshape(-1)
            if how == "interleaved-same-view":
                grads = [views[0], views[0], views[2]]
            else:  # dk starts one element after dq, same strides
                shifted = as_strided(flat[1:], shape=views[0].shape, strides=views[0].strides)
                grads = [views[0], shifted, views[2]]
            guard = buf
        else:
            bwd = build_bwd(compact(dims))
            guard = nan(3 * n + 2)
            if how == "compact-same-array":
                a = guard[:n].reshape(dims)
                grads = [a, a, guard[2 * n + 2 :].reshape(dims)]
            else:
                grads = [guard[:n].reshape(dims), guard[1 : n + 1].reshape(dims), guard[2 * n + 2 :].reshape(dims)]
        ws = np.empty(max(1, bwd.g.get_workspace_size()), np.uint8)
        try:
            if form == "execute":
                pack: dict[Any, Any] = {bwd.inputs[k]: vals[k] for k in vals}
                pack.update(zip(bwd.grads, grads))
                bwd.g.execute(handle(), pack, ws)
            else:
                bound = bwd.g.bind(handle(), [bwd.inputs[k] for k in vals] + list(bwd.grads))
                bound(
                    [int(vals[k].ctypes.data) for k in vals] + [int(x.ctypes.data) for x in grads], int(ws.ctypes.data)
                )
        finally:
            assert np.isnan(guard).all(), "a refused call wrote a gradient"

    return run


register(11, "interleaved-execute-right", _k11_interleaved("execute"), "ok")
register(11, "interleaved-bound-right", _k11_interleaved("bound"), "ok")
for _how in ("interleaved-same-view", "interleaved-shifted-by-one", "compact-same-array", "compact-shifted-by-one"):
    for _form in ("execute", "bound"):
        register(11, f"{_how}-{_form}", _k11_overlap(_how, _form), "refused", ("'dq'", "'dk'", "overlap"))


# -- the child ------------------------------------------------------------------------------------
def run_case(name: str) -> dict[str, str]:
    """Run one case here and say how it ended."""
    case = CASES[name]
    try:
        case.run()
    except Skip as e:
        return {"outcome": "skipped", "type": "Skip", "code": "", "message": str(e)}
    except HipdnnError as e:
        return {"outcome": "refused", "type": type(e).__name__, "code": e.code.name, "message": e.message}
    except AssertionError as e:
        return {"outcome": "wrong", "type": "AssertionError", "code": "", "message": str(e)}
    except BaseException as e:  # noqa: BLE001 - the point is to see what escapes
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))[-1500:]
        return {"outcome": "escaped", "type": type(e).__qualname__, "code": "", "message": f"{e}\n{tb}"}
    return {"outcome": "ok", "type": "", "code": "", "message": ""}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] not in CASES:
        print(f"usage: python -m tests.adversarial.hostile_cases CASE ({len(CASES)} cases)", file=sys.stderr)
        return 2
    result = run_case(argv[1])
    gc.collect()  # a heap the call corrupted tends to show here
    print(MARKER + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
