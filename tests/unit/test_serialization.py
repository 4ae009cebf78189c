"""Wire-format round trips of random graphs, and fuzzing of both decoders (frontend and backend)."""

from __future__ import annotations

import signal
from contextlib import contextmanager
from datetime import timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hipdnn import DataType, DiagonalAlignment, ErrorCode, Graph, HipdnnError, PointwiseMode, TensorAttributes
from hipdnn.backend.graph_summary import GraphDecodeError, GraphSummary, summarize
from hipdnn.frontend.ops import MatmulNode, PointwiseNode, SdpaNode
from hipdnn.frontend.types import POINTWISE_ARITY

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
DIM = st.sampled_from([1, 2, 3, 37, 129])
NAME = st.text(max_size=12)  # any unicode but surrogates, NUL included
INPUT_TYPES = [None, DataType.FLOAT, DataType.HALF, DataType.BFLOAT16, DataType.INT32]
IO_TYPES = [DataType.NOT_SET, DataType.FLOAT, DataType.HALF, DataType.BFLOAT16]
UNARY = sorted(m for m, n in POINTWISE_ARITY.items() if n == 1)
BINARY = [m for m in PointwiseMode if m not in POINTWISE_ARITY]


class Hang(BaseException):
    """Raised by the watchdog; a BaseException so that no ``except Exception`` swallows it."""


@contextmanager
def watchdog(seconds: float):
    """Fail (rather than hang) when the block runs longer than ``seconds``."""

    def fire(signum, frame):
        raise Hang(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# -- random graphs ---------------------------------------------------------------------------
@st.composite
def graphs(draw) -> Graph:
    """A random, valid chain of pointwise / matmul / sdpa nodes with random layouts and uids."""
    g = Graph(
        name=draw(NAME),
        io_data_type=draw(st.sampled_from(IO_TYPES)),
        intermediate_data_type=draw(st.sampled_from(IO_TYPES)),
        compute_data_type=draw(st.sampled_from([DataType.NOT_SET, DataType.FLOAT])),
        is_override_shape_enabled=draw(st.booleans()),
        preferred_engine_id=draw(st.none() | st.integers(INT64_MIN, INT64_MAX)),
    )
    uid_pool = iter(draw(st.lists(st.integers(INT64_MIN, INT64_MAX), min_size=64, max_size=64, unique=True)))

    def maybe_uid(t: TensorAttributes) -> TensorAttributes:
        if draw(st.booleans()):
            t.set_uid(next(uid_pool))
        return t

    def new_input(dims: list[int]) -> TensorAttributes:
        order = draw(st.permutations(range(len(dims))))  # memory order, outermost first
        strides = [0] * len(dims)
        step = 1
        for axis in reversed(order):
            strides[axis] = step
            step *= dims[axis]
        dtype = draw(st.sampled_from(INPUT_TYPES))
        return maybe_uid(g.tensor(draw(NAME), dims, strides, dtype))

    def node_name() -> str | None:
        return draw(st.none() | NAME)

    def compute_type() -> DataType:
        return draw(st.sampled_from([DataType.NOT_SET, DataType.FLOAT, DataType.HALF]))

    def broadcastable_to(dims: list[int]) -> list[int]:
        keep = draw(st.integers(1, len(dims)))  # drop leading dims
        return [d if draw(st.booleans()) else 1 for d in dims[len(dims) - keep :]]

    # Output shapes are only inferred at validate, so the strategy tracks the current shape itself.
    dims = draw(st.lists(DIM, min_size=4, max_size=4) | st.lists(DIM, min_size=1, max_size=4))
    cur = new_input(dims)
    for _ in range(draw(st.integers(1, 5))):
        rank = len(dims)
        kinds = ["unary", "binary", "select"]
        kinds += (["matmul"] if rank >= 2 else []) + (["sdpa", "sdpa"] if rank == 4 else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "unary":
            mode = draw(st.sampled_from(UNARY))
            out = g.pointwise(mode, cur, compute_data_type=compute_type(), name=node_name())
        elif kind == "binary":
            other = new_input(broadcastable_to(dims))
            a, b = (cur, other) if draw(st.booleans()) else (other, cur)
            mode = draw(st.sampled_from(BINARY))
            out = g.pointwise(mode, a, b, compute_data_type=compute_type(), name=node_name())
        elif kind == "select":
            cond = new_input(broadcastable_to(dims))
            other = new_input(broadcastable_to(dims))
            out = g.pointwise(PointwiseMode.BINARY_SELECT, cur, other, cond, name=node_name())
        elif kind == "matmul":
            batch = broadcastable_to(dims[:-2]) if rank > 2 and draw(st.booleans()) else []
            n = draw(DIM)
            b = new_input(batch + [dims[-1], n])
            out = g.matmul(cur, b, compute_data_type=compute_type(), name=node_name())
            dims = dims[:-1] + [n]
        else:
            bsz, h, sq, d = dims
            hk = draw(st.sampled_from([x for x in range(1, h + 1) if h % x == 0]))
            skv, dv = draw(DIM), draw(DIM)
            k, v = new_input([bsz, hk, skv, d]), new_input([bsz, hk, skv, dv])
            scale_kind = draw(st.sampled_from(["none", "value", "tensor"]))
            scale = {
                "none": None,
                "value": draw(st.floats(width=32, allow_nan=False, allow_infinity=False)),
                "tensor": new_input([1, 1, 1, 1]) if scale_kind == "tensor" else None,
            }[scale_kind]
            padding = draw(st.booleans())
            seq_q = new_input([bsz, 1, 1, 1]) if padding else None
            seq_kv = new_input([bsz, 1, 1, 1]) if padding else None
            bias = new_input([1, h, sq, skv]) if draw(st.booleans()) else None
            bound = st.none() | st.integers(0, INT64_MAX)
            out, stats = g.sdpa(
                cur,
                k,
                v,
                attn_scale=scale,
                use_causal_mask=draw(st.booleans()),
                generate_stats=draw(st.booleans()),
                diagonal_alignment=draw(st.sampled_from(list(DiagonalAlignment))),
                diagonal_band_left_bound=draw(bound),
                diagonal_band_right_bound=draw(bound),
                use_padding_mask=padding,
                seq_len_q=seq_q,
                seq_len_kv=seq_kv,
                bias=bias,
                use_alibi_mask=draw(st.booleans()),
                compute_data_type=compute_type(),
                name=node_name(),
            )
            if stats is not None:
                maybe_uid(stats.set_output(True).set_name(draw(NAME)))
            dims = [bsz, h, sq, dv]
        maybe_uid(out.set_name(draw(NAME)))
        if draw(st.booleans()):
            out.set_output(True)  # an intermediate the user also reads
        cur = out
    cur.set_output(True)
    return g


ROUNDTRIP = settings(max_examples=120, deadline=timedelta(seconds=2), suppress_health_check=[HealthCheck.too_slow])


def _node_fields(n) -> tuple:
    uids = ([t.get_uid() for t in n.inputs()], [t.get_uid() for t in n.outputs()])
    common = (type(n), n.name, n.compute_data_type, *uids)
    if isinstance(n, PointwiseNode):
        return common + (n.mode,)
    if isinstance(n, MatmulNode):
        return common
    assert isinstance(n, SdpaNode)
    opts = n.options
    scale = opts.attn_scale.get_uid() if isinstance(opts.attn_scale, TensorAttributes) else opts.attn_scale
    return common + (
        scale,
        opts.use_causal_mask,
        opts.diagonal_alignment,
        opts.diagonal_band_left_bound,
        opts.diagonal_band_right_bound,
        opts.use_padding_mask,
        opts.use_alibi_mask,
        *(t.get_uid() if t is not None else None for t in (n.stats, opts.seq_len_q, opts.seq_len_kv, opts.bias)),
    )


def _tensor_fields(t: TensorAttributes) -> tuple:
    return (t.get_name(), t.get_uid(), t.get_dim(), t.get_stride(), t.get_data_type(), t.get_is_virtual())


@ROUNDTRIP
@given(graphs())
def test_random_graphs_round_trip(g: Graph) -> None:
    blob = g.serialize()
    back = Graph.deserialize(blob)
    assert back.serialize() == blob
    assert (back.name, back.io_data_type, back.intermediate_data_type, back.compute_data_type) == (
        g.name,
        g.io_data_type,
        g.intermediate_data_type,
        g.compute_data_type,
    )
    assert back.is_override_shape_enabled() is g.is_override_shape_enabled()
    assert back.preferred_engine_id == g.preferred_engine_id
    assert [_tensor_fields(t) for t in back.tensors] == [_tensor_fields(t) for t in g.tensors]
    assert [_node_fields(n) for n in back.nodes] == [_node_fields(n) for n in g.nodes]
    # The backend reads the same buffer the same way.
    summary = summarize(blob)
    assert summary.name == g.name and summary.node_count == len(g.nodes)
    assert summary.is_override_shape_enabled is g.is_override_shape_enabled()
    assert summary.preferred_engine_id == g.preferred_engine_id
    read = [(i.uid, i.name, list(i.dims), list(i.strides), i.data_type, i.is_virtual) for i in summary.tensors.values()]
    assert read == [
        (t.get_uid(), t.get_name(), t.get_dim(), t.get_stride(), int(t.get_data_type()), t.get_is_virtual())
        for t in g.tensors
    ]


def test_attn_scale_travels_as_float32() -> None:
    g = Graph()
    q = g.tensor("q", [1, 1, 2, 4], [8, 8, 4, 1])
    o, _ = g.sdpa(q, g.tensor_like(q, "k"), g.tensor_like(q, "v"), attn_scale=0.1)
    o.set_output(True)
    (node,) = Graph.deserialize(g.serialize()).nodes
    assert node.options.attn_scale == float(np.float32(0.1))
    assert node.options.attn_scale != 0.1


def test_deserialize_accepts_bytes_like() -> None:
    g = _sample_graphs()[0]
    blob = g.serialize()
    for form in (blob, bytearray(blob), memoryview(blob)):
        assert Graph.deserialize(form).serialize() == blob


# -- fuzzing ---------------------------------------------------------------------------------
def _sample_graphs() -> list[Graph]:
    g = Graph(name="fuzz ∑ graph", io_data_type=DataType.HALF, is_override_shape_enabled=True, preferred_engine_id=9)
    q = g.tensor("q", [2, 4, 3, 8], [96, 8, 32, 1], uid=11)
    k = g.tensor("k", [2, 2, 5, 8], [80, 8, 16, 1])
    v = g.tensor("v", [2, 2, 5, 8], [80, 40, 8, 1])
    o, stats = g.sdpa(q, k, v, attn_scale=0.25, use_causal_mask=True, generate_stats=True, name="attn")
    stats.set_output(True)
    w = g.tensor("w", [8, 6], [6, 1])
    c = g.matmul(o, w, name="proj")
    bias = g.tensor("bias", [1, 6], [6, 1])
    g.add(c, bias, name="bias add").set_output(True).set_uid(99)

    h = Graph(name="small")
    x = h.tensor("x", [4, 3], [3, 1])
    h.pointwise(PointwiseMode.RELU_FWD, x).set_output(True)
    return [g, h]


BLOBS = [g.serialize() for g in _sample_graphs()]
BIG = BLOBS[0]


def check_frontend(blob: bytes) -> None:
    """Graph.deserialize returns a usable Graph or raises HipdnnError, nothing else."""
    try:
        g = Graph.deserialize(blob)
    except HipdnnError as exc:
        assert isinstance(exc.code, ErrorCode) and exc.code is not ErrorCode.OK
        return
    assert isinstance(g, Graph)
    again = g.serialize()  # what decoded is a valid graph, and re-encodes stably
    assert Graph.deserialize(again).serialize() == again


def check_backend(blob: bytes) -> None:
    """summarize returns a GraphSummary or raises GraphDecodeError, nothing else."""
    try:
        s = summarize(blob)
    except GraphDecodeError:
        return
    assert isinstance(s, GraphSummary)
    assert s.node_count >= 0 and all(isinstance(u, int) for u in s.tensors)


CHECKS = pytest.mark.parametrize("check", [check_frontend, check_backend], ids=["frontend", "backend"])
FUZZ = settings(max_examples=300, deadline=timedelta(seconds=1), suppress_health_check=[HealthCheck.too_slow])


@CHECKS
@pytest.mark.parametrize("which", range(len(BLOBS)))
def test_every_truncation(check, which) -> None:
    blob = BLOBS[which]
    with watchdog(20):
        for n in range(len(blob) + 1):
            check(blob[:n])


@CHECKS
def test_empty_and_tiny_inputs(check) -> None:
    for blob in (b"", b"\x00", b"\x00" * 7, b"\xff" * 8, b"\x04\x00\x00\x00\x00\x00\x00\x00"):
        check(blob)
    with pytest.raises(HipdnnError) as info:
        Graph.deserialize(b"")
    assert info.value.code is ErrorCode.INVALID_VALUE
    with pytest.raises(GraphDecodeError):
        summarize(b"")


@CHECKS
@FUZZ
@given(pos=st.integers(0, len(BIG) - 1), byte=st.integers(0, 255))
def test_single_byte_corruption(check, pos, byte) -> None:
    blob = bytearray(BIG)
    blob[pos] = byte
    with watchdog(5):
        check(bytes(blob))


@CHECKS
@FUZZ
@given(edits=st.lists(st.tuples(st.integers(0, len(BIG) - 1), st.integers(0, 255)), min_size=2, max_size=24))
def test_multi_byte_corruption(check, edits) -> None:
    blob = bytearray(BIG)
    for pos, byte in edits:
        blob[pos] = byte
    with watchdog(5):
        check(bytes(blob))


@CHECKS
@FUZZ
@given(garbage=st.binary(max_size=2048))
def test_random_garbage(check, garbage) -> None:
    with watchdog(5):
        check(garbage)


@CHECKS
@FUZZ
@given(cut=st.integers(0, len(BIG)), tail=st.binary(min_size=1, max_size=256))
def test_truncated_then_padded_with_garbage(check, cut, tail) -> None:
    with watchdog(5):
        check(BIG[:cut] + tail)


def test_backend_decode_error_is_a_value_error_with_a_message() -> None:
    with pytest.raises(GraphDecodeError) as info:
        summarize(BIG[:5])
    assert isinstance(info.value, ValueError) and "5 bytes" in str(info.value)
