"""Plan cache and the pre-bound execute path."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest

import hipdnn
from hipdnn import reference
from hipdnn.backend.plan_cache import PlanCache, PlanKey
from hipdnn.plugins import PluginFingerprint

F32 = hipdnn.DataType.FLOAT


def sdpa_graph(s: int, overridable: bool = True, h: int = 2, d: int = 16) -> tuple[hipdnn.Graph, list]:
    g = hipdnn.Graph(name="sdpa", io_data_type=F32, is_override_shape_enabled=overridable)
    dims, strides = [1, h, s, d], [h * s * d, s * d, d, 1]
    q, k, v = (g.tensor(name=n, dim=dims, stride=strides, data_type=F32) for n in "qkv")
    o, _ = g.sdpa(q, k, v, attn_scale=0.25, use_causal_mask=True)
    o.set_output(True)
    return g, [q, k, v, o]


@pytest.fixture
def handle() -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle()
    yield h
    h.close()


def test_identical_graph_hits_the_cache(handle: hipdnn.Handle) -> None:
    g1, _ = sdpa_graph(64)
    g1.build(handle)
    before = handle.backend.plan_cache.stats()
    g2, _ = sdpa_graph(64)
    g2.build(handle)
    after = handle.backend.plan_cache.stats()
    assert after.hits == before.hits + 1 and after.misses == before.misses
    assert g2._require_plan() is g1._require_plan()
    g3, _ = sdpa_graph(65)
    g3.build(handle)
    assert handle.backend.plan_cache.stats().misses == before.misses + 1
    assert g3._require_plan() is not g1._require_plan()


def test_cached_plan_computes_correctly_for_both_graphs(handle: hipdnn.Handle) -> None:
    rng = np.random.default_rng(1)
    for _ in range(2):
        g, t = sdpa_graph(40)
        g.build(handle)
        q, k, v = (rng.standard_normal((1, 2, 40, 16)).astype(np.float32) for _ in range(3))
        o = np.full((1, 2, 40, 16), np.nan, np.float32)
        g.execute(handle, dict(zip(t, [q, k, v, o])), np.empty(max(g.get_workspace_size(), 1), np.uint8))
        want, _ = reference.sdpa(q, k, v, 0.25, causal=True)
        assert reference.relative_error(o, want) < 1e-5
    assert handle.backend.plan_cache.stats().hits >= 1


def test_lru_eviction_and_counters() -> None:
    cache = PlanCache(capacity=2)

    class FakePlan:
        context = object()

    keys = [PlanKey(str(i), 0, None, (), ()) for i in range(3)]
    plans = [FakePlan() for _ in keys]
    for key, plan in zip(keys, plans):
        cache.put(key, plan)  # type: ignore[arg-type]
    stats = cache.stats()
    assert (stats.size, stats.evictions, stats.capacity) == (2, 1, 2)
    assert cache.get(keys[0]) is None  # evicted, least recently used
    assert cache.get(keys[2]) is plans[2]
    cache.put(PlanKey("3", 0, None, (), ()), FakePlan())  # type: ignore[arg-type]
    assert cache.get(keys[1]) is None and cache.get(keys[2]) is plans[2]
    stats = cache.stats()
    assert stats.hits == 2 and stats.misses == 2
    cache.set_capacity(0)
    assert cache.stats().size == 0


def test_key_changes_with_plugin_fingerprint_and_graph_bytes() -> None:
    fp = PluginFingerprint("p", "1.0", "1.1.0", "aa" * 32)
    rebuilt = PluginFingerprint("p", "1.0", "1.1.0", "bb" * 32)
    assert PlanKey.for_graph(b"graph", 0, (fp,)) == PlanKey.for_graph(b"graph", 0, (fp,))
    assert PlanKey.for_graph(b"graph", 0, (fp,)) != PlanKey.for_graph(b"graph", 0, (rebuilt,))
    assert PlanKey.for_graph(b"graph", 0, (fp,)) != PlanKey.for_graph(b"graph2", 0, (fp,))
    assert PlanKey.for_graph(b"graph", 0, (fp,)) != PlanKey.for_graph(b"graph", 1, (fp,))


def test_concurrent_builds_are_consistent(handle: hipdnn.Handle) -> None:
    errors: list[BaseException] = []
    plans = []
    lock = threading.Lock()

    def work() -> None:
        try:
            for _ in range(5):
                g, _ = sdpa_graph(48)
                g.build(handle)
                with lock:
                    plans.append(g._require_plan())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    stats = handle.backend.plan_cache.stats()
    assert stats.hits + stats.misses == 20
    assert all(p.context is not None for p in plans)


def test_bound_execute_matches_float64_and_enforces_rules(handle: hipdnn.Handle) -> None:
    rng = np.random.default_rng(2)
    g, t = sdpa_graph(128)
    g.build(handle)
    ws = np.empty(max(g.get_workspace_size(), 1), np.uint8)
    bound = g.bind(handle, t, override_uids=t)
    for s in (1, 37, 128):
        dims, strides = [1, 2, s, 16], [2 * s * 16, s * 16, 16, 1]
        arrays = [rng.standard_normal(dims).astype(np.float32) for _ in range(3)] + [np.full(dims, np.nan, np.float32)]
        bound([a.ctypes.data for a in arrays], ws.ctypes.data, [dims] * 4, [strides] * 4)
        want, _ = reference.sdpa(*arrays[:3], 0.25, causal=True)
        assert reference.relative_error(arrays[3], want) < 1e-5
    ptrs = [a.ctypes.data for a in arrays]
    bad = [
        ([[1, 2, 129, 16]] * 4, [[2 * 129 * 16, 129 * 16, 16, 1]] * 4, "rule 7"),
        ([[1, 2, 0, 16]] * 4, [[32, 16, 16, 1]] * 4, "rule 5"),
        ([[1, 2, 8, 16]] * 4, [[256, 128, 16, 0]] * 4, "rule 6"),
        ([[1, 2, 8, 16]] * 4, [[256, 1, 2, 16]] * 4, "rule 8"),
        ([[1, 2, 8]] * 4, [[256, 128, 16]] * 4, "rule 4"),
        ([[1, 2, 8, 16]] * 3, [[256, 128, 16, 1]] * 3, "rule 1"),
    ]
    for shapes, strides, rule in bad:
        with pytest.raises(hipdnn.HipdnnError) as err:
            bound(ptrs, ws.ctypes.data, shapes, strides)
        assert rule in err.value.message and err.value.code == hipdnn.ErrorCode.INVALID_VALUE
    with pytest.raises(hipdnn.HipdnnError):
        bound(ptrs[:3], ws.ctypes.data, [dims] * 4, [strides] * 4)


def test_bind_refuses_what_execute_refuses(handle: hipdnn.Handle) -> None:
    g, t = sdpa_graph(32, overridable=False)
    g.build(handle)
    with pytest.raises(hipdnn.HipdnnError, match="without set_override_shape_enabled"):
        g.bind(handle, t, override_uids=[t[0]])
    with pytest.raises(hipdnn.HipdnnError, match="no pointer slot"):
        g.bind(handle, t[:3])
    other, _ = sdpa_graph(32)
    with pytest.raises(hipdnn.HipdnnError, match="not a tensor of this graph"):
        g.bind(handle, [t[0], t[1], t[2], other.tensors[0]])


def test_bound_execute_is_thread_safe_with_different_overrides(handle: hipdnn.Handle) -> None:
    g, t = sdpa_graph(96)
    g.build(handle)
    ws_size = max(g.get_workspace_size(), 1)
    bound = g.bind(handle, t, override_uids=t)
    errors: list[str] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        ws = np.empty(ws_size, np.uint8)
        for _ in range(6):
            s = int(rng.integers(1, 97))
            dims, strides = [1, 2, s, 16], [2 * s * 16, s * 16, 16, 1]
            arrays = [rng.standard_normal(dims).astype(np.float32) for _ in range(3)]
            arrays.append(np.full(dims, np.nan, np.float32))
            bound([a.ctypes.data for a in arrays], ws.ctypes.data, [dims] * 4, [strides] * 4)
            want, _ = reference.sdpa(*arrays[:3], 0.25, causal=True)
            err = reference.relative_error(arrays[3], want)
            if err > 1e-5:
                errors.append(f"seed {seed} S={s}: {err}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors


def test_closed_handle_refuses_bound_and_plain_execute() -> None:
    h = hipdnn.Handle()
    g, t = sdpa_graph(16)
    g.build(h)
    arrays = [np.zeros((1, 2, 16, 16), np.float32) for _ in t]
    bound = g.bind(h, t)
    h.close()
    with pytest.raises(hipdnn.HipdnnError, match="released"):
        bound([a.ctypes.data for a in arrays], np.empty(max(g.get_workspace_size(), 1), np.uint8).ctypes.data)
    with pytest.raises(hipdnn.HipdnnError, match="closed"):
        g.execute(h, dict(zip(t, arrays)), np.empty(max(g.get_workspace_size(), 1), np.uint8))


def test_execute_is_thread_safe_with_different_overrides(handle: hipdnn.Handle) -> None:
    """The full-checking path from several threads at once, each with its own lengths; every result is
    checked against float64."""
    g, t = sdpa_graph(80)
    g.build(handle)
    ws_size = max(g.get_workspace_size(), 1)
    errors: list[str] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(100 + seed)
        ws = np.empty(ws_size, np.uint8)
        for _ in range(8):
            s = int(rng.integers(1, 81))
            dims, strides = [1, 2, s, 16], [2 * s * 16, s * 16, 16, 1]
            arrays = [rng.standard_normal(dims).astype(np.float32) for _ in range(3)]
            arrays.append(np.full(dims, np.nan, np.float32))
            try:
                g.execute(
                    handle, dict(zip(t, arrays)), ws, overrides={x: hipdnn.OverrideEntry(dims, strides) for x in t}
                )
            except hipdnn.HipdnnError as exc:  # pragma: no cover - reported below
                errors.append(f"seed {seed} S={s}: {exc}")
                continue
            want, _ = reference.sdpa(*arrays[:3], 0.25, causal=True)
            err = reference.relative_error(arrays[3], want)
            if err > 1e-5:
                errors.append(f"seed {seed} S={s}: relative error {err}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
