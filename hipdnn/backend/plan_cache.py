"""A bounded, thread-safe LRU cache of execution plans, one per handle.

Keys name everything a plan depends on: the serialized graph (by hash), how the engine was chosen
(heuristic mode, requested engine), the knobs, and the fingerprints of the handle's plugins (name,
version, API version, file hash), so a rebuilt plugin never serves a stale plan.

The cache knows a plan only through :class:`CachedPlan`: the plans are descriptors, which are made on
a handle, and the handle owns this cache, so naming the descriptor class here would close a circle."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from hipdnn.plugins import PluginFingerprint


class CachedPlan(Protocol):
    """What the cache asks of a plan (an ``ExecutionPlanDescriptor``): its execution context, which
    is None once destroyed; such a plan can no longer serve and is dropped on lookup."""

    @property
    def context(self) -> object: ...


@dataclass(frozen=True)
class PlanKey:
    """Everything a plan depends on; :meth:`for_graph` hashes the serialized graph."""

    graph_sha256: str
    heur_mode: int
    engine_id: int | None
    knobs: tuple[tuple[str, int], ...]
    plugins: tuple[PluginFingerprint, ...]

    @classmethod
    def for_graph(
        cls,
        serialized_graph: bytes,
        heur_mode: int,
        plugins: tuple[PluginFingerprint, ...],
        engine_id: int | None = None,
        knobs: tuple[tuple[str, int], ...] = (),
    ) -> PlanKey:
        return cls(hashlib.sha256(serialized_graph).hexdigest(), int(heur_mode), engine_id, knobs, plugins)


@dataclass(frozen=True)
class PlanCacheStats:
    """A snapshot of :meth:`PlanCache.stats`: lookups served and missed, plans evicted, plans held."""

    hits: int
    misses: int
    evictions: int
    size: int
    capacity: int


class PlanCache:
    """LRU of plans. An evicted plan is not destroyed here: graphs may still use it, and its
    execution context is released when the last reference goes (or when the handle closes)."""

    def __init__(self, capacity: int = 128) -> None:
        if capacity < 0:
            raise ValueError("capacity must be >= 0")
        self._capacity = capacity
        self._plans: OrderedDict[PlanKey, CachedPlan] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = self._misses = self._evictions = 0

    def get(self, key: PlanKey) -> CachedPlan | None:
        with self._lock:
            plan = self._plans.get(key)
            if plan is None or plan.context is None:
                if plan is not None:
                    del self._plans[key]
                self._misses += 1
                return None
            self._plans.move_to_end(key)
            self._hits += 1
            return plan

    def put(self, key: PlanKey, plan: CachedPlan) -> None:
        with self._lock:
            if self._capacity == 0:
                return
            self._plans[key] = plan
            self._plans.move_to_end(key)
            while len(self._plans) > self._capacity:
                self._plans.popitem(last=False)
                self._evictions += 1

    def set_capacity(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError("capacity must be >= 0")
        with self._lock:
            self._capacity = capacity
            while len(self._plans) > capacity:
                self._plans.popitem(last=False)
                self._evictions += 1

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()

    def stats(self) -> PlanCacheStats:
        with self._lock:
            return PlanCacheStats(self._hits, self._misses, self._evictions, len(self._plans), self._capacity)
