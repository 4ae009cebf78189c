"""Structure-aware fuzzing of the CPU engine's attention paths through its C ABI.

Each case is a random, mostly well-formed graph of the newest attention features, then mutated:
FP8 forward / backward (factors, amax outputs; their ranks, shapes, strides, types, uids naming q/k/v/o),
ragged offsets and paged K/V caches (offsets and page-table entries inside and outside the tensors),
padding (sequence lengths negative, huge, past the dims), GQA ratios, d != dv, softcap (NaN, inf,
negative), strides with gaps, several nodes (data flow: one tensor in two roles, virtual tensors never
produced, a node reading what it writes). A graph the engine applies to is executed a few times with
random overrides (shrinking dims, growing strides, the factors and amax included), every buffer
allocated with malloc at exactly the bytes its shape at that call spans.

Oracles: the process must not crash (under an ASan + UBSan build of the engine a report aborts it);
every status is SUCCESS or a refusal with a message; no input buffer changes; an output's bytes that
its dims and strides do not address (the gaps) do not change.

    # a sanitized engine (see --help for the build) and the sanitizer runtimes preloaded:
    python tools/fuzz/sdpa_abi_fuzz.py --lib /tmp/asan_build/engines/cpu/libhipdnn_cpu_engine.so \
        --seeds 0:5000 --asan

With --asan the cases run in a child process with libasan / libubsan preloaded; a case that stops it
is recorded (its seed and the report) and the run goes on from the next seed. ``run_cases`` is the
in-process form the test suite calls (tests/adversarial/test_sdpa_abi_fuzz.py).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import cffi  # noqa: E402
import flatbuffers  # noqa: E402

from hipdnn.frontend.ops.sdpa_fp8 import AMAX_ROLES, SCALE_ROLES, WIRE_FIELDS  # noqa: E402
from hipdnn.frontend.ops.sdpa_fp8_backward import (  # noqa: E402
    BACKWARD_AMAX_ROLES,
    BACKWARD_SCALE_ROLES,
    BACKWARD_WIRE_FIELDS,
)
from hipdnn.plugins._cdef import sdk_cdef  # noqa: E402
from hipdnn.wire.DataType import DataType as DT  # noqa: E402
from hipdnn.wire.DiagonalAlignment import DiagonalAlignment  # noqa: E402
from hipdnn.wire.EngineConfig import EngineConfigT  # noqa: E402
from hipdnn.wire.Float32Value import Float32ValueT  # noqa: E402
from hipdnn.wire.Graph import GraphT  # noqa: E402
from hipdnn.wire.IntValue import IntValueT  # noqa: E402
from hipdnn.wire.KnobSetting import KnobSettingT  # noqa: E402
from hipdnn.wire.KnobValue import KnobValue  # noqa: E402
from hipdnn.wire.Node import NodeT  # noqa: E402
from hipdnn.wire.NodeAttributes import NodeAttributes  # noqa: E402
from hipdnn.wire.PointwiseAttributes import PointwiseAttributesT  # noqa: E402
from hipdnn.wire.PointwiseMode import PointwiseMode  # noqa: E402
from hipdnn.wire.SdpaAttributes import SdpaAttributesT  # noqa: E402
from hipdnn.wire.SdpaBackwardAttributes import SdpaBackwardAttributesT  # noqa: E402
from hipdnn.wire.TensorAttributes import TensorAttributesT  # noqa: E402
from hipdnn.wire.TensorValue import TensorValue  # noqa: E402

ENGINE_ID = 101
SUCCESS, BAD_PARAM, NOT_APPLICABLE = 0, 1, 5
ESIZE = {DT.FLOAT: 4, DT.HALF: 2, DT.BFLOAT16: 2, DT.FP8_E4M3: 1, DT.FP8_E5M2: 1, DT.INT32: 4, DT.INT64: 8}
FP8 = (DT.FP8_E4M3, DT.FP8_E5M2)

# The FP8 uid fields (object-API names without "TensorUid"), from the frontend's role -> field tables.
FWD_FACTORS = tuple(WIRE_FIELDS[r].removesuffix("TensorUid") for r in SCALE_ROLES)
FWD_AMAX = tuple(WIRE_FIELDS[r].removesuffix("TensorUid") for r in AMAX_ROLES)
BWD_FACTORS = tuple(BACKWARD_WIRE_FIELDS[r].removesuffix("TensorUid") for r in BACKWARD_SCALE_ROLES)
BWD_AMAX = tuple(BACKWARD_WIRE_FIELDS[r].removesuffix("TensorUid") for r in BACKWARD_AMAX_ROLES)
# Output fields by node type (what a node may write; the rest of its uid fields are read).
FWD_OUT = ("oTensorUid", "statsTensorUid", "amaxSTensorUid", "amaxOTensorUid")
BWD_OUT = (
    "dqTensorUid",
    "dkTensorUid",
    "dvTensorUid",
    "amaxDqTensorUid",
    "amaxDkTensorUid",
    "amaxDvTensorUid",
    "amaxDpTensorUid",
)

ODD_FLOATS = (1.0, 0.5, 2.0, 0.0, -1.0, float("nan"), float("inf"), float("-inf"), 1e30, 1e-30, 448.0, 3e38)


# ------------------------------------------------------------------ the case


@dataclass
class Ten:
    uid: int
    dims: list[int]
    strides: list[int]
    dtype: int = DT.FLOAT
    virtual: bool = False
    ragged: int | None = None  # ragged offset uid
    value: float | None = None  # by-value scalar
    data: Any = None  # callable(rng, n_elements, eff dims) -> bytes; None: random of its type
    dynamic: bool = False  # declared dims: -1 at wild axes; strides: the axis order (0 innermost)
    wild: tuple = ()  # the axes declared -1
    order: list = field(default_factory=list)  # dynamic: axes outermost first
    sym: tuple | None = None  # what each dim is (B, sq, skv, d, dv, or a number), for coherent overrides


@dataclass
class Case:
    seed: int
    tensors: dict[int, Ten]
    nodes: list[NodeT]
    notes: list[str] = field(default_factory=list)
    threads: int = 1


def compact(dims):
    st, acc = [], 1
    for d in reversed(dims):
        st.append(acc)
        acc *= max(d, 1)
    return list(reversed(st))


def gappy(dims, rng: random.Random, perm=None):
    """Strides of dims laid out in axis order perm (outermost first), each level padded by a gap."""
    n = len(dims)
    perm = list(range(n)) if perm is None else perm
    st = [0] * n
    acc = 1
    for ax in reversed(perm):
        st[ax] = acc
        acc *= max(dims[ax], 1) + rng.choice((0, 0, 0, 1, 2, 5))
    return st


def layout(dims, rng: random.Random):
    r = rng.random()
    if len(dims) != 4 or r < 0.4:
        return compact(dims)
    if r < 0.6:  # BSHD
        return gappy(dims, rng, [0, 2, 1, 3])
    if r < 0.85:
        return gappy(dims, rng)
    p = list(range(len(dims)))
    rng.shuffle(p)
    return gappy(dims, rng, p)


def extent(dims, strides):
    if any(d <= 0 for d in dims):
        return 0
    return 1 + sum((d - 1) * s for d, s in zip(dims, strides))


def node(kind, attrs, name):
    n = NodeT()
    n.name = name
    n.computeDataType = DT.FLOAT
    n.attributesType = kind
    n.attributes = attrs
    return n


def odd_len(rng: random.Random, cap: int, i64: bool) -> int:
    choices = [0, 1, cap, max(cap - 1, 0), cap // 2, rng.randint(0, cap)] * 3 + [
        -1,
        -7,
        cap + 1,
        cap + 5,
        2**31 - 1,
        -(2**31),
    ]
    if i64:
        choices += [2**62, -(2**63), 2**63 - 1, 2**53 + 1]
    return rng.choice(choices)


def pack_ints(vals, dtype):
    if dtype == DT.INT64:
        return b"".join(struct.pack("<q", max(min(v, 2**63 - 1), -(2**63))) for v in vals)
    return b"".join(struct.pack("<i", max(min(v, 2**31 - 1), -(2**31))) for v in vals)


def gen_case(seed: int) -> Case:
    rng = random.Random(seed)
    t: dict[int, Ten] = {}
    notes: list[str] = []

    def add(uid, dims, dtype=DT.FLOAT, strides=None, **kw):
        t[uid] = Ten(uid, list(dims), list(strides) if strides is not None else layout(dims, rng), dtype, **kw)
        return uid

    # A hostile case mutates freely; a clean one is mostly well formed, so that the kernels run.
    hostile = rng.random() < 0.35

    def odd(p: float) -> bool:
        return rng.random() < (p if hostile else p * 0.1)

    bwd = rng.random() < 0.45
    fp8 = rng.random() < 0.5
    paged = not bwd and not fp8 and rng.random() < 0.25
    ragged = not fp8 and rng.random() < 0.3
    padding = paged or ragged or rng.random() < 0.4
    B = rng.randint(1, 3)
    hk = rng.choice((1, 1, 2, 3))
    hq = hk * rng.choice((1, 2, 3))
    if odd(0.1):
        hq = rng.randint(1, 5)  # maybe not a multiple
    sq, skv = rng.randint(1, 6), rng.randint(1, 7)
    d = rng.randint(1, 6)
    dv = d if rng.random() < 0.5 else rng.randint(1, 6)
    qt = rng.choice(FP8) if fp8 else rng.choice((DT.FLOAT, DT.FLOAT, DT.HALF, DT.BFLOAT16))
    kt = rng.choice(list(ESIZE)) if odd(0.1) else qt if fp8 or rng.random() < 0.8 else rng.choice((DT.FLOAT, DT.HALF))
    vt = rng.choice(list(ESIZE)) if odd(0.1) else qt if fp8 or rng.random() < 0.8 else rng.choice((DT.FLOAT, DT.HALF))
    ot = rng.choice((DT.FLOAT, DT.HALF, DT.BFLOAT16) + (FP8 if fp8 else ()))
    notes.append(
        f"bwd={bwd} fp8={fp8} paged={paged} ragged={ragged} B={B} hq={hq} hk={hk} sq={sq} skv={skv} d={d} dv={dv}"
    )

    Q, K, V, OUT = ("B", hq, "sq", "d"), ("B", hk, "skv", "d"), ("B", hk, "skv", "dv"), ("B", hq, "sq", "dv")
    add(1, [B, hq, sq, d], qt, sym=Q)
    if paged:
        bs, bsv = rng.randint(1, 4), rng.randint(1, 4)
        nb, nbv = rng.randint(1, 6), rng.randint(1, 6)
        add(2, [nb, hk, bs, d], kt, sym=(nb, hk, bs, "d"))
        add(3, [nbv, hk, bsv, dv], vt, sym=(nbv, hk, bsv, "dv"))
    else:
        add(2, [B, hk, skv, d], kt, sym=K)
        add(3, [B, hk, skv, dv], vt, sym=V)
    add(4, [B, hq, sq, dv], ot, sym=OUT)
    stats = rng.random() < 0.7 or bwd
    if stats:
        add(5, [B, hq, sq, 1], DT.FLOAT, sym=("B", hq, "sq", 1))
    if bwd:
        add(6, [B, hq, sq, dv], rng.choice(FP8) if fp8 else rng.choice((DT.FLOAT, DT.HALF)), sym=OUT)
        for uid, dims, sy in ((7, [B, hq, sq, d], Q), (8, [B, hk, skv, d], K), (9, [B, hk, skv, dv], V)):
            add(uid, dims, rng.choice((DT.FLOAT, DT.HALF, DT.BFLOAT16) + (FP8 if fp8 else ())), sym=sy)

    a = SdpaBackwardAttributesT() if bwd else SdpaAttributesT()
    a.qTensorUid, a.kTensorUid, a.vTensorUid = 1, 2, 3
    if bwd:
        a.oTensorUid, a.doTensorUid, a.statsTensorUid = 4, 6, 5
        a.dqTensorUid, a.dkTensorUid, a.dvTensorUid = 7, 8, 9
    else:
        a.oTensorUid = 4
        a.statsTensorUid = 5 if stats else None
        if stats and rng.random() < 0.3:
            a.generateStats = True
    a.attnScaleValue = rng.choice((None, 0.5, 1.0, -2.0, float("nan"), 1e30))

    if padding:
        a.paddingMask = True
        for uid, cap in ((10, sq), (11, skv if not paged else 8)):
            dt = rng.choice((DT.INT32, DT.INT64))
            dims = [B, 1, 1, 1] if rng.random() < 0.8 else rng.choice(([1, 1, 1, 1], [B], [1], [B + 1, 1], [B, 2]))
            vals_cap = cap
            add(
                uid,
                dims,
                dt,
                data=lambda r, n, eff, c=vals_cap, dt=dt: pack_ints(
                    [odd_len(r, c, dt == DT.INT64) for _ in range(n)], dt
                ),
                sym=("B", 1, 1, 1) if dims == [B, 1, 1, 1] else None,
            )
        a.seqLenQTensorUid, a.seqLenKvTensorUid = 10, 11
        if odd(0.1):
            a.seqLenKvTensorUid = None  # half a padding mask

    if rng.random() < 0.3:
        a.causalMask = True
    if rng.random() < 0.2:
        a.causalMaskBottomRight = True
    if rng.random() < 0.2:
        a.rightBound = rng.choice((0, 1, 3, 2**62, -1)) if odd(1) else rng.choice((0, 1, 3, 2**62))
    if rng.random() < 0.2:
        a.leftBound = rng.choice((0, 1, 2, 2**62, -3)) if odd(1) else rng.choice((0, 1, 2, 2**62))
    if rng.random() < 0.3:
        a.diagonalAlignment = (
            7 if odd(0.2) else rng.choice((DiagonalAlignment.TOP_LEFT, DiagonalAlignment.BOTTOM_RIGHT))
        )
    if not fp8 and rng.random() < 0.15:
        a.alibiMask = True
    if (rng.random() < 0.35 and not fp8) or odd(0.2):
        a.softcap = (
            rng.choice((-1.0, -0.0, float("nan"), float("inf"), float("-inf"), -1e-30))
            if odd(0.5)
            else rng.choice((0.0, 1.0, 30.0, 0.1, 1e-30, 1e-6, 3e38))
        )
    if not fp8 and rng.random() < 0.15:
        skv_b = skv if not paged else rng.randint(1, 8)
        b0, h0 = rng.choice((1, B)), rng.choice((1, hq))
        add(
            12,
            [b0, h0, sq, skv_b],
            rng.choice((DT.FLOAT, DT.HALF)),
            sym=(1 if b0 == 1 else "B", h0, "sq", "skv" if not paged else skv_b),
        )
        a.attnMaskTensorUid = 12
    if not fp8 and rng.random() < 0.1:
        add(13, [1, 1, 1, 1], DT.FLOAT)
        a.scaleTensorUid = 13

    if fp8:
        factors = BWD_FACTORS if bwd else FWD_FACTORS
        amaxes = BWD_AMAX if bwd else FWD_AMAX
        for i, f in enumerate(factors):
            uid = 20 + i
            r = rng.random()
            dims = (
                rng.choice(([1], [2], [1, 1, 1, 2], [1, 1], [1, 1, 1, 1, 1]))
                if odd(0.15)
                else rng.choice(([1, 1, 1, 1], [1], [1, 1]))
            )
            strides = [1] * len(dims) if rng.random() < 0.7 else [rng.randint(1, 9) for _ in dims]
            val = rng.choice(ODD_FLOATS) if rng.random() < 0.3 else rng.uniform(0.25, 4.0)
            add(
                uid,
                dims,
                DT.HALF if odd(0.05) else DT.FLOAT,
                strides=strides,
                data=lambda r, n, eff, v=val: struct.pack("<f", v) * n,
            )
            if rng.random() < 0.05:
                t[uid].value, t[uid].data = val, None  # by value
            setattr(a, f + "TensorUid", uid)
        for i, f in enumerate(amaxes):
            uid = 40 + i
            r = rng.random()
            dims = rng.choice(([1], [2, 1, 1, 1], [1, 1, 1, 2], [1, 1, 1])) if odd(0.15) else [1, 1, 1, 1]
            strides = [1] * len(dims) if rng.random() < 0.6 else [rng.randint(1, 9) for _ in dims]
            add(uid, dims, DT.BFLOAT16 if odd(0.05) else DT.FLOAT, strides=strides, virtual=rng.random() < 0.05)
            setattr(a, f + "TensorUid", uid)
        if odd(0.1):  # a partial set
            setattr(a, rng.choice(factors + amaxes) + "TensorUid", None)

    if ragged:
        # Ragged roles: offsets at 60 + uid, mostly the packed layout's prefix sums.
        roles = [1, 2, 3, 4] + ([5] if stats else []) + ([6, 7, 8, 9] if bwd else [])
        if paged:
            roles = [r for r in roles if r not in (2, 3)]
        for uid in rng.sample(roles, rng.randint(1, len(roles))):
            ten = t[uid]
            ou = 60 + uid
            dt = rng.choice((DT.INT32, DT.INT64))
            row_axis = 2
            per_row = ten.strides[row_axis]
            junk = rng.random() < 0.3
            odims = (
                [B + 1, 1, 1, 1]
                if not odd(0.1)
                else rng.choice(([B, 1, 1, 1], [B + 1], [B + 2, 1, 1, 1], [B + 1, 2, 1, 1]))
            )

            def offs(r, n, eff, per_row=per_row, junk=junk, dt=dt, ten=ten):
                rows = eff_rows = ten.dims[2]
                vals, acc = [], 0
                padded = r.random() < 0.5  # batch b at b * strides[0], as the padded layout
                for b in range(n):
                    if padded and not junk:
                        vals.append(b * ten.strides[0])
                    elif junk and r.random() < 0.5:
                        vals.append(
                            r.choice(
                                (
                                    -1,
                                    -(2**31),
                                    2**31 - 1,
                                    2**62,
                                    acc + 1,
                                    acc + per_row * eff_rows * 3,
                                    r.randint(-5, 500),
                                )
                            )
                        )
                    else:
                        vals.append(acc)
                    acc += per_row * r.randint(0, rows)
                return pack_ints(vals, dt)

            add(ou, odims, dt, data=offs)
            ten.ragged = ou
        if odd(0.1):
            t[rng.choice(roles)].ragged = rng.choice(list(t))  # offsets in a tensor of another role

    if paged:
        for uid, cache in ((70, 2), (71, 3)):
            mb = rng.randint(1, 5)
            nb = t[cache].dims[0]
            dims = [B, 1, mb, 1] if not odd(0.1) else rng.choice(([B, 1, mb], [B + 1, 1, mb, 1], [B, 2, mb, 1]))
            bad = rng.random() < 0.3

            def table(r, n, eff, nb=nb, bad=bad):
                return pack_ints(
                    [
                        r.choice((-1, nb, nb + 3, 2**31 - 1, -(2**31))) if bad and r.random() < 0.3 else r.randrange(nb)
                        for _ in range(n)
                    ],
                    DT.INT32,
                )

            add(uid, dims, DT.INT64 if odd(0.05) else DT.INT32, data=table)
        a.pageTableKTensorUid, a.pageTableVTensorUid = 70, 71
        if rng.random() < 0.7:
            a.maxSeqLenKv = rng.choice((0, -3)) if odd(0.2) else rng.choice((1, 2, 5, 8, 20, 2**31 - 1))
        if odd(0.05):
            a.pageTableVTensorUid = None

    nodes = [
        node(
            NodeAttributes.SdpaBackwardAttributes if bwd else NodeAttributes.SdpaAttributes,
            a,
            "sdpa_bwd" if bwd else "sdpa",
        )
    ]

    # Data flow: a producer of q (or of a factor) before the node, or a consumer of o after it.
    r = rng.random()
    if r < 0.1:
        src = rng.choice([u for u in t if t[u].dtype == DT.FLOAT and not t[u].virtual] or [1])
        tgt = rng.choice((1, 20, 21, 4, 5, 40))
        if tgt in t:
            pw = PointwiseAttributesT()
            pw.operation = PointwiseMode.IDENTITY
            pw.in0TensorUid, pw.out0TensorUid = src, tgt
            t[tgt].virtual = rng.random() < 0.7
            if t[tgt].virtual:
                t[tgt].dtype = DT.FLOAT
            nodes.insert(0, node(NodeAttributes.PointwiseAttributes, pw, "pw_pre"))
            notes.append(f"pre pointwise {src}->{tgt}")
    elif r < 0.2:
        pw = PointwiseAttributesT()
        pw.operation = rng.choice((PointwiseMode.IDENTITY, PointwiseMode.ADD))
        pw.in0TensorUid = rng.choice((4, 5, 40) if fp8 else (4, 5))
        pw.in1TensorUid = rng.choice((1, 4)) if pw.operation == PointwiseMode.ADD else None
        pw.out0TensorUid = rng.choice((90, 1, 4, 20))
        if pw.out0TensorUid == 90:
            add(90, t[4].dims, DT.FLOAT)
        if pw.in0TensorUid in t and rng.random() < 0.5:
            t[pw.in0TensorUid].virtual, t[pw.in0TensorUid].dtype = True, DT.FLOAT
        nodes.append(node(NodeAttributes.PointwiseAttributes, pw, "pw_post"))
        notes.append("post pointwise")

    # A forward node producing (virtual) o and stats for this backward node.
    if bwd and rng.random() < 0.15:
        fa = SdpaAttributesT()
        fa.qTensorUid, fa.kTensorUid, fa.vTensorUid, fa.oTensorUid, fa.statsTensorUid = 1, 2, 3, 4, 5
        fa.attnScaleValue = a.attnScaleValue
        fa.causalMask, fa.paddingMask = a.causalMask, a.paddingMask
        fa.seqLenQTensorUid, fa.seqLenKvTensorUid = a.seqLenQTensorUid, a.seqLenKvTensorUid
        if fp8:
            for f in FWD_FACTORS:
                setattr(fa, f + "TensorUid", getattr(a, f + "TensorUid", None) if f != "scaleO" else 20)
            for i, f in enumerate(FWD_AMAX):
                add(50 + i, [1, 1, 1, 1], DT.FLOAT, virtual=rng.random() < 0.5)
                setattr(fa, f + "TensorUid", 50 + i)
        for u in (4, 5):
            if rng.random() < 0.7:
                t[u].virtual, t[u].dtype = True, DT.FLOAT
        nodes.insert(0, node(NodeAttributes.SdpaAttributes, fa, "sdpa_fwd_first"))
        notes.append("forward then backward")

    # Dynamic tensors: wildcard dims given by every call's overrides.
    if rng.random() < 0.15:
        for u in rng.sample(list(t), rng.randint(1, len(t))):
            ten = t[u]
            if ten.virtual or ten.value is not None or ten.ragged is not None or 60 <= u < 70 or rng.random() < 0.3:
                continue
            order = sorted(range(len(ten.dims)), key=lambda ax: -ten.strides[ax])  # outermost first
            ten.dynamic = True
            ten.wild = tuple(ax for ax in range(len(ten.dims)) if rng.random() < (0.5 if ax != 3 else 0.1))
            ten.order = order
        notes.append("dynamic " + ",".join(str(u) for u in t if t[u].dynamic))

    # Mutations.
    uid_fields = [k for k in vars(a) if k.endswith("TensorUid")]
    for _ in range(rng.choice((0, 1, 1, 2, 3)) if hostile else 0):
        m = rng.random()
        uids = list(t)
        if m < 0.3:  # a uid field names another tensor (or none)
            f = rng.choice(uid_fields)
            v = rng.choice(uids + [None, 999])
            setattr(a, f, v)
            notes.append(f"{f}={v}")
        elif m < 0.45:  # dims changed
            u = rng.choice(uids)
            ten = t[u]
            i = rng.randrange(len(ten.dims))
            ten.dims[i] = max(1, ten.dims[i] + rng.choice((-1, 1, 2)))
            ten.strides = layout(ten.dims, rng)
            notes.append(f"dims {u}={ten.dims}")
        elif m < 0.55:  # rank changed
            u = rng.choice(uids)
            ten = t[u]
            ten.dims = ten.dims[:-1] if len(ten.dims) > 1 and rng.random() < 0.5 else ten.dims + [1]
            ten.strides = compact(ten.dims)
            notes.append(f"rank {u}={ten.dims}")
        elif m < 0.65:  # data type changed
            u = rng.choice(uids)
            t[u].dtype = rng.choice(list(ESIZE))
            notes.append(f"dtype {u}={t[u].dtype}")
        elif m < 0.75:  # virtual
            u = rng.choice(uids)
            t[u].virtual = not t[u].virtual
            notes.append(f"virtual {u}={t[u].virtual}")
        elif m < 0.82:  # a tensor dropped
            u = rng.choice(uids)
            del t[u]
            notes.append(f"dropped {u}")
        elif m < 0.9:  # overlapping strides
            u = rng.choice(uids)
            t[u].strides = [rng.randint(1, 3) for _ in t[u].dims]
            notes.append(f"strides {u}={t[u].strides}")
        else:  # a ragged offset anywhere
            u = rng.choice(uids)
            t[u].ragged = rng.choice(uids + [999])
            notes.append(f"ragged {u}->{t[u].ragged}")
    notes.append(f"hostile={hostile}")
    return Case(seed, t, nodes, notes, threads=rng.choice((1, 1, 2, 3)))


def graph_bytes(case: Case) -> bytes:
    g = GraphT()
    g.name = f"fuzz{case.seed}"
    g.ioDataType = DT.FLOAT
    g.computeDataType = DT.FLOAT
    g.intermediateDataType = DT.FLOAT
    g.isOverrideShapeEnabled = True
    g.tensors = []
    for ten in case.tensors.values():
        ta = TensorAttributesT()
        ta.uid, ta.name, ta.dataType = ten.uid, f"t{ten.uid}", ten.dtype
        ta.dims, ta.strides, ta.virtual = list(ten.dims), list(ten.strides), ten.virtual
        if ten.dynamic:
            ta.isDynamic = True
            ta.dims = [-1 if ax in ten.wild else x for ax, x in enumerate(ten.dims)]
            order = (
                [o for o in ten.order if o < len(ten.dims)]
                if len(ten.order) == len(ten.dims)
                else list(range(len(ten.dims)))
            )
            ta.strides = [0] * len(ten.dims)
            for rank_from_inner, ax in enumerate(reversed(order)):
                ta.strides[ax] = rank_from_inner
        ta.raggedOffsetTensorUid = ten.ragged
        if ten.value is not None:
            v = Float32ValueT()
            v.value = ten.value
            ta.valueType, ta.value = TensorValue.Float32Value, v
        g.tensors.append(ta)
    g.nodes = list(case.nodes)
    b = flatbuffers.Builder(1024)
    b.Finish(g.Pack(b))
    return bytes(b.Output())


def config_bytes(threads: int) -> bytes:
    c = EngineConfigT()
    c.engineId = ENGINE_ID
    k = KnobSettingT()
    k.knobId = "CPU_THREADS"
    k.valueType, k.value = KnobValue.IntValue, IntValueT()
    k.value.value = threads
    c.knobs = [k]
    b = flatbuffers.Builder(64)
    b.Finish(c.Pack(b))
    return bytes(b.Output())


# ------------------------------------------------------------------ running


class Engine:
    def __init__(self, lib_path: str):
        self.ffi = cffi.FFI()
        self.ffi.cdef(sdk_cdef())
        self.ffi.cdef("void* malloc(size_t); void free(void*);")
        self.lib = self.ffi.dlopen(str(lib_path))
        self.libc = self.ffi.dlopen(None)
        h = self.ffi.new("hipdnnEnginePluginHandle_t*")
        assert self.lib.hipdnnEnginePluginCreate(h) == SUCCESS
        self.handle = h[0]

    def close(self):
        self.lib.hipdnnEnginePluginDestroy(self.handle)

    def last_error(self) -> str:
        p = self.ffi.new("const char**")
        self.lib.hipdnnPluginGetLastErrorString(p)
        return self.ffi.string(p[0]).decode(errors="replace")

    def const(self, data: bytes, keep: list):
        cbuf = self.ffi.new("char[]", data)
        d = self.ffi.new("hipdnnPluginConstData_t*")
        d.ptr, d.size = cbuf, len(data)
        keep += [cbuf, d]
        return d

    def alloc(self, data: bytes):
        """A malloc'd block of exactly len(data) bytes (at least 1), holding data."""
        n = max(1, len(data))
        p = self.libc.malloc(n)
        assert p != self.ffi.NULL
        self.ffi.memmove(p, data, len(data))
        return p


class Failure(AssertionError):
    pass


def addressed(dims, strides):
    """Element offsets a (dims, strides) view addresses."""
    offs = {0}
    for d, s in zip(dims, strides):
        offs = {o + i * s for o in offs for i in range(d)}
    return offs


def random_bytes(rng: random.Random, ten: Ten, n: int, eff_dims) -> bytes:
    if ten.data is not None:
        return ten.data(rng, n, eff_dims)
    if ten.dtype in FP8:
        return bytes(rng.getrandbits(8) for _ in range(n))
    if ten.dtype == DT.FLOAT:
        vals = [rng.uniform(-2, 2) if rng.random() < 0.97 else rng.choice(ODD_FLOATS) for _ in range(n)]
        return struct.pack(f"<{n}f", *vals)
    if ten.dtype in (DT.HALF, DT.BFLOAT16):
        return struct.pack(f"<{n}e", *[rng.uniform(-2, 2) for _ in range(n)])  # bf16: bits only
    if ten.dtype == DT.INT32:
        return pack_ints([rng.randint(-2, 9) for _ in range(n)], DT.INT32)
    return pack_ints([rng.randint(-2, 9) for _ in range(n)], DT.INT64)


def writers(case: Case) -> set[int]:
    out = set()
    for n in case.nodes:
        a = n.attributes
        names = (
            FWD_OUT
            if n.attributesType == NodeAttributes.SdpaAttributes
            else (BWD_OUT if n.attributesType == NodeAttributes.SdpaBackwardAttributes else ("out0TensorUid",))
        )
        for f in names:
            v = getattr(a, f, None)
            if v is not None:
                out.add(v)
    return out


def run_case(eng: Engine, case: Case, stats: dict) -> None:
    ffi, lib = eng.ffi, eng.lib
    rng = random.Random(case.seed * 7919 + 1)
    keep: list = []
    try:
        gb = graph_bytes(case)
    except (TypeError, struct.error):  # a mutation left a required field empty
        stats["unpackable"] += 1
        return
    g = eng.const(gb, keep)
    ids = ffi.new("int64_t[4]")
    n = ffi.new("uint32_t*")
    st = lib.hipdnnEnginePluginGetApplicableEngineIds(eng.handle, g, ids, 4, n)
    if st != SUCCESS:
        raise Failure(f"GetApplicableEngineIds: status {st}: {eng.last_error()}")
    c = eng.const(config_bytes(case.threads), keep)
    p = ffi.new("hipdnnEnginePluginExecutionContext_t*")
    st = lib.hipdnnEnginePluginCreateExecutionContext(eng.handle, c, g, p)
    if n[0] == 0:
        stats["not_applicable"] += 1
        if st == SUCCESS:
            lib.hipdnnEnginePluginDestroyExecutionContext(eng.handle, p[0])
            raise Failure("not applicable, yet CreateExecutionContext succeeded")
        if not eng.last_error():
            raise Failure(f"refused (status {st}) without a message")
        key = _gist(eng.last_error())
        stats["why"][key] = stats["why"].get(key, 0) + 1
        return
    if st != SUCCESS:
        raise Failure(f"applicable, but CreateExecutionContext: status {st}: {eng.last_error()}")
    stats["applicable"] += 1
    ctx = p[0]
    try:
        ws_n = ffi.new("size_t*")
        assert lib.hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(eng.handle, ctx, ws_n) == SUCCESS
        if ws_n[0] > (1 << 30):
            stats["huge_workspace"] += 1
            return
        ws = eng.libc.malloc(max(1, ws_n[0])) if ws_n[0] else ffi.NULL
        try:
            for _call in range(rng.randint(1, 3)):
                one_call(eng, case, ctx, ws, rng, stats)
        finally:
            if ws != ffi.NULL:
                eng.libc.free(ws)
    finally:
        lib.hipdnnEnginePluginDestroyExecutionContext(eng.handle, ctx)


def one_call(eng: Engine, case: Case, ctx, ws, rng: random.Random, stats: dict) -> None:
    ffi, lib = eng.ffi, eng.lib
    outs = writers(case)
    overrides: dict[int, tuple[list[int], list[int]]] = {}
    use_ov = rng.random() < 0.6 or any(ten.dynamic for ten in case.tensors.values())
    coherent = rng.random() < 0.6
    new = {}  # symbol -> (declared value, this call's value)
    for ten in case.tensors.values():
        for sy, dim in zip(ten.sym or (), ten.dims):
            if isinstance(sy, str) and sy not in new:
                new[sy] = rng.randint(1, dim) if rng.random() < 0.5 else dim
    eff: dict[int, tuple[list[int], list[int]]] = {}
    for ten in case.tensors.values():
        if ten.virtual or ten.value is not None:
            continue
        dims, strides = list(ten.dims), list(ten.strides)
        if ten.dynamic and len(ten.order) == len(dims):
            if ten.sym is not None and len(ten.sym) == len(dims) and coherent:
                dims = [min(new[sy], x) if isinstance(sy, str) else x for sy, x in zip(ten.sym, dims)]
            dims = [
                x + rng.choice((1, 2, 40)) if ax in ten.wild and rng.random() < 0.05 else x for ax, x in enumerate(dims)
            ]
            strides = gappy(dims, rng, ten.order)
            if rng.random() < 0.97:
                overrides[ten.uid] = (dims, strides)
        elif use_ov and coherent:
            if ten.sym is not None and len(ten.sym) == len(dims):
                dims = [min(new[sy], x) if isinstance(sy, str) else x for sy, x in zip(ten.sym, dims)]
            strides = strides if rng.random() < 0.3 or ten.ragged is not None else layout(dims, rng)
            overrides[ten.uid] = (dims, strides)
        elif use_ov and rng.random() < 0.5:
            if rng.random() < 0.7:
                dims = [rng.randint(1, x) if rng.random() < 0.5 else x for x in ten.dims]
            r = rng.random()
            strides = (
                compact(dims) if r < 0.3 else layout(dims, rng) if r < 0.8 else [s * rng.randint(1, 3) for s in strides]
            )
            if rng.random() < 0.03:
                dims = dims + [1]
                strides = strides + [1]
            overrides[ten.uid] = (dims, strides)
        eff[ten.uid] = (dims, strides)
    bufs: dict[int, Any] = {}
    snap: dict[int, bytes] = {}
    nbytes: dict[int, int] = {}
    for uid, (dims, strides) in eff.items():
        ten = case.tensors[uid]
        es = ESIZE.get(ten.dtype, 4)
        nel = extent(dims[: len(ten.dims)], strides[: len(ten.dims)])
        data = random_bytes(rng, ten, nel, dims)
        # exactly the bytes of its type (a mutation may have changed the type under a data maker)
        data = (data + bytes(rng.getrandbits(8) for _ in range(max(0, nel * es - len(data)))))[: nel * es]
        bufs[uid] = eng.alloc(data)
        snap[uid] = data
        nbytes[uid] = len(data)
    # Occasionally a buffer missing or NULL.
    listed = dict(bufs)
    if rng.random() < 0.03 and listed:
        del listed[rng.choice(list(listed))]
    null_uid = rng.choice(list(listed)) if rng.random() < 0.03 and listed else None
    arr = ffi.new("hipdnnPluginDeviceBuffer_t[]", max(1, len(listed)))
    for i, (uid, ptr) in enumerate(listed.items()):
        arr[i].uid = uid
        arr[i].ptr = ffi.NULL if uid == null_uid else ptr
    try:
        if use_ov:
            uids = list(overrides)
            dl = [ffi.new("int64_t[]", overrides[u][0]) for u in uids]
            sl = [ffi.new("int64_t[]", overrides[u][1]) for u in uids]
            st = lib.hipdnnEnginePluginExecuteOpGraphWithOverrides(
                eng.handle,
                ctx,
                ws,
                arr,
                len(listed),
                len(uids),
                ffi.new("int64_t[]", uids),
                ffi.new("uint32_t[]", [len(overrides[u][0]) for u in uids]),
                ffi.new("int64_t*[]", dl),
                ffi.new("int64_t*[]", sl),
            )
        else:
            st = lib.hipdnnEnginePluginExecuteOpGraph(eng.handle, ctx, ws, arr, len(listed))
        if st == SUCCESS:
            stats["executed"] += 1
        else:
            stats["refused_call"] += 1
            msg = eng.last_error()
            if not msg:
                raise Failure(f"execute status {st} without a message")
            if st not in (BAD_PARAM, NOT_APPLICABLE):
                raise Failure(f"execute status {st}: {msg}")
            key = _gist(msg)
            stats["why_call"][key] = stats["why_call"].get(key, 0) + 1
        # Inputs unchanged; outputs' gaps unchanged.
        for uid, p in bufs.items():
            now = bytes(ffi.buffer(ffi.cast("char*", p), nbytes[uid]))
            if now == snap[uid]:
                continue
            ten = case.tensors[uid]
            if uid not in outs or st != SUCCESS:
                raise Failure(f"call status {st}: tensor uid {uid} ({'output' if uid in outs else 'input'}) changed")
            if ten.ragged is not None:
                continue  # its batches sit at offsets only the data says
            dims, strides = eff[uid]
            es = ESIZE.get(ten.dtype, 4)
            inside = addressed(dims[: len(ten.dims)], strides[: len(ten.dims)])
            for e in range(nbytes[uid] // es):
                if e not in inside and now[e * es : (e + 1) * es] != snap[uid][e * es : (e + 1) * es]:
                    raise Failure(f"output uid {uid}: element {e}, outside its view {dims}/{strides}, was written")
    finally:
        for p in bufs.values():
            eng.libc.free(p)


def _gist(msg: str) -> str:
    """A refusal's message without its entry point, node name and numbers (for counting kinds)."""
    msg = re.sub(r"^hipdnnEnginePlugin\w+: (engine 101 cannot run this graph: )?", "", msg)
    msg = re.sub(r"-?\d+", "#", msg)
    return msg[:110]


def new_stats() -> dict:
    return {
        "applicable": 0,
        "not_applicable": 0,
        "executed": 0,
        "refused_call": 0,
        "huge_workspace": 0,
        "unpackable": 0,
        "why": {},
        "why_call": {},
    }


def run_cases(lib_path: str, seeds, progress: Path | None = None, verbose=False) -> dict:
    """Runs the cases of `seeds` in this process; raises Failure (with the seed) on an oracle failure."""
    eng = Engine(lib_path)
    stats = new_stats()
    try:
        for s in seeds:
            if progress is not None:
                progress.write_text(str(s))
            case = gen_case(s)
            try:
                run_case(eng, case, stats)
            except Failure as e:
                raise Failure(f"seed {s} ({'; '.join(case.notes)}): {e}") from None
    finally:
        eng.close()
    return stats


def _child(args) -> int:
    seeds = range(args.start, args.stop)
    progress = Path(args.progress) if args.progress else None
    failures = 0
    eng_path = args.lib
    s = args.start
    stats = new_stats()
    eng = Engine(eng_path)
    for s in seeds:
        if progress is not None:
            progress.write_text(str(s))
        case = gen_case(s)
        try:
            run_case(eng, case, stats)
        except Failure as e:
            failures += 1
            print(f"ORACLE seed {s} ({'; '.join(case.notes)}): {e}", flush=True)
    eng.close()
    print("STATS", {k: v for k, v in stats.items() if not isinstance(v, dict)}, flush=True)
    if args.verbose:
        for k in ("why", "why_call"):
            for msg, cnt in sorted(stats[k].items(), key=lambda x: -x[1])[:40]:
                print(f"  {k} {cnt:6d} {msg}")
    return 3 if failures else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="libhipdnn_cpu_engine.so (sanitized for --asan)")
    ap.add_argument("--seeds", default="0:1000", help="start:stop")
    ap.add_argument("--asan", action="store_true", help="preload GCC's libasan / libubsan, restart after a report")
    ap.add_argument("--crash-dir", default="build/sdpa_abi_fuzz_crashes")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--stop", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--progress", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _child(args)
    start, stop = (int(x) for x in args.seeds.split(":"))
    crash_dir = Path(args.crash_dir)
    crash_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if args.asan:
        cxx = os.environ.get("CXX", "c++")
        libs = [
            subprocess.check_output([cxx, f"-print-file-name={x}"], text=True).strip()
            for x in ("libasan.so", "libubsan.so")
        ]
        env["LD_PRELOAD"] = " ".join(os.path.realpath(x) for x in libs)
        env["ASAN_OPTIONS"] = (
            "detect_leaks=0:abort_on_error=1:allocator_may_return_null=1:allow_user_segv_handler=0:handle_abort=1"
        )
        env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
        env["PYTHONMALLOC"] = "malloc"
    progress = crash_dir / "progress"
    crashes, t0 = [], time.time()
    s = start
    rc_all = 0
    while s < stop:
        progress.write_text("")
        cmd = [
            sys.executable,
            __file__,
            "--child",
            "--lib",
            args.lib,
            "--start",
            str(s),
            "--stop",
            str(stop),
            "--progress",
            str(progress),
        ] + (["--verbose"] if args.verbose else [])
        res = subprocess.run(cmd, env=env, capture_output=True, text=True)
        sys.stdout.write(res.stdout)
        if res.returncode in (0, 3):
            rc_all |= res.returncode
            break
        last = progress.read_text().strip()
        bad = int(last) if last else s
        (crash_dir / f"seed{bad}.txt").write_text(res.stderr[-20000:])
        head = [ln for ln in res.stderr.splitlines() if "ERROR" in ln or "runtime error" in ln or "SUMMARY" in ln]
        print(f"CRASH seed {bad} (exit {res.returncode}): {head[:2]}", flush=True)
        crashes.append(bad)
        s = bad + 1
    print(f"done: seeds {start}:{stop}, crashes {crashes}, {time.time() - t0:.0f} s")
    return 1 if crashes else rc_all


if __name__ == "__main__":
    sys.exit(main())
