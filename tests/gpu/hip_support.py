"""Helpers shared by the GPU engine tests and bench/gpu_sdpa.py: locating the HIP engine plugin,
building SDPA graphs for it, and a float32 reference on the device."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import hipdnn

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_NAME = "libhipdnn_hip_engine.so"
PORTABLE, TENSOR_CORE = 201, 202


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
    g = hipdnn.Graph(
        name="gpu_sdpa",
        io_data_type=dtype,
        intermediate_data_type=hipdnn.DataType.FLOAT,
        compute_data_type=hipdnn.DataType.FLOAT,
        is_override_shape_enabled=overridable,
        preferred_engine_id=engine,
    )
    qs, kvs = layout_strides(layout, b, hq, sq, d), layout_strides(layout, b, hk, skv, d)
    q = g.tensor(name="q", dim=q_dims, stride=qs, data_type=dtype)
    k = g.tensor(name="k", dim=kv_dims, stride=kvs, data_type=dtype)
    v = g.tensor(name="v", dim=kv_dims, stride=kvs, data_type=dtype)
    extra: dict[str, Any] = {}
    if padding:
        i32 = hipdnn.DataType.INT32
        extra["seq_len_q"] = g.tensor(name="seq_q", dim=[b, 1, 1, 1], stride=[1, 1, 1, 1], data_type=i32)
        extra["seq_len_kv"] = g.tensor(name="seq_kv", dim=[b, 1, 1, 1], stride=[1, 1, 1, 1], data_type=i32)
    o, lse = g.sdpa(
        q,
        k,
        v,
        attn_scale=scale,
        use_causal_mask=causal,
        generate_stats=stats,
        diagonal_alignment=hipdnn.DiagonalAlignment.BOTTOM_RIGHT if bottom_right else hipdnn.DiagonalAlignment.TOP_LEFT,
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
    g = hipdnn.Graph(
        name="gpu_sdpa_dynamic",
        io_data_type=dtype,
        intermediate_data_type=hipdnn.DataType.FLOAT,
        compute_data_type=hipdnn.DataType.FLOAT,
        is_override_shape_enabled=True,
        preferred_engine_id=engine,
    )
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
        i = torch.arange(lq, device=q.device)[:, None]
        j = torch.arange(lkv, device=q.device)[None, :]
        allowed = torch.ones(lq, lkv, dtype=torch.bool, device=q.device)
        if causal_tl:
            allowed &= j <= i
        if causal_br:
            allowed &= j <= i + (lkv - lq)
        s = s.masked_fill(~allowed, -math.inf)
        m = s.amax(dim=-1, keepdim=True)
        live = torch.isfinite(m)
        p = torch.exp(s - torch.where(live, m, torch.zeros_like(m)))
        den = p.sum(dim=-1, keepdim=True)
        o[bi, :, :lq] = torch.where(live, torch.matmul(p, vf[bi, :, :lkv]) / den.clamp_min(1e-30), 0.0)
        lse[bi, :, :lq] = torch.where(live, m + torch.log(den.clamp_min(1e-30)), -math.inf)
    return o, lse


def flops(b: int, h: int, sq: int, skv: int, d: int, causal: bool) -> float:
    """Forward SDPA flops counted the usual way (two matmuls; causal halves them when Sq == Skv)."""
    f = 4.0 * b * h * sq * skv * d
    return f / 2 if causal else f


def workspace_for(g: hipdnn.Graph) -> Any:
    """The device workspace a built graph asks for (engine 202's decode path needs one), or None."""
    import torch

    size = g.get_workspace_size()
    return torch.empty(size, dtype=torch.uint8, device="cuda") if size else None
