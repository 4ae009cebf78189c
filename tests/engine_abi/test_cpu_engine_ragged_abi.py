"""The CPU engine's own checks of ragged tensors and paged K/V (rfcs/0012), on graphs written straight to
the wire and handed to the plugin's C ABI: the frontend refuses all of these first, so here the engine
is its own last line. Each graph must be declined (not applicable, saying why), never run."""

from __future__ import annotations

import pytest

from hipdnn.wire.DataType import DataType
from tests.engine_abi.test_cpu_engine_abi import (  # noqa: F401  (session fixtures)
    NOT_APPLICABLE,
    T,
    applicable,
    config_bytes,
    const_data,
    ffi,
    handle,
    last_error,
    lib,
    matmul_node,
    plugin_path,
    sdpa_node,
)


def _graph(tensors: list[T], nodes: list, ragged: dict[int, int]) -> bytes:
    import flatbuffers

    from hipdnn.wire.Graph import GraphT
    from hipdnn.wire.TensorAttributes import TensorAttributesT as TA

    g = GraphT()
    g.name = "ragged_abi"
    g.ioDataType = g.computeDataType = g.intermediateDataType = DataType.FLOAT
    g.tensors = []
    for t in tensors:
        ta = TA()
        ta.uid, ta.name, ta.dataType = t.uid, f"t{t.uid}", t.dtype
        ta.dims, ta.strides, ta.virtual = list(t.dims), list(t.strides), t.virtual
        ta.raggedOffsetTensorUid = ragged.get(t.uid)
        g.tensors.append(ta)
    g.nodes = nodes
    b = flatbuffers.Builder(1024)
    b.Finish(g.Pack(b))
    return bytes(b.Output())


I32, I64, F32 = DataType.INT32, DataType.INT64, DataType.FLOAT
QKV = [T(1, [2, 2, 8, 4], [64, 4, 8, 1]), T(2, [2, 2, 8, 4], [64, 4, 8, 1]), T(3, [2, 2, 8, 4], [64, 4, 8, 1])]
OUT = T(4, [2, 2, 8, 4], [64, 4, 8, 1])
SEQ = [T(5, [2, 1, 1, 1], dtype=I32), T(6, [2, 1, 1, 1], dtype=I32)]
PAD = dict(paddingMask=True, seqLenQTensorUid=5, seqLenKvTensorUid=6)
CACHE = [T(2, [9, 2, 16, 4]), T(3, [9, 2, 16, 4])]
TABLES = [T(7, [2, 1, 4, 1], dtype=I32), T(8, [2, 1, 4, 1], dtype=I32)]


def sdpa(**kw):
    return sdpa_node(1, 2, 3, 4, scale=0.5, **kw)


CASES = {
    "offset uid of no tensor": (
        lambda: _graph([*QKV, OUT, *SEQ], [sdpa(**PAD)], {1: 99}),
        "ragged offset uid 99 is no tensor",
    ),
    "FLOAT offsets": (
        lambda: _graph([*QKV, OUT, *SEQ, T(9, [3, 1, 1, 1], dtype=F32)], [sdpa(**PAD)], {1: 9}),
        "has data type FLOAT; INT32 or INT64 is needed",
    ),
    "ragged without the padding mask": (
        lambda: _graph([*QKV, OUT, T(9, [3, 1, 1, 1], dtype=I64)], [sdpa()], {1: 9}),
        "need the padding mask",
    ),
    "a ragged seq_len tensor": (
        lambda: _graph([*QKV, OUT, *SEQ, T(9, [3, 1, 1, 1], dtype=I64)], [sdpa(**PAD)], {5: 9}),
        "tensor uid 5 is ragged in a role that cannot be",
    ),
    "a ragged matmul operand": (
        lambda: _graph(
            [T(1, [2, 2, 4, 4]), T(2, [2, 2, 4, 4]), T(3, [2, 2, 4, 4]), T(9, [3, 1, 1, 1], dtype=I64)],
            [matmul_node(1, 2, 3)],
            {1: 9},
        ),
        "only SDPA's q, k, v, o, stats",
    ),
    "a ragged offset that is itself ragged": (
        lambda: _graph(
            [*QKV, OUT, *SEQ, T(9, [3, 1, 1, 1], dtype=I64), T(10, [3, 1, 1, 1], dtype=I64)],
            [sdpa(**PAD)],
            {1: 9, 9: 10},
        ),
        "must be a static input",
    ),
    "offsets of the wrong length": (
        lambda: _graph([*QKV, OUT, *SEQ, T(9, [2, 1, 1, 1], dtype=I64)], [sdpa(**PAD)], {1: 9}),
        r"must be \[B\+1,1,1,1\] with B = 2",
    ),
    "one page table": (
        lambda: _graph([QKV[0], *CACHE, OUT, *SEQ, *TABLES], [sdpa(pageTableKTensorUid=7, **PAD)], {}),
        "both page tables are needed",
    ),
    "INT64 page tables": (
        lambda: _graph(
            [QKV[0], *CACHE, OUT, *SEQ, T(7, [2, 1, 4, 1], dtype=I64), TABLES[1]],
            [sdpa(pageTableKTensorUid=7, pageTableVTensorUid=8, **PAD)],
            {},
        ),
        "K page table has data type INT64",
    ),
    "paged without the padding mask": (
        lambda: _graph([QKV[0], *CACHE, OUT, *TABLES], [sdpa(pageTableKTensorUid=7, pageTableVTensorUid=8)], {}),
        "without the padding mask",
    ),
    "a ragged paged cache": (
        lambda: _graph(
            [QKV[0], *CACHE, OUT, *SEQ, *TABLES, T(9, [3, 1, 1, 1], dtype=I64)],
            [sdpa(pageTableKTensorUid=7, pageTableVTensorUid=8, **PAD)],
            {2: 9},
        ),
        "static, rank-4|paged cache and cannot also be ragged",
    ),
    "page tables of another batch": (
        lambda: _graph(
            [QKV[0], *CACHE, OUT, *SEQ, T(7, [3, 1, 4, 1], dtype=I32), T(8, [3, 1, 4, 1], dtype=I32)],
            [sdpa(pageTableKTensorUid=7, pageTableVTensorUid=8, **PAD)],
            {},
        ),
        r"page table \(uid 7\) must be \[B,1,max_blocks,1\] with B = 2",
    ),
    "max_seq_len_kv without tables": (
        lambda: _graph([*QKV, OUT, *SEQ], [sdpa(maxSeqLenKv=8, **PAD)], {}),
        "max_seq_len_kv without page tables",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_engine_declines_saying_why(ffi, lib, handle, name):  # noqa: F811
    import re

    make, why = CASES[name]
    gb = make()
    assert applicable(ffi, lib, handle, gb) == []
    keep: list = []
    g = const_data(ffi, gb, keep)
    c = const_data(ffi, config_bytes(), keep)
    p = ffi.new("hipdnnEnginePluginExecutionContext_t*")
    assert lib.hipdnnEnginePluginCreateExecutionContext(handle, c, g, p) == NOT_APPLICABLE
    msg = last_error(ffi, lib)
    assert re.search(why, msg), msg


def test_a_well_formed_ragged_graph_is_applicable(ffi, lib, handle):  # noqa: F811
    gb = _graph([*QKV, OUT, *SEQ, T(9, [3, 1, 1, 1], dtype=I64)], [sdpa(**PAD)], {1: 9, 2: 9, 3: 9, 4: 9})
    assert applicable(ffi, lib, handle, gb) == [101]
    gp = _graph([QKV[0], *CACHE, OUT, *SEQ, *TABLES], [sdpa(pageTableKTensorUid=7, pageTableVTensorUid=8, **PAD)], {})
    assert applicable(ffi, lib, handle, gp) == [101]
