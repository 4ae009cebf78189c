"""Shared helpers for the plugin SDK tests: compilers, the reader driver, sample graphs."""

from __future__ import annotations

import shutil
import struct
import subprocess
from collections.abc import Iterable
from pathlib import Path

import flatbuffers
import numpy as np
import pytest

import hipdnn
from hipdnn.frontend.tensor import compact_strides
from hipdnn.frontend.types import DataType, PointwiseMode

REPO = Path(__file__).resolve().parents[2]
SDK_INCLUDE = REPO / "plugin_sdk" / "include"
DRIVER_SOURCE = Path(__file__).with_name("reader_driver.c")
STRICT = ["-Wall", "-Wextra", "-Werror", "-pedantic"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
SANITIZER_ENV = {
    "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=86",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=87",
}


def compiler(name: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        pytest.skip(f"{name} not installed")
    return exe


def compile_c(args: list[str], cwd: Path | None = None) -> None:
    result = subprocess.run(args, capture_output=True, text=True, cwd=cwd)
    assert result.returncode == 0, f"{' '.join(args)}\n{result.stdout}\n{result.stderr}"


def build_driver(out_dir: Path, sanitize: bool = True, cplusplus: bool = False) -> Path:
    exe = out_dir / ("reader_driver_cpp" if cplusplus else "reader_driver")
    cmd = [compiler("g++"), "-std=c++17", "-x", "c++"] if cplusplus else [compiler("gcc"), "-std=c99"]
    cmd += [*STRICT, "-g", "-O0", f"-I{SDK_INCLUDE}", str(DRIVER_SOURCE), "-o", str(exe)]
    if sanitize:
        cmd[1:1] = SANITIZE
    compile_c(cmd)
    return exe


def write_records(path: Path, buffers: Iterable[bytes]) -> int:
    n = 0
    with path.open("wb") as f:
        for b in buffers:
            f.write(struct.pack("<I", len(b)))
            f.write(b)
            n += 1
    return n


# -- sample graphs ---------------------------------------------------------------------------

F = DataType.FLOAT


def _graph(name: str, **kw: object) -> hipdnn.Graph:
    return hipdnn.Graph(name=name, io_data_type=F, intermediate_data_type=F, compute_data_type=F, **kw)  # type: ignore[arg-type]


def sdpa_full() -> hipdnn.Graph:
    """SDPA with stats, a float scale, padding mask with sequence lengths, a bias and a band."""
    g = _graph("sdpa_full", preferred_engine_id=-77)
    B, H, S, D = 2, 4, 33, 16
    dims, strides = [B, H, S, D], [H * S * D, S * D, D, 1]
    q = g.tensor(name="q", dim=dims, stride=strides, data_type=F)
    k = g.tensor(name="k", dim=dims, stride=strides, data_type=F)
    v = g.tensor(name="v", dim=dims, stride=strides, data_type=F)
    sq = g.tensor(name="seq_q", dim=[B, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DataType.INT32)
    skv = g.tensor(name="seq_kv", dim=[B, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DataType.INT32)
    bias = g.tensor(name="bias", dim=[1, H, S, S], stride=[H * S * S, S * S, S, 1], data_type=F)
    o, stats = g.sdpa(
        q,
        k,
        v,
        attn_scale=0.3,
        use_causal_mask=True,
        generate_stats=True,
        diagonal_band_left_bound=5,
        diagonal_band_right_bound=0,
        use_padding_mask=True,
        seq_len_q=sq,
        seq_len_kv=skv,
        bias=bias,
        use_alibi_mask=True,
        name="attention",
    )
    o.set_output(True)
    assert stats is not None
    stats.set_output(True)
    return g


def sdpa_bottom_right() -> hipdnn.Graph:
    """Bottom-right causal SDPA with the scale passed as a tensor, grouped-query heads, overrides on."""
    g = _graph("gqa \u00e9", is_override_shape_enabled=True, preferred_engine_id=101)
    q = g.tensor(name="q", dim=[1, 8, 7, 8], stride=[448, 56, 8, 1], data_type=F, uid=1000)
    k = g.tensor(name="k", dim=[1, 2, 9, 8], stride=[144, 72, 8, 1], data_type=F, uid=2**40)
    v = g.tensor(name="v", dim=[1, 2, 9, 8], stride=[144, 72, 8, 1], data_type=F, uid=-5)
    scale = g.tensor(name="scale", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=F)
    o, _ = g.sdpa(q, k, v, attn_scale=scale, use_causal_mask_bottom_right=True)
    o.set_output(True)
    return g


def matmul_batched() -> hipdnn.Graph:
    g = _graph("mm")
    a = g.tensor(name="a", dim=[3, 1, 5, 7], stride=[35, 35, 7, 1], data_type=F)
    b = g.tensor(name="b", dim=[1, 4, 7, 2], stride=[56, 14, 2, 1], data_type=F)
    c = g.matmul(a, b)
    c.set_output(True)
    return g


def pointwise_chain() -> hipdnn.Graph:
    """ADD -> MUL -> RELU through virtual intermediates, with broadcasting."""
    g = _graph("chain")
    x = g.tensor(name="x", dim=[2, 3, 5], stride=[15, 5, 1], data_type=F)
    y = g.tensor(name="y", dim=[1, 3, 1], stride=[3, 1, 1], data_type=F)
    z = g.tensor(name="z", dim=[5], stride=[1], data_type=F)
    s = g.pointwise(PointwiseMode.ADD, x, y)
    m = g.pointwise(PointwiseMode.MUL, s, z, name="scale by z")
    r = g.pointwise(PointwiseMode.RELU_FWD, m)
    r.set_output(True)
    return g


def frontend_graphs() -> dict[str, hipdnn.Graph]:
    return {f.__name__: f() for f in (sdpa_full, sdpa_bottom_right, matmul_batched, pointwise_chain)}


def future_graph() -> bytes:
    """A graph as a newer writer might produce it: fields appended to Graph, TensorAttributes and
    PointwiseAttributes, a node of a kind this SDK does not know (id 5), a by-value tensor, and a
    tensor with no name, dims or strides stored at all."""
    b = flatbuffers.Builder(256)
    name = b.CreateString("future")
    tname = b.CreateString("alpha")

    def vec(values: list[int]) -> int:
        b.StartVector(8, len(values), 8)
        for v in reversed(values):
            b.PrependInt64(v)
        return b.EndVector()

    dims, strides = vec([4, 1]), vec([1, 1])
    # Float64Value { value: double } for the by-value tensor
    b.StartObject(1)
    b.PrependFloat64Slot(0, 2.5, 0.0)
    scalar = b.EndObject()
    # tensor 0: uid 7, by-value Float64 (union type 6), is_dynamic (8), a ragged offset uid (9) and a
    # field 10 no schema has yet
    b.StartObject(11)
    b.PrependInt64Slot(0, 7, 0)
    b.PrependUOffsetTRelativeSlot(1, tname, 0)
    b.PrependInt8Slot(2, int(DataType.DOUBLE), 0)
    b.PrependUOffsetTRelativeSlot(3, strides, 0)
    b.PrependUOffsetTRelativeSlot(4, dims, 0)
    b.PrependUint8Slot(6, 6, 0)
    b.PrependUOffsetTRelativeSlot(7, scalar, 0)
    b.PrependBoolSlot(8, True, False)
    b.PrependInt64Slot(9, 0, 1)  # ragged offset uid 0, stored explicitly
    b.PrependInt64Slot(10, -1, 0)
    t0 = b.EndObject()
    # tensor 1: an empty table (uid 0, no name, rank 0, virtual false)
    b.StartObject(0)
    t1 = b.EndObject()
    # an unknown node kind's attributes
    b.StartObject(2)
    b.PrependInt64Slot(0, 99, 0)
    b.PrependInt64Slot(1, 98, 0)
    unknown_attrs = b.EndObject()
    # pointwise with an appended field 12
    b.StartObject(13)
    b.PrependInt8Slot(0, int(PointwiseMode.SWISH_FWD), 0)
    b.PrependInt64Slot(5, 7, 0)
    b.PrependInt64Slot(8, 0, 1)  # out_0 uid 0, stored explicitly
    b.PrependFloat32Slot(9, 1.5, 0.0)
    b.PrependInt64Slot(12, 123456, 0)
    pw = b.EndObject()
    nodes = []
    for kind, attrs, nm in ((5, unknown_attrs, "mystery"), (2, pw, "swish")):
        nname = b.CreateString(nm)
        b.StartObject(4)
        b.PrependUOffsetTRelativeSlot(0, nname, 0)
        b.PrependUint8Slot(2, kind, 0)
        b.PrependUOffsetTRelativeSlot(3, attrs, 0)
        nodes.append(b.EndObject())
    b.StartVector(4, 2, 4)
    b.PrependUOffsetTRelative(t1)
    b.PrependUOffsetTRelative(t0)
    tensors = b.EndVector()
    b.StartVector(4, len(nodes), 4)
    for n in reversed(nodes):
        b.PrependUOffsetTRelative(n)
    nodes_vec = b.EndVector()
    b.StartObject(11)
    b.PrependUOffsetTRelativeSlot(0, name, 0)
    b.PrependInt8Slot(3, int(DataType.HALF), 0)
    b.PrependUOffsetTRelativeSlot(4, tensors, 0)
    b.PrependUOffsetTRelativeSlot(5, nodes_vec, 0)
    b.PrependBoolSlot(7, True, False)
    b.PrependInt64Slot(10, 42, 0)
    root = b.EndObject()
    b.Finish(root)
    return bytes(b.Output())


def seed_buffers() -> dict[str, bytes]:
    out = {name: g.serialize() for name, g in frontend_graphs().items()}
    out["future"] = future_graph()
    return out


def check_add_through_overrides(handle: hipdnn.Handle, engine_id: int) -> None:
    """An ADD plugin (the SDK examples) built at maximum shapes and run at smaller ones through
    ExecuteOpGraphWithOverrides (API 1.1.0), with a broadcast operand; NaN-filled outputs."""
    g = _graph("ovr", is_override_shape_enabled=True, preferred_engine_id=engine_id)
    dmax = [2, 6, 8]
    x = g.tensor(name="x", dim=dmax, stride=compact_strides(dmax), data_type=F)
    y = g.tensor(name="y", dim=[1, 1, 8], stride=[8, 8, 1], data_type=F)
    out = g.pointwise(PointwiseMode.ADD, x, y)
    out.set_output(True)
    g.build(handle)
    assert g.get_engine_id() == engine_id
    for s in ([2, 3, 5], [1, 1, 1], dmax):
        a = np.random.default_rng(1).standard_normal(s).astype(np.float32)
        b = np.random.default_rng(2).standard_normal([1, 1, s[2]]).astype(np.float32)
        c = np.full(s, np.nan, np.float32)
        overrides = {
            x: hipdnn.OverrideEntry(shape=s, stride=compact_strides(s)),
            y: hipdnn.OverrideEntry(shape=[1, 1, s[2]], stride=[s[2], s[2], 1]),
            out: hipdnn.OverrideEntry(shape=s, stride=compact_strides(s)),
        }
        g.execute(handle, {x: a, y: b, out: c}, np.empty(0, np.uint8), overrides=overrides)
        np.testing.assert_array_equal(c, a + b)
