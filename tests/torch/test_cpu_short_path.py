"""hipdnn.torch's compiled short path (``PlanCache.cpu_calls``, hipdnn/backend/native/sdpa_calls.cpp):
attention on plain CPU tensors with no mask tensor, read and run in one compiled step once the general
path has built the kind's plan. Every call it serves must equal the float64 definition with every
output element written; every call it does not serve must reach the general path unchanged; and what
an allocator or a caller hands it must never make the engine read or write outside a tensor."""

from __future__ import annotations

import gc
import threading
import weakref
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
from hipdnn.torch.plans import LAYOUTS, _mask_bias  # noqa: E402

TOL = {torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 4e-3}


def nan_empty(size: Any, layout: Any, *, dtype: Any, device: Any) -> Any:
    """torch.empty_permuted's output filled with NaN: a served call must overwrite every element."""
    return torch.empty_permuted(size, layout, dtype=dtype, device=device).fill_(float("nan"))


def table(allocate: Callable[..., Any], to_bias: Callable[..., Any] = _mask_bias) -> Any:
    return SdpaCalls(
        torch.Tensor, allocate, torch.is_grad_enabled, torch.device("cpu"), LAYOUTS, to_bias, torch.bool, torch.float32,
        torch._C._is_torch_function_mode_enabled, torch._C._len_torch_dispatch_stack,
    )  # fmt: skip


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
    """Only kinds the short path can serve are in it (an additive mask, but no band, softcap,
    lengths or statistics); a grown kind replaces its entry; clear() empties it and zeroes its count,
    which stats() adds."""
    q, k = torch.randn(1, 2, 1, 16), torch.randn(1, 2, 40, 16)
    ht.scaled_dot_product_attention(q, k, k)
    assert len(cache.cpu_calls) == 1
    ht.scaled_dot_product_attention(q, k, k, attn_mask=torch.ones(1, 1, 1, 40, dtype=torch.bool))
    ht.scaled_dot_product_attention(q, k, k, left_bound=3, is_causal=True)
    ht.scaled_dot_product_attention(q, k, k, softcap=5.0)
    ht.scaled_dot_product_attention(q, k, k, return_lse=True)
    ht.scaled_dot_product_attention(q, k, k, seq_len_kv=torch.tensor([30]))
    assert len(cache.stats().capacities) == 6 and len(cache.cpu_calls) == 2
    ht.scaled_dot_product_attention(q, k, k, is_causal=True)
    assert len(cache.cpu_calls) == 3
    before = cache.stats()
    ht.scaled_dot_product_attention(q, torch.randn(1, 2, 500, 16), torch.randn(1, 2, 500, 16))  # grows
    assert len(cache.cpu_calls) == 3 and cache.stats().builds == before.builds + 1
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


def test_modes_take_the_general_path(cache: ht.PlanCache) -> None:
    """Under a torch function mode (``with torch.device(...)`` is one) or a dispatch mode, which see
    the accessors and the allocation, the short path serves nothing: the general path, which reads the
    tensors after allocating, gives the same results."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counting(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            self.ops += 1
            return func(*args, **(kwargs or {}))

    q, k, v = torch.randn(1, 4, 2, 16), torch.randn(1, 4, 40, 16), torch.randn(1, 4, 40, 16)
    mask = torch.rand(1, 1, 2, 40) > 0.3
    want, _ = reference(q, k, v)
    want_masked, _ = reference(q, k, v, mask)
    ht.scaled_dot_product_attention(q, k, v)  # the kinds' plans
    ht.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    counting = Counting()
    for mode in (torch.device("cpu"), counting):
        with mode:
            o = _unserved(cache, q, k, v)
            om = _unserved(cache, q, k, v, attn_mask=mask)
        assert torch.allclose(o.double(), want, atol=2e-5)
        assert torch.allclose(om.double(), want_masked, atol=2e-5)
    assert counting.ops > 0  # the general path's torch calls (the allocation) went through the mode
    hits = cache.cpu_calls.hits
    ht.scaled_dot_product_attention(q, k, v)  # no mode: served again
    assert cache.cpu_calls.hits == hits + 1


def test_code_run_during_a_call_cannot_free_what_it_read(cache: ht.PlanCache) -> None:
    """Code of the caller's that runs inside a call (a mode's handler at the allocation or at an
    accessor, a flag's ``__bool__``) frees the keys and values it reads (``set_()`` on them: their
    storage, big enough to be given back to the system, goes). Nothing may read the freed memory: the
    call raises a clear error, or serves the tensors as they are (function modes do not run inside it)."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

    skv = 1 << 16  # 16 MB each: allocated (and freed) by mmap
    state: dict[str, Any] = {}

    def fresh() -> tuple[Any, Any, Any]:
        q, k, v = torch.randn(1, 8, 1, 32), torch.randn(1, 8, skv, 32), torch.randn(1, 8, skv, 32)
        state.update(k=k, v=v, armed=True)
        return q, k, v

    def free() -> None:
        if state.pop("armed", False):
            state["k"].set_(torch.empty(0))
            state["v"].set_(torch.empty(0))

    class FreeingFunctions(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if getattr(func, "__name__", "") in ("empty_permuted", "empty", "data_ptr", "stride"):
                free()
            return func(*args, **(kwargs or {}))

    class FreeingDispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if "empty" in str(func):
                with _disable_current_modes():
                    free()
            return func(*args, **(kwargs or {}))

    class FreeingFlag:
        def __bool__(self) -> bool:
            free()
            return False

    q, k, v = fresh()
    with FreeingDispatch(), pytest.raises(HipdnnError, match="changed while the call was prepared"):
        ht.scaled_dot_product_attention(q, k, v)  # the kind's first call: its plan is described after
    q, k, v = fresh()
    ht.scaled_dot_product_attention(q, k, v)  # the kind's plan: later calls would be the short path's
    q, k, v = fresh()
    want, _ = reference(q, k, v)
    with FreeingFunctions():  # runs with function modes off: the handler never sees the call
        o = ht.scaled_dot_product_attention(q, k, v)
    assert state.get("armed") and torch.allclose(o.double(), want, atol=2e-5)
    q, k, v = fresh()
    with FreeingDispatch(), pytest.raises(HipdnnError):  # the allocation is an op: k and v go before the read
        ht.scaled_dot_product_attention(q, k, v)
    q, k, v = fresh()
    want, _ = reference(q, k, v)
    try:
        o = ht.scaled_dot_product_attention(q, k, v, enable_gqa=FreeingFlag())  # type: ignore[arg-type]
    except HipdnnError:
        assert not state.get("armed")  # its __bool__ ran, and the call saw k and v freed
    else:
        assert state.get("armed") and torch.allclose(o.double(), want, atol=2e-5)  # (equal heads: never asked)
    # the table itself takes only bools as its flags: another object goes to the general path
    q, k, v = fresh()
    for flags in ((FreeingFlag(), False, False), (False, FreeingFlag(), False), (True, False, FreeingFlag())):
        assert cache.cpu_calls(q, k, v, flags[0], None, flags[1], flags[2]) is None
    assert state.get("armed") and k.shape == (1, 8, skv, 32)  # (no flag's __bool__ ran)


def test_call_tensors_reads_again_what_a_subclass_could_free(cache: ht.PlanCache) -> None:
    """The bound call's tensor form (``call_tensors``, the general path's launch) reads each tensor's
    accessors in turn; a subclass's ``shape`` may free a tensor read before it. The core reads the
    call's torch tensors again through torch's own accessors before running, when any is not exactly
    ``torch.Tensor``: the call is refused, naming the tensor, and the output keeps its NaN."""
    q, k, v = torch.randn(1, 4, 3, 64), torch.randn(1, 4, 700, 64), torch.randn(1, 4, 700, 64)
    ht.scaled_dot_product_attention(q, k, v)
    (plan,) = cache.plans()

    class Freeing(torch.Tensor):
        victim: Any = None

        @property
        def shape(self) -> Any:  # type: ignore[override]
            if type(self).victim is not None:
                type(self).victim.set_(torch.empty(0))
                type(self).victim = None
            return super().shape

    o = torch.full((1, 4, 3, 64), float("nan"))
    Freeing.victim = k
    with pytest.raises(HipdnnError, match="tensor 'k'.*changed while"):
        plan.run([q, k, v.as_subclass(Freeing), o])
    assert o.isnan().all() and k.numel() == 0
    k = torch.randn(1, 4, 700, 64)
    assert plan.run([q, k, v.as_subclass(Freeing), o])  # (its shape now frees nothing)
    assert torch.allclose(o.double(), reference(q, k, v)[0], atol=2e-5)


def test_misuse_of_the_table_is_a_clear_error(cache: ht.PlanCache) -> None:
    calls = cache.cpu_calls
    q = torch.randn(1, 2, 1, 8)
    with pytest.raises(TypeError):
        calls(q, q, q)
    with pytest.raises(TypeError):
        calls(q, q, q, False, None, False, False, None, None)
    with pytest.raises(TypeError, match="bound call"):
        calls.put(object(), torch.float32, 2, 2, 8, 8, 0.5, False, False, 0, 1, 16, 16)
    with pytest.raises(TypeError):
        calls.put(None)
    with pytest.raises(ValueError):
        calls.hits = -1
    with pytest.raises(TypeError):
        SdpaCalls(torch.Tensor, None, None, None, "not a tuple", None, None, None, None, None)
    with pytest.raises(TypeError):
        SdpaCalls(torch.Tensor, None, None, None, LAYOUTS)  # too few
    with pytest.raises(ValueError):
        SdpaCalls(torch.Tensor, None, None, None, ((0, 1, 2, 3),), None, None, None, None, None)
    ht.scaled_dot_product_attention(q, q, q)
    (plan,) = cache.plans()
    with pytest.raises(ValueError, match="codes"):
        calls.put(plan.bound, torch.float32, 2, 2, 8, 8, 0.5, False, False, 216, 1, 16, 16)
    with pytest.raises(TypeError, match="heads"):
        calls.put(plan.bound, torch.float32, "2", 2, 8, 8, 0.5, False, False, 0, 1, 16, 16)
    with pytest.raises(ValueError, match="bias_code"):
        calls.put(plan.bound, torch.float32, 2, 2, 8, 8, 0.5, False, False, 0, 1, 16, 16, torch.float32, 0, 0, 6)
    with pytest.raises(TypeError):
        calls.put(plan.bound, torch.float32, 2, 2, 8, 8, 0.5, False, False, 0, 1, 16, 16, torch.float32)


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


# -- attention masks -------------------------------------------------------------------------------


def _mask_reference(q: Any, k: Any, v: Any, mask: Any, causal: bool = False) -> Any:
    sq, skv = q.shape[2], k.shape[2]
    if mask.dtype == torch.bool:
        keep = mask.expand(q.shape[0], q.shape[1], sq, skv)
        if causal:
            keep = keep & visible(sq, skv, causal=True)
        return reference(q, k, v, keep)[0]
    return reference(q, k, v, visible(sq, skv, causal=True) if causal else None, bias=mask)[0]


MASKS = {
    # name: (b, hq, sq, skv) -> mask
    "padding [B,1,1,S]": lambda b, h, sq, skv, g: torch.rand(b, 1, 1, skv, generator=g) > 0.2,
    "transformers [B,1,Sq,S] expanded": lambda b, h, sq, skv, g: (torch.rand(1, 1, sq, skv, generator=g) > 0.3).expand(
        b, 1, sq, skv
    ),
    "per head [B,H,Sq,S]": lambda b, h, sq, skv, g: torch.rand(b, h, sq, skv, generator=g) > 0.3,
    "one row [1,1,1,S]": lambda b, h, sq, skv, g: torch.rand(1, 1, 1, skv, generator=g) > 0.5,
    "key axis broadcast [B,1,Sq,1]": lambda b, h, sq, skv, g: torch.rand(b, 1, sq, 1, generator=g) > 0.2,
}


@pytest.mark.parametrize("name", list(MASKS))
@pytest.mark.parametrize("kind", ["bool", "float", "float32 for bf16"])
@pytest.mark.parametrize("causal", [False, True])
def test_masked_calls_are_served(nan_cache: ht.PlanCache, name: str, kind: str, causal: bool) -> None:
    """Masks as models pass them, boolean (converted once) and additive (read in place), served from
    the second call on; rows left with no key give zeros, as torch's do."""
    dtype = torch.bfloat16 if kind == "float32 for bf16" else torch.float32
    b, h, sq, skv, d = 2, 4, 5, 37, 32
    for n in range(3):
        g = torch.Generator().manual_seed(n)
        q = make((b, h, sq, d), "bshd", dtype, 10 * n)
        k, v = (make((b, h, skv, d), "bshd", dtype, 10 * n + i) for i in (1, 2))
        keep = MASKS[name](b, h, sq, skv, g)
        mask = keep if kind == "bool" else torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))
        if kind == "float":
            mask = mask + torch.randn(mask.shape, generator=g) * keep  # a bias, not only 0 / -inf
        if name.endswith("expanded"):
            mask = mask.expand(b, 1, sq, skv)
        hits = nan_cache.cpu_calls.hits
        o = ht.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        if n:
            assert nan_cache.cpu_calls.hits == hits + 1
        assert not o.isnan().any()
        want = _mask_reference(q, k, v, mask, causal)
        assert torch.allclose(o.double(), want, atol=TOL[dtype] * 3, rtol=TOL[dtype])


def test_a_boolean_mask_is_converted_once_and_never_outlives_itself(cache: ht.PlanCache) -> None:
    """The memo: one conversion while the same mask comes back unmodified; an in-place change, another
    mask or another call shape converts again; the bias dies with its mask."""
    made: list[Any] = []

    def counting(mask: Any, query: Any, b: int, hq: int, sq: int, skv: int) -> Any:
        bias = _mask_bias(mask, query, b, hq, sq, skv)
        made.append(weakref.ref(bias))
        return bias

    cache.cpu_calls = table(torch.empty_permuted, counting)
    q, k, v = torch.randn(2, 4, 1, 16), torch.randn(2, 4, 50, 16), torch.randn(2, 4, 50, 16)
    mask = torch.rand(2, 1, 1, 50) > 0.3
    ht.scaled_dot_product_attention(q, k, v)  # a kind without a mask: no candidate for a masked call
    cache._sync_cpu_calls()
    assert cache.cpu_calls(q, k, v, False, None, False, False, mask) is None and not made
    ht.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # builds the plan (general path)
    cache._sync_cpu_calls()
    for _ in range(4):  # layer after layer
        o = ht.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert len(made) == 1 and cache.cpu_calls.hits == 4
    assert torch.allclose(o.double(), _mask_reference(q, k, v, mask), atol=2e-5)
    mask[0, 0, 0, :10] = False  # in place: the version counter moves
    o = ht.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert len(made) == 2 and torch.allclose(o.double(), _mask_reference(q, k, v, mask), atol=2e-5)
    view = mask[..., :40]
    o = ht.scaled_dot_product_attention(q, k[:, :, :40], v[:, :, :40], attn_mask=view)  # another tensor and length
    assert len(made) == 3 and cache.cpu_calls.hits == 6
    assert torch.allclose(o.double(), _mask_reference(q, k[:, :, :40], v[:, :, :40], view), atol=2e-5)
    assert made[-1]() is not None
    del view
    gc.collect()
    assert made[-1]() is None, "the bias outlived its mask"
    for _ in range(3):  # new masks, perhaps at the dead one's address: each converted, each right
        fresh = torch.rand(2, 1, 1, 50) > 0.5
        o = ht.scaled_dot_product_attention(q, k, v, attn_mask=fresh)
        assert torch.allclose(o.double(), _mask_reference(q, k, v, fresh), atol=2e-5)
        del fresh
    assert len(made) == 6
    with torch.inference_mode():
        frozen = torch.rand(2, 1, 1, 50) > 0.5  # an inference tensor: no version counter, no memo
    for _ in range(2):
        o = ht.scaled_dot_product_attention(q, k, v, attn_mask=frozen)
        assert torch.allclose(o.double(), _mask_reference(q, k, v, frozen), atol=2e-5)
    assert len(made) == 8
    cache.cpu_calls.clear()
    gc.collect()
    assert all(r() is None for r in made)


def test_masks_it_leaves_to_the_general_path(cache: ht.PlanCache) -> None:
    q, k, v = torch.randn(2, 4, 3, 16), torch.randn(2, 4, 50, 16), torch.randn(2, 4, 50, 16)
    bias = torch.randn(2, 1, 3, 50)
    ht.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    for mask in (
        torch.randn(3, 50),  # 2-D: broadcast by the general path
        torch.randn(2, 1, 50, 3).transpose(-1, -2),  # key axis strided: the general path reads a copy
        torch.randn(2, 1, 3, 50).as_subclass(type("Sub", (torch.Tensor,), {})),
    ):
        o = _unserved(cache, q, k, v, attn_mask=mask)
        assert torch.allclose(o.double(), reference(q, k, v, bias=mask.as_subclass(torch.Tensor))[0], atol=2e-5)
    for mask, error in (
        (torch.randn(2, 1, 3, 50, dtype=torch.float64), "float64"),
        (torch.randn(2, 1, 3, 49), "broadcast"),
        (torch.randn(2, 1, 3, 50, device="meta"), "meta"),
        (torch.randn(2, 1, 3, 50, requires_grad=True), "requires grad"),
    ):
        with pytest.raises(HipdnnError, match=error):
            _unserved(cache, q, k, v, attn_mask=mask)


@settings(max_examples=60, deadline=None)
@given(
    b=st.integers(1, 3),
    h=st.integers(1, 3),
    sq=st.sampled_from([1, 2, 9]),
    skv=st.sampled_from([1, 5, 37]),
    full=st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()),
    expanded=st.booleans(),
    kind=st.sampled_from(["bool", "float"]),
    causal=st.booleans(),
    permute=st.sampled_from([(0, 1, 2, 3), (1, 0, 2, 3), (2, 1, 0, 3), (0, 2, 1, 3)]),
    seed=st.integers(0, 1000),
)
def test_generated_masks(
    b: int, h: int, sq: int, skv: int, full: Any, expanded: bool, kind: str, causal: bool, permute: Any, seed: int
) -> None:
    """Masks of every broadcast pattern, stored in any order of their outer axes, expanded or not,
    against float64: what the short path serves and what it leaves alike."""
    cache = ht.plan_cache()
    cache.clear()
    cache.cpu_calls = table(nan_empty)
    try:
        g = torch.Generator().manual_seed(seed)
        scores = (b, h, sq, skv)
        shape = tuple(n if f else 1 for n, f in zip(scores, full))
        stored = torch.rand(tuple(shape[p] for p in permute), generator=g).permute(*_inverse(permute))
        keep = stored > 0.3
        mask = keep if kind == "bool" else torch.randn(shape, generator=g).masked_fill(~keep, float("-inf"))
        if expanded:
            mask = mask.expand(scores)
        q, k, v = (torch.randn(s, generator=g) for s in ((b, h, sq, 8), (b, h, skv, 8), (b, h, skv, 8)))
        for _ in range(2):
            o = ht.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
            assert not o.isnan().any()
            assert torch.allclose(o.double(), _mask_reference(q, k, v, mask, causal), atol=3e-5)
    finally:
        cache.clear()


def _inverse(p: Any) -> list[int]:
    out = [0] * len(p)
    for i, a in enumerate(p):
        out[a] = i
    return out
