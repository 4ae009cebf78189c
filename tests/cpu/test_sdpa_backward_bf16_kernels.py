"""SDPA backward on the CPU engine's bf16 pairs kernel: bf16 q, k, v and dO run the five products on
bf16 hardware (P and dS rounded to bf16 for the products that take them, the softmax recompute in
fp32; sdpa_bwd.inl's pair_item), on each build this CPU has: ``amx`` (AMX-BF16 tiles) and
``avx512_bf16`` (VDPBF16PS dot products on the same operands). Head dims that are multiples of 32 at
unit last strides are read in place; other head dims (80, odd ones) and layouts its packs cannot read
(padded rows with an odd key stride, a strided head dim) run on compact copies zero-padded to 32
(sdpa_bwd.cpp's run_padded_pairs). Every option of the backward, odd lengths on both sides of the
kernel's 32-row steps and the 128-query blocks, GQA / MQA (key blocks split over chunks), padding with
empty sequences, every bias shape, ALiBi, softcapping, huge and -inf masks, BSHD rows. Each against
the float64 reference in NaN-filled guarded buffers (tests/cpu/test_sdpa_backward.run_bwd and
test_sdpa_softcap.run_backward)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hipdnn
from tests.cpu import test_sdpa_softcap as softcap
from tests.cpu.test_sdpa_backward import run_bwd
from tests.cpu.test_sdpa_isa import HAVE
from tests.cpu.test_sdpa_modes import Case

DT = hipdnn.DataType
BF16 = DT.BFLOAT16

KERNELS = [isa for isa in ("avx512_bf16", "amx") if isa in HAVE]
pytestmark = pytest.mark.skipif(not KERNELS, reason="this CPU has neither AVX512_BF16 nor AMX-BF16")


@pytest.fixture(scope="module", params=KERNELS or ["none"])
def pairs_handle(request: pytest.FixtureRequest) -> Iterator[hipdnn.Handle]:
    """A handle whose plans run one of the bf16 pairs builds this CPU has."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HIPDNN_CPU_ISA", request.param)
        h = hipdnn.Handle()
        yield h
        h.close()


BASE = Case(dt=BF16, sq=37, skv=37, d=64, dv=64)
CASES = {
    "one_query_one_key": replace(BASE, sq=1, skv=1, d=32, dv=32),
    "s37": BASE,
    # 32-row steps: exactly one, one past, and a head whose last block passes Sq
    "s32_s64": replace(BASE, sq=32, skv=64),
    "s33_s65": replace(BASE, sq=33, skv=65, causal=True),
    # several 128-query blocks and 64-key blocks, the last ones partial
    "s300_s129_d128": replace(BASE, sq=300, skv=129, d=128, dv=128),
    "s129_s300_d96_dv32": replace(BASE, sq=129, skv=300, d=96, dv=32),
    "d32_dv128": replace(BASE, sq=70, skv=90, d=32, dv=128, causal=True, bottom_right=True),
    # GQA and MQA: one kv head splits its key blocks over chunks (fp32 dQ accumulators summed)
    "gqa_causal": replace(BASE, hq=4, hk=2, sq=200, skv=200, causal=True),
    "mqa_d128": replace(BASE, hq=3, hk=1, sq=129, skv=257, d=128, dv=128),
    "decode": replace(BASE, b=2, hq=8, hk=2, sq=1, skv=300),
    "window": replace(BASE, sq=150, skv=150, left=17, right=0),
    "window_br_right": replace(BASE, sq=90, skv=160, left=33, right=4, bottom_right=True),
    "causal_br_dead_rows": replace(BASE, sq=170, skv=60, causal=True, bottom_right=True),
    "padding": replace(BASE, b=3, sq=70, skv=90, padding=True, seq_q=[70, 33, 1], seq_kv=[90, 0, 61]),
    "padding_causal_gqa": replace(
        BASE, b=2, hq=4, hk=2, sq=80, skv=80, padding=True, seq_q=[50, 80], seq_kv=[77, 20], causal=True
    ),
    "bias_full": replace(BASE, b=2, bias="full", sq=100, skv=77),
    "bias_b1_causal": replace(BASE, b=2, hq=4, hk=2, bias="b1", causal=True),
    "bias_keys_only": replace(BASE, b=2, bias="keys_only", sq=70, skv=130),
    "bias_queries_only": replace(BASE, b=2, bias="queries_only", sq=90, skv=60),
    "alibi_gqa": replace(BASE, hq=6, hk=3, alibi=True, sq=60, skv=80, causal=True),
    "scale_tensor": replace(BASE, scale_tensor=True),
    "bshd": replace(BASE, layout="bshd", sq=50, skv=70, d=64, dv=32),
    # layouts the pairs kernel's packs do not read in place: run on compact copies
    "padded_rows": replace(BASE, layout="padded", sq=40, skv=45, d=32, dv=32),
    "strided_head_dim": replace(BASE, layout="dstride", sq=40, skv=45, d=32, dv=32),
    # head dims that are not multiples of 32: zero-padded copies (Phi-2's 80, odd ones, mixed)
    "d80": replace(BASE, sq=150, skv=129, d=80, dv=80),
    "d80_gqa_causal_chunks": replace(BASE, hq=4, hk=1, sq=129, skv=300, d=80, dv=80, causal=True),
    "d37_dv19_padding": replace(BASE, b=2, sq=70, skv=90, d=37, dv=19, padding=True, seq_q=[70, 9], seq_kv=[0, 88]),
    "d1_dv1": replace(BASE, sq=33, skv=31, d=1, dv=1),
    "d48_dv80_bias_alibi": replace(BASE, b=2, hq=2, hk=2, sq=65, skv=64, d=48, dv=80, bias="full", alibi=True),
    "d80_bshd_window": replace(BASE, layout="bshd", sq=100, skv=100, d=80, dv=80, left=20, right=3),
    "d80_padded_rows": replace(BASE, layout="padded", sq=40, skv=45, d=80, dv=80),
    "d80_strided_head_dim": replace(BASE, layout="dstride", sq=40, skv=45, d=80, dv=80, causal=True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_backward_case(pairs_handle: hipdnn.Handle, name: str) -> None:
    run_bwd(pairs_handle, CASES[name], seed=len(name) + 7)


# softcapping (the cap's derivative on dS), with the bias, ALiBi, window and padding together
SOFTCAP = {
    "softcap": softcap.Case(dt=BF16, d=32, dv=32, sq=70, skv=90, cap=2.0, causal=True),
    "softcap_everything": replace(softcap.EVERYTHING, dt=BF16, d=64, dv=64, cap=2.0, scale=0.2),
}


@pytest.mark.parametrize("name", list(SOFTCAP))
def test_backward_softcap(pairs_handle: hipdnn.Handle, name: str) -> None:
    softcap.run_backward(pairs_handle, SOFTCAP[name], seed=len(name), cap_matters=False)


@st.composite
def pairs_cases(draw: st.DrawFn) -> Case:
    b = draw(st.integers(1, 2))
    hk = draw(st.integers(1, 2))
    sq = draw(st.sampled_from([1, 2, 31, 32, 33, 64, 65, 129, 150]))
    skv = draw(st.sampled_from([1, 3, 37, 63, 64, 65, 129]))
    padding = draw(st.booleans())
    return Case(
        b=b,
        hq=hk * draw(st.integers(1, 3)),
        hk=hk,
        sq=sq,
        skv=skv,
        d=draw(st.sampled_from([32, 64, 96, 128, 16, 37, 80])),
        dv=draw(st.sampled_from([32, 64, 128, 19, 80])),
        dt=BF16,
        layout=draw(st.sampled_from(["bhsd", "bhsd", "bshd", "padded", "dstride"])),
        causal=draw(st.booleans()),
        bottom_right=draw(st.booleans()),
        left=draw(st.one_of(st.none(), st.integers(1, 90))),
        right=draw(st.one_of(st.none(), st.integers(0, 20))),
        padding=padding,
        seq_q=[draw(st.integers(0, sq)) for _ in range(b)] if padding else [],
        seq_kv=[draw(st.integers(0, skv)) for _ in range(b)] if padding else [],
        bias=draw(st.sampled_from([None, "full", "b1", "h1", "11", "keys_only", "queries_only", "scalar"])),
        alibi=draw(st.booleans()),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(c=pairs_cases(), seed=st.integers(0, 2**16))
def test_backward_hypothesis(pairs_handle: hipdnn.Handle, c: Case, seed: int) -> None:
    run_bwd(pairs_handle, c, seed)


RUNS_PAIRS = {
    "in_place": replace(BASE, sq=150, skv=129, d=64, dv=64, causal=True),
    "d80_copies": replace(BASE, sq=150, skv=129, d=80, dv=80, causal=True),
    "strided_copies": replace(BASE, layout="dstride", sq=150, skv=129, d=64, dv=64, causal=True),
}


@pytest.mark.parametrize("name", list(RUNS_PAIRS))
def test_the_pairs_kernel_is_what_runs(pairs_handle: hipdnn.Handle, name: str) -> None:
    """Its P and dS are rounded to bf16 for the products that take them: gradients differ from the
    AVX-512 build's (fp32 P and dS) in some elements, while both pass the float64 check; so for the
    calls it takes in place and for those it runs on padded copies."""
    c = RUNS_PAIRS[name]
    got = run_bwd(pairs_handle, c, seed=3)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HIPDNN_CPU_ISA", "avx512")
        h = hipdnn.Handle()
        fp32 = run_bwd(h, c, seed=3)
        h.close()
    assert all(np.count_nonzero(got[n] != fp32[n]) > 0 for n in ("dq", "dk", "dv")), "computed what the fp32 build does"


def backward_workspace(handle: hipdnn.Handle, dt: hipdnn.DataType, d: int) -> int:
    g = hipdnn.Graph(name="ws", io_data_type=dt, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    dims = [1, 2, 100, d]
    t = {n: g.tensor(name=n, dim=dims, data_type=dt) for n in ("q", "k", "v", "o", "do")}
    st = g.tensor(name="stats", dim=[1, 2, 100, 1], data_type=DT.FLOAT)
    for x in g.sdpa_backward(t["q"], t["k"], t["v"], t["o"], t["do"], st, attn_scale=0.1):
        x.set_output(True)
    g.build(handle)
    return int(g.get_workspace_size())


def test_only_bf16_plans_reserve_the_pairs_scratch(pairs_handle: hipdnn.Handle) -> None:
    """The pairs kernel's per-thread scratch (larger than the fp32 kernels' at D = 128) is part of a
    plan's workspace only where q, k, v and dO are bf16, the only calls it takes."""
    fp32, bf16 = (backward_workspace(pairs_handle, dt, 128) for dt in (DT.FLOAT, BF16))
    assert bf16 > fp32 > 0
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HIPDNN_CPU_ISA", "avx512")
        h = hipdnn.Handle()
        assert backward_workspace(h, DT.FLOAT, 128) == fp32
        h.close()
