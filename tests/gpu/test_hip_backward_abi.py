"""The HIP engine's SDPA backward graph rules, driven through its C ABI with cffi; no torch.

Runs wherever the plugin is built or can be (tests/conftest.py's ``hip_plugin``), GPU or not, like
test_hip_dynamic_abi.py: without a usable GPU the engine offers no engine for any graph, but it parses
every graph first and logs why it declined it, so which backward graphs it takes and which it refuses
(and why) is checked here on any machine. A graph it can serve is declined, if at all, for the same
reason as a forward graph it runs (no GPU). Where a GPU is present the refusals of the execute path that
come before any launch are checked too, with buffers that are never dereferenced. The numerics are in
test_hip_backward.py (GPU only).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import flatbuffers
import pytest

import tests.gpu.test_hip_dynamic_abi as dynamic_abi
from hipdnn.wire.DataType import DataType
from hipdnn.wire.DiagonalAlignment import DiagonalAlignment
from hipdnn.wire.Graph import GraphT
from hipdnn.wire.NodeAttributes import NodeAttributes
from hipdnn.wire.SdpaBackwardAttributes import SdpaBackwardAttributesT
from tests.engine_abi.test_cpu_engine_abi import BAD_PARAM, Ctx, config_bytes, const_data, last_error, node
from tests.gpu.hip_support import AXIS_ORDER, bwd_plan_workspace, compact
from tests.gpu.test_hip_dynamic_abi import STATIC_SERVABLE, Abi, tensor

#: the plugin session (logging callback, handle) of the dynamic-tensor ABI tests, as this module's fixture
abi = dynamic_abi.abi

W = -1  # a wildcard dim
Q, K, V, OUT, DO, ST, DQ, DK, DV, SQ, SKV = range(1, 12)
Q_LIKE, KV_LIKE = (Q, OUT, DO, DQ), (K, V, DK, DV)
BF16, HALF, FLOAT, INT32 = DataType.BFLOAT16, DataType.HALF, DataType.FLOAT, DataType.INT32


def bshd(dims: list[int]) -> list[int]:
    b, h, s, d = dims
    return [s * h * d, d, h * d, 1]


def bwd_bytes(
    q: list[int],
    kv: list[int] | None = None,
    *,
    layout: str = "bhsd",
    dynamic: bool = False,
    dtype: int = BF16,
    override: bool = False,
    padding: bool = False,
    change: dict[int, dict[str, Any]] | None = None,
    drop: tuple[int, ...] = (),
    **attrs: Any,
) -> bytes:
    """One SDPA backward node: q, o, dO, dQ of dims ``q``; k, v, dK, dV of dims ``kv``; stats
    [B, Hq, Sq, 1]. ``change`` replaces a tensor's dims / strides / dtype / dynamic flag by uid;
    ``drop`` leaves tensors out of the graph; ``attrs`` set fields of the node's attribute table."""
    kv = q if kv is None else kv

    def strides(dims: list[int]) -> list[int]:
        if dynamic:
            return AXIS_ORDER[layout]
        return bshd(dims) if layout == "bshd" else compact(dims)

    spec: dict[int, dict[str, Any]] = {}
    for uid in Q_LIKE:
        spec[uid] = {"dims": q, "strides": strides(q), "dtype": dtype, "dynamic": dynamic}
    for uid in KV_LIKE:
        spec[uid] = {"dims": kv, "strides": strides(kv), "dtype": dtype, "dynamic": dynamic}
    st_dims = [q[0], q[1], q[2], 1]
    spec[ST] = {"dims": st_dims, "dtype": FLOAT, "dynamic": dynamic}
    spec[ST]["strides"] = [3, 2, 1, 0] if dynamic else compact(st_dims)
    a = SdpaBackwardAttributesT()
    a.qTensorUid, a.kTensorUid, a.vTensorUid, a.oTensorUid, a.doTensorUid = Q, K, V, OUT, DO
    a.statsTensorUid, a.dqTensorUid, a.dkTensorUid, a.dvTensorUid = ST, DQ, DK, DV
    a.attnScaleValue = 0.125
    if padding:
        for uid in (SQ, SKV):
            spec[uid] = {"dims": [q[0], 1, 1, 1], "strides": [1, 1, 1, 1], "dtype": INT32, "dynamic": dynamic}
        a.paddingMask, a.seqLenQTensorUid, a.seqLenKvTensorUid = True, SQ, SKV
    for key, val in attrs.items():
        assert hasattr(a, key), key
        setattr(a, key, val)
    for uid, fields in (change or {}).items():
        spec.setdefault(uid, {"dtype": FLOAT, "dynamic": False}).update(fields)
    g = GraphT()
    g.name = "hip_backward_abi"
    g.ioDataType, g.computeDataType, g.intermediateDataType = dtype, FLOAT, FLOAT
    g.isOverrideShapeEnabled = override
    g.tensors = [
        tensor(uid, s["dims"], s["strides"], s["dynamic"], s["dtype"]) for uid, s in spec.items() if uid not in drop
    ]
    g.nodes = [node(NodeAttributes.SdpaBackwardAttributes, a, "bwd")]
    b = flatbuffers.Builder(1024)
    b.Finish(g.Pack(b))
    return bytes(b.Output())


@pytest.fixture(scope="module")
def probe(abi: Abi) -> tuple[list[int], str]:
    """What the engine says about a forward graph it runs: its engines here, or why none (no GPU)."""
    return abi.decide(STATIC_SERVABLE)


QS = [2, 4, 64, 64]
#: a bias tensor (uid 20) for QS: fp32 [B, Hq, Sq, Skv], compact
BIAS: dict[str, Any] = {"dims": QS, "strides": compact(QS), "dtype": FLOAT, "dynamic": False}

SERVABLE = {
    "bf16 bhsd D=64": bwd_bytes([2, 4, 64, 64]),
    "fp16 bshd D=128 GQA causal bottom-right": bwd_bytes(
        [2, 8, 37, 128],
        [2, 2, 129, 128],
        layout="bshd",
        dtype=HALF,
        causalMask=True,
        diagonalAlignment=DiagonalAlignment.BOTTOM_RIGHT,
    ),
    "MQA, top-left causal as right bound 0": bwd_bytes([1, 4, 100, 64], [1, 1, 100, 64], rightBound=0),
    "padding mask": bwd_bytes([3, 4, 700, 128], [3, 2, 700, 128], padding=True, override=True),
    "dynamic bhsd": bwd_bytes([W, 4, W, 64], [W, 2, W, 64], dynamic=True),
    "dynamic bshd, wildcard heads": bwd_bytes([W, W, W, 128], layout="bshd", dynamic=True),
    "head dim declared by q only": bwd_bytes(
        [W, 4, W, 64], dynamic=True, change={u: {"dims": [W, 4, W, W]} for u in (K, V, OUT, DO, DQ, DK, DV)}
    ),
    # one (batch, kv head) pair of the maximum shape exceeds the capped workspace; smaller calls fit
    "overridable beyond the workspace cap": bwd_bytes([1, 64, 8192, 128], [1, 1, 8192, 128], override=True),
    "dropout probability 0": bwd_bytes([1, 2, 64, 64], dropoutProbability=0.0),
    "head dim 96": bwd_bytes([1, 2, 64, 96]),
    "head dim 40, GQA": bwd_bytes([1, 4, 64, 40], [1, 2, 64, 40]),
    # bias tensors and band bounds (issue 27): served by both engines
    "bias fp32 per (b, h)": bwd_bytes(QS, attnMaskTensorUid=20, change={20: BIAS}),
    "bias bf16 broadcast over B and H, padded rows": bwd_bytes(
        QS,
        attnMaskTensorUid=20,
        change={20: {"dims": [1, 1, 64, 64], "strides": [64 * 67, 64 * 67, 67, 1], "dtype": BF16}},
    ),
    "bias fp16 of one row per batch (a key padding mask)": bwd_bytes(
        QS, attnMaskTensorUid=20, change={20: {"dims": [2, 1, 1, 64], "strides": [64, 64, 64, 1], "dtype": HALF}}
    ),
    "dynamic bias broadcast over H": bwd_bytes(
        [W, 4, W, 64],
        [W, 2, W, 64],
        dynamic=True,
        attnMaskTensorUid=20,
        change={20: {"dims": [W, 1, W, W], "strides": [3, 2, 1, 0], "dtype": HALF, "dynamic": True}},
    ),
    "left bound": bwd_bytes(QS, leftBound=16),
    "right bound 4": bwd_bytes(QS, rightBound=4),
    "window bottom-right": bwd_bytes(
        QS, leftBound=16, rightBound=3, diagonalAlignment=DiagonalAlignment.BOTTOM_RIGHT, causalMask=True
    ),
}


@pytest.mark.parametrize("name", list(SERVABLE))
def test_servable_backward_graphs_pass_the_graph_rules(abi: Abi, probe: tuple[list[int], str], name: str) -> None:
    assert abi.decide(SERVABLE[name]) == probe


DECLINED = {
    "dropout": (bwd_bytes(QS, dropoutProbability=0.1), "dropout is not supported"),
    "dropout seed": (bwd_bytes(QS, seedTensorUid=20), "dropout is not supported"),
    "dbias": (bwd_bytes(QS, dbiasTensorUid=20), "dbias"),
    "bias tensor missing from the graph": (bwd_bytes(QS, attnMaskTensorUid=20), "refers to bias uid 20"),
    "bias with a key-dim stride of 2": (
        bwd_bytes(QS, attnMaskTensorUid=20, change={20: {**BIAS, "strides": [2 * x for x in compact(QS)]}}),
        "bias (uid 20): a key-dim stride other than 1 is not supported",
    ),
    "bias of another query length": (
        bwd_bytes(QS, attnMaskTensorUid=20, change={20: {**BIAS, "dims": [2, 4, 32, 64]}}),
        "bias is [2,4,32,64]; it must be [B|1, Hq|1, Sq|1, Skv]",
    ),
    "bias broadcast over the keys": (
        bwd_bytes(QS, attnMaskTensorUid=20, change={20: {**BIAS, "dims": [2, 4, 64, 1], "strides": [256, 64, 1, 1]}}),
        "bias is [2,4,64,1]; it must be [B|1, Hq|1, Sq|1, Skv]",
    ),
    "dynamic bias, key dim not innermost": (
        bwd_bytes(
            [W, 4, W, 64],
            dynamic=True,
            attnMaskTensorUid=20,
            change={20: {"dims": [W, 4, W, W], "strides": [3, 2, 0, 1], "dtype": FLOAT, "dynamic": True}},
        ),
        "declare the key dim innermost",
    ),
    "bias int32": (bwd_bytes(QS, attnMaskTensorUid=20, change={20: {**BIAS, "dtype": INT32}}), "bias (uid 20) has"),
    "negative softcap": (bwd_bytes(QS, softcap=-1.0), "a softcap other than 0 (off) or a finite value > 0"),
    "NaN softcap": (bwd_bytes(QS, softcap=float("nan")), "a softcap other than 0 (off) or a finite value > 0"),
    "infinite softcap": (bwd_bytes(QS, softcap=float("inf")), "a softcap other than 0 (off) or a finite value > 0"),
    "tensor scale": (bwd_bytes(QS, scaleTensorUid=20), "tensor attention scale"),
    "negative left bound": (bwd_bytes(QS, leftBound=-1), "a negative left bound is not supported"),
    "negative right bound": (bwd_bytes(QS, rightBound=-2), "a negative right bound is not supported"),
    "deterministic": (bwd_bytes(QS, deterministic=True), "deterministic"),
    "padding without lengths": (bwd_bytes(QS, paddingMask=True), "padding mask without both"),
    "dQ is q": (bwd_bytes(QS, dqTensorUid=Q, drop=(DQ,)), "q and dQ are the same tensor"),
    "dK is dV": (bwd_bytes(QS, dvTensorUid=DK, drop=(DV,)), "dK and dV are the same tensor"),
    "dV is dO": (bwd_bytes(QS, dvTensorUid=DO, drop=(DV,)), "dO and dV are the same tensor"),
    "no stats tensor": (bwd_bytes(QS, drop=(ST,)), "stats uid"),
    "stats half": (bwd_bytes(QS, change={ST: {"dtype": HALF}}), "stats (uid 6) must be FLOAT"),
    "stats of the wrong length": (
        bwd_bytes(QS, change={ST: {"dims": [2, 4, 63, 1], "strides": compact([2, 4, 63, 1])}}),
        "stats is [2,4,63,1]",
    ),
    "dO in another type": (bwd_bytes(QS, change={DO: {"dtype": HALF}}), "must share one data type"),
    "fp32 gradients": (bwd_bytes(QS, change={DK: {"dtype": FLOAT}}), "BFLOAT16 or HALF"),
    "dQ of another length": (
        bwd_bytes(QS, change={DQ: {"dims": [2, 4, 32, 64], "strides": compact([2, 4, 32, 64])}}),
        "dQ is [2,4,32,64] but q gives [2,4,64,64]",
    ),
    "dK with q's heads under GQA": (
        bwd_bytes(
            [1, 8, 64, 64], [1, 2, 64, 64], change={DK: {"dims": [1, 8, 64, 64], "strides": compact([1, 8, 64, 64])}}
        ),
        "dK is [1,8,64,64] but k gives [1,2,64,64]",
    ),
    "dV of another batch": (
        bwd_bytes(QS, change={DV: {"dims": [1, 4, 64, 64], "strides": compact([1, 4, 64, 64])}}),
        "batch sizes of q (2) and dV (1) differ",
    ),
    "dO head dim 128": (
        bwd_bytes(QS, change={DO: {"dims": [2, 4, 64, 128], "strides": compact([2, 4, 64, 128])}}),
        "head dims of v (64) and dO (128) differ",
    ),
    "head dim 192": (bwd_bytes([1, 2, 64, 192]), "head dim 192 not served"),
    "strided dQ head dim": (bwd_bytes(QS, change={DQ: {"strides": [2 * x for x in compact(QS)]}}), "stride 1"),
    "dynamic dK, head dim not innermost": (
        bwd_bytes([W, 4, W, 64], dynamic=True, change={DK: {"strides": [3, 2, 0, 1]}}),
        "dK (uid 8): the head dimension must be the innermost axis",
    ),
    "heads not a multiple": (bwd_bytes([1, 6, 64, 64], [1, 4, 64, 64]), "multiple of kv heads"),
    "fixed shape beyond the workspace cap": (
        bwd_bytes([1, 64, 8192, 128], [1, 1, 8192, 128]),
        "more than the engine's 268435456-byte cap",
    ),
}


@pytest.mark.parametrize("name", list(DECLINED))
def test_backward_graphs_the_kernels_cannot_serve_are_declined(abi: Abi, name: str) -> None:
    gb, reason = DECLINED[name]
    ids, why = abi.decide(gb)
    assert ids == [] and reason in why, why


# ---------------------------------------------------------------------------- execute (GPU only)
# Never dereferenced: every call below is refused before a kernel is launched.
FAKE = {uid: 0x10000 * uid for uid in (Q, K, V, OUT, DO, ST, DQ, DK, DV)}
FAKE_WORKSPACE = 0x7F0000


@pytest.fixture
def mqa_ctx(abi: Abi, probe: tuple[list[int], str]) -> Iterator[Ctx]:
    """Portable engine, dynamic q [-1, 64, -1, 128] and k/v [-1, 1, -1, 128]: 64 query heads share one
    kv head, so one (batch, kv head) pair holds 64 x Sq rows of workspace, and the (wildcard) plan's
    workspace is the cap."""
    if not probe[0]:
        pytest.skip("no GPU: the engine creates no execution context")
    keep: list[Any] = []
    gb = bwd_bytes([W, 64, W, 128], [W, 1, W, 128], dynamic=True)
    g, c = const_data(abi.ffi, gb, keep), const_data(abi.ffi, config_bytes(201), keep)
    ws = abi.ffi.new("size_t*")
    assert abi.lib.hipdnnEnginePluginGetWorkspaceSize(abi.handle, c, g, ws) == 0, last_error(abi.ffi, abi.lib)
    assert ws[0] == bwd_plan_workspace(-1, 64, 1, -1, 128)  # the cap
    p = abi.ffi.new("hipdnnEnginePluginExecutionContext_t*")
    assert abi.lib.hipdnnEnginePluginCreateExecutionContext(abi.handle, c, g, p) == 0, last_error(abi.ffi, abi.lib)
    ctx = Ctx(abi.ffi, abi.lib, abi.handle, p[0], ws[0], keep)
    yield ctx
    ctx.destroy()


def mqa_overrides(s: int, b: int = 1) -> dict[int, tuple[list[int], list[int]]]:
    qd, kd = [b, 64, s, 128], [b, 1, s, 128]
    ov = {uid: (qd, compact(qd)) for uid in Q_LIKE}
    ov.update({uid: (kd, compact(kd)) for uid in KV_LIKE})
    ov[ST] = ([b, 64, s, 1], compact([b, 64, s, 1]))
    return ov


def refused(ctx: Ctx, ov: dict[int, tuple[list[int], list[int]]], reason: str) -> None:
    ws = ctx.ffi.cast("void*", FAKE_WORKSPACE)
    assert ctx.execute(FAKE, overrides=ov, workspace=ws) == BAD_PARAM
    assert reason in last_error(ctx.ffi, ctx.lib), last_error(ctx.ffi, ctx.lib)


def test_a_call_whose_pair_exceeds_the_workspace_is_refused(mqa_ctx: Ctx) -> None:
    """64 x 8192 rows x (128 + 4) floats and a flag = 276,824,320 bytes (256-aligned) > the 256 MiB plan
    workspace."""
    refused(mqa_ctx, mqa_overrides(8192), "276824320 bytes of backward workspace per (batch, kv head) pair")


def test_gradient_shapes_are_rechecked_per_call(mqa_ctx: Ctx) -> None:
    ov = mqa_overrides(64)
    ov[DQ] = mqa_overrides(65)[DQ]
    refused(mqa_ctx, ov, "dQ is [1,64,65,128] but q gives [1,64,64,128]")
    ov = mqa_overrides(64)
    ov[DV] = mqa_overrides(64, b=2)[DV]
    refused(mqa_ctx, ov, "batch sizes of q (1) and dV (2) differ")


def test_strided_gradient_head_dim_is_refused(mqa_ctx: Ctx) -> None:
    ov = mqa_overrides(64)
    ov[DK] = (ov[DK][0], [2 * x for x in ov[DK][1]])
    refused(mqa_ctx, ov, "override of dynamic dK (uid 8): head-dim stride 2")


def test_a_missing_gradient_buffer_is_refused(mqa_ctx: Ctx) -> None:
    ws = mqa_ctx.ffi.cast("void*", FAKE_WORKSPACE)
    buffers = {u: p for u, p in FAKE.items() if u != DV}
    assert mqa_ctx.execute(buffers, overrides=mqa_overrides(64), workspace=ws) == BAD_PARAM
    assert "no device buffer for dV (uid 9)" in last_error(mqa_ctx.ffi, mqa_ctx.lib)


def test_no_workspace_is_refused(mqa_ctx: Ctx) -> None:
    assert mqa_ctx.execute(FAKE, overrides=mqa_overrides(64), workspace=mqa_ctx.ffi.NULL) == BAD_PARAM
    assert "workspace is NULL" in last_error(mqa_ctx.ffi, mqa_ctx.lib)
