"""hipdnn for PyTorch (``pip install "hipdnn[torch]"``): attention on hipdnn's engines with torch's
own signature, autograd, ``torch.compile`` and a transformers attention backend::

    import hipdnn.torch
    out = hipdnn.torch.scaled_dot_product_attention(q, k, v, is_causal=True)

    hipdnn.torch.register_transformers()                  # then, in transformers:
    model.set_attn_implementation("hipdnn")               # or from_pretrained(..., attn_implementation="hipdnn")

Plans are built and cached per attention kind (device, dtype, heads, head dims, layouts, masks,
scale) at a capacity that grows by powers of two; every other call is served by shape overrides
(``plan_cache().stats()`` says what it did). On the CPU, attention runs on torch's own OpenMP
threads wherever torch runs on the same OpenMP runtime as the CPU engine (GNU's ``libgomp.so.1``, as
torch's Linux wheels do), else on the engine's worker pool; ``HIPDNN_TORCH_CPU_THREADING=pool`` or
``openmp`` decides instead. See rfcs/0010-torch-integration.md.
"""

from __future__ import annotations

try:
    import torch as _torch
except ImportError as exc:  # pragma: no cover - exercised only without torch
    raise ImportError('hipdnn.torch needs PyTorch: pip install "hipdnn[torch]"') from exc

from hipdnn.torch.attention import HipdnnFallbackWarning, fallback_enabled, scaled_dot_product_attention, set_fallback
from hipdnn.torch.kernels import CACHE as _CACHE
from hipdnn.torch.ops import BACKWARD_OP, FORWARD_OP, AttentionFunction
from hipdnn.torch.plans import CacheStats, PlanCache
from hipdnn.torch.transformers_support import TRANSFORMERS_NAME, hipdnn_attention_forward, register_transformers

__all__ = [
    "BACKWARD_OP",
    "FORWARD_OP",
    "TRANSFORMERS_NAME",
    "AttentionFunction",
    "CacheStats",
    "HipdnnFallbackWarning",
    "PlanCache",
    "fallback_enabled",
    "hipdnn_attention_forward",
    "plan_cache",
    "register_transformers",
    "scaled_dot_product_attention",
    "set_fallback",
]

del _torch


def plan_cache() -> PlanCache:
    """The process's plan cache: ``.stats()`` (builds, hits, bound and execute calls, capacities)
    and ``.clear()``."""
    return _CACHE
