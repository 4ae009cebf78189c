"""The CPU engine's bf16 product kernels: bf16 attention forward (q, k, v in bf16, more than 16
queries) with both products on bf16 hardware (engines/cpu/src/sdpa_fwd.inl), each run where the CPU has it:

* ``amx``: AMX-BF16 tiles (amx_item; and Linux must let the process use the tiles);
* ``avx512_bf16``: VDPBF16PS dot products on the panel kernel (its bf16 dot-product panels; AMD Zen 4
  and 5, Intel Cooper Lake, and any CPU with AMX).

Every case goes through ``test_sdpa_modes.run_case`` (float64 reference, NaN-filled outputs with guard
bands checked after, stats) on a handle whose plans are built with ``HIPDNN_CPU_ISA`` set to the
kernel's ISA: the edges (head dims not a multiple of 32 or 16, odd ones, key counts around the 16-, 32-
and 64-key steps, query panels of 32 and 48, a panel's keys starting or ending at an odd offset of a
tile, which the dot products take in pairs), every mask, bias, ALiBi, padding with empty sequences,
GQA and strided layouts. Beside them: proof that the kernel is what ran (its P is rounded to bf16 for
the second product, so its output differs from the AVX-512 kernel's while both stay accurate), that
keys a panel does not see never reach its output even when their V holds infinities, and its accuracy
at larger sizes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hipdnn
from tests.cpu.test_sdpa_isa import HAVE
from tests.cpu.test_sdpa_modes import BASE, BF16, DT, Case, bf16_bits, bf16_value, cases, reference, run_case

KERNELS = [isa for isa in ("avx512_bf16", "amx") if isa in HAVE]
pytestmark = pytest.mark.skipif(not KERNELS, reason="this CPU has neither AVX512_BF16 nor AMX-BF16")


def make_handle(isa: str, mp: pytest.MonkeyPatch) -> hipdnn.Handle:
    mp.setenv("HIPDNN_CPU_ISA", isa)
    h = hipdnn.Handle()
    if not any(p.name == "hipdnn_cpu_engine" for p in h.loaded_plugins()):
        pytest.fail(f"the CPU engine did not load: {h.skipped_plugins()}")
    return h


@pytest.fixture(scope="module", params=KERNELS or ["none"])
def kernel(request: pytest.FixtureRequest) -> Iterator[hipdnn.Handle]:
    """A handle whose plans run one of the bf16 product kernels this CPU has."""
    with pytest.MonkeyPatch.context() as mp:
        h = make_handle(request.param, mp)
        yield h
        h.close()


B16 = replace(BASE, dt=DT.BFLOAT16)
CASES = {
    # head dims: 32-dim steps of the scores, 16-dim tiles of the output, padding inside both
    "d8_dv8": replace(B16, sq=40, skv=70, d=8, dv=8),
    "d24_dv40": replace(B16, sq=33, skv=65, d=24, dv=40),
    "d32_dv16": replace(B16, sq=64, skv=64, d=32, dv=16),
    "d72_dv72": replace(B16, sq=100, skv=129, d=72, dv=72),
    "d128_dv64": replace(B16, sq=129, skv=200, d=128, dv=64),
    "d136_dv136": replace(B16, sq=50, skv=90, d=136, dv=136),
    "d256_dv256": replace(B16, hq=1, hk=1, sq=70, skv=150, d=256, dv=256),
    "d1_dv3": replace(B16, sq=17, skv=5, d=1, dv=3),
    # key counts around the 16-, 32- and 64-key steps
    "skv1": replace(B16, sq=17, skv=1, d=64, dv=64),
    "skv15": replace(B16, sq=31, skv=15, d=64, dv=64),
    "skv17": replace(B16, sq=32, skv=17, d=64, dv=64),
    "skv63": replace(B16, sq=33, skv=63, d=64, dv=64),
    "skv65": replace(B16, sq=47, skv=65, d=64, dv=64),
    "skv95": replace(B16, sq=129, skv=95, d=64, dv=64),
    "skv300": replace(B16, sq=200, skv=300, d=64, dv=64),
    # masks, both alignments, windows
    "causal_tl": replace(B16, sq=129, skv=129, d=64, dv=64, causal=True),
    "causal_br_long_kv": replace(B16, sq=37, skv=300, d=64, dv=64, causal=True, bottom_right=True),
    "causal_tl_short_kv": replace(B16, sq=300, skv=37, d=64, dv=64, causal=True),
    "window_left": replace(B16, sq=200, skv=200, d=64, dv=64, left=40, right=0),
    "window_both_br": replace(B16, sq=90, skv=150, d=32, dv=32, left=20, right=5, bottom_right=True),
    # bias in every broadcast, ALiBi, tensor scale
    "bias_full": replace(B16, b=2, sq=70, skv=90, d=64, dv=64, bias="full"),
    "bias_b1_alibi": replace(B16, sq=129, skv=129, d=128, dv=128, bias="b1", alibi=True),
    "bias_h1_causal": replace(B16, hq=4, hk=2, sq=65, skv=65, d=64, dv=64, bias="h1", causal=True),
    "bias_11_scale_tensor": replace(B16, sq=40, skv=40, d=40, dv=40, bias="11", scale_tensor=True),
    "alibi_gqa": replace(B16, hq=6, hk=2, sq=100, skv=100, d=64, dv=64, alibi=True),
    # padding, empty sequences
    "padding_empty": replace(
        B16, b=4, sq=70, skv=90, d=64, dv=64, padding=True, seq_q=[70, 0, 33, 17], seq_kv=[90, 40, 0, 65]
    ),
    "padding_causal_br": replace(
        B16,
        b=2,
        sq=100,
        skv=100,
        d=64,
        dv=64,
        padding=True,
        seq_q=[37, 100],
        seq_kv=[99, 18],
        causal=True,
        bottom_right=True,
    ),
    # GQA, MQA, layouts with gaps, head dim not unit-stride
    "mqa_bshd": replace(B16, b=2, hq=8, hk=1, sq=70, skv=70, d=64, dv=64, layout="bshd"),
    "gqa_padded": replace(B16, hq=4, hk=2, sq=129, skv=37, d=72, dv=40, layout="padded"),
    "dstride": replace(B16, hq=2, hk=1, sq=37, skv=129, d=24, dv=24, layout="dstride"),
    "no_stats": replace(B16, sq=60, skv=60, d=64, dv=64, stats=False),
    # several of the kernel's 256-key tiles, the last one ragged: masks, windows, bias and padding
    # that cross tile boundaries, and the running max carried from tile to tile
    "tiles3": replace(B16, hq=1, hk=1, sq=70, skv=600, d=64, dv=64),
    "tiles_causal_tl": replace(B16, hq=1, hk=1, sq=530, skv=530, d=128, dv=128, causal=True),
    "tiles_causal_br": replace(B16, hq=1, hk=1, sq=300, skv=777, d=72, dv=40, causal=True, bottom_right=True),
    "tiles_window": replace(B16, hq=1, hk=1, sq=520, skv=600, d=64, dv=64, left=300, right=17),
    "tiles_bias_alibi": replace(B16, hq=2, hk=1, sq=100, skv=520, d=64, dv=64, bias="full", alibi=True),
    "tiles_padding": replace(
        B16, b=3, hq=1, hk=1, sq=260, skv=600, d=64, dv=64, padding=True, seq_q=[260, 1, 99], seq_kv=[600, 257, 255]
    ),
    "tiles_gqa_bshd": replace(B16, hq=4, hk=2, sq=64, skv=520, d=64, dv=64, layout="bshd"),
    "tiles_bias_full_causal": replace(B16, hq=2, hk=1, sq=290, skv=300, d=64, dv=64, bias="full", causal=True),
    "tiles_bias_kt": replace(B16, hq=1, hk=1, sq=45, skv=530, d=64, dv=64, bias="kt"),
    "bias_full_odd": replace(B16, hq=1, hk=1, sq=77, skv=83, d=40, dv=40, bias="full"),
    # narrow bands: lanes of a panel that see no key of a tile, under zero, negative and large scales
    "band_narrow_scale0": replace(B16, hq=1, hk=1, sq=300, skv=300, d=64, dv=64, left=5, right=0, scale=0.0),
    "band_narrow_negative": replace(B16, hq=1, hk=1, sq=300, skv=310, d=64, dv=64, left=3, right=2, scale=-0.3),
    "band_narrow_large": replace(B16, hq=1, hk=1, sq=280, skv=600, d=32, dv=32, left=1, right=40, scale=4.0),
    # items of many panels (up to 32: 1024 queries) under a narrow window: a panel's first visible
    # keys lie in a later tile than its item's first, so its output starts from that tile (no zeroed
    # Ot beforehand)
    "band_narrow_late_panels": replace(B16, b=4, hq=1, hk=1, sq=600, skv=640, d=64, dv=48, left=5, right=0),
    "band_narrow_late_panels_br": replace(
        B16, b=2, hq=2, hk=1, sq=580, skv=600, d=32, dv=32, left=2, right=3, bottom_right=True
    ),
    # the dot products' pairs of keys and 64-key tiles: panels whose first (window) or last (causal,
    # bottom-right) key lies an odd offset into a tile, tiles that end on an odd key, odd head dims read
    # through copies, 48- and 32-query panels, the last block's narrower panels
    "pairs_window_odd": replace(B16, hq=1, hk=1, sq=200, skv=200, d=64, dv=64, left=7, right=0),
    "pairs_window_br_odd": replace(B16, hq=2, hk=1, sq=97, skv=131, d=64, dv=48, left=9, right=3, bottom_right=True),
    "pairs_causal_br_odd_shift": replace(
        B16, hq=1, hk=1, sq=150, skv=217, d=128, dv=128, causal=True, bottom_right=True
    ),
    "pairs_skv_one_past_tiles": replace(B16, hq=1, hk=1, sq=100, skv=129, d=64, dv=64),
    "pairs_odd_d_dstride": replace(B16, hq=2, hk=1, sq=61, skv=77, d=33, dv=17, layout="dstride"),
    "pairs_odd_d_causal": replace(B16, hq=1, hk=1, sq=144, skv=144, d=65, dv=31, causal=True),
    "pairs_panels48_bias_window": replace(
        B16, hq=2, hk=2, sq=144, skv=205, d=64, dv=64, bias="full", left=31, right=12
    ),
    "pairs_tail_panels_padding": replace(
        B16, b=2, hq=1, hk=1, sq=256, skv=255, d=96, dv=96, padding=True, seq_q=[255, 130], seq_kv=[255, 67]
    ),
    "causal_br_short_kv_scale0": replace(
        B16, hq=1, hk=1, sq=300, skv=270, d=64, dv=64, causal=True, bottom_right=True, scale=0.0
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_forward(kernel: hipdnn.Handle, name: str) -> None:
    run_case(kernel, CASES[name], seed=len(name))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    c=cases(
        dts=(DT.BFLOAT16,),
        sq=(17, 160),  # the rows kernel serves 16 and fewer
        skv=(1, 600),  # up to three 256-key tiles
        ds=(8, 16, 24, 32, 40, 48, 64, 72, 96, 104, 128, 160),
        dvs=(16, 40, 64),
        heads=2,
        left_max=150,
        right_max=30,
    ),
    seed=st.integers(0, 2**16),
    scale=st.sampled_from([None, None, 0.0, -0.3, 3.0]),  # None: drawn from [0.05, 0.4)
)
def test_forward_generated(kernel: hipdnn.Handle, c: Case, seed: int, scale: float | None) -> None:
    run_case(kernel, replace(c, scale=scale), seed)


def bf16_sdpa(
    h: hipdnn.Handle,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    scale: float,
    causal: bool = False,
) -> np.ndarray:
    """o (as float32) of a bf16 SDPA graph over these bf16 arrays, through h's CPU engine."""
    g = hipdnn.Graph(
        name="bf16_kernel", io_data_type=DT.BFLOAT16, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT
    )
    tq, tk, tv = (g.tensor(name=n, dim=list(x.shape), data_type=DT.BFLOAT16) for n, x in (("q", q), ("k", k), ("v", v)))
    o, _ = g.sdpa(tq, tk, tv, attn_scale=scale, use_causal_mask=causal)
    o.set_output(True)
    g.build(h)
    out = np.full(q.shape[:3] + v.shape[3:], np.nan, np.float32).astype(BF16)
    g.execute(h, {tq: q, tk: k, tv: v, o: out}, np.empty(max(1, g.get_workspace_size()), np.uint8))
    return bf16_value(out)


def bf16_sdpa_bias(
    h: hipdnn.Handle, q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray, scale: float, alibi: bool
) -> np.ndarray:
    """o (as float32) of a bf16 SDPA graph with an fp32 additive bias (and ALiBi), through h."""
    g = hipdnn.Graph(
        name="bf16_kernel", io_data_type=DT.BFLOAT16, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT
    )
    tq, tk, tv = (g.tensor(name=n, dim=list(x.shape), data_type=DT.BFLOAT16) for n, x in (("q", q), ("k", k), ("v", v)))
    tb = g.tensor(name="bias", dim=list(bias.shape), data_type=DT.FLOAT)
    o, _ = g.sdpa(tq, tk, tv, attn_scale=scale, bias=tb, use_alibi_mask=alibi)
    o.set_output(True)
    g.build(h)
    out = np.full(q.shape[:3] + v.shape[3:], np.nan, np.float32).astype(BF16)
    g.execute(h, {tq: q, tk: k, tv: v, tb: bias, o: out}, np.full(max(1, g.get_workspace_size()), 0xFF, np.uint8))
    return bf16_value(out)


def rand_bf16(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return bf16_bits(rng.standard_normal(shape).astype(np.float32))


def test_the_bf16_kernel_is_what_runs(kernel: hipdnn.Handle) -> None:
    """Its P is rounded to bf16 for the P V product: outputs differ from the AVX-512 kernel's (fp32 P)
    in some elements, while both stay within the bf16 output's own rounding of the float64 result."""
    rng = np.random.default_rng(11)
    q, k, v = (rand_bf16(rng, (1, 2, 96, 64)) for _ in range(3))
    got = bf16_sdpa(kernel, q, k, v, 0.125)
    with pytest.MonkeyPatch.context() as mp:
        h = make_handle("avx512", mp)
        fp32_p = bf16_sdpa(h, q, k, v, 0.125)
        h.close()
    want = reference(*(bf16_value(x).astype(np.float64) for x in (q, k, v)), 0.125)[0]
    scale = float(np.abs(want).max())
    assert float(np.abs(got - want).max()) < 8e-3 * scale
    assert float(np.abs(fp32_p - want).max()) < 8e-3 * scale
    assert np.count_nonzero(got != fp32_p) > 0, "the plan computed exactly what the fp32 kernel does"


@pytest.mark.parametrize("left", [7, 8, 22])
def test_keys_before_a_window_never_reach_the_output(kernel: hipdnn.Handle, left: int) -> None:
    """A sliding window whose second panel (queries 32-63) starts at key 33 - left: an odd offset into
    its tile at left = 8 and 22, even at 7. The dot products take keys in pairs, so at an odd offset
    the key before a panel's first shares its pair; its V, infinite here, must stay out of that panel
    (P = 0 there is not enough). Keys 0 to 32 - left hold inf, visible only to queries below 32: rows
    32-63 come out finite and equal to the float64 result."""
    rng = np.random.default_rng(left)
    sq, d = 64, 64
    q, k = rand_bf16(rng, (1, 1, sq, d)), rand_bf16(rng, (1, 1, sq, d))
    v = bf16_value(rand_bf16(rng, (1, 1, sq, d)))
    last_unseen = 32 - left  # the last key queries 32.. do not see
    v[0, 0, : last_unseen + 1, :] = np.inf
    g = hipdnn.Graph(
        name="bf16_kernel", io_data_type=DT.BFLOAT16, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT
    )
    tq, tk, tv = (g.tensor(name=n, dim=list(x.shape), data_type=DT.BFLOAT16) for n, x in (("q", q), ("k", k), ("v", v)))
    o, _ = g.sdpa(tq, tk, tv, attn_scale=0.125, diagonal_band_left_bound=left, diagonal_band_right_bound=0)
    o.set_output(True)
    g.build(kernel)
    out = np.full((1, 1, sq, d), np.nan, np.float32).astype(BF16)
    g.execute(kernel, {tq: q, tk: k, tv: bf16_bits(v), o: out}, np.empty(max(1, g.get_workspace_size()), np.uint8))
    got = bf16_value(out)[0, 0, 32:]
    assert np.isfinite(got).all(), np.argwhere(~np.isfinite(got))[:5]
    want = reference(
        bf16_value(q).astype(np.float64),
        bf16_value(k).astype(np.float64),
        np.where(np.isinf(v), 0.0, v).astype(np.float64),
        0.125,
        left=left,
        right=0,
    )[0][0, 0, 32:]
    assert float(np.abs(got - want).max()) < 8e-3 * float(np.abs(want).max())


def test_unseen_keys_never_reach_the_output(kernel: hipdnn.Handle) -> None:
    """The second product runs in steps of keys (32 on the tiles, pairs on the dot products): keys past
    the last one a 32-query panel sees, inside its last step, get zeros in V's copy, not just P = 0
    (0 x inf is NaN). Bottom-right causal with Skv = Sq + 5: queries 0-31 (the first panel on both
    kernels at Sq = 64) see keys up to 36, an odd count, so an infinite V from key 37 on leaves them
    finite and equal to attention over keys 0-36 alone."""
    rng = np.random.default_rng(3)
    sq, skv, d, seen = 64, 69, 64, 37
    q, k = rand_bf16(rng, (1, 1, sq, d)), rand_bf16(rng, (1, 1, skv, d))
    v = bf16_value(rand_bf16(rng, (1, 1, skv, d)))
    v[0, 0, seen:, :] = np.inf
    g = hipdnn.Graph(
        name="bf16_kernel", io_data_type=DT.BFLOAT16, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT
    )
    tq, tk, tv = (g.tensor(name=n, dim=list(x.shape), data_type=DT.BFLOAT16) for n, x in (("q", q), ("k", k), ("v", v)))
    o, _ = g.sdpa(tq, tk, tv, attn_scale=0.125, use_causal_mask_bottom_right=True)
    o.set_output(True)
    g.build(kernel)
    out = np.full((1, 1, sq, d), np.nan, np.float32).astype(BF16)
    g.execute(kernel, {tq: q, tk: k, tv: bf16_bits(v), o: out}, np.empty(max(1, g.get_workspace_size()), np.uint8))
    got = bf16_value(out)[0, 0, :32]
    assert np.isfinite(got).all(), np.argwhere(~np.isfinite(got))[:5]
    want = reference(
        bf16_value(q).astype(np.float64)[:, :, :32],
        bf16_value(k).astype(np.float64)[:, :, :seen],
        v.astype(np.float64)[:, :, :seen],
        0.125,
        causal=True,
        bottom_right=True,
        seq_q=[32],
        seq_kv=[seen],
    )[0][0, 0]
    assert float(np.abs(got - want).max()) < 8e-3 * float(np.abs(want).max())


@pytest.mark.parametrize(("s", "d", "causal"), [(512, 64, False), (700, 128, True), (333, 256, False)])
def test_accuracy_at_size(kernel: hipdnn.Handle, s: int, d: int, causal: bool) -> None:
    """Error against float64 at prefill sizes: the largest within a few bf16 roundings of max |o|; the
    mean at most twice the AVX-512 kernel's, whose P stays fp32 (rounding P to bf16 for its product,
    as flash attention and torch's bf16 CPU kernel do, adds about half the output's own rounding:
    1.45-1.5x here)."""
    rng = np.random.default_rng(s + d)
    q, k, v = (rand_bf16(rng, (1, 2, s, d)) for _ in range(3))
    scale = 1.0 / np.sqrt(d)
    got = bf16_sdpa(kernel, q, k, v, scale, causal=causal)
    with pytest.MonkeyPatch.context() as mp:
        h = make_handle("avx512", mp)
        fp32_p = bf16_sdpa(h, q, k, v, scale, causal=causal)
        h.close()
    want = reference(*(bf16_value(x).astype(np.float64) for x in (q, k, v)), scale, causal=causal)[0]
    err, err_fp32_p = np.abs(got - want), np.abs(fp32_p - want)
    assert float(err.max()) < 8e-3 * float(np.abs(want).max())
    assert float(err.mean()) < 2.0 * float(err_fp32_p.mean()), (float(err.mean()), float(err_fp32_p.mean()))


def test_callers_float_state_is_left_alone(kernel: hipdnn.Handle) -> None:
    """The kernel runs its items with flush-to-zero (so exponentials that underflow cost no
    microcode assist) and restores the thread's MXCSR after: subnormal arithmetic on the calling
    thread still gives subnormals, not 0."""
    tiny = np.float32(2.0**-140)
    before = tiny * np.float32(0.5)
    assert before != 0
    rng = np.random.default_rng(3)
    q, k, v = (rand_bf16(rng, (1, 2, 300, 64)) for _ in range(3))
    bf16_sdpa(kernel, q, k, v, 0.125, causal=True)
    assert tiny * np.float32(0.5) == before


@pytest.mark.parametrize("causal", [False, True])
def test_huge_scores_and_non_finite_inputs(kernel: hipdnn.Handle, causal: bool) -> None:
    """Scores near 1e31 (one query row at 1e30) still give the softmax of their max key, as the
    float64 definition does (the max's own exponent must come out 0, not the product's rounding
    error); NaN and infinities in q, k and v give NaN and inf in the same elements as the AVX-512
    kernel (rows whose softmax sum is NaN are written NaN there)."""
    rng = np.random.default_rng(5)
    q, k, v = (bf16_value(rand_bf16(rng, (1, 2, 300, 64))) for _ in range(3))
    q[0, 1, 290, :] = 1e30
    q[0, 0, 5, 3] = np.nan
    k[0, 0, 100, 7] = np.inf
    k[0, 1, 280, 0] = -np.inf
    v[0, 1, 17, 2] = np.inf
    qb, kb, vb = (bf16_bits(x.astype(np.float32)) for x in (q, k, v))
    got = bf16_sdpa(kernel, qb, kb, vb, 0.125, causal=causal)
    with pytest.MonkeyPatch.context() as mp:
        h = make_handle("avx512", mp)
        fp32_p = bf16_sdpa(h, qb, kb, vb, 0.125, causal=causal)
        h.close()
    assert (np.isnan(got) == np.isnan(fp32_p)).all()
    assert (np.isinf(got) == np.isinf(fp32_p)).all()
    with np.errstate(invalid="ignore"):
        want = reference(*(bf16_value(x).astype(np.float64) for x in (qb, kb, vb)), 0.125, causal=causal)[0]
    both = np.isfinite(got) & np.isfinite(want)
    assert float(np.abs(got[both] - want[both]).max()) < 8e-3 * float(np.abs(want[both]).max())
    row = (0, 1, 290)  # the softmax of one key: that key's v row
    assert both[row].sum() >= 60 and float(np.abs(got[row] - want[row])[both[row]].max()) < 2e-2


@pytest.mark.parametrize("alibi", [False, True])
def test_bias_with_masks_infinities_and_huge_values(kernel: hipdnn.Handle, alibi: bool) -> None:
    """A bias (what hipdnn.torch makes of an attn_mask) goes into the scores before the one-pass
    softmax: -inf entries mask keys (a query row masked whole gives 0, as the AVX-512 kernel does),
    +inf and NaN entries give NaN rows, and entries of +-1e30 or that jump by far more than the lazy
    margin between 256-key tiles give the float64 softmax; the same NaN / inf pattern as the AVX-512
    kernel, the float64 reference elsewhere. ALiBi over 900 keys adds up to ~-7 per 32 keys."""
    rng = np.random.default_rng(21)
    b, h, sq, skv, d = 1, 2, 300, 900, 64
    q, k, v = (rand_bf16(rng, (b, h if n == "q" else 1, sq if n == "q" else skv, d)) for n in "qkv")
    bias = rng.standard_normal((b, h, sq, skv)).astype(np.float32)
    bias[0, 0, :, 100:200] = -np.inf  # a masked span of keys
    bias[0, 0, 7, :] = -np.inf  # a query row that sees nothing
    bias[0, 1, 11, 333] = np.inf
    bias[0, 1, 12, 444] = np.nan
    bias[0, 1, 40:80, 700] = 1e30  # one key dominates those rows
    bias[0, 0, 100:140, 600:] += 60.0  # later tiles pass the running max by far more than the margin
    bias[0, 1, 200, :] = -1e30
    got = bf16_sdpa_bias(kernel, q, k, v, bias, 0.125, alibi)
    with pytest.MonkeyPatch.context() as mp:
        hh = make_handle("avx512", mp)
        fp32_p = bf16_sdpa_bias(hh, q, k, v, bias, 0.125, alibi)
        hh.close()
    assert (np.isnan(got) == np.isnan(fp32_p)).all()
    assert (np.isinf(got) == np.isinf(fp32_p)).all()
    assert np.isnan(got[0, 1, 11]).all() and np.isnan(got[0, 1, 12]).all()
    assert (got[0, 0, 7] == 0).all()
    with np.errstate(invalid="ignore"):
        want = reference(
            *(bf16_value(x).astype(np.float64) for x in (q, k, v)), 0.125, bias=bias.astype(np.float64), alibi=alibi
        )[0]
    both = np.isfinite(got) & np.isfinite(want)
    assert both.sum() > 0.98 * got.size - 2 * d
    assert float(np.abs(got[both] - want[both]).max()) < 8e-3 * float(np.abs(want[both]).max())


@pytest.mark.parametrize("rising", [True, False])
def test_running_max_across_tiles(kernel: hipdnn.Handle, rising: bool) -> None:
    """Scores that climb (or fall) by far more than the lazy margin from one 256-key tile to the next:
    each new tile's max replaces the running one and rescales Ot and l (rising), or never does
    (falling); either way the result is the float64 softmax's."""
    rng = np.random.default_rng(7 if rising else 8)
    s, d = 900, 64
    q = rand_bf16(rng, (1, 1, 64, d))
    ramp = np.linspace(0.0, 8.0, s) if rising else np.linspace(8.0, 0.0, s)
    k = bf16_bits((np.abs(rng.standard_normal((1, 1, s, d))) * ramp[None, None, :, None]).astype(np.float32))
    q = bf16_bits(np.abs(bf16_value(q)))
    v = rand_bf16(rng, (1, 1, s, d))
    got = bf16_sdpa(kernel, q, k, v, 0.125)
    want = reference(*(bf16_value(x).astype(np.float64) for x in (q, k, v)), 0.125)[0]
    assert np.isfinite(got).all()
    assert float(np.abs(got - want).max()) < 8e-3 * float(np.abs(want).max())


@pytest.mark.parametrize("scale", [-0.2, 0.0, 3.0])
def test_any_scale(kernel: hipdnn.Handle, scale: float) -> None:
    """The plain tiles' max is taken on the raw scores and scaled after (of -s for a negative scale);
    a zero scale makes every score 0; a large one makes the running max jump past the lazy margin."""
    rng = np.random.default_rng(int(scale * 10) + 50)
    q, k, v = (rand_bf16(rng, (1, 2, 300, 64)) for _ in range(3))
    got = bf16_sdpa(kernel, q, k, v, scale)
    want = reference(*(bf16_value(x).astype(np.float64) for x in (q, k, v)), scale)[0]
    assert float(np.abs(got - want).max()) < 8e-3 * float(np.abs(want).max())
