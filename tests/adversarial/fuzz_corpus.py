"""Seeds, mutators and the oracle of the deserialize fuzzing (issue #16).

Shared by ``tests/adversarial/test_deserialize_fuzz.py`` (a fixed seed set, in CI) and
``tools/fuzz/long_fuzz.py`` (the long form). A case is fully determined by ``(seed, index)``, so any
failure is replayed from those two numbers: ``python tools/fuzz/long_fuzz.py --replay SEED:INDEX``.

Each case is a byte string. The oracle feeds it three ways, and every outcome must be a success or
the error type of that layer; never another exception, never a write outside a buffer:

- frontend: ``Graph.deserialize`` -> ``build`` -> ``execute`` (HipdnnError);
- backend: the operation graph, engine heuristic and execution plan descriptors on the raw bytes
  (BackendError), then the compiled core's ``execute_payload`` with raw pointers (HipdnnError);
- plugin ABI: the CPU engine's GetApplicableEngineIds / GetEngineDetails / GetWorkspaceSize on the
  raw bytes, whatever Python thinks of them (PluginError).

Buffers are guard-banded (bytes of a fixed pattern before and after the addressed span, which is
exactly what the tensor's dims and strides reach); a changed guard byte is a failure.
"""

from __future__ import annotations

import math
import pickle
import random
import struct
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import ml_dtypes
import numpy as np
from numpy.lib.stride_tricks import as_strided

import hipdnn
from hipdnn.backend import AttributeName, AttributeType, BackendError
from hipdnn.backend.descriptors import EngineHeurDescriptor, ExecutionPlanDescriptor, OperationGraphDescriptor
from hipdnn.plugins import PluginError
from hipdnn.wire.EngineConfig import EngineConfigT
from hipdnn.wire.Float32Value import Float32ValueT
from hipdnn.wire.Graph import Graph as WireGraph
from hipdnn.wire.Graph import GraphT
from hipdnn.wire.Int64Value import Int64ValueT
from hipdnn.wire.TensorAttributes import (
    TensorAttributesAddDataType,
    TensorAttributesAddDims,
    TensorAttributesAddIsDynamic,
    TensorAttributesAddName,
    TensorAttributesAddStrides,
    TensorAttributesAddUid,
    TensorAttributesAddVirtual,
    TensorAttributesEnd,
    TensorAttributesStart,
    TensorAttributesStartStridesVector,
    TensorAttributesT,
)

F32 = hipdnn.DataType.FLOAT
I32 = hipdnn.DataType.INT32
DYN = hipdnn.DYNAMIC_DIM
A = AttributeName
T = AttributeType

GUARD = 64  # guard bytes on each side of every buffer
PATTERN = 0xA5
#: Execution is skipped (the case still counts) when a graph's buffers or workspace would exceed these:
#: mutated dims easily ask for terabytes, and the point is memory safety, not allocation.
MAX_ELEMENTS = 1 << 15
MAX_WORKSPACE = 32 << 20
CPU_ENGINE = "hipdnn_cpu_engine"


# ----------------------------------------------------------------------------- seed graphs
def _graph(name: str, override: bool = False) -> hipdnn.Graph:
    return hipdnn.Graph(
        name=name,
        io_data_type=F32,
        intermediate_data_type=F32,
        compute_data_type=F32,
        is_override_shape_enabled=override,
    )


def compact(dims: list[int]) -> list[int]:
    out = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        out[i] = out[i + 1] * max(dims[i + 1], 1)
    return out


def _t(g: hipdnn.Graph, name: str, dims: list[int], dt: hipdnn.DataType = F32) -> hipdnn.TensorAttributes:
    return g.tensor(name=name, dim=dims, stride=compact(dims), data_type=dt)


def seed_sdpa_options() -> hipdnn.Graph:
    """SDPA with stats, a float scale, a padding mask with sequence lengths, a bias and a band."""
    g = _graph("sdpa_options", override=True)
    dims = [1, 2, 9, 8]
    q, k, v = (_t(g, n, dims) for n in "qkv")
    sq, skv = _t(g, "seq_q", [1, 1, 1, 1], I32), _t(g, "seq_kv", [1, 1, 1, 1], I32)
    bias = _t(g, "bias", [1, 2, 9, 9])
    o, stats = g.sdpa(
        q,
        k,
        v,
        attn_scale=0.3,
        use_causal_mask=True,
        generate_stats=True,
        diagonal_band_left_bound=5,
        use_padding_mask=True,
        seq_len_q=sq,
        seq_len_kv=skv,
        bias=bias,
        name="attention",
    )
    o.set_output(True)
    assert stats is not None
    stats.set_output(True)
    return g


def seed_sdpa_gqa() -> hipdnn.Graph:
    """Grouped-query SDPA, bottom-right causal, the scale as a tensor."""
    g = _graph("sdpa_gqa")
    q = _t(g, "q", [1, 4, 7, 8])
    k, v = _t(g, "k", [1, 2, 9, 8]), _t(g, "v", [1, 2, 9, 8])
    scale = _t(g, "scale", [1, 1, 1, 1])
    o, _ = g.sdpa(q, k, v, attn_scale=scale, use_causal_mask_bottom_right=True)
    o.set_output(True)
    return g


def seed_matmul() -> hipdnn.Graph:
    g = _graph("matmul", override=True)
    a, b = _t(g, "a", [3, 1, 5, 7]), _t(g, "b", [1, 4, 7, 2])
    g.matmul(a, b).set_output(True)
    return g


def seed_pointwise_chain() -> hipdnn.Graph:
    """ADD -> MUL -> RELU through virtual intermediates, with broadcasting."""
    g = _graph("chain")
    x, y, z = _t(g, "x", [2, 3, 5]), _t(g, "y", [1, 3, 1]), _t(g, "z", [5])
    s = g.pointwise(hipdnn.PointwiseMode.ADD, x, y)
    m = g.pointwise(hipdnn.PointwiseMode.MUL, s, z)
    g.pointwise(hipdnn.PointwiseMode.RELU_FWD, m).set_output(True)
    return g


def seed_norms() -> hipdnn.Graph:
    """LayerNorm (training: mean and inverse variance out) feeding an RMSNorm."""
    g = _graph("norms")
    x = _t(g, "x", [2, 3, 8])
    sc, bi = _t(g, "scale", [1, 1, 8]), _t(g, "bias", [1, 1, 8])
    y, mean, inv = g.layernorm(x, sc, bi, epsilon=1e-5, norm_forward_phase=hipdnn.NormFwdPhase.TRAINING)
    for t in (mean, inv):
        assert t is not None
        t.set_output(True)
    z, _ = g.rmsnorm(y, _t(g, "scale2", [8]), epsilon=1e-3)
    z.set_output(True)
    return g


def seed_reduction() -> hipdnn.Graph:
    g = _graph("reduction", override=True)
    x = _t(g, "x", [3, 5, 4])
    g.reduction(x, hipdnn.ReductionMode.ADD, axes=[1]).set_output(True)
    g.reduction(_t(g, "w", [2, 6]), hipdnn.ReductionMode.MAX).set_output(True)
    return g


def seed_sdpa_backward() -> hipdnn.Graph:
    g = _graph("sdpa_backward")
    dims = [1, 2, 6, 8]
    q, k, v, o, do = (_t(g, n, dims) for n in ("q", "k", "v", "o", "do"))
    stats = _t(g, "stats", [1, 2, 6, 1])
    for t in g.sdpa_backward(q, k, v, o, do, stats, attn_scale=0.35, use_causal_mask=True):
        t.set_output(True)
    return g


def seed_dynamic() -> hipdnn.Graph:
    """Dynamic SDPA ([-1, H, -1, D], BHSD axis order) whose output feeds a pointwise op."""
    g = _graph("dynamic", override=True)
    q, k, v = (g.tensor(name=n, dim=[DYN, 2, DYN, 8], stride=[3, 2, 1, 0], data_type=F32).mark_dynamic() for n in "qkv")
    o, _ = g.sdpa(q, k, v, attn_scale=0.25)
    o.set_output(True).set_stride([3, 2, 1, 0])
    x = g.tensor(name="x", dim=[DYN, 4], stride=[1, 0], data_type=F32).mark_dynamic()
    g.pointwise(hipdnn.PointwiseMode.TANH_FWD, x).set_output(True).set_dim([DYN, 4]).set_stride([1, 0])
    return g


def seed_mixed() -> hipdnn.Graph:
    """LayerNorm -> matmul -> add -> GELU, overrides enabled."""
    g = _graph("mixed", override=True)
    x = _t(g, "x", [4, 6])
    y, _, _ = g.layernorm(x, _t(g, "gamma", [1, 6]), _t(g, "beta", [1, 6]))
    c = g.matmul(y, _t(g, "w", [6, 3]))
    s = g.pointwise(hipdnn.PointwiseMode.ADD, c, _t(g, "b", [1, 3]))
    g.pointwise(hipdnn.PointwiseMode.GELU_FWD, s).set_output(True)
    return g


SEEDS: dict[str, Callable[[], hipdnn.Graph]] = {
    f.__name__.removeprefix("seed_"): f
    for f in (
        seed_sdpa_options,
        seed_sdpa_gqa,
        seed_matmul,
        seed_pointwise_chain,
        seed_norms,
        seed_reduction,
        seed_sdpa_backward,
        seed_dynamic,
        seed_mixed,
    )
}


def seed_blobs() -> dict[str, bytes]:
    return {name: make().serialize() for name, make in SEEDS.items()}


# ----------------------------------------------------------------------------- byte mutations
INTERESTING_U32 = [0, 1, 2, 3, 4, 7, 8, 0x7F, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFC]
INTERESTING_U16 = [0, 1, 2, 3, 4, 5, 0x7FFF, 0x8000, 0xFFFF, 0xFFFE]


def bit_flips(buf: bytes, rng: random.Random) -> bytes:
    b = bytearray(buf)
    for _ in range(rng.choice((1, 1, 1, 2, 3, 5, 16))):
        pos = rng.randrange(len(b))
        b[pos] ^= 1 << rng.randrange(8)
    return bytes(b)


def truncation(buf: bytes, rng: random.Random) -> bytes:
    """A prefix from one of the length classes: nothing, shorter than a root offset, shorter than the
    smallest table, cut inside the header, anywhere, or one or a few bytes short."""
    n = len(buf)
    cls = rng.randrange(6)
    if cls == 0:
        return b""
    if cls == 1:
        return buf[: rng.randrange(1, 8)]
    if cls == 2:
        return buf[: rng.randrange(8, 13)]
    if cls == 3:
        return buf[: rng.randrange(13, min(64, n))]
    if cls == 4:
        return buf[: rng.randrange(n)]
    return buf[: n - rng.randrange(1, 9)]


def splice(a: bytes, b: bytes, rng: random.Random) -> bytes:
    """The head of one graph and the tail of another, cut at 4-byte boundaries (offsets then point
    into the other graph's tables) or anywhere."""
    cut_a = rng.randrange(len(a) + 1)
    cut_b = rng.randrange(len(b) + 1)
    if rng.random() < 0.7:
        cut_a, cut_b = cut_a & ~3, cut_b & ~3
    if rng.random() < 0.5:  # same length as a: b's bytes take a's positions
        cut_b = max(0, len(b) - (len(a) - cut_a))
    return a[:cut_a] + b[cut_b:]


def havoc(buf: bytes, rng: random.Random) -> bytes:
    """Word-sized edits aimed at offsets, vtables and lengths, plus deletions, insertions and copies."""
    b = bytearray(buf)
    for _ in range(rng.choice((1, 1, 2, 3, 6))):
        if len(b) < 8:
            b.extend(rng.randbytes(8))
        kind = rng.randrange(7)
        pos = rng.randrange(len(b))
        if kind == 0:
            b[pos] = rng.randrange(256)
        elif kind == 1:
            pos = rng.randrange(0, len(b) - 3) & ~3
            value = rng.choice(INTERESTING_U32 + [len(b), len(b) - 4, len(b) + 4, rng.randrange(len(b) + 64)])
            b[pos : pos + 4] = struct.pack("<I", value & 0xFFFFFFFF)
        elif kind == 2:
            pos = rng.randrange(0, len(b) - 1) & ~1
            b[pos : pos + 2] = struct.pack("<H", rng.choice(INTERESTING_U16 + [rng.randrange(256)]))
        elif kind == 3:
            pos = rng.randrange(0, len(b) - 3) & ~3
            (v,) = struct.unpack_from("<I", b, pos)
            struct.pack_into("<I", b, pos, (v + rng.choice((-8, -4, -1, 1, 4, 8))) & 0xFFFFFFFF)
        elif kind == 4:
            del b[pos : pos + rng.randrange(1, 16)]
        elif kind == 5:
            b[pos:pos] = rng.randbytes(rng.randrange(1, 16))
        else:
            n = rng.randrange(1, 24)
            src = rng.randrange(len(b))
            b[pos : pos + n] = b[src : src + n]
    return bytes(b)


def int64_word_edit(buf: bytes, rng: random.Random) -> bytes:
    """An aligned 8-byte word (dims, strides, uids live in such words) set to an extreme value."""
    b = bytearray(buf)
    if len(b) < 16:
        return bytes(b)
    pos = rng.randrange(0, len(b) - 7) & ~7
    value = rng.choice([0, -1, 1, 2**31, 2**32, 2**47, 2**48, 2**62, 2**63 - 1, -(2**63), -(2**31)])
    struct.pack_into("<q", b, pos, value)
    return bytes(b)


# ----------------------------------------------------------------------------- field-level edits
#: Enum fields (one byte on the wire), by object-API attribute name.
BYTE_ENUMS = {
    "dataType",
    "computeDataType",
    "ioDataType",
    "intermediateDataType",
    "operation",
    "mode",
    "forwardPhase",
    "diagonalAlignment",
    "mmaCoreMode",
    "implementation",
}
INT32_FIELDS = {"maxSeqLenKv", "normalizedDimCount"}
INT64_EXTREMES = [0, -1, 1, 2, 3, 2**31, 2**32, 2**47, 2**48 + 1, 2**62, 2**63 - 1, -(2**63), -5]
FLOAT_EXTREMES = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e38, -1e38, 1e-45, 3.4028234663852886e38, 0.5]


def _int64(rng: random.Random) -> int:
    return rng.choice(INT64_EXTREMES) if rng.random() < 0.8 else rng.randrange(-(2**63), 2**63)


def _dims_value(rng: random.Random) -> list[int]:
    kind = rng.randrange(5)
    if kind == 0:
        return []
    if kind == 1:
        return [rng.choice([1, 2, 3, 5]) for _ in range(rng.choice([9, 12, 16, 40]))]  # rank beyond any engine
    if kind == 2:
        return [2**62, 2**62]
    if kind == 3:
        return [_int64(rng) for _ in range(rng.randrange(1, 6))]
    return [rng.choice([-1, 0, 1, 7, 2**31 - 1]) for _ in range(rng.randrange(1, 5))]


@dataclass
class _Wire:
    graph: GraphT
    uids: list[int]


def _uid_pool(w: _Wire, rng: random.Random) -> int | None:
    choice = rng.randrange(6)
    if choice == 0:
        return None
    if choice <= 2 and w.uids:
        return rng.choice(w.uids)  # existing: a wrong role, a duplicate, a cycle
    if choice == 3:
        return max(w.uids or [0]) + rng.randrange(1, 1000)  # dangling
    return _int64(rng)


def _edit_field(obj: Any, name: str, w: _Wire, rng: random.Random) -> None:
    """Set one object-API field to a hostile value of its wire type."""
    current = getattr(obj, name)
    if name in BYTE_ENUMS:
        setattr(obj, name, rng.choice([-128, -1, 0, 18, 48, 99, 127, rng.randrange(-128, 128)]))
    elif name in INT32_FIELDS:
        setattr(obj, name, rng.choice([None, -(2**31), -1, 0, 1, 9, 2**31 - 1]))
    elif name.endswith("TensorUid"):
        value = _uid_pool(w, rng)
        # required uids cannot be absent on the wire: None packs as 0
        setattr(obj, name, value if value is not None or current is None or rng.random() < 0.5 else 0)
    elif isinstance(current, bool) or name in ("generateStats",):
        setattr(obj, name, rng.choice([True, False, None] if name == "generateStats" else [not current]))
    elif isinstance(current, float) or name in (
        "attnScaleValue",
        "dropoutProbability",
        "epsilonValue",
        "reluLowerClip",
        "reluUpperClip",
        "reluLowerClipSlope",
        "swishBeta",
        "eluAlpha",
        "softplusBeta",
    ):
        setattr(obj, name, rng.choice([None, *FLOAT_EXTREMES]))
    else:
        setattr(obj, name, rng.choice([None, _int64(rng)]) if current is None else _int64(rng))


def _fields(obj: Any) -> list[str]:
    return [k for k in vars(obj) if not k.startswith("_")]


def _tensor_edit(w: _Wire, rng: random.Random) -> str:
    tensors = w.graph.tensors or []
    if not tensors:
        return "no tensors"
    t = rng.choice(tensors)
    kind = rng.randrange(10)
    if kind == 0:
        t.dims = _dims_value(rng) if rng.random() < 0.8 else None
        return "tensor dims"
    if kind == 1:
        t.strides = _dims_value(rng) if rng.random() < 0.8 else None
        return "tensor strides"
    if kind == 2:  # stride overflow: huge dims times huge strides
        rank = len(t.dims) if t.dims is not None and len(t.dims) else 2
        t.dims = [rng.choice([2**20, 2**31, 2**40]) for _ in range(rank)]
        t.strides = [rng.choice([2**20, 2**31, 2**40, 2**62]) for _ in range(rank)]
        return "stride overflow"
    if kind == 3 and t.dims is not None and len(t.dims):  # rank mismatch
        t.strides = list(t.strides if t.strides is not None else [])[: len(t.dims) - 1] or [1] * (len(t.dims) + 1)
        return "rank mismatch"
    if kind == 4:
        t.uid = rng.choice(w.uids) if w.uids and rng.random() < 0.7 else _int64(rng)
        return "duplicate uid"
    if kind == 5:
        t.virtual = not t.virtual
        return "virtual flip"
    if kind == 6:
        t.isDynamic = not t.isDynamic
        return "dynamic flip"
    if kind == 7:  # by-value scalars, of the right or a confused kind
        t.valueType = rng.choice([0, 1, 1, 5, 7, 8, 9, 200])
        t.value = rng.choice([Float32ValueT(), Int64ValueT()])
        if isinstance(t.value, Float32ValueT):
            t.value.value = rng.choice([1.0, *FLOAT_EXTREMES])
        else:
            t.value.value = _int64(rng)
        return "by-value"
    if kind == 8:
        t.dataType = rng.choice([-128, -1, 0, 2, 3, 4, 6, 15, 17, 18, 99, 127])
        return "tensor data type"
    t.name = rng.choice([None, "", "\x00\x1b[2J", "n" * 4096])
    return "tensor name"


def _node_edit(w: _Wire, rng: random.Random) -> str:
    nodes = w.graph.nodes or []
    if not nodes:
        return "no nodes"
    n = rng.choice(nodes)
    kind = rng.randrange(8)
    if kind == 0:  # type confusion: another kind's id over these attributes
        n.attributesType = rng.choice([0, 1, 2, 3, 5, 9, 10, 11, 12, 13, 15, 18, 19, 99, 255])
        return "attributes type"
    if kind == 1:
        n.attributes = None
        return "attributes missing"
    if kind == 2:
        n.computeDataType = rng.choice([-1, 2, 4, 99, 127])
        return "node compute type"
    if kind == 3 and len(nodes) > 1:  # cycles and use-before-definition
        w.graph.nodes = list(reversed(nodes))
        return "nodes reversed"
    if kind == 4 and len(nodes) > 1:
        other = rng.choice(nodes)
        n.attributes, other.attributes = other.attributes, n.attributes
        n.attributesType, other.attributesType = other.attributesType, n.attributesType
        return "attributes swapped"
    if kind == 5:
        w.graph.nodes = nodes + [rng.choice(nodes)] * rng.randrange(1, 4)  # the same node again
        return "node repeated"
    if n.attributes is None:
        return "attributes missing"
    for _ in range(rng.randrange(1, 4)):
        _edit_field(n.attributes, rng.choice(_fields(n.attributes)), w, rng)
    return f"{type(n.attributes).__name__} fields"


def _graph_edit(w: _Wire, rng: random.Random) -> str:
    g = w.graph
    kind = rng.randrange(7)
    if kind == 0:
        _edit_field(g, rng.choice(["ioDataType", "computeDataType", "intermediateDataType"]), w, rng)
        return "graph data type"
    if kind == 1:
        g.tensors = rng.choice([None, []])
        return "tensors empty"
    if kind == 2:
        g.nodes = rng.choice([None, []])
        return "nodes empty"
    if kind == 3:
        g.isOverrideShapeEnabled = not g.isOverrideShapeEnabled
        return "override flag"
    if kind == 4:
        g.preferredEngineId = rng.choice([None, 101, 0, -1, 2**63 - 1])
        return "preferred engine"
    if kind == 5 and g.tensors:  # a tensor dropped: every node reading it dangles
        g.tensors = [t for t in g.tensors if t is not rng.choice(g.tensors)]
        return "tensor dropped"
    g.name = rng.choice([None, "", "\x00", "é" * 300])
    return "graph name"


_UNPACKED: dict[bytes, bytes] = {}


def _unpacked(blob: bytes) -> GraphT:
    """A fresh object-API copy of ``blob``. Unpacking costs several times a pickle round trip, and the
    same few seeds are edited over and over."""
    pickled = _UNPACKED.get(blob)
    if pickled is None:
        pickled = pickle.dumps(GraphT.InitFromPackedBuf(blob, 0))
        if len(_UNPACKED) < 64:  # the seeds; anything else is not worth keeping
            _UNPACKED[blob] = pickled
    graph: GraphT = pickle.loads(pickled)
    return graph


def field_edit(blob: bytes, rng: random.Random) -> bytes:
    """The graph rebuilt through the generated object API with one to three hostile edits."""
    g = _unpacked(blob)
    w = _Wire(g, [int(t.uid) for t in g.tensors or []])
    for _ in range(rng.choice((1, 1, 2, 3))):
        rng.choice((_tensor_edit, _tensor_edit, _node_edit, _node_edit, _node_edit, _graph_edit))(w, rng)
    builder = flatbuffers.Builder(1024)
    try:
        builder.Finish(g.Pack(builder))
    except (struct.error, TypeError, ValueError, OverflowError):
        return blob  # an edit the writer itself refuses (the wire type cannot hold it): no case
    return bytes(builder.Output())


# ----------------------------------------------------------------------------- cases
STRATEGIES = ("bit_flips", "truncation", "splice", "havoc", "int64_word", "field_edit", "field_then_bytes")


def make_case(seed: int, index: int, blobs: dict[str, bytes]) -> tuple[str, bytes]:
    """Case ``index`` of run ``seed``: (label, bytes). Deterministic."""
    rng = random.Random(seed * 1_000_003 + index)
    names = sorted(blobs)
    name = rng.choice(names)
    base = blobs[name]
    strategy = STRATEGIES[index % len(STRATEGIES)]
    if strategy == "bit_flips":
        out = bit_flips(base, rng)
    elif strategy == "truncation":
        out = truncation(base, rng)
    elif strategy == "splice":
        out = splice(base, blobs[rng.choice(names)], rng)
    elif strategy == "havoc":
        out = havoc(base, rng)
    elif strategy == "int64_word":
        out = int64_word_edit(base, rng)
    elif strategy == "field_edit":
        out = field_edit(base, rng)
    else:
        out = rng.choice((bit_flips, havoc, int64_word_edit))(field_edit(base, rng), rng)
    return f"{strategy}:{name}", out


# ----------------------------------------------------------------------------- buffers
NUMPY_TYPES: dict[int, Any] = {
    int(hipdnn.DataType.FLOAT): np.float32,
    int(hipdnn.DataType.HALF): np.float16,
    int(hipdnn.DataType.BFLOAT16): ml_dtypes.bfloat16,
    int(hipdnn.DataType.DOUBLE): np.float64,
    int(hipdnn.DataType.UINT8): np.uint8,
    int(hipdnn.DataType.INT8): np.int8,
    int(hipdnn.DataType.INT32): np.int32,
    int(hipdnn.DataType.INT64): np.int64,
    int(hipdnn.DataType.FP8_E4M3): ml_dtypes.float8_e4m3fn,
    int(hipdnn.DataType.FP8_E5M2): ml_dtypes.float8_e5m2,
}


def addressed(dims: list[int], strides: list[int]) -> int | None:
    """Elements from the first to the last one the layout reaches, or None when it is not a positive
    layout a buffer could hold."""
    if not dims or len(dims) != len(strides) or any(d <= 0 for d in dims) or any(s <= 0 for s in strides):
        return None
    return 1 + sum((d - 1) * s for d, s in zip(dims, strides, strict=True))


class Guarded:
    """Exactly the bytes a tensor addresses, between two guard bands of PATTERN."""

    def __init__(self, data_type: int, dims: list[int], strides: list[int], rng: np.random.Generator) -> None:
        dtype = np.dtype(NUMPY_TYPES.get(data_type, np.uint8))
        span = addressed(dims, strides)
        assert span is not None
        nbytes = span * dtype.itemsize
        self.base = np.full(nbytes + 2 * GUARD, PATTERN, np.uint8)
        body = self.base[GUARD : GUARD + nbytes].view(dtype)
        if dtype.kind in "iu":
            body[:] = rng.integers(-2, 12, span).astype(dtype)
        else:
            body[:] = rng.standard_normal(span).astype(dtype)
        # an axis of length 1 is never stepped along: its stride (maybe huge) does not reach the view
        steps = tuple(s * dtype.itemsize if d > 1 else 0 for d, s in zip(dims, strides, strict=True))
        self.view = as_strided(body, shape=tuple(dims), strides=steps)
        self.ptr = int(body.ctypes.data)
        self.end = nbytes

    def intact(self) -> bool:
        return bool((self.base[:GUARD] == PATTERN).all() and (self.base[GUARD + self.end :] == PATTERN).all())


def concrete(dims: list[int], strides: list[int], dynamic: bool, wildcard: int = 3) -> tuple[list[int], list[int]]:
    """A dynamic tensor's call shape: wildcards set to ``wildcard`` and compact element strides in its
    declared axis order (0 = innermost). Static tensors come back as they are."""
    if not dynamic:
        return list(dims), list(strides)
    shape = [wildcard if d == DYN else d for d in dims]
    out = [0] * len(dims)
    step = 1
    for axis in sorted(range(len(dims)), key=lambda i: strides[i]):
        out[axis] = step
        step *= max(shape[axis], 1)
    return shape, out


# ----------------------------------------------------------------------------- the oracle
class FuzzFailure(AssertionError):
    """A forbidden outcome: an unexpected exception type or a changed guard byte."""


@dataclass
class Tally:
    cases: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)

    def add(self, stage: str, outcome: str) -> None:
        self.outcomes[f"{stage}:{outcome}"] += 1

    def merge(self, other: Tally) -> None:
        self.cases += other.cases
        self.outcomes.update(other.outcomes)


def _outcome(exc: BaseException) -> str:
    if isinstance(exc, hipdnn.HipdnnError):
        return exc.code.name
    if isinstance(exc, BackendError):
        return f"backend.{exc.status.name}"
    if isinstance(exc, PluginError):
        return f"plugin.{exc.status}"
    raise FuzzFailure(f"{type(exc).__name__}: {exc}") from exc


class Oracle:
    """Runs cases against one handle (which must have loaded the CPU engine)."""

    def __init__(self, handle: hipdnn.Handle) -> None:
        self.handle = handle
        cpu = [p for p in handle.backend.plugins if p.name == CPU_ENGINE]
        if not cpu:
            raise RuntimeError(f"the CPU engine did not load: {handle.skipped_plugins()}")
        self.cpu = cpu[0]
        cfg = EngineConfigT()
        cfg.engineId = 101
        b = flatbuffers.Builder(64)
        b.Finish(cfg.Pack(b))
        self.config = bytes(b.Output())
        self.rng = np.random.default_rng(0)

    def run(self, blob: bytes, tally: Tally) -> None:
        tally.cases += 1
        for stage, fn in (("frontend", self._frontend), ("backend", self._backend), ("abi", self._abi)):
            try:
                outcome = fn(blob)
            except FuzzFailure:
                raise
            except Exception as exc:  # classified: any type but the layer's own error fails the case
                try:
                    outcome = _outcome(exc)
                except FuzzFailure as failure:
                    raise FuzzFailure(f"{stage}: {failure}") from exc
            tally.add(stage, outcome)

    # -- frontend: deserialize, build, execute at the declared (or, for dynamic tensors, concrete) shapes
    def _frontend(self, blob: bytes) -> str:
        g = hipdnn.Graph.deserialize(blob)
        g.build(self.handle)
        tensors = [
            (t, int(t.get_data_type()), t.get_dim(), t.get_stride(), t.is_dynamic())
            for t in g.tensors
            if not t.get_is_virtual()
        ]
        layout = self._layouts([(dt, d, s, dyn) for _, dt, d, s, dyn in tensors])
        if layout is None or g.get_workspace_size() > MAX_WORKSPACE:
            return "built (too large to run)"
        bufs = [Guarded(dt, d, s, self.rng) for dt, (d, s) in zip((x[1] for x in tensors), layout, strict=True)]
        ws = Guarded(int(hipdnn.DataType.UINT8), [max(g.get_workspace_size(), 1)], [1], self.rng)
        overrides = {
            t: hipdnn.OverrideEntry(d, s)
            for (t, _, _, _, dyn), (d, s) in zip(tensors, layout, strict=True)
            if dyn or DYN in t.get_dim()
        }
        try:
            g.execute(self.handle, {t: b.view for (t, *_), b in zip(tensors, bufs, strict=True)}, ws.view, overrides)
            return "executed"
        finally:
            self._check_guards(bufs + [ws], "frontend execute")

    # -- backend descriptors over the raw bytes, then the compiled core with raw pointers
    def _backend(self, blob: bytes) -> str:
        graph = OperationGraphDescriptor(blob)
        graph.set_attribute(A.OPERATIONGRAPH_HANDLE, T.HANDLE, self.handle.backend)
        graph.finalize()
        heur = EngineHeurDescriptor()
        heur.set_attribute(A.ENGINEHEUR_OPERATION_GRAPH, T.BACKEND_DESCRIPTOR, graph)
        heur.finalize()
        configs = heur.get_attribute(A.ENGINEHEUR_RESULTS)
        if not configs:
            return "not applicable"
        plan = ExecutionPlanDescriptor()
        plan.set_attribute(A.EXECUTION_PLAN_HANDLE, T.HANDLE, self.handle.backend)
        plan.set_attribute(A.EXECUTION_PLAN_ENGINE_CONFIG, T.BACKEND_DESCRIPTOR, configs[0])
        plan.finalize()
        try:
            assert graph.summary is not None and plan.core is not None
            infos = [t for t in graph.summary.tensors.values() if not t.is_virtual]
            layout = self._layouts([(t.data_type, list(t.dims), list(t.strides), t.is_dynamic) for t in infos])
            if layout is None or plan.workspace_size > MAX_WORKSPACE:
                return "planned (too large to run)"
            bufs = [Guarded(t.data_type, d, s, self.rng) for t, (d, s) in zip(infos, layout, strict=True)]
            ws = Guarded(int(hipdnn.DataType.UINT8), [max(plan.workspace_size, 1)], [1], self.rng)
            ov = [(t.uid, d, s) for t, (d, s) in zip(infos, layout, strict=True) if t.is_dynamic or DYN in t.dims]
            try:
                plan.core.execute_payload(
                    [t.uid for t in infos],
                    [b.ptr for b in bufs],
                    ws.ptr,
                    [u for u, _, _ in ov],
                    [len(d) for _, d, _ in ov],
                    [x for _, d, _ in ov for x in d],
                    [x for _, _, s in ov for x in s],
                )
                return "executed"
            finally:
                self._check_guards(bufs + [ws], "backend execute")
        finally:
            plan.destroy()

    # -- the plugin's own entries on the raw bytes
    def _abi(self, blob: bytes) -> str:
        found = self.cpu.applicable_engine_ids(blob)
        if not found:
            return "not applicable"
        self.cpu.engine_details(found[0], blob)
        size = self.cpu.workspace_size(self.config, blob)
        if size > 1 << 62:
            raise FuzzFailure(f"GetWorkspaceSize reported {size} bytes")
        return "applicable"

    def _layouts(
        self, tensors: list[tuple[int, list[int], list[int], bool]]
    ) -> list[tuple[list[int], list[int]]] | None:
        """The call shape of every tensor, or None when one cannot be given a buffer here (not a
        positive layout, or more than MAX_ELEMENTS in all)."""
        out, total = [], 0
        for _, dims, strides, dynamic in tensors:
            d, s = concrete(dims, strides, dynamic)
            span = addressed(d, s)
            if span is None:
                return None
            total += span
            out.append((d, s))
        return out if total <= MAX_ELEMENTS else None

    @staticmethod
    def _check_guards(bufs: list[Guarded], where: str) -> None:
        broken = [i for i, b in enumerate(bufs) if not b.intact()]
        if broken:
            raise FuzzFailure(f"{where}: guard bytes changed around buffer(s) {broken}")


def run_cases(oracle: Oracle, seed: int, indices: Iterator[int] | range, blobs: dict[str, bytes]) -> Tally:
    tally = Tally()
    for i in indices:
        label, blob = make_case(seed, i, blobs)
        try:
            oracle.run(blob, tally)
        except FuzzFailure as exc:
            raise FuzzFailure(f"case {seed}:{i} ({label}, {len(blob)} bytes: {blob.hex()}): {exc}") from exc
    return tally


# ----------------------------------------------------------------------------- crafted regressions
class _MisalignedDims(TensorAttributesT):
    """Packs its dims as int64 words at a 4-byte (not 8-byte) aligned position, which the FlatBuffers
    verifier does not check (it checks the vector's length word only)."""

    pad = 0

    def Pack(self, builder: flatbuffers.Builder) -> int:  # noqa: N802 (the generated API's name)
        name = builder.CreateString(self.name or "")
        TensorAttributesStartStridesVector(builder, len(self.strides))
        for v in reversed(list(self.strides)):
            builder.PrependInt64(int(v))
        strides = builder.EndVector()
        for _ in range(self.pad):
            builder.PrependInt32(0)
        builder.StartVector(8, len(self.dims), 4)
        for v in reversed(list(self.dims)):
            builder.Place(int(v), flatbuffers.number_types.Int64Flags)
        dims = builder.EndVector()
        TensorAttributesStart(builder)
        TensorAttributesAddUid(builder, self.uid)
        TensorAttributesAddName(builder, name)
        TensorAttributesAddDataType(builder, self.dataType)
        TensorAttributesAddStrides(builder, strides)
        TensorAttributesAddDims(builder, dims)
        TensorAttributesAddVirtual(builder, self.virtual)
        TensorAttributesAddIsDynamic(builder, self.isDynamic)
        return int(TensorAttributesEnd(builder))


def _pack(g: GraphT) -> bytes:
    b = flatbuffers.Builder(1024)
    b.Finish(g.Pack(b))
    return bytes(b.Output())


def misaligned_dims_graph() -> bytes:
    """The pointwise chain with its first tensor's dims stored at an offset that is 4 mod 8."""
    for pad in (0, 1):
        g = GraphT.InitFromPackedBuf(seed_blobs()["pointwise_chain"], 0)
        first = g.tensors[0]
        t = _MisalignedDims()
        t.uid, t.name, t.dataType, t.virtual, t.isDynamic = first.uid, first.name, first.dataType, False, False
        t.dims, t.strides = [int(x) for x in first.dims], [int(x) for x in first.strides]
        t.pad = pad
        g.tensors[0] = t
        blob = _pack(g)
        table = WireGraph.GetRootAs(blob, 0).Tensors(0)
        assert table is not None
        position = table._tab.Vector(table._tab.Offset(12))  # field 4 (dims): vtable slot 4 + 2 * 4
        if position % 8 == 4 and list(table.DimsAsNumpy()) == t.dims:
            return blob
    raise AssertionError("could not place the dims vector at 4 mod 8")


def regression_blobs() -> dict[str, bytes]:
    """Buffers that once broke a reader (each names what it broke); kept in every run."""
    out: dict[str, bytes] = {}
    g = GraphT.InitFromPackedBuf(seed_blobs()["sdpa_gqa"], 0)
    g.tensors[0].name = b"q\x00hidden"
    out["nul in a tensor name (ValueError from the compiled core)"] = _pack(g)
    g = GraphT.InitFromPackedBuf(seed_blobs()["matmul"], 0)
    g.name = "mm\x00"
    out["nul in the graph name (ValueError from the compiled core)"] = _pack(g)
    g = GraphT.InitFromPackedBuf(seed_blobs()["pointwise_chain"], 0)
    virtual = next(t for t in g.tensors if t.virtual)
    virtual.strides = [1]
    out["virtual tensor with 3 dims and 1 stride (ValueError from the compiled core)"] = _pack(g)
    g = GraphT.InitFromPackedBuf(seed_blobs()["pointwise_chain"], 0)
    virtual = next(t for t in g.tensors if t.virtual)
    virtual.dims = [2**40, 2**40, 8]
    out["virtual tensor whose compact strides overflow int64 (UB in set_compact)"] = _pack(g)
    out["dims vector at 4 mod 8 (misaligned int64 loads in the CPU engine)"] = misaligned_dims_graph()
    g = GraphT.InitFromPackedBuf(seed_blobs()["sdpa_backward"], 0)
    bwd = g.nodes[0].attributes
    bwd.oTensorUid = bwd.statsTensorUid
    out["sdpa_bwd reading stats [..,1] as o [..,Dv] (heap read past stats in the CPU engine)"] = _pack(g)
    for seed in ("sdpa_backward", "sdpa_options"):
        g = GraphT.InitFromPackedBuf(seed_blobs()[seed], 0)
        g.nodes[0].attributes.leftBound = 2**63 - 1
        g.nodes[0].attributes.rightBound = 2**63 - 1
        out[f"{seed} with int64-max band bounds (signed overflow in the CPU engine's kernels)"] = _pack(g)
    g = GraphT.InitFromPackedBuf(seed_blobs()["dynamic"], 0)
    g.tensors[0].dims = [-1, 2, 2**63 - 1, 8]
    out["dynamic q declaring an int64-max sequence length (signed overflow sizing SDPA tiles)"] = _pack(g)
    return out
