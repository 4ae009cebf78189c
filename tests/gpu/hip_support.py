"""Helpers shared by the GPU engine tests and bench/gpu_sdpa.py: locating (or building) the HIP engine
plugin, building SDPA forward and backward graphs for it, and references on the device (float32 for
the forward's output, float64 for the backward's gradients)."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hipdnn

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_NAME = "libhipdnn_hip_engine.so"
PORTABLE, TENSOR_CORE = 201, 202
#: the GPU compilers on PATH that engines/hip builds with (nvcc is preferred when both are present)
GPU_COMPILERS = [c for c in ("nvcc", "hipcc") if shutil.which(c)]


def build_hip_wheel(out: Path) -> Path:
    """engines/hip built as a wheel into ``out`` with this machine's GPU compiler, as ``pip install
    ./engines/hip`` builds it (without build isolation: the test extra has the build requirements).
    About 1.5 min for a first build on 2 cores; engines/hip/build keeps the build tree for the next."""
    command = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", str(out)]
    result = subprocess.run([*command, str(ROOT / "engines" / "hip")], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    (wheel,) = out.glob("hipdnn_engine_hip-*.whl")
    return wheel


def plugin_of_wheel(wheel: Path, out: Path) -> Path:
    """The engine library of a hipdnn-engine-hip wheel, extracted under ``out`` (mode 0755: the loader
    refuses files others may write)."""
    with zipfile.ZipFile(wheel) as z:
        z.extract(f"hipdnn_engine_hip/{PLUGIN_NAME}", out)
    plugin = out / "hipdnn_engine_hip" / PLUGIN_NAME
    plugin.chmod(0o755)
    return plugin


def find_plugin() -> Path | None:
    """HIPDNN_HIP_ENGINE (a path), else the installed hipdnn-engine-hip distribution (found through its
    hipdnn.engine_plugins entry point), else hipdnn's own engines directory (a tree configured with
    -DHIPDNN_BUILD_HIP_ENGINE=ON), else a build tree (of the whole project or of engines/hip alone)."""
    from hipdnn.plugins.discovery import entry_point_dirs

    env = os.environ.get("HIPDNN_HIP_ENGINE")
    if env:
        return Path(env) if Path(env).is_file() else None
    candidates = [sp.path / PLUGIN_NAME for sp in entry_point_dirs()[0]]
    candidates.append(Path(hipdnn.__file__).parent / "engines" / PLUGIN_NAME)
    for build in (ROOT / ".gpu_build", ROOT / "build"):
        candidates += sorted(build.glob(f"**/engines/hip/{PLUGIN_NAME}"))
    candidates += sorted((ROOT / "engines" / "hip" / "build").glob(f"*/{PLUGIN_NAME}"))
    return next((c for c in candidates if c.is_file()), None)


def compact(dims: list[int]) -> list[int]:
    strides = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        strides[i] = strides[i + 1] * dims[i + 1]
    return strides


def layout_strides(layout: str, b: int, h: int, s: int, d: int) -> list[int]:
    """[B, H, S, D] strides of a BHSD or BSHD buffer."""
    if layout == "bshd":
        return [s * h * d, d, h * d, 1]
    return compact([b, h, s, d])


def gpu_graph(name: str, dtype: hipdnn.DataType, *, overridable: bool, engine: int | None) -> hipdnn.Graph:
    """A graph of bf16 / fp16 io with fp32 intermediates and compute, as the GPU engine takes them."""
    return hipdnn.Graph(
        name=name,
        io_data_type=dtype,
        intermediate_data_type=hipdnn.DataType.FLOAT,
        compute_data_type=hipdnn.DataType.FLOAT,
        is_override_shape_enabled=overridable,
        preferred_engine_id=engine,
    )


def seq_len_tensors(g: hipdnn.Graph, b: int) -> dict[str, hipdnn.TensorAttributes]:
    """The padding mask's INT32 [B, 1, 1, 1] seq_len_q and seq_len_kv, keyed as the sdpa calls take them."""
    i32 = hipdnn.DataType.INT32
    return {
        "seq_len_q": g.tensor(name="seq_q", dim=[b, 1, 1, 1], stride=[1, 1, 1, 1], data_type=i32),
        "seq_len_kv": g.tensor(name="seq_kv", dim=[b, 1, 1, 1], stride=[1, 1, 1, 1], data_type=i32),
    }


def alignment(bottom_right: bool) -> hipdnn.DiagonalAlignment:
    return hipdnn.DiagonalAlignment.BOTTOM_RIGHT if bottom_right else hipdnn.DiagonalAlignment.TOP_LEFT


def sdpa_graph(
    dtype: hipdnn.DataType,
    q_dims: list[int],
    kv_dims: list[int],
    layout: str,
    *,
    causal: bool = False,
    bottom_right: bool = False,
    stats: bool = True,
    overridable: bool = False,
    scale: float | None = None,
    padding: bool = False,
    engine: int | None = None,
) -> tuple[hipdnn.Graph, dict[str, hipdnn.TensorAttributes]]:
    b, hq, sq, d = q_dims
    _, hk, skv, _ = kv_dims
    g = gpu_graph("gpu_sdpa", dtype, overridable=overridable, engine=engine)
    qs, kvs = layout_strides(layout, b, hq, sq, d), layout_strides(layout, b, hk, skv, d)
    q = g.tensor(name="q", dim=q_dims, stride=qs, data_type=dtype)
    k = g.tensor(name="k", dim=kv_dims, stride=kvs, data_type=dtype)
    v = g.tensor(name="v", dim=kv_dims, stride=kvs, data_type=dtype)
    extra: dict[str, Any] = seq_len_tensors(g, b) if padding else {}
    o, lse = g.sdpa(
        q,
        k,
        v,
        attn_scale=scale,
        use_causal_mask=causal,
        generate_stats=stats,
        diagonal_alignment=alignment(bottom_right),
        use_padding_mask=padding,
        **extra,
    )
    o.set_output(True).set_stride(qs)
    tensors = {"q": q, "k": k, "v": v, "o": o, **extra}
    if lse is not None:
        lse.set_output(True)
        tensors["stats"] = lse
    return g, tensors


# Axis orders of dynamic [B, H, S, D] tensors (their declared "strides": 0 = innermost axis).
AXIS_ORDER = {"bhsd": [3, 2, 1, 0], "bshd": [3, 1, 2, 0]}


def dynamic_sdpa_graph(
    dtype: hipdnn.DataType,
    h: int,
    hk: int,
    d: int,
    layout: str,
    *,
    causal: bool = False,
    stats: bool = True,
    scale: float | None = None,
    engine: int | None = None,
) -> tuple[hipdnn.Graph, dict[str, hipdnn.TensorAttributes]]:
    """q, k, v declared [-1, h, -1, d] / [-1, hk, -1, d] and marked dynamic, in the axis order of
    ``layout``; o and stats inferred (dynamic, o in q's order). -1 heads are allowed too."""
    g = gpu_graph("gpu_sdpa_dynamic", dtype, overridable=True, engine=engine)
    dyn, order = hipdnn.DYNAMIC_DIM, AXIS_ORDER[layout]
    q = g.tensor(name="q", dim=[dyn, h, dyn, d], stride=order, data_type=dtype).mark_dynamic()
    k = g.tensor(name="k", dim=[dyn, hk, dyn, d], stride=order, data_type=dtype).mark_dynamic()
    v = g.tensor(name="v", dim=[dyn, hk, dyn, d], stride=order, data_type=dtype).mark_dynamic()
    o, lse = g.sdpa(q, k, v, attn_scale=scale, use_causal_mask=causal, generate_stats=stats)
    o.set_output(True)
    tensors = {"q": q, "k": k, "v": v, "o": o}
    if lse is not None:
        lse.set_output(True)
        tensors["stats"] = lse
    return g, tensors


def sdpa_backward_graph(
    dtype: hipdnn.DataType,
    q_dims: list[int],
    kv_dims: list[int],
    layout: str,
    *,
    causal: bool = False,
    bottom_right: bool = False,
    overridable: bool = False,
    scale: float | None = None,
    padding: bool = False,
    engine: int | None = None,
) -> tuple[hipdnn.Graph, dict[str, hipdnn.TensorAttributes]]:
    """One SDPA backward node: q, o, dO and dQ [B, Hq, Sq, D] and k, v, dK, dV [B, Hk, Skv, D] in
    ``layout``, stats [B, Hq, Sq, 1] fp32 (compact); tensors keyed q, k, v, o, dO, stats, dQ, dK, dV
    (and seq_len_q / seq_len_kv with ``padding``)."""
    b, hq, sq, d = q_dims
    _, hk, skv, _ = kv_dims
    g = gpu_graph("gpu_sdpa_backward", dtype, overridable=overridable, engine=engine)
    qs, kvs = layout_strides(layout, b, hq, sq, d), layout_strides(layout, b, hk, skv, d)
    t: dict[str, hipdnn.TensorAttributes] = {}
    for name in ("q", "o", "dO"):
        t[name] = g.tensor(name=name, dim=q_dims, stride=qs, data_type=dtype)
    for name in ("k", "v"):
        t[name] = g.tensor(name=name, dim=kv_dims, stride=kvs, data_type=dtype)
    t["stats"] = g.tensor(
        name="stats", dim=[b, hq, sq, 1], stride=compact([b, hq, sq, 1]), data_type=hipdnn.DataType.FLOAT
    )
    extra: dict[str, Any] = seq_len_tensors(g, b) if padding else {}
    dq, dk, dv = g.sdpa_backward(
        t["q"],
        t["k"],
        t["v"],
        t["o"],
        t["dO"],
        t["stats"],
        attn_scale=scale,
        use_causal_mask=causal,
        diagonal_alignment=alignment(bottom_right),
        use_padding_mask=padding,
        **extra,
    )
    dq.set_output(True).set_stride(qs)
    dk.set_output(True).set_stride(kvs)
    dv.set_output(True).set_stride(kvs)
    t.update(dQ=dq, dK=dk, dV=dv, **extra)
    return g, t


def dynamic_sdpa_backward_graph(
    dtype: hipdnn.DataType,
    h: int,
    hk: int,
    d: int,
    layout: str,
    *,
    causal: bool = False,
    bottom_right: bool = False,
    scale: float | None = None,
    engine: int | None = None,
) -> tuple[hipdnn.Graph, dict[str, hipdnn.TensorAttributes]]:
    """The backward node with q, o, dO declared [-1, h, -1, d], k, v [-1, hk, -1, d] (dynamic, in the
    axis order of ``layout``) and stats [-1, h, -1, 1]; dQ, dK, dV inferred dynamic. -1 heads are
    allowed too."""
    g = gpu_graph("gpu_sdpa_backward_dynamic", dtype, overridable=True, engine=engine)
    dyn, order = hipdnn.DYNAMIC_DIM, AXIS_ORDER[layout]
    t: dict[str, hipdnn.TensorAttributes] = {}
    for name, heads in (("q", h), ("o", h), ("dO", h), ("k", hk), ("v", hk)):
        t[name] = g.tensor(name=name, dim=[dyn, heads, dyn, d], stride=order, data_type=dtype).mark_dynamic()
    t["stats"] = g.tensor(
        name="stats", dim=[dyn, h, dyn, 1], stride=AXIS_ORDER["bhsd"], data_type=hipdnn.DataType.FLOAT
    ).mark_dynamic()
    dq, dk, dv = g.sdpa_backward(
        t["q"],
        t["k"],
        t["v"],
        t["o"],
        t["dO"],
        t["stats"],
        attn_scale=scale,
        use_causal_mask=causal,
        diagonal_alignment=alignment(bottom_right),
    )
    for x in (dq, dk, dv):
        x.set_output(True)
    t.update(dQ=dq, dK=dk, dV=dv)
    return g, t


def visible(lq: int, lkv: int, causal_tl: bool, causal_br: bool, device: Any) -> Any:
    """[lq, lkv] bool: which keys each query row sees under the causal masks (at these lengths)."""
    import torch

    i = torch.arange(lq, device=device)[:, None]
    j = torch.arange(lkv, device=device)[None, :]
    allowed = torch.ones(lq, lkv, dtype=torch.bool, device=device)
    if causal_tl:
        allowed &= j <= i
    if causal_br:
        allowed &= j <= i + (lkv - lq)
    return allowed


def reference(
    q: Any,
    k: Any,
    v: Any,
    scale: float,
    *,
    causal_tl: bool = False,
    causal_br: bool = False,
    seq_q: list[int] | None = None,
    seq_kv: list[int] | None = None,
) -> tuple[Any, Any]:
    """o [B,Hq,Sq,D] and natural-log LSE [B,Hq,Sq,1] in float32 (torch, on q's device). Fully masked
    rows and rows past a batch's seq_len_q give o = 0 and lse = -inf."""
    import torch

    b, hq, sq, d = q.shape
    hk, skv = k.shape[1], k.shape[2]
    qf, kf, vf = q.float(), k.float(), v.float()
    if hq != hk:
        kf = kf.repeat_interleave(hq // hk, dim=1)
        vf = vf.repeat_interleave(hq // hk, dim=1)
    o = torch.zeros(b, hq, sq, vf.shape[3], device=q.device, dtype=torch.float32)
    lse = torch.full((b, hq, sq, 1), -math.inf, device=q.device, dtype=torch.float32)
    for bi in range(b):
        lq = sq if seq_q is None else min(seq_q[bi], sq)
        lkv = skv if seq_kv is None else min(seq_kv[bi], skv)
        if lq <= 0 or lkv <= 0:
            continue
        s = torch.matmul(qf[bi, :, :lq], kf[bi, :, :lkv].transpose(-1, -2)) * scale
        s = s.masked_fill(~visible(lq, lkv, causal_tl, causal_br, q.device), -math.inf)
        m = s.amax(dim=-1, keepdim=True)
        live = torch.isfinite(m)
        p = torch.exp(s - torch.where(live, m, torch.zeros_like(m)))
        den = p.sum(dim=-1, keepdim=True)
        o[bi, :, :lq] = torch.where(live, torch.matmul(p, vf[bi, :, :lkv]) / den.clamp_min(1e-30), 0.0)
        lse[bi, :, :lq] = torch.where(live, m + torch.log(den.clamp_min(1e-30)), -math.inf)
    return o, lse


#: float64 [heads, Sq, Skv] matrices of the references are built this many bytes at a time (at least one head)
REFERENCE_CHUNK_BYTES = 1 << 30


def _head_chunks(
    q: Any, k: Any, causal_tl: bool, causal_br: bool, seq_q: list[int] | None, seq_kv: list[int] | None
) -> Iterator[tuple[int, int, int, Any, int, int, Any]]:
    """(batch, first and last + 1 query head, their kv heads, lq, lkv, visible mask) over every batch
    with rows and keys, a few query heads at a time so that [heads, lq, lkv] float64 matrices stay
    near 1 GiB."""
    import torch

    b, hq, sq, _ = q.shape
    hk, skv = k.shape[1], k.shape[2]
    for bi in range(b):
        lq = sq if seq_q is None else min(seq_q[bi], sq)
        lkv = skv if seq_kv is None else min(seq_kv[bi], skv)
        if lq <= 0 or lkv <= 0:
            continue
        allowed = visible(lq, lkv, causal_tl, causal_br, q.device)
        step = max(1, REFERENCE_CHUNK_BYTES // (lq * lkv * 8))
        for h0 in range(0, hq, step):
            h1 = min(hq, h0 + step)
            kv_heads = torch.arange(h0, h1, device=q.device) // (hq // hk)
            yield bi, h0, h1, kv_heads, lq, lkv, allowed


def _probabilities(qh: Any, kh: Any, scale: float, allowed: Any) -> tuple[Any, Any]:
    """Softmax probabilities of the scores (0 in a row that sees no key) and the natural-log LSE
    (-inf there), in qh's precision."""
    import torch

    s = (qh @ kh.transpose(-1, -2) * scale).masked_fill(~allowed, -math.inf)
    m = s.amax(dim=-1, keepdim=True)
    live = torch.isfinite(m)
    e = torch.exp(s - torch.where(live, m, torch.zeros_like(m)))
    den = e.sum(dim=-1, keepdim=True).clamp_min(1e-300)
    return torch.where(live, e / den, 0.0), torch.where(live, m + torch.log(den), -math.inf)


def forward64(
    q: Any,
    k: Any,
    v: Any,
    scale: float,
    *,
    causal_tl: bool = False,
    causal_br: bool = False,
    seq_q: list[int] | None = None,
    seq_kv: list[int] | None = None,
) -> tuple[Any, Any]:
    """o [B,Hq,Sq,D] and natural-log LSE [B,Hq,Sq,1] in float64 (torch, on q's device), a few heads
    at a time (large shapes). Rows that see no key and rows past seq_len_q: o = 0, lse = -inf."""
    import torch

    f64 = torch.float64
    b, hq, sq, _ = q.shape
    o = torch.zeros(b, hq, sq, v.shape[3], device=q.device, dtype=f64)
    lse = torch.full((b, hq, sq, 1), -math.inf, device=q.device, dtype=f64)
    for bi, h0, h1, kvh, lq, lkv, allowed in _head_chunks(q, k, causal_tl, causal_br, seq_q, seq_kv):
        qh = q[bi, h0:h1, :lq].to(f64)
        kh, vh = (x[bi, :, :lkv].to(f64).index_select(0, kvh) for x in (k, v))
        p, lse_h = _probabilities(qh, kh, scale, allowed)
        o[bi, h0:h1, :lq] = p @ vh
        lse[bi, h0:h1, :lq] = lse_h
    return o, lse


def reference_backward(
    q: Any,
    k: Any,
    v: Any,
    o: Any,
    do: Any,
    scale: float,
    *,
    causal_tl: bool = False,
    causal_br: bool = False,
    seq_q: list[int] | None = None,
    seq_kv: list[int] | None = None,
) -> tuple[Any, Any, Any]:
    """dQ, dK, dV in float64 (torch, on q's device), from the definition: P recomputed from q, k, the
    scale and masks; dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO * O)), dQ = scale dS K,
    dK = scale dS^T Q; dK and dV summed over each group of Hq / Hk query heads. ``o`` is the forward
    output as the engine reads it (rounded to the input type). Rows past a batch's seq_len_q (of dQ)
    or seq_len_kv (of dK, dV), and rows that see no key, are 0."""
    import torch

    f64 = torch.float64
    dq = torch.zeros(q.shape, device=q.device, dtype=f64)
    dk = torch.zeros(k.shape, device=q.device, dtype=f64)
    dv = torch.zeros(v.shape, device=q.device, dtype=f64)
    for bi, h0, h1, kvh, lq, lkv, allowed in _head_chunks(q, k, causal_tl, causal_br, seq_q, seq_kv):
        qh, oh, doh = (x[bi, h0:h1, :lq].to(f64) for x in (q, o, do))
        kh, vh = (x[bi, :, :lkv].to(f64).index_select(0, kvh) for x in (k, v))
        p, _ = _probabilities(qh, kh, scale, allowed)
        ds = p * (doh @ vh.transpose(-1, -2) - (doh * oh).sum(dim=-1, keepdim=True))
        dq[bi, h0:h1, :lq] = scale * (ds @ kh)
        dk[bi, :, :lkv].index_add_(0, kvh, scale * (ds.transpose(-1, -2) @ qh))
        dv[bi, :, :lkv].index_add_(0, kvh, p.transpose(-1, -2) @ doh)
    return dq, dk, dv


def flops(b: int, h: int, sq: int, skv: int, d: int, causal: bool) -> float:
    """Forward SDPA flops counted the usual way (two matmuls; causal halves them when Sq == Skv)."""
    f = 4.0 * b * h * sq * skv * d
    return f / 2 if causal else f


#: SDPA backward flops as the issue (and the PyTorch anchors) count them: 2.5 x the forward's
BACKWARD_FLOPS_FACTOR = 2.5

# The backward's workspace rule (engines/hip/src/sdpa_bwd_plan.h), for checking what plans report.
BWD_WORKSPACE_CAP = 256 << 20
BWD_WORKSPACE_ALIGN = 256


def bwd_pair_bytes(hq: int, hk: int, sq: int, d: int) -> int:
    """Workspace of one (batch, kv head) pair: its Hq / Hk heads' rows (Sq rounded up to 128 each, whole
    query tiles), D + 4 floats a row and one int flag, 256-aligned."""
    raw = (hq // hk) * ((sq + 127) // 128 * 128) * (d + 4) * 4 + 4
    return (raw + BWD_WORKSPACE_ALIGN - 1) // BWD_WORKSPACE_ALIGN * BWD_WORKSPACE_ALIGN


def bwd_plan_workspace(b: int, hq: int, hk: int, sq: int, d: int) -> int:
    """What a backward plan of this maximum shape reports: every pair, capped (a wildcard, -1, anywhere:
    the cap), and room to align the pointer."""
    if min(b, hq, hk, sq, d) <= 0:
        return BWD_WORKSPACE_CAP + BWD_WORKSPACE_ALIGN
    return min(BWD_WORKSPACE_CAP, bwd_pair_bytes(hq, hk, sq, d) * b * hk) + BWD_WORKSPACE_ALIGN


def workspace_for(g: hipdnn.Graph) -> Any:
    """The device workspace a built graph asks for (engine 202's decode path needs one), or None."""
    import torch

    size = g.get_workspace_size()
    return torch.empty(size, dtype=torch.uint8, device="cuda") if size else None
