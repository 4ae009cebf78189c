"""hipdnn.torch's compiled short path (``PlanCache.cpu_calls``, hipdnn/backend/native/sdpa_calls.cpp):
attention on plain CPU tensors with no mask tensor, read and run in one compiled step once the general
path has built the kind's plan. Every call it serves must equal the float64 definition with every
output element written; every call it does not serve must reach the general path unchanged; and what
an allocator or a caller hands it must never make the engine read or write outside a tensor."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.torch.support import reference, visible

torch = pytest.importorskip("torch", reason="hipdnn.torch needs PyTorch (pip install 'hipdnn[torch]')")

import hipdnn.torch as ht  # noqa: E402
from hipdnn.backend.execute_core import SdpaCalls, thread_workspace  # noqa: E402
from hipdnn.frontend import HipdnnError  # noqa: E402
from hipdnn.torch.plans import LAYOUTS  # noqa: E402

TOL = {torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 4e-3}


def nan_empty(size: Any, layout: Any, *, dtype: Any, device: Any) -> Any:
    """torch.empty_permuted's output filled with NaN: a served call must overwrite every element."""
    return torch.empty_permuted(size, layout, dtype=dtype, device=device).fill_(float("nan"))


def table(allocate: Callable[..., Any]) -> Any:
    return SdpaCalls(torch.Tensor, allocate, torch.is_grad_enabled, torch.device("cpu"), LAYOUTS)


@pytest.fixture
def nan_cache(cache: ht.PlanCache) -> Iterator[ht.PlanCache]:
    """The cleared plan cache, its short path allocating NaN-filled outputs."""
    cache.cpu_calls = table(nan_empty)
    yield cache


def make(shape: tuple[int, int, int, int], layout: str, dtype: Any, seed: int) -> Any:
    """A [B, H, S, D] tensor of random values stored in ``layout`` ("bhsd" or "bshd")."""
    g = torch.Generator().manual_seed(seed)
    b, h, s, d = shape
    if layout == "bhsd":
        return torch.randn(b, h, s, d, generator=g).to(dtype)
    return torch.randn(b, s, h, d, generator=g).to(dtype).transpose(1, 2)


def check(
    cache: ht.PlanCache,
    b: int,
    hq: int,
    hk: int,
    sq: int,
    skv: int,
    d: int,
    dv: int,
    layouts: tuple[str, str, str] = ("bhsd", "bhsd", "bhsd"),
    dtype: Any = torch.float32,
    causal: bool = False,
    bottom_right: bool = False,
    scale: float | int | None = None,
    seed: int = 0,
) -> None:
    """One call at these sizes built (the general path), then a second at the same sizes and a third
    one key shorter (when there is one), which the short path must serve, each against float64."""
    alignment = "bottom_right" if bottom_right else "top_left"
    for n, (s_q, s_kv) in enumerate(((sq, skv), (sq, skv), (sq, max(1, skv - 1)))):
        q = make((b, hq, s_q, d), layouts[0], dtype, seed + 3 * n)
        k = make((b, hk, s_kv, d), layouts[1], dtype, seed + 3 * n + 1)
        v = make((b, hk, s_kv, dv), layouts[2], dtype, seed + 3 * n + 2)
        hits = cache.cpu_calls.hits
        o = ht.scaled_dot_product_attention(
            q, k, v, is_causal=causal, scale=scale, enable_gqa=hq != hk, causal_alignment=alignment
        )
        if n:
            assert cache.cpu_calls.hits == hits + 1, "the short path did not serve a repeated call"
        mask = visible(s_q, s_kv, causal=causal, bottom_right=bottom_right) if causal else None
        want, _ = reference(q, k, v, mask, scale=None if scale is None else float(scale))
        assert o.shape == (b, hq, s_q, dv) and o.dtype == dtype
        assert not o.isnan().any(), "an output element was not written"
        assert torch.allclose(o.double(), want, atol=TOL[dtype], rtol=TOL[dtype])
        assert o.stride() == torch.empty_permuted(o.shape, LAYOUTS[_order(q)]).stride()  # the query's layout


def _order(t: Any) -> int:
    a, b, c = t.stride()[:3]
    if a >= b:
        return 0 if b >= c else 1 if a >= c else 4
    return 2 if a >= c else 3 if b >= c else 5


@pytest.mark.parametrize(
    "b,hq,hk,sq,skv,d,dv",
    [
        (1, 8, 8, 1, 256, 64, 64),  # decode
        (2, 4, 4, 1, 129, 128, 128),
        (1, 6, 2, 1, 37, 64, 64),  # GQA
        (3, 4, 1, 5, 37, 16, 24),  # multi-query, d != dv
        (1, 2, 2, 37, 37, 8, 8),
        (2, 3, 3, 129, 65, 40, 40),
        (1, 1, 1, 1, 1, 1, 1),
    ],
)
@pytest.mark.parametrize("layouts", [("bhsd",) * 3, ("bshd",) * 3, ("bshd", "bhsd", "bshd")])
def test_served_calls_equal_the_definition(
    nan_cache: ht.PlanCache, b: int, hq: int, hk: int, sq: int, skv: int, d: int, dv: int, layouts: Any
) -> None:
    check(nan_cache, b, hq, hk, sq, skv, d, dv, layouts)


@pytest.mark.parametrize("causal,bottom_right", [(True, False), (True, True), (False, True)])
@pytest.mark.parametrize("scale", [None, 0.3, 2])
def test_masking_and_scale(nan_cache: ht.PlanCache, causal: bool, bottom_right: bool, scale: Any) -> None:
    check(nan_cache, 2, 4, 2, 7, 37, 32, 32, ("bshd",) * 3, causal=causal, bottom_right=bottom_right, scale=scale)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_types(nan_cache: ht.PlanCache, dtype: Any) -> None:
    check(nan_cache, 1, 8, 2, 1, 300, 64, 64, ("bshd",) * 3, dtype=dtype)
    check(nan_cache, 1, 4, 4, 33, 33, 80, 80, dtype=dtype, causal=True)


@settings(max_examples=40, deadline=None)
@given(
    b=st.integers(1, 3),
    hk=st.integers(1, 3),
    group=st.integers(1, 3),
    sq=st.sampled_from([1, 2, 7, 37]),
    skv=st.sampled_from([1, 3, 37, 129]),
    d=st.sampled_from([1, 8, 37, 64]),
    dv=st.sampled_from([1, 16, 64]),
    layouts=st.tuples(*[st.sampled_from(["bhsd", "bshd"])] * 3),
    causal=st.booleans(),
    bottom_right=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_generated_calls(
    b: int,
    hk: int,
    group: int,
    sq: int,
    skv: int,
    d: int,
    dv: int,
    layouts: Any,
    causal: bool,
    bottom_right: bool,
    seed: int,
) -> None:
    cache = ht.plan_cache()
    cache.clear()
    cache.cpu_calls = table(nan_empty)
    try:
        check(cache, b, hk * group, hk, sq, skv, d, dv, layouts, causal=causal, bottom_right=bottom_right, seed=seed)
    finally:
        cache.clear()


def test_the_table_follows_the_cache(cache: ht.PlanCache) -> None:
    """Only kinds the short path can serve are in it (no mask tensor, band, softcap, statistics);
    a grown kind replaces its entry; clear() empties it and zeroes its count, which stats() adds."""
    q, k = torch.randn(1, 2, 1, 16), torch.randn(1, 2, 40, 16)
    ht.scaled_dot_product_attention(q, k, k)
    assert len(cache.cpu_calls) == 1
    ht.scaled_dot_product_attention(q, k, k, attn_mask=torch.ones(1, 40, dtype=torch.bool))
    ht.scaled_dot_product_attention(q, k, k, left_bound=3, is_causal=True)
    ht.scaled_dot_product_attention(q, k, k, softcap=5.0)
    ht.scaled_dot_product_attention(q, k, k, return_lse=True)
    assert len(cache.stats().capacities) == 5 and len(cache.cpu_calls) == 1
    ht.scaled_dot_product_attention(q, k, k, is_causal=True)
    assert len(cache.cpu_calls) == 2
    before = cache.stats()
    ht.scaled_dot_product_attention(q, torch.randn(1, 2, 500, 16), torch.randn(1, 2, 500, 16))  # grows
    assert len(cache.cpu_calls) == 2 and cache.stats().builds == before.builds + 1
    ht.scaled_dot_product_attention(q, k, k)
    after = cache.stats()
    assert cache.cpu_calls.hits == 1 and after.hits == before.hits + 1
    assert after.bound_calls == before.bound_calls + 2
    cache.clear()
    assert len(cache.cpu_calls) == 0 and cache.cpu_calls.hits == 0


def _unserved(cache: ht.PlanCache, q: Any, k: Any, v: Any, **kw: Any) -> Any:
    hits = cache.cpu_calls.hits
    o = ht.scaled_dot_product_attention(q, k, v, **kw)
    assert cache.cpu_calls.hits == hits
    return o


def test_calls_it_leaves_to_the_general_path(cache: ht.PlanCache) -> None:
    """Each of these reaches the general path, which serves (or refuses) it as before."""
    q, k, v = torch.randn(2, 4, 3, 16), torch.randn(2, 4, 50, 16), torch.randn(2, 4, 50, 16)
    ht.scaled_dot_product_attention(q, k, v)  # the kind's plan
    want, _ = reference(q, k, v)

    class Sub(torch.Tensor):
        pass

    for args in (
        (q.as_subclass(Sub), k, v),
        (q, k.as_subclass(Sub), v),
        (q, k, v.requires_grad_(True)),
        (q, k[:, :1].expand(2, 4, 50, 16), v),  # a stride-0 axis: copied first
        (q, k.transpose(2, 3).contiguous().transpose(2, 3), v),  # head dim not innermost
    ):
        o = _unserved(cache, *args)
        assert torch.allclose(o.detach().double(), want if args[1] is k else reference(*args)[0], atol=2e-5)
    v.requires_grad_(False)
    with pytest.raises(HipdnnError):
        _unserved(cache, q, k.double(), v)  # mixed element types: the general path's error
    # past the plan's capacity: the general path grows the kind, and the next call is served again
    long_k, long_v = torch.randn(2, 4, 300, 16), torch.randn(2, 4, 300, 16)
    _unserved(cache, q, long_k, long_v)
    hits = cache.cpu_calls.hits
    ht.scaled_dot_product_attention(q, long_k, long_v)
    assert cache.cpu_calls.hits == hits + 1
    # a view wider than the plan's declared maximum (a slice of a packed tensor): the bound call
    # refuses it, nothing runs, and the general path widens the plan
    packed = torch.randn(2, 4, 50, 48)
    kp, vp = packed[..., 16:32], packed[..., 32:]
    o = _unserved(cache, packed[:, :, :3, :16], kp, vp)
    assert torch.allclose(o.double(), reference(packed[:, :, :3, :16], kp, vp)[0], atol=2e-5)


def test_other_devices_are_not_its_business(cache: ht.PlanCache) -> None:
    calls = cache.cpu_calls
    meta = torch.empty(1, 2, 1, 8, device="meta")
    assert calls(meta, meta, meta, False, None, False, False) is NotImplemented
    q = torch.randn(1, 2, 1, 8)
    assert calls(q.as_subclass(type("Sub", (torch.Tensor,), {})), q, q, False, None, False, False) is NotImplemented
    assert calls(q, meta, meta, False, None, False, False) is None  # mixed devices: the general path explains
    assert calls(q, q, q, False, None, False, False) is None  # no plan of this kind yet


def test_allocators_cannot_make_it_write_outside_the_output(cache: ht.PlanCache) -> None:
    """What the allocator returns is read back and checked by the core like any tensor: too small,
    overlapping an input, another type or another device never reaches the engine as an output."""
    q, k = torch.randn(1, 4, 1, 32), torch.randn(1, 4, 64, 32)
    ht.scaled_dot_product_attention(q, k, k)

    def use(allocate: Callable[..., Any]) -> Any:
        cache.cpu_calls = table(allocate)
        cache._sync_cpu_calls()
        return cache.cpu_calls(q, k, k, False, None, False, False)

    with pytest.raises(HipdnnError):
        use(lambda size, layout, dtype, device: torch.empty(1, 1, 1, 1, dtype=dtype))  # too small
    with pytest.raises(HipdnnError):
        use(lambda size, layout, dtype, device: q)  # the query itself: an output aliasing an input
    assert use(lambda size, layout, dtype, device: torch.empty(size, dtype=torch.float64)) is None
    assert use(lambda size, layout, dtype, device: torch.empty(size, dtype=dtype, device="meta")) is None
    assert use(lambda size, layout, dtype, device: "not a tensor") is None
    with pytest.raises(RuntimeError, match="allocator failed"):
        use(lambda size, layout, dtype, device: (_ for _ in ()).throw(RuntimeError("allocator failed")))
    o = use(nan_empty)
    assert o is not None and torch.allclose(o.double(), reference(q, k, k)[0], atol=2e-5)


def test_misuse_of_the_table_is_a_clear_error(cache: ht.PlanCache) -> None:
    calls = cache.cpu_calls
    q = torch.randn(1, 2, 1, 8)
    with pytest.raises(TypeError):
        calls(q, q, q)
    with pytest.raises(TypeError):
        calls(q, q, q, False, None, False, False, None)
    with pytest.raises(TypeError, match="bound call"):
        calls.put(object(), torch.float32, 2, 2, 8, 8, 0.5, False, False, 0, 1, 16, 16)
    with pytest.raises(TypeError):
        calls.put(None)
    with pytest.raises(ValueError):
        calls.hits = -1
    with pytest.raises(TypeError):
        SdpaCalls(torch.Tensor, None, None, None, "not a tuple")
    with pytest.raises(ValueError):
        SdpaCalls(torch.Tensor, None, None, None, ((0, 1, 2, 3),))
    ht.scaled_dot_product_attention(q, q, q)
    (plan,) = cache.plans()
    with pytest.raises(ValueError, match="codes"):
        calls.put(plan.bound, torch.float32, 2, 2, 8, 8, 0.5, False, False, 216, 1, 16, 16)
    with pytest.raises(TypeError, match="heads"):
        calls.put(plan.bound, torch.float32, "2", 2, 8, 8, 0.5, False, False, 0, 1, 16, 16)


def test_threads_growing_one_kind(cache: ht.PlanCache) -> None:
    """Threads calling one kind at different lengths, growing it while others run on the short
    path: every result is exact."""
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            for i in range(30):
                skv = 1 + (37 * t + 11 * i) % 600
                q = torch.randn(1, 4, 1, 32)
                k, v = torch.randn(1, 4, skv, 32), torch.randn(1, 4, skv, 32)
                o = ht.scaled_dot_product_attention(q, k, v)
                assert torch.allclose(o.double(), reference(q, k, v)[0], atol=2e-5)
        except BaseException as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert cache.cpu_calls.hits > 0


def test_thread_workspace() -> None:
    assert thread_workspace(0) == 0
    p = thread_workspace(100)
    assert p % 64 == 0 and thread_workspace(10) == p  # a smaller ask reuses the buffer
    grown = thread_workspace(1 << 20)
    assert grown % 64 == 0
    other: list[int] = []
    th = threading.Thread(target=lambda: other.append(thread_workspace(100)))
    th.start()
    th.join()
    assert other and other[0] % 64 == 0
    with pytest.raises((OverflowError, TypeError)):
        thread_workspace(-1)
