"""Bias tensors and band bounds (sliding windows, right bounds) on the HIP engine, forward and backward.

Skipped where torch, a CUDA/HIP device or the built plugin is missing (test_hip_applicability_abi.py
checks the build rules on any machine). The semantics are the CPU engine's (rfcs/0005-cpu-engine.md,
"SDPA semantics"): scores = scale q.k + bias; key j is visible to query i when i < seq_len_q[b],
j < seq_len_kv[b], j <= i + R + shift and j >= i - L + 1 + shift (shift = Skv_b - Sq_b under
bottom-right alignment, 0 under top-left; causal is R = 0), all present bounds intersecting; a row with
no visible key, or whose scores the bias makes all -inf, gives o = 0 and stats = -inf, and the
backward reads such a row as empty. A row whose every key carries a huge finite bias (-1e30,
finfo.min) is not empty: its softmax is taken over its scores as they round (uniform where they are
all equal), in the forward and in the backward.

The references are float64, written from that definition here (``band_reference``), on the device.
Every output is NaN-prefilled inside a guard-banded buffer. Plans are built once at a maximum shape
and served at smaller ones through overrides (the bias's Sq and Skv overridden with q's and k's);
bias broadcasts over B, over H, over both, or is per (b, h); its dtype is fp32, bf16 or fp16 and its
rows are padded (row stride Skv + 3). Shapes: Sq 1, 16, 37, 129 and Skv 1, 37, 300 (decode shapes
Sq <= 16 included, which on engine 202 run the prefill kernel when a bias or window is present)."""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA/HIP device visible to torch", allow_module_level=True)

import hipdnn  # noqa: E402
from tests.cpu.test_sdpa_modes import alibi_slopes  # noqa: E402
from tests.gpu.hip_support import PORTABLE, TENSOR_CORE, alignment, compact, gpu_graph, workspace_for  # noqa: E402
from tests.gpu.test_hip_engine import (  # noqa: E402
    BF16,
    HALF,
    TORCH,
    Guarded,
    check_lse,
    random_view,
    rel_err,
    skip_unless_here,
    value,
)

FLOAT = hipdnn.DataType.FLOAT
BF16_MIN, HALF_MIN = float(torch.finfo(torch.bfloat16).min), float(torch.finfo(torch.float16).min)
BIAS_TORCH = {FLOAT: torch.float32, BF16: torch.bfloat16, HALF: torch.float16}
TOL_O = {BF16: 1.6e-2, HALF: 4e-3}
TOL_GRAD = {BF16: 2e-2, HALF: 5e-3}
ENGINES = pytest.mark.parametrize("engine", [TENSOR_CORE, PORTABLE], ids=["tc202", "portable201"])

# Build (maximum) shape of every plan here; calls are served at smaller shapes through overrides.
MAX_B, HQ, HK, MAX_SQ, MAX_SKV = 3, 4, 2, 129, 300


@pytest.fixture(scope="module")
def handle(hip_plugin: Path) -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle(plugin_paths=[hip_plugin], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
    yield h
    h.close()


@dataclass
class Opts:
    """The band and bias options of one plan."""

    causal: bool = False
    bottom_right: bool = False
    left: int | None = None
    right: int | None = None
    bias: str | None = None  # None, "bh" (per b, h), "b1" (broadcast over H), "1h" (over B), "11" (both);
    # a third "1": broadcast over the queries too ("b11": a key padding mask [B, 1, 1, Skv])
    bias_dtype: hipdnn.DataType = FLOAT
    inf_rows: bool = False  # some bias rows all -inf, and scattered -inf entries
    # some bias rows all at this huge finite value (-1e30, finfo.min: transformers' older padding
    # masks), some at huge values that differ per key, and scattered huge entries elsewhere
    huge: float | None = None
    scale: float = 0.9 / 8
    d: int = 64  # head dim of q and k
    dv: int = 64  # of v and o
    softcap: float | None = None  # c: scores s -> c tanh(s / c) before bias, ALiBi and masks
    alibi: bool = False  # ALiBi: slope(h) (j - i) added after the cap


@dataclass
class Shape:
    b: int
    sq: int
    skv: int
    seq_q: list[int] | None = None
    seq_kv: list[int] | None = None
    d: int = 64
    extra: dict[str, Any] = field(default_factory=dict)


def bias_dims(kind: str, b: int, sq: int, skv: int) -> list[int]:
    """kind: per batch "b" or broadcast "1", per head "h" or "1", then "1" where one row serves every
    query (a key padding mask [B, 1, 1, Skv])."""
    return [b if kind[0] == "b" else 1, HQ if kind[1] == "h" else 1, 1 if kind[2:] == "1" else sq, skv]


def bias_strides(dims: list[int]) -> list[int]:
    """Rows padded by 3 keys (a key-dim stride of 1, other strides not compact)."""
    row = dims[3] + 3
    return [dims[1] * dims[2] * row, dims[2] * row, row, 1]


def band_visible(lq: int, lkv: int, o: Opts, device: Any) -> Any:
    """[lq, lkv] bool from the definition."""
    i = torch.arange(lq, device=device)[:, None]
    j = torch.arange(lkv, device=device)[None, :]
    shift = lkv - lq if o.bottom_right else 0
    ok = torch.ones(lq, lkv, dtype=torch.bool, device=device)
    if o.causal:
        ok &= j <= i + shift
    if o.right is not None:
        ok &= j <= i + o.right + shift
    if o.left is not None:
        ok &= j >= i - o.left + 1 + shift
    return ok


def band_reference(
    q: Any, k: Any, v: Any, bias: Any, scale: float, o: Opts, seq_q: list[int] | None, seq_kv: list[int] | None
) -> tuple[Any, Any, Any]:
    """o, natural-log lse and P in float64; P is [B, Hq, Sq, Skv] (0 where not visible)."""
    f64 = torch.float64
    b, hq, sq, _ = q.shape
    hk, skv = k.shape[1], k.shape[2]
    kf = k.to(f64).repeat_interleave(hq // hk, dim=1)
    vf = v.to(f64).repeat_interleave(hq // hk, dim=1)
    s = q.to(f64) @ kf.transpose(-1, -2) * scale
    if o.softcap is not None:
        s = o.softcap * torch.tanh(s / o.softcap)
    if bias is not None:
        # (a finite bias beyond +-2^127 counts as +-2^127, as in the CPU engine: rfcs/0006)
        limited = bias.to(f64).clamp(-(2.0**127), 2.0**127)
        s = s + torch.where(bias.isinf(), bias.to(f64), limited).expand(b, hq, sq, skv)
    if o.alibi:
        i = torch.arange(sq, device=q.device, dtype=f64)[:, None]
        j = torch.arange(skv, device=q.device, dtype=f64)[None, :]
        slopes = torch.tensor(alibi_slopes(hq), dtype=f64, device=q.device)[None, :, None, None]
        s = s + slopes * (j - i)
    allowed = torch.zeros(b, 1, sq, skv, dtype=torch.bool, device=q.device)
    for bi in range(b):
        lq = sq if seq_q is None else min(seq_q[bi], sq)
        lkv = skv if seq_kv is None else min(seq_kv[bi], skv)
        if lq > 0 and lkv > 0:
            allowed[bi, 0, :lq, :lkv] = band_visible(lq, lkv, o, q.device)
    s = s.masked_fill(~allowed, -math.inf)
    m = s.amax(dim=-1, keepdim=True)
    live = torch.isfinite(m)
    e = torch.exp(s - torch.where(live, m, torch.zeros_like(m)))
    den = e.sum(dim=-1, keepdim=True).clamp_min(1e-300)
    p = torch.where(live, e / den, 0.0)
    return p @ vf, torch.where(live, m + torch.log(den), -math.inf), p


def gradients(
    q: Any, k: Any, v: Any, o_in: Any, do: Any, p: Any, scale: float, softcap: float | None = None
) -> tuple[Any, Any, Any]:
    f64 = torch.float64
    b, hq, _, _ = q.shape
    hk = k.shape[1]
    g = hq // hk
    qf, kf, vf, of, dof = (x.to(f64) for x in (q, k, v, o_in, do))
    kr, vr = kf.repeat_interleave(g, dim=1), vf.repeat_interleave(g, dim=1)
    dp = dof @ vr.transpose(-1, -2)
    ds = p * (dp - (dof * of).sum(dim=-1, keepdim=True))
    if softcap is not None:  # d/du of c tanh(u / c) at u = scale q.k
        ds = ds * (1.0 - torch.tanh(scale * (qf @ kr.transpose(-1, -2)) / softcap) ** 2)
    dq = scale * (ds @ kr)
    dk = (scale * (ds.transpose(-1, -2) @ qf)).view(b, hk, g, *kf.shape[2:]).sum(dim=2)
    dv = (p.transpose(-1, -2) @ dof).view(b, hk, g, *vf.shape[2:]).sum(dim=2)
    return dq, dk, dv


def make_bias(o: Opts, b: int, sq: int, skv: int, gen: Any) -> tuple[Any, list[int], list[int]] | None:
    """A random bias at this call's shape in a padded-row buffer (and its dims and strides)."""
    if o.bias is None:
        return None
    dims = bias_dims(o.bias, b, sq, skv)
    strides = bias_strides(dims)
    x = random_view(dims, strides, BIAS_TORCH[o.bias_dtype], gen)
    if o.inf_rows:
        x[..., sq // 2 :: 5, :] = -math.inf  # whole rows fully masked
        x[..., ::3, ::4] = -math.inf  # scattered entries
    if o.huge is not None:
        x[..., 1::4, :] = o.huge  # every key of these rows: all their scores equal (P uniform)
        # huge, and different per key (at most 1e30: the engines count a bias past 2^127 as 2^127,
        # and their raw-unit kernels one past 2^127 times the scale)
        spread = 0.5 + 0.5 * torch.rand(x[..., 2::4, :].shape, generator=gen, device=x.device)
        x[..., 2::4, :] = (max(o.huge, -1e30) * spread).to(x.dtype)
        x[..., ::3, ::5] = o.huge  # scattered entries
    return x, dims, strides


def fwd_graph(
    dtype: hipdnn.DataType,
    o: Opts,
    engine: int,
    *,
    stats: bool = True,
    padding: bool = False,
    max_sq: int = MAX_SQ,
    max_skv: int = MAX_SKV,
) -> Any:
    g = gpu_graph("gpu_sdpa_band", dtype, overridable=True, engine=engine)
    qd, kd = [MAX_B, HQ, max_sq, o.d], [MAX_B, HK, max_skv, o.d]
    vd, od = [MAX_B, HK, max_skv, o.dv], [MAX_B, HQ, max_sq, o.dv]
    t: dict[str, Any] = {
        "q": g.tensor(name="q", dim=qd, stride=compact(qd), data_type=dtype),
        "k": g.tensor(name="k", dim=kd, stride=compact(kd), data_type=dtype),
        "v": g.tensor(name="v", dim=vd, stride=compact(vd), data_type=dtype),
    }
    kw = band_keywords(g, o, t, padding, max_sq, max_skv)
    out, lse = g.sdpa(t["q"], t["k"], t["v"], attn_scale=o.scale, generate_stats=stats, **kw)
    out.set_output(True).set_stride(compact(od))
    t["o"] = out
    if lse is not None:
        lse.set_output(True)
        t["stats"] = lse
    return g, t


def band_keywords(
    g: Any, o: Opts, t: dict[str, Any], padding: bool, max_sq: int = MAX_SQ, max_skv: int = MAX_SKV
) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "use_causal_mask": o.causal,
        "diagonal_alignment": alignment(o.bottom_right),
        "diagonal_band_left_bound": o.left,
        "diagonal_band_right_bound": o.right,
    }
    if o.alibi:
        kw["use_alibi_mask"] = True
    if o.softcap is not None:
        kw["softcap"] = o.softcap
    if o.bias is not None:
        dims = bias_dims(o.bias, MAX_B, max_sq, max_skv)
        t["bias"] = g.tensor(name="bias", dim=dims, stride=bias_strides(dims), data_type=o.bias_dtype)
        kw["bias"] = t["bias"]
    if padding:
        i32 = hipdnn.DataType.INT32
        t["seq_len_q"] = g.tensor(name="seq_q", dim=[MAX_B, 1, 1, 1], stride=[1, 1, 1, 1], data_type=i32)
        t["seq_len_kv"] = g.tensor(name="seq_kv", dim=[MAX_B, 1, 1, 1], stride=[1, 1, 1, 1], data_type=i32)
        kw.update(use_padding_mask=True, seq_len_q=t["seq_len_q"], seq_len_kv=t["seq_len_kv"])
    return kw


def lengths_pack(t: dict[str, Any], c: Shape, pack: dict[Any, Any], ov: dict[Any, Any]) -> None:
    if c.seq_q is None:
        return
    assert c.seq_kv is not None
    pack[t["seq_len_q"]] = torch.tensor(c.seq_q, dtype=torch.int32, device="cuda").view(c.b, 1, 1, 1)
    pack[t["seq_len_kv"]] = torch.tensor(c.seq_kv, dtype=torch.int32, device="cuda").view(c.b, 1, 1, 1)
    for n in ("seq_len_q", "seq_len_kv"):
        ov[t[n]] = hipdnn.OverrideEntry(shape=[c.b, 1, 1, 1], stride=[1, 1, 1, 1])


def run_forward(handle: Any, g: Any, t: dict[str, Any], dtype: hipdnn.DataType, o: Opts, c: Shape, gen: Any) -> None:
    tdt = TORCH[dtype]
    qd, kd = [c.b, HQ, c.sq, o.d], [c.b, HK, c.skv, o.d]
    vd, od = [c.b, HK, c.skv, o.dv], [c.b, HQ, c.sq, o.dv]
    q, k, v = (random_view(d, compact(d), tdt, gen) for d in (qd, kd, vd))
    out = Guarded(od, compact(od), tdt)
    st_dims = [c.b, HQ, c.sq, 1]
    lse = Guarded(st_dims, compact(st_dims), torch.float32)
    pack: dict[Any, Any] = {t["q"]: value(q, dtype), t["k"]: value(k, dtype), t["v"]: value(v, dtype)}
    pack[t["o"]] = value(out.view, dtype)
    pack[t["stats"]] = lse.view
    ov = {
        t["q"]: hipdnn.OverrideEntry(shape=qd, stride=compact(qd)),
        t["k"]: hipdnn.OverrideEntry(shape=kd, stride=compact(kd)),
        t["v"]: hipdnn.OverrideEntry(shape=vd, stride=compact(vd)),
        t["o"]: hipdnn.OverrideEntry(shape=od, stride=compact(od)),
        t["stats"]: hipdnn.OverrideEntry(shape=st_dims, stride=compact(st_dims)),
    }
    made = make_bias(o, c.b, c.sq, c.skv, gen)
    bias = None
    if made is not None:
        bias, bd, bs = made
        pack[t["bias"]] = value(bias, o.bias_dtype)
        ov[t["bias"]] = hipdnn.OverrideEntry(shape=bd, stride=bs)
    lengths_pack(t, c, pack, ov)
    g.execute(handle, pack, workspace_for(g), overrides=ov)
    torch.cuda.synchronize()
    want_o, want_lse, _ = band_reference(q, k, v, bias, o.scale, o, c.seq_q, c.seq_kv)
    got = out.view.float()
    assert not torch.isnan(got).any(), "an output element was not written (or is NaN)"
    assert out.guards_intact() and lse.guards_intact(), "a write landed outside the output"
    err = rel_err(got, want_o) if want_o.norm() > 0 else float(got.abs().max())
    assert err < TOL_O[dtype], f"relative error {err:.2e}"
    # A row whose scores all carry a bias past 2^100 (finfo.min) has stats only as large as the
    # kernel's bias limit lets them be (2^127, or 2^127 times the scale where a kernel keeps scores
    # in raw units: rfcs/0006): huge and of the same sign, not equal.
    got_lse = lse.view.float()
    huge = want_lse.isfinite() & (want_lse.abs() > 2.0**100)
    assert bool((got_lse[huge].abs() > 2.0**100).all()), "stats of a row at a huge bias"
    assert torch.equal(got_lse[huge].sign(), want_lse[huge].sign().float())
    check_lse(torch.where(huge, want_lse.float(), got_lse), want_lse)


# (name, options): every band and bias combination the task lists
OPTIONS = [
    ("left_tl", Opts(left=40)),
    ("left_br", Opts(left=40, bottom_right=True)),
    ("right_tl", Opts(right=20)),
    ("right_br", Opts(right=7, bottom_right=True)),
    ("both_tl", Opts(left=50, right=30)),
    ("both_br", Opts(left=3, right=2, bottom_right=True)),
    ("causal_window", Opts(causal=True, left=64)),
    ("causal_window_br", Opts(causal=True, left=129, bottom_right=True)),
    ("left1", Opts(left=1)),
    ("bias_bh_f32", Opts(bias="bh")),
    ("bias_b1_bf16", Opts(bias="b1", bias_dtype=BF16)),
    ("bias_1h_fp16", Opts(bias="1h", bias_dtype=HALF)),
    ("bias_11_f32_causal", Opts(bias="11", causal=True)),
    ("bias_inf_rows", Opts(bias="bh", inf_rows=True)),
    ("bias_inf_window_br", Opts(bias="1h", bias_dtype=BF16, inf_rows=True, left=33, bottom_right=True)),
    ("bias_window_right", Opts(bias="b1", bias_dtype=HALF, left=70, right=5)),
    ("bias_b11_bf16_causal", Opts(bias="b11", bias_dtype=BF16, causal=True)),
    ("bias_1h1_f32_inf", Opts(bias="1h1", inf_rows=True, left=33)),
    ("bias_huge_f32", Opts(bias="bh", huge=-1e30)),
    ("bias_huge_bf16_min_causal", Opts(bias="b1", bias_dtype=BF16, huge=BF16_MIN, causal=True)),
    ("bias_huge_fp16_min_window", Opts(bias="1h", bias_dtype=HALF, huge=HALF_MIN, left=33)),
]

# (B, Sq, Skv) served by the one plan built at the maximum shape
SHAPES = [(1, 1, 1), (2, 37, 37), (3, 129, 300), (2, 1, 300), (1, 37, 1), (3, 16, 300), (2, 129, 37), (1, 5, 129)]


@ENGINES
@pytest.mark.parametrize("dtype", [BF16, HALF], ids=["bf16", "fp16"])
@pytest.mark.parametrize(("name", "opts"), OPTIONS, ids=[n for n, _ in OPTIONS])
def test_forward_band_and_bias(handle: Any, engine: int, dtype: hipdnn.DataType, name: str, opts: Opts) -> None:
    check_forward(handle, engine, dtype, opts, SHAPES, seed_of(name))


PADDED = [
    Shape(3, 129, 300, seq_q=[0, 129, 50], seq_kv=[300, 7, 0]),
    Shape(3, 37, 300, seq_q=[37, 1, 20], seq_kv=[129, 300, 1]),
    Shape(2, 16, 129, seq_q=[16, 0], seq_kv=[100, 129]),
]


@ENGINES
@pytest.mark.parametrize("dtype", [BF16], ids=["bf16"])
@pytest.mark.parametrize(
    ("name", "opts"),
    [o for o in OPTIONS if o[0] in ("left_br", "both_tl", "causal_window_br", "bias_inf_window_br", "bias_bh_f32")],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_forward_band_and_bias_padded(handle: Any, engine: int, dtype: hipdnn.DataType, name: str, opts: Opts) -> None:
    """Per-batch lengths (0 included): bottom-right bounds use each batch's own lengths."""
    check_forward(handle, engine, dtype, opts, PADDED, 17, padding=True)


@pytest.mark.parametrize("dtype", [BF16, HALF], ids=["bf16", "fp16"])
def test_window_skips_tiles_at_long_sequences(handle: Any, dtype: hipdnn.DataType) -> None:
    """A window much shorter than the sequence (Sq = Skv = 2000, L = 300, causal): the tensor-core kernel
    walks only the tiles the window reaches, and is exact."""
    skip_unless_here(handle, TENSOR_CORE)
    o = Opts(causal=True, left=300, bias="11")
    g = gpu_graph("gpu_sdpa_window_long", dtype, overridable=False, engine=TENSOR_CORE)
    qd = [1, 2, 2000, 128]
    t: dict[str, Any] = {n: g.tensor(name=n, dim=qd, stride=compact(qd), data_type=dtype) for n in ("q", "k", "v")}
    bd = [1, 1, 2000, 2000]
    t["bias"] = g.tensor(name="bias", dim=bd, stride=compact(bd), data_type=FLOAT)
    out, lse = g.sdpa(
        t["q"], t["k"], t["v"], attn_scale=0.1, generate_stats=True, use_causal_mask=True,
        diagonal_band_left_bound=300, bias=t["bias"],
    )  # fmt: skip
    out.set_output(True).set_stride(compact(qd))
    assert lse is not None
    lse.set_output(True)
    g.build(handle)
    gen = torch.Generator(device="cuda").manual_seed(5)
    tdt = TORCH[dtype]
    q, k, v = (random_view(qd, compact(qd), tdt, gen) for _ in range(3))
    bias = random_view(bd, compact(bd), torch.float32, gen)
    o_buf = Guarded(qd, compact(qd), tdt)
    st = Guarded([1, 2, 2000, 1], compact([1, 2, 2000, 1]), torch.float32)
    g.execute(
        handle,
        {t["q"]: value(q, dtype), t["k"]: value(k, dtype), t["v"]: value(v, dtype), t["bias"]: bias,
         out: value(o_buf.view, dtype), lse: st.view},
        workspace_for(g),
    )  # fmt: skip
    torch.cuda.synchronize()
    p_o, p_lse, _ = band_reference(q, k, v, bias, 0.1, o, None, None)
    assert not torch.isnan(o_buf.view.float()).any() and o_buf.guards_intact()
    assert rel_err(o_buf.view.float(), p_o) < TOL_O[dtype]
    check_lse(st.view.float(), p_lse)


DECODE_OPTIONS = [
    ("window_br", Opts(left=700, bottom_right=True)),
    ("window_causal_br_bias", Opts(left=1000, causal=True, bottom_right=True, bias="bh", bias_dtype=BF16)),
    ("window_tl_right", Opts(left=100, right=2000)),
    ("bias_inf_rows", Opts(bias="1h", inf_rows=True)),
    ("bias_b11", Opts(bias="b11", bias_dtype=HALF)),
    ("bias_huge", Opts(bias="bh", huge=-1e30)),  # (splits of unequal lengths, merged by their sums)
]


@ENGINES
@pytest.mark.parametrize("dtype", [BF16, HALF], ids=["bf16", "fp16"])
@pytest.mark.parametrize(("name", "opts"), DECODE_OPTIONS, ids=[n for n, _ in DECODE_OPTIONS])
def test_decode_window_and_bias_long_cache(
    handle: Any, engine: int, dtype: hipdnn.DataType, name: str, opts: Opts
) -> None:
    """Decode shapes (Sq 1-16) against a 4097-key cache: on engine 202 the split-KV path, whose splits
    start at the window (without padding) or are cut per batch (with it)."""
    skip_unless_here(handle, engine)
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(name.encode()) % 10007 + 7)
    for padding in (False, True):
        g, t = fwd_graph(dtype, opts, engine, padding=padding, max_sq=16, max_skv=4097)
        g.build(handle)
        if padding:
            shapes = [Shape(3, 1, 4097, [1, 0, 1], [4097, 900, 17]), Shape(3, 16, 4000, [16, 3, 9], [3000, 4000, 1])]
        else:
            shapes = [Shape(3, 1, 4097), Shape(2, 16, 4097), Shape(1, 4, 1000), Shape(3, 7, 65), Shape(1, 1, 1)]
        for c in shapes:
            run_forward(handle, g, t, dtype, opts, c, gen)


# ------------------------------------------------------------------------------------------ backward
def bwd_graph(dtype: hipdnn.DataType, o: Opts, engine: int, padding: bool = False) -> Any:
    g = gpu_graph("gpu_sdpa_band_backward", dtype, overridable=True, engine=engine)
    qd, kd = [MAX_B, HQ, MAX_SQ, o.d], [MAX_B, HK, MAX_SKV, o.d]
    od, vd = [MAX_B, HQ, MAX_SQ, o.dv], [MAX_B, HK, MAX_SKV, o.dv]
    t: dict[str, Any] = {}
    for n, dims in (("q", qd), ("o", od), ("dO", od), ("k", kd), ("v", vd)):
        t[n] = g.tensor(name=n, dim=dims, stride=compact(dims), data_type=dtype)
    sd = [MAX_B, HQ, MAX_SQ, 1]
    t["stats"] = g.tensor(name="stats", dim=sd, stride=compact(sd), data_type=FLOAT)
    kw = band_keywords(g, o, t, padding)
    dq, dk, dv = g.sdpa_backward(t["q"], t["k"], t["v"], t["o"], t["dO"], t["stats"], attn_scale=o.scale, **kw)
    dq.set_output(True).set_stride(compact(qd))
    dk.set_output(True).set_stride(compact(kd))
    dv.set_output(True).set_stride(compact(vd))
    t.update(dQ=dq, dK=dk, dV=dv)
    return g, t


def run_backward(handle: Any, g: Any, t: dict[str, Any], dtype: hipdnn.DataType, o: Opts, c: Shape, gen: Any) -> None:
    tdt = TORCH[dtype]
    qd, kd, sd = [c.b, HQ, c.sq, o.d], [c.b, HK, c.skv, o.d], [c.b, HQ, c.sq, 1]
    od, vd = [c.b, HQ, c.sq, o.dv], [c.b, HK, c.skv, o.dv]
    q, do = random_view(qd, compact(qd), tdt, gen), random_view(od, compact(od), tdt, gen)
    k, v = random_view(kd, compact(kd), tdt, gen), random_view(vd, compact(vd), tdt, gen)
    made = make_bias(o, c.b, c.sq, c.skv, gen)
    bias = made[0] if made is not None else None
    o64, lse64, p = band_reference(q, k, v, bias, o.scale, o, c.seq_q, c.seq_kv)
    o_in = o64.to(tdt).contiguous()
    stats = lse64.float().contiguous()
    outs = {
        "dQ": Guarded(qd, compact(qd), tdt),
        "dK": Guarded(kd, compact(kd), tdt),
        "dV": Guarded(vd, compact(vd), tdt),
    }
    pack: dict[Any, Any] = {t["q"]: value(q, dtype), t["k"]: value(k, dtype), t["v"]: value(v, dtype)}
    pack.update({t["o"]: value(o_in, dtype), t["dO"]: value(do, dtype), t["stats"]: stats})
    pack.update({t[n]: value(x.view, dtype) for n, x in outs.items()})
    ov = {t[n]: hipdnn.OverrideEntry(shape=qd, stride=compact(qd)) for n in ("q", "dQ")}
    ov.update({t[n]: hipdnn.OverrideEntry(shape=od, stride=compact(od)) for n in ("o", "dO")})
    ov.update({t[n]: hipdnn.OverrideEntry(shape=kd, stride=compact(kd)) for n in ("k", "dK")})
    ov.update({t[n]: hipdnn.OverrideEntry(shape=vd, stride=compact(vd)) for n in ("v", "dV")})
    ov[t["stats"]] = hipdnn.OverrideEntry(shape=sd, stride=compact(sd))
    if made is not None:
        _, bd, bs = made
        pack[t["bias"]] = value(bias, o.bias_dtype)
        ov[t["bias"]] = hipdnn.OverrideEntry(shape=bd, stride=bs)
    lengths_pack(t, c, pack, ov)
    ws = workspace_for(g)
    if ws is not None:
        ws.fill_(0xFF)
    g.execute(handle, pack, ws, overrides=ov)
    torch.cuda.synchronize()
    want = gradients(q, k, v, o_in, do, p, o.scale, o.softcap)
    for (name, got), ref in zip(outs.items(), want):
        view = got.view.float()
        assert not torch.isnan(view).any(), f"{name}: an element was not written (or is NaN)"
        assert got.guards_intact(), f"{name}: a write landed outside the tensor"
        err = rel_err(view, ref) if ref.norm() > 0 else float(view.abs().max())
        assert err < TOL_GRAD[dtype], f"{name}: relative error {err:.2e} at {c}"


def as_shapes(cases: list[tuple[int, int, int]] | list[Shape]) -> list[Shape]:
    return [c if isinstance(c, Shape) else Shape(*c) for c in cases]


def check_forward(
    handle: Any,
    engine: int,
    dtype: hipdnn.DataType,
    opts: Opts,
    cases: list[tuple[int, int, int]] | list[Shape],
    seed: int,
    **graph: Any,
) -> None:
    """One plan at the maximum shape (``graph``: fwd_graph's keywords) built on ``engine``, then every case
    (B, Sq, Skv or a Shape with lengths) through overrides, each against the float64 reference."""
    skip_unless_here(handle, engine)
    g, t = fwd_graph(dtype, opts, engine, **graph)
    g.build(handle)
    assert g.get_engine_id() == engine
    gen = torch.Generator(device="cuda").manual_seed(seed)
    for c in as_shapes(cases):
        run_forward(handle, g, t, dtype, opts, c, gen)


def check_backward(
    handle: Any,
    engine: int,
    dtype: hipdnn.DataType,
    opts: Opts,
    cases: list[tuple[int, int, int]] | list[Shape],
    seed: int,
    padding: bool = False,
) -> None:
    """As check_forward, for the backward (dQ, dK, dV against the float64 gradients)."""
    skip_unless_here(handle, engine)
    g, t = bwd_graph(dtype, opts, engine, padding=padding)
    g.build(handle)
    assert g.get_engine_id() == engine
    gen = torch.Generator(device="cuda").manual_seed(seed)
    for c in as_shapes(cases):
        run_backward(handle, g, t, dtype, opts, c, gen)


def seed_of(name: str, offset: int = 0) -> int:
    return zlib.crc32(name.encode()) % 10007 + offset


BWD_OPTIONS = [
    o
    for o in OPTIONS
    if o[0] in ("left_tl", "left_br", "right_tl", "both_br", "causal_window", "bias_bh_f32", "bias_b1_bf16",
                "bias_1h_fp16", "bias_inf_rows", "bias_inf_window_br", "bias_b11_bf16_causal", "bias_1h1_f32_inf",
                "bias_huge_f32", "bias_huge_bf16_min_causal", "bias_huge_fp16_min_window")
]  # fmt: skip
BWD_SHAPES = [(1, 1, 1), (2, 37, 300), (3, 129, 37), (1, 129, 300), (2, 16, 129)]


@ENGINES
@pytest.mark.parametrize("dtype", [BF16, HALF], ids=["bf16", "fp16"])
@pytest.mark.parametrize(("name", "opts"), BWD_OPTIONS, ids=[n for n, _ in BWD_OPTIONS])
def test_backward_band_and_bias(handle: Any, engine: int, dtype: hipdnn.DataType, name: str, opts: Opts) -> None:
    check_backward(handle, engine, dtype, opts, BWD_SHAPES, seed_of(name, 1))


@ENGINES
@pytest.mark.parametrize("name", ["left_br", "bias_inf_window_br"])
def test_backward_band_and_bias_padded(handle: Any, engine: int, name: str) -> None:
    check_backward(handle, engine, BF16, dict(OPTIONS)[name], PADDED, 23, padding=True)


# (d_qk, d_v): head dims other than 64 / 128 run at a padded kernel head dim (64 or 128, zeros past
# the tensor's own columns, which are never written), d_qk != d_v too (issue 27)
HEAD_DIMS = [(8, 8), (40, 40), (72, 72), (80, 80), (96, 96), (120, 120), (128, 64), (64, 96), (32, 128)]
HEAD_DIM_OPTIONS = [
    ("none", Opts()),
    ("causal_br", Opts(causal=True, bottom_right=True)),
    ("bias_inf_window_br", Opts(bias="1h", bias_dtype=BF16, inf_rows=True, left=33, bottom_right=True)),
]


@ENGINES
@pytest.mark.parametrize(("d", "dv"), HEAD_DIMS, ids=[f"d{a}_dv{b}" for a, b in HEAD_DIMS])
@pytest.mark.parametrize(("name", "base"), HEAD_DIM_OPTIONS, ids=[n for n, _ in HEAD_DIM_OPTIONS])
def test_head_dims_forward_and_decode(handle: Any, engine: int, d: int, dv: int, name: str, base: Opts) -> None:
    """Prefill and decode shapes (Sq 1 and 16: the split-KV path on engine 202) of one max-shape plan."""
    skip_unless_here(handle, engine)
    opts = replace(base, d=d, dv=dv, scale=0.9 / math.sqrt(d))
    g, t = fwd_graph(BF16, opts, engine)
    g.build(handle)
    assert g.get_engine_id() == engine
    gen = torch.Generator(device="cuda").manual_seed(d * 1000 + dv)
    for b, sq, skv in [(3, 129, 300), (2, 1, 300), (3, 16, 257), (1, 37, 1), (2, 100, 100)]:
        run_forward(handle, g, t, BF16, opts, Shape(b, sq, skv), gen)


@ENGINES
@pytest.mark.parametrize(("d", "dv"), HEAD_DIMS, ids=[f"d{a}_dv{b}" for a, b in HEAD_DIMS])
@pytest.mark.parametrize(("name", "base"), HEAD_DIM_OPTIONS, ids=[n for n, _ in HEAD_DIM_OPTIONS])
def test_head_dims_backward(handle: Any, engine: int, d: int, dv: int, name: str, base: Opts) -> None:
    skip_unless_here(handle, engine)
    opts = replace(base, d=d, dv=dv, scale=0.9 / math.sqrt(d))
    g, t = bwd_graph(HALF, opts, engine)
    g.build(handle)
    gen = torch.Generator(device="cuda").manual_seed(d * 1000 + dv + 1)
    for b, sq, skv in [(3, 129, 300), (1, 1, 37), (2, 64, 129)]:
        run_backward(handle, g, t, HALF, opts, Shape(b, sq, skv), gen)


@pytest.mark.parametrize("kernel", ["ws_2wg", "ws_cp", "wg", "serial", "mma"])
def test_forced_kernels_with_padded_head_dims(handle: Any, kernel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forced family that has no padded head dim (wgmma, mma.sync) is never given one: the call is
    routed to one that has (and a negative scale to the portable kernel), and stays exact."""
    skip_unless_here(handle, TENSOR_CORE)
    monkeypatch.setenv("HIPDNN_HIP_202_KERNEL", kernel)
    for scale, (d, dv) in ((0.1, (80, 80)), (-0.1, (40, 40)), (0.1, (128, 64))):
        opts = Opts(causal=True, scale=scale, d=d, dv=dv)
        g, t = fwd_graph(BF16, opts, TENSOR_CORE)
        g.build(handle)
        gen = torch.Generator(device="cuda").manual_seed(5)
        for b, sq, skv in [(3, 129, 300), (2, 1, 300), (1, 37, 37)]:
            run_forward(handle, g, t, BF16, opts, Shape(b, sq, skv), gen)


@pytest.mark.parametrize("kernel", ["ws_2wg", "ws_cp", "wg", "serial", "mma"])
def test_forced_kernels_never_ignore_an_option(handle: Any, kernel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """HIPDNN_HIP_202_KERNEL forcing a family that serves neither bias nor window: the call is still exact
    (routed to a family that serves them), and so is a negative scale (the wgmma kernels need > 0)."""
    skip_unless_here(handle, TENSOR_CORE)
    monkeypatch.setenv("HIPDNN_HIP_202_KERNEL", kernel)
    for scale in (0.9 / 8, -0.1):
        opts = Opts(left=40, bias="b1", bias_dtype=BF16, bottom_right=True, scale=scale)
        g, t = fwd_graph(BF16, opts, TENSOR_CORE)
        g.build(handle)
        gen = torch.Generator(device="cuda").manual_seed(3)
        for b, sq, skv in [(3, 129, 300), (2, 1, 300), (1, 37, 37)]:
            run_forward(handle, g, t, BF16, opts, Shape(b, sq, skv), gen)


# Huge finite biases on every prefill kernel that serves a bias: engine 202's warp-specialized kernel
# with K and V by the copy engine ("auto") or by cp.async ("ws_cp"), its portable fallback (a scale
# that is not positive) and engine 201; at a scale below 1/2 (where raw-unit kernels limit the bias
# to 2^127 times the scale), negative, at padded head dims, and positive huge values.
HUGE_FORCED = [
    ("f32_small_scale", Opts(bias="bh", huge=-1e30, scale=0.05)),
    ("bf16_min_negative_scale_causal", Opts(bias="b1", bias_dtype=BF16, huge=BF16_MIN, causal=True, scale=-0.1)),
    ("fp16_min_window_d80", Opts(bias="1h", bias_dtype=HALF, huge=HALF_MIN, left=33, d=80, dv=80, scale=0.1)),
    ("f32_positive_huge", Opts(bias="b11", huge=1e30)),
    ("bf16_min_d128_dv64_br", Opts(bias="bh", bias_dtype=BF16, huge=BF16_MIN, right=5, bottom_right=True, d=128)),
]
KERNEL_PATHS = [(TENSOR_CORE, "auto"), (TENSOR_CORE, "ws_cp"), (PORTABLE, "auto")]


@pytest.mark.parametrize(("engine", "kernel"), KERNEL_PATHS, ids=[f"{e}_{k}" for e, k in KERNEL_PATHS])
@pytest.mark.parametrize(("name", "opts"), HUGE_FORCED, ids=[n for n, _ in HUGE_FORCED])
def test_huge_biases_on_every_prefill_kernel(
    handle: Any, engine: int, kernel: str, name: str, opts: Opts, monkeypatch: pytest.MonkeyPatch
) -> None:
    skip_unless_here(handle, engine)
    monkeypatch.setenv("HIPDNN_HIP_202_KERNEL", kernel)
    cases = [(3, 129, 300), (2, 1, 300), (1, 37, 37), (2, 64, 129), (1, 1, 1)]
    for dtype in (BF16, HALF):
        check_forward(handle, engine, dtype, opts, cases, seed_of(name, 3))


@pytest.mark.parametrize("engine", [TENSOR_CORE, PORTABLE], ids=["tc202", "portable201"])
@pytest.mark.parametrize(("name", "opts"), HUGE_FORCED, ids=[n for n, _ in HUGE_FORCED])
def test_huge_biases_backward_at_every_scale(handle: Any, engine: int, name: str, opts: Opts) -> None:
    check_backward(handle, engine, BF16, opts, [(3, 129, 37), (2, 37, 300), (1, 1, 1)], seed_of(name, 4))


@ENGINES
def test_a_call_whose_bias_key_dim_is_strided_is_refused(handle: Any, engine: int) -> None:
    """The kernels read each bias row contiguously: an override giving the key dim another stride is
    refused before any launch, with the reason."""
    skip_unless_here(handle, engine)
    opts = Opts(bias="11")
    g, t = fwd_graph(BF16, opts, engine)
    g.build(handle)
    gen = torch.Generator(device="cuda").manual_seed(11)
    b, sq, skv = 1, 37, 100
    qd, kd, sd = [b, HQ, sq, 64], [b, HK, skv, 64], [b, HQ, sq, 1]
    q, k, v = (random_view(d, compact(d), torch.bfloat16, gen) for d in (qd, kd, kd))
    o = torch.empty(qd, dtype=torch.bfloat16, device="cuda")
    st = torch.empty(sd, dtype=torch.float32, device="cuda")
    bias = torch.zeros(sq * 2 * skv, dtype=torch.float32, device="cuda")
    bd, bs = [1, 1, sq, skv], [sq * 2 * skv, sq * 2 * skv, 2 * skv, 2]
    pack = {t["q"]: value(q, BF16), t["k"]: value(k, BF16), t["v"]: value(v, BF16), t["o"]: value(o, BF16)}
    pack.update({t["stats"]: st, t["bias"]: bias.as_strided(bd, bs)})
    ov = {t[n]: hipdnn.OverrideEntry(shape=d, stride=compact(d)) for n, d in (("q", qd), ("k", kd), ("v", kd))}
    ov[t["o"]] = hipdnn.OverrideEntry(shape=qd, stride=compact(qd))
    ov[t["stats"]] = hipdnn.OverrideEntry(shape=sd, stride=compact(sd))
    ov[t["bias"]] = hipdnn.OverrideEntry(shape=bd, stride=bs)
    with pytest.raises(hipdnn.HipdnnError, match="bias has key-dim stride 2; a stride other than 1 is not supported"):
        g.execute(handle, pack, workspace_for(g), overrides=ov)
