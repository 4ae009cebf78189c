"""Handle lifecycle under threads (issue #16): create, build, execute, bind, destroy plans and close
handles in every order and at the same time. Every call either succeeds, with a correct result, or
raises HipdnnError; nothing reaches a plugin instance after its handle closed; and cycles of handles
leak no file descriptors, threads, plugin instances, execution contexts or memory.

``tests/test_execute_core.py`` covers executes racing ``close()`` and a destroyed plan refusing
calls; this file adds the other operations racing each other and the leak checks.
"""

from __future__ import annotations

import functools
import gc
import os
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hipdnn
from hipdnn import reference
from hipdnn.backend import ExecutionPlanDescriptor
from hipdnn.plugins import EnginePlugin
from tests.adversarial.conftest import budget
from tests.test_execute_core import compact, relu_graph, sdpa_graph

GONE = ("closed", "released", "destroyed")  # what a refusal after close / destroy says


def _refused_for_lifetime(exc: hipdnn.HipdnnError) -> bool:
    return any(word in exc.message for word in GONE)


class Outcomes:
    """Thread-safe tally; anything but success or HipdnnError is recorded as a failure."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ok = 0
        self.refused = 0
        self.failures: list[str] = []

    def run(self, call: Callable[[], Any], check: Callable[[Any], bool] | None = None) -> bool:
        try:
            result = call()
        except hipdnn.HipdnnError:
            with self.lock:
                self.refused += 1
            return False
        except BaseException as exc:  # the test fails on these
            with self.lock:
                self.failures.append(f"{type(exc).__name__}: {exc}")
            return False
        if check is not None and not check(result):
            with self.lock:
                self.failures.append("wrong result")
            return False
        with self.lock:
            self.ok += 1
        return True


def _sdpa_case(rng: np.random.Generator, s: int = 32) -> tuple[list[np.ndarray], np.ndarray]:
    q, k, v = (rng.standard_normal([1, 2, s, 8]).astype(np.float32) for _ in range(3))
    want, _ = reference.sdpa(q, k, v, 0.3, causal=True)
    return [q, k, v], want


# -- nothing reaches a plugin after close -------------------------------------------------------
def test_calls_after_close_never_reach_the_plugin(fake_handle_factory: Any, fakes: Any) -> None:
    """Building on a closed handle called GetApplicableEngineIds (and set_stream called SetStream) with
    the plugin handle its Destroy had already freed; the CPU engine noticed only because its magic
    word was still in the freed memory. Now the host refuses before any call."""
    h = fake_handle_factory("fake_override_v110")
    g, (x, y) = relu_graph([4], [1])
    g.build(h)
    plan = g._require_plan()
    bound = g.bind(h, [x, y])
    h.close()
    fake = fakes["fake_override_v110"]
    fake.reset()
    a, b = np.ones(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(hipdnn.HipdnnError, match="closed"):
        g.execute(h, {x: a, y: b})
    with pytest.raises(hipdnn.HipdnnError, match="closed"):
        bound([a.ctypes.data, b.ctypes.data])
    with pytest.raises(hipdnn.HipdnnError, match="closed"):
        g.bind(h, [x, y])([a.ctypes.data, b.ctypes.data])
    plan.destroy()
    plan.destroy()
    with pytest.raises(hipdnn.HipdnnError, match="closed"):
        g.build(h)
    with pytest.raises(hipdnn.HipdnnError, match="closed"):
        relu_graph([8], [1])[0].build(h)
    h.set_stream(7)  # logged per plugin, not called
    h.close()
    assert fake.calls() == [], fake.calls()


def test_double_close_and_context_manager() -> None:
    with hipdnn.Handle() as h:
        g, (x, y) = relu_graph([4], [1])
        g.build(h)
    h.close()
    h.close()
    with pytest.raises(hipdnn.HipdnnError, match="closed"):
        g.execute(h, {x: np.ones(4, np.float32), y: np.zeros(4, np.float32)})


# -- races ----------------------------------------------------------------------------------------
class Race:
    """One round: a handle, a built SDPA graph, its workspace, and the threads' shared tally."""

    def __init__(self, parties: int) -> None:
        self.h = hipdnn.Handle()
        self.g, self.ts = sdpa_graph(32)
        self.g.build(self.h)
        self.ws = np.empty(max(self.g.get_workspace_size(), 1), np.uint8)
        self.bound = self.g.bind(self.h, self.ts)
        self.outcomes = Outcomes()
        self.start = threading.Barrier(parties)

    def execute(self, seed: int, calls: int = 30, overrides: bool = False, stop_on_refusal: bool = False) -> None:
        ins, want = _sdpa_case(np.random.default_rng(seed))
        dims = [1, 2, 32, 8]
        ov = {t: hipdnn.OverrideEntry(dims, compact(dims)) for t in self.ts} if overrides else None
        self.start.wait()
        for _ in range(calls):
            out = np.full(dims, np.nan, np.float32)
            pack = dict(zip(self.ts, (*ins, out)))
            ok = self.outcomes.run(
                functools.partial(self.g.execute, self.h, pack, self.ws, ov), functools.partial(_matches, out, want)
            )
            if not ok and stop_on_refusal:
                return

    def call_bound(self, seed: int, calls: int = 30, rebind: bool = False, stop_on_refusal: bool = False) -> None:
        ins, want = _sdpa_case(np.random.default_rng(seed))
        self.start.wait()
        for _ in range(calls):
            out = np.full([1, 2, 32, 8], np.nan, np.float32)
            ptrs = [a.ctypes.data for a in (*ins, out)]
            ok = self.outcomes.run(
                functools.partial(self._bound_call, rebind, ptrs), functools.partial(_matches, out, want)
            )
            if not ok and stop_on_refusal:
                return

    def _bound_call(self, rebind: bool, ptrs: list[int]) -> None:
        bound = self.g.bind(self.h, self.ts) if rebind else self.bound
        bound(ptrs, self.ws.ctypes.data)

    def build_new(self, seed: int, graphs: int = 10) -> None:
        rng = np.random.default_rng(seed)
        self.start.wait()
        for _ in range(graphs):
            n = int(rng.integers(1, 64))
            g, (x, y) = relu_graph([n], [1])
            xs = rng.standard_normal(n).astype(np.float32)
            ys = np.full(n, np.nan, np.float32)
            self.outcomes.run(
                functools.partial(_build_and_run, self.h, g, {x: xs, y: ys}), functools.partial(_is_relu, xs, ys)
            )

    def destroy_plan(self, delay: float) -> None:
        self.start.wait()
        threading.Event().wait(delay)
        self.outcomes.run(self.g._require_plan().destroy)


def _matches(out: np.ndarray, want: np.ndarray, _result: Any = None) -> bool:
    return bool(np.abs(out.astype(np.float64) - want).max() < 1e-5)


def _is_relu(xs: np.ndarray, ys: np.ndarray, _result: Any = None) -> bool:
    return bool((ys == np.maximum(xs, 0)).all())


def _build_and_run(h: hipdnn.Handle, g: hipdnn.Graph, pack: dict[Any, np.ndarray]) -> None:
    g.build(h)
    g.execute(h, pack)


def _run_threads(targets: list[tuple[Callable[..., None], tuple[Any, ...]]]) -> list[threading.Thread]:
    threads = [threading.Thread(target=fn, args=args) for fn, args in targets]
    for t in threads:
        t.start()
    return threads


def test_plan_destroyed_while_threads_execute() -> None:
    """destroy() waits for calls in flight; later calls are refused; results stay right."""
    rng = np.random.default_rng(0)
    ok = refused = 0
    for _ in range(budget(20)):
        race = Race(4)
        seeds = [int(s) for s in rng.integers(1 << 30, size=3)]
        threads = _run_threads(
            [
                (race.execute, (seeds[0], 5000, False, True)),
                (race.call_bound, (seeds[1], 5000, False, True)),
                (race.call_bound, (seeds[2], 5000, False, True)),
            ]
        )
        race.start.wait()
        threading.Event().wait(float(rng.uniform(0.0005, 0.003)))  # calls succeed meanwhile
        race.g._require_plan().destroy()  # then the threads are refused and stop
        for t in threads:
            t.join()
        assert not race.outcomes.failures, race.outcomes.failures
        race.g._require_plan().destroy()  # idempotent
        race.h.close()
        ok, refused = ok + race.outcomes.ok, refused + race.outcomes.refused
    assert ok > 0 and refused > 0, (ok, refused)  # the destroy did land among the calls


@pytest.mark.parametrize("round_", range(3))
def test_everything_at_once(round_: int) -> None:
    """Executes, bound calls, binds, builds of new graphs and a plan destroy race each other and a
    close(): each call succeeds with the right numbers or raises HipdnnError, never anything else."""
    rng = np.random.default_rng(round_)
    ok = refused = 0
    for _ in range(budget(8)):
        race = Race(6)
        seeds = [int(s) for s in rng.integers(1 << 30, size=4)]
        threads = _run_threads(
            [
                # until refused (the plan destroyed or the handle closed), at most 2000 calls each
                (race.execute, (seeds[0], 2000, True, True)),
                (race.execute, (seeds[1], 2000, False, True)),
                (race.call_bound, (seeds[2], 2000, True, True)),
                (race.build_new, (seeds[3],)),
                (race.destroy_plan, (float(rng.uniform(0, 0.01)),)),
            ]
        )
        race.start.wait()
        threading.Event().wait(float(rng.uniform(0.001, 0.02)))
        race.h.close()
        for t in threads:
            t.join()
        assert not race.outcomes.failures, race.outcomes.failures
        ok, refused = ok + race.outcomes.ok, refused + race.outcomes.refused
    assert ok > 0 and refused > 0, (ok, refused)


def _handles_in_a_thread(outcomes: Outcomes, seed: int, count: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(count):
        with hipdnn.Handle() as h:
            n = int(rng.integers(1, 100))
            g, (x, y) = relu_graph([n], [1])
            xs = rng.standard_normal(n).astype(np.float32)
            ys = np.full(n, np.nan, np.float32)
            outcomes.run(functools.partial(_build_and_run, h, g, {x: xs, y: ys}), functools.partial(_is_relu, xs, ys))


def test_handles_created_and_closed_from_many_threads() -> None:
    outcomes = Outcomes()
    threads = _run_threads([(_handles_in_a_thread, (outcomes, i, budget(3))) for i in range(6)])
    for t in threads:
        t.join()
    assert not outcomes.failures and outcomes.refused == 0, (outcomes.failures, outcomes.refused)
    assert outcomes.ok == 6 * budget(3)


def _build_until_refused(h: hipdnn.Handle, start: threading.Barrier, outcomes: Outcomes) -> None:
    start.wait()
    for n in range(1, 400):
        g, (x, y) = relu_graph([n], [1])
        if not outcomes.run(functools.partial(g.build, h)):
            return


def test_builds_racing_close_leak_no_context(fake_plugin_paths: dict[str, Path], fakes: Any) -> None:
    """A plan finalized on one thread while another closed the handle registered its context after
    close() had destroyed the others: the context leaked and its later release was refused. The
    plugin instance now releases what it created; the fake plugin counts what is left at Destroy."""
    fake = fakes["fake_override_v110"]
    rng = np.random.default_rng(11)
    for _ in range(budget(40)):
        h = hipdnn.Handle(
            plugin_paths=[fake_plugin_paths["fake_override_v110"]],
            plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE,
        )
        outcomes = Outcomes()
        start = threading.Barrier(3)
        threads = _run_threads([(_build_until_refused, (h, start, outcomes)) for _ in range(2)])
        start.wait()
        threading.Event().wait(float(rng.uniform(0.0005, 0.005)))
        h.close()
        for t in threads:
            t.join()
        assert not outcomes.failures, outcomes.failures
    gc.collect()  # plans of the refused builds' graphs release their contexts
    calls = fake.calls()
    destroys = [c for c in calls if c["entry"] == "Destroy"]
    assert len(destroys) == budget(40) and all(c["leaked_contexts"] == 0 for c in destroys), destroys
    created = {
        (c["handle"], c["context"]) for c in calls if c["entry"] == "CreateExecutionContext" and c["status"] == 0
    }
    released = {(c["handle"], c["context"]) for c in calls if c["entry"] == "DestroyExecutionContext"}
    assert created == released
    closed_at = {c["handle"]: i for i, c in enumerate(calls) if c["entry"] == "Destroy"}
    late = [c for i, c in enumerate(calls) if c.get("handle") in closed_at and i > closed_at[c["handle"]]]
    assert late == [], late  # nothing called on an instance after its Destroy


def test_close_between_context_creation_and_registration_leaks_nothing(
    fake_plugin_paths: dict[str, Path], fakes: Any
) -> None:
    """The race above, made certain: the handle closes right after the plugin created a plan's
    context, before the plan registered it. The build is refused, and the context is released with
    the instance (before, its release was refused and the plugin reported it leaked at Destroy)."""
    fake = fakes["fake_override_v110"]
    h = hipdnn.Handle(
        plugin_paths=[fake_plugin_paths["fake_override_v110"]], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE
    )
    plugin = h.backend.plugins[0]
    real = plugin.workspace_size_from_context

    def close_first(context: Any) -> int:
        h.close()
        return real(context)

    plugin.workspace_size_from_context = close_first  # type: ignore[method-assign]
    g, _ = relu_graph([4], [1])
    with pytest.raises(hipdnn.HipdnnError, match="destroyed"):
        g.build(h)
    (destroy,) = [c for c in fake.calls() if c["entry"] == "Destroy"]
    assert destroy["leaked_contexts"] == 0, fake.calls()


# -- collection and leaks ---------------------------------------------------------------------------
def test_a_graph_keeps_its_handle_and_both_are_collected(fake_plugin_paths: dict[str, Path], fakes: Any) -> None:
    """Dropping the handle while a built graph lives keeps the plugins; dropping both releases them:
    the plugin sees its contexts and its instance destroyed, and the handle object is collected."""

    def graph_only() -> tuple[Any, Any, weakref.ref[hipdnn.Handle]]:
        h = hipdnn.Handle(
            plugin_paths=[fake_plugin_paths["fake_override_v110"]],
            plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE,
        )
        g, ts = relu_graph([4], [1])
        g.build(h)
        return g, ts, weakref.ref(h)

    fake = fakes["fake_override_v110"]
    g, (x, y), handle_ref = graph_only()
    gc.collect()
    assert handle_ref() is not None  # the graph holds it
    g.execute(handle_ref(), {x: np.ones(4, np.float32), y: np.zeros(4, np.float32)})
    fake.reset()
    del g
    gc.collect()
    assert handle_ref() is None
    entries = [c["entry"] for c in fake.calls()]
    assert "DestroyExecutionContext" in entries and "Destroy" in entries, entries


def _resources() -> dict[str, int]:
    gc.collect()
    live_plugins = sum(1 for o in gc.get_objects() if isinstance(o, EnginePlugin) and not o._destroyed)
    live_plans = sum(1 for o in gc.get_objects() if isinstance(o, ExecutionPlanDescriptor) and o.context is not None)
    with open("/proc/self/statm") as f:
        rss_pages = int(f.read().split()[1])
    return {
        "fds": len(os.listdir("/proc/self/fd")),
        "threads": threading.active_count(),
        "plugin instances": live_plugins,
        "plans with a context": live_plans,
        "rss_kib": rss_pages * (os.sysconf("SC_PAGE_SIZE") // 1024),
    }


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors through /proc")
def test_handle_cycles_leak_nothing() -> None:
    rng = np.random.default_rng(9)

    def cycle(i: int) -> None:
        h = hipdnn.Handle()
        g, ts = sdpa_graph(16)
        g.build(h)
        ws = np.empty(max(g.get_workspace_size(), 1), np.uint8)
        arrays = [rng.standard_normal([1, 2, 16, 8]).astype(np.float32) for _ in ts]
        g.execute(h, dict(zip(ts, arrays)), ws)
        g2, (x, y) = relu_graph([8], [1])
        g2.build(h)
        g2.bind(h, [x, y])([arrays[0].ctypes.data, arrays[1].ctypes.data])
        if i % 3 == 0:
            h.close()  # else dropped with its graphs and collected

    for i in range(10):
        cycle(i)
    before = _resources()
    for i in range(budget(60)):
        cycle(i)
    after = _resources()
    for key in ("fds", "threads", "plugin instances", "plans with a context"):
        assert after[key] == before[key], (key, before, after)
    assert after["rss_kib"] - before["rss_kib"] < 16 * 1024, (before, after)
