"""Graph builders and small helpers shared by the override integration tests."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

import hipdnn
from hipdnn.backend import (
    AttributeName,
    AttributeType,
    EngineHeurDescriptor,
    ExecutionPlanDescriptor,
    OperationGraphDescriptor,
)

FLOAT = hipdnn.DataType.FLOAT
INVALID_VALUE = hipdnn.ErrorCode.INVALID_VALUE
GRAPH_NOT_SUPPORTED = hipdnn.ErrorCode.GRAPH_NOT_SUPPORTED
EXECUTE_ENTRIES = ("ExecuteOpGraph", "ExecuteOpGraphWithOverrides")
OVERRIDE_ATTRIBUTE_IDS = {704, 705, 706, 707}

#: SDPA inputs used by most tests: B, H, S, D
ATTN = (1, 2, 8, 4)

#: engine id of each fake (fake_plugins/README.md)
ENGINE = {
    "fake_override_v110": 9001,
    "fake_plain_v100": 9002,
    "fake_no_api_version": 9003,
    "fake_prebaseline_v001": 9004,
    "fake_version_liar": 9005,
    "fake_symbol_no_bump": 9006,
    "fake_override_second": 9007,
    "fake_override_v120": 9008,
    "fake_override_v130": 9009,
    "fake_override_v140": 9010,
    "fake_override_v150": 9011,
    "fake_override_v160": 9012,
}


def compact(dims: Sequence[int]) -> list[int]:
    """Row-major strides, computed here rather than borrowed from the package under test."""
    out = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        out[i] = out[i + 1] * dims[i + 1]
    return out


def attn_shapes(*, b: int = 1, hq: int, hkv: int, sq: int, skv: int, d: int, dv: int) -> dict[str, list[int]]:
    """Mutually consistent SDPA shapes, written out here rather than borrowed from the package under
    test: q [B, Hq, Sq, D], k [B, Hkv, Skv, D], v [B, Hkv, Skv, Dv] and o [B, Hq, Sq, Dv], with Hq a
    multiple of Hkv. Overrides of an SDPA graph must be shape-consistent (Graph.execute re-runs the
    node's shape rules on the effective shapes), so tests override with sets built from this."""
    assert hq % hkv == 0
    return {
        "q": [b, hq, sq, d],
        "k": [b, hkv, skv, d],
        "v": [b, hkv, skv, dv],
        "o": [b, hq, sq, dv],
    }


def sdpa_graph(
    *, override: bool, name: str = "attn", preferred: int | None = None, dims: Sequence[int] = ATTN
) -> tuple[hipdnn.Graph, list[hipdnn.TensorAttributes]]:
    """q, k, v -> sdpa -> o (an output). Returns the graph and [q, k, v, o]."""
    g = hipdnn.Graph(name=name, io_data_type=FLOAT, is_override_shape_enabled=override, preferred_engine_id=preferred)
    q = g.tensor(name="q", dim=list(dims), stride=compact(dims))
    k = g.tensor(name="k", dim=list(dims), stride=compact(dims))
    v = g.tensor(name="v", dim=list(dims), stride=compact(dims))
    o, stats = g.sdpa(q, k, v, attn_scale=0.5)
    assert stats is None
    o.set_output(True)
    return g, [q, k, v, o]


def arrays_for(tensors: Iterable[hipdnn.TensorAttributes]) -> dict[Any, np.ndarray]:
    """A zeroed float32 array of each tensor's declared (maximum) shape. Call after validate/build."""
    return {t: np.zeros(t.get_dim(), dtype=np.float32) for t in tensors}


def strided_view(
    shape: Sequence[int], stride: Sequence[int], dtype: Any = np.float32, base: np.ndarray | None = None
) -> np.ndarray:
    """A view stating ``shape`` and element strides ``stride`` (what a sized value for an overridden
    tensor must state: issue #26), over the start of ``base`` (a C-contiguous array, e.g. one of
    :func:`arrays_for`'s maximum-size arrays) or over a fresh zero-filled buffer just large enough."""
    need = sum((d - 1) * s for d, s in zip(shape, stride)) + 1 if all(d > 0 for d in shape) else 0
    if base is None:
        base = np.zeros(max(need, 1), dtype)
    assert base.flags.c_contiguous, "strided_view needs a C-contiguous base"
    flat = base.reshape(-1)
    assert flat.size >= need, f"base of {flat.size} elements is too small for {list(shape)} / {list(stride)}"
    return np.lib.stride_tricks.as_strided(flat, shape=tuple(shape), strides=tuple(s * flat.itemsize for s in stride))


def ptr(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def execute_calls(fakes: dict[str, Any], names: Iterable[str] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Every execute record (either entry) in the logs of the named fakes (all when None)."""
    out = []
    for n in names if names is not None else fakes:
        for rec in fakes[n].calls():
            if rec["entry"] in EXECUTE_ENTRIES:
                out.append((n, rec))
    return out


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def backend_plan(handle: hipdnn.Handle, blob: bytes, override_flag: bool | None = None) -> ExecutionPlanDescriptor:
    """Lower ``blob`` and build a plan for the first applicable engine through the backend descriptors
    alone (no frontend Graph involved)."""
    A, T = AttributeName, AttributeType
    og = OperationGraphDescriptor(blob)
    og.set_attribute(A.OPERATIONGRAPH_HANDLE, T.HANDLE, handle.backend)
    if override_flag is not None:
        og.set_attribute(A.OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT, T.BOOLEAN, override_flag)
    og.finalize()
    heur = EngineHeurDescriptor()
    heur.set_attribute(A.ENGINEHEUR_OPERATION_GRAPH, T.BACKEND_DESCRIPTOR, og)
    heur.finalize()
    configs = heur.get_attribute(A.ENGINEHEUR_RESULTS)
    assert configs, heur.report()
    plan = ExecutionPlanDescriptor()
    plan.set_attribute(A.EXECUTION_PLAN_HANDLE, T.HANDLE, handle.backend)
    plan.set_attribute(A.EXECUTION_PLAN_ENGINE_CONFIG, T.BACKEND_DESCRIPTOR, configs[0])
    plan.finalize()
    return plan
