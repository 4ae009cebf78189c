"""Shared by tests/torch/: the float64 reference (written here from the definitions, independent of
torch's SDPA backends) and input makers."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="hipdnn.torch needs PyTorch (pip install 'hipdnn[torch]')")


def rand(*shape: int, seed: int = 0) -> Any:
    """Standard normal float32 of this shape, from its own seeded generator."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def visible(
    sq: int,
    skv: int,
    *,
    causal: bool = False,
    bottom_right: bool = False,
    left: int | None = None,
    right: int | None = None,
    len_q: int | None = None,
    len_kv: int | None = None,
) -> Any:
    """[Sq, Skv] bool: key j visible to query i (hipdnn's definitions; lengths: padding of one sequence)."""
    i = torch.arange(sq)[:, None]
    j = torch.arange(skv)[None, :]
    lq = sq if len_q is None else len_q
    lkv = skv if len_kv is None else len_kv
    shift = lkv - lq if bottom_right else 0
    m = (i < lq) & (j < lkv)
    if causal:
        m = m & (j <= i + shift)
    if right is not None:
        m = m & (j <= i + shift + right)
    if left is not None:
        m = m & (j > i + shift - left)
    return m


def reference(
    q: Any, k: Any, v: Any, mask: Any = None, bias: Any = None, scale: float | None = None
) -> tuple[Any, Any]:
    """(o, lse) in float64 over [..., H, S, D] inputs; k/v heads repeated for GQA; ``mask`` bool
    (True: visible) and ``bias`` additive, both broadcast to the scores. Rows with no visible key
    give o = 0 and lse = -inf."""
    q, k, v = q.double(), k.double(), v.double()
    hq, hk = q.shape[-3], k.shape[-3]
    if hq != hk:
        k = k.repeat_interleave(hq // hk, dim=-3)
        v = v.repeat_interleave(hq // hk, dim=-3)
    s = q @ k.transpose(-1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if bias is not None:
        s = s + bias.double()
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    # a softmax that gives empty rows zeros, and finite gradients everywhere
    m = s.amax(dim=-1, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    total = e.sum(dim=-1, keepdim=True)
    p = e / torch.where(total > 0, total, torch.ones_like(total))
    lse = (m + torch.log(total)).squeeze(-1)
    return p @ v, lse


def bshd(b: int, s: int, h: int, d: int, dtype: Any = None, generator: Any = None) -> Any:
    """A [B, H, S, D] view of a contiguous [B, S, H, D] tensor, as transformers passes q, k and v."""
    return torch.randn(b, s, h, d, dtype=dtype or torch.float32, generator=generator).transpose(1, 2)


def bhsd(b: int, h: int, s: int, d: int, dtype: Any = None, generator: Any = None) -> Any:
    return torch.randn(b, h, s, d, dtype=dtype or torch.float32, generator=generator)


def close(got: Any, want: Any, atol: float, what: str = "") -> None:
    """Every element within ``atol`` (NaNs and infinities must agree exactly)."""
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    g, w = got.double(), want.double()
    finite = torch.isfinite(w)
    assert torch.equal(torch.isfinite(g), finite), f"{what}: non-finite elements differ"
    assert torch.equal(g[~finite], w[~finite]), f"{what}: infinities differ"
    err = (g[finite] - w[finite]).abs().max().item() if finite.any() else 0.0
    assert err <= atol, f"{what}: max abs error {err:.3g} > {atol:.3g}"
