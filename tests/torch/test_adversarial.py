"""hipdnn.torch against inputs a user can pass that the other tests do not: tensor subclasses whose
accessors misreport their memory, ``__torch_dispatch__`` subclasses, FakeTensor and meta tensors, a
head dim of 0, scales that are not finite numbers, double backward, masks in every layout, the
plan cache under churn (distinct kinds, ``clear()`` from another thread), and ``torch.compile`` with
layouts that change between calls. Each case is compared with torch's own SDPA (float64) or must
raise a clear ``HipdnnError``."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.torch.support import close, rand, reference

torch = pytest.importorskip("torch", reason="hipdnn.torch needs PyTorch (pip install 'hipdnn[torch]')")
import torch.nn.functional as F  # noqa: E402

import hipdnn  # noqa: E402
import hipdnn.torch as ht  # noqa: E402
from hipdnn.torch import plans  # noqa: E402

ATOL = 5e-6


def torch64(q: Any, k: Any, v: Any, **kw: Any) -> Any:
    mask = kw.pop("attn_mask", None)
    if mask is not None and mask.dtype != torch.bool:
        mask = mask.double()  # torch 2.13 mixes a float32 mask into float64 inputs wrongly
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask, **kw)


# -- subclasses ---------------------------------------------------------------------------------


class SwappedStrides(torch.Tensor):
    """Reports the strides of its head and sequence axes swapped (the extent is the same)."""

    def stride(self, *dim: Any) -> Any:
        s = super().stride(*dim)
        return s if dim else (s[0], s[2], s[1], s[3])


class ShiftedPointer(torch.Tensor):
    """Reports a data pointer 16 elements past its own (inside a larger allocation)."""

    def data_ptr(self) -> int:
        return int(super().data_ptr()) + 16 * self.element_size()


def test_subclass_accessors_do_not_steer_the_engines(cache: ht.PlanCache) -> None:
    """The bound call reads data_ptr(), shape and stride() through Python: a subclass overriding them
    had the engines read other memory (wrong values; larger strides read past the tensor and crashed
    the process). torch's own accessors on a plain alias are what counts."""
    q, v = rand(2, 4, 4, 16, seed=1), rand(2, 4, 4, 16, seed=2)
    base = rand(2 * 4 * 4 * 16 + 16, seed=3)
    k = base[: 2 * 4 * 4 * 16].view(2, 4, 4, 16)
    want = torch64(q, k, v, is_causal=True)
    for cls in (SwappedStrides, ShiftedPointer):
        for grad in (False, True):
            lying = k.as_subclass(cls)
            qg = q.clone().requires_grad_(grad)
            out = ht.scaled_dot_product_attention(qg, lying, v, is_causal=True)
            close(out.detach(), want, ATOL, f"{cls.__name__}, grad {grad}")
            if grad:
                (dq,) = torch.autograd.grad(out.square().sum(), [qg])
                q64 = q.double().requires_grad_(True)
                (want_dq,) = torch.autograd.grad(torch64(q64, k, v, is_causal=True).square().sum(), [q64])
                close(dq, want_dq, 2e-5, f"{cls.__name__} dq")
        # a mask and a gradient of the subclass are not trusted either
        mask = rand(4, 4, seed=4).as_subclass(cls)
        close(ht.scaled_dot_product_attention(q, k, v, attn_mask=mask), torch64(q, k, v, attn_mask=mask), ATOL)
    with pytest.raises(hipdnn.HipdnnError, match="__torch_dispatch__"):
        from torch.testing._internal.two_tensor import TwoTensor

        plans.plain(TwoTensor(q, q))


def test_dispatch_subclasses_fake_and_meta_tensors_see_the_op() -> None:
    """A __torch_dispatch__ subclass (TwoTensor: two tensors in one), FakeTensor and meta tensors have
    no memory hipdnn could read; like torch's SDPA they get the call as an op (hipdnn::sdpa), which
    they dispatch (TwoTensor: on each of its tensors; fake and meta: the op's fake implementation).
    They raised INVALID_VARIANT_PACK ("pointer 0") or "tensors on meta are not served"."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.testing._internal.two_tensor import TwoTensor

    q, k, v = rand(2, 4, 7, 16, seed=1), rand(2, 2, 9, 16, seed=2), rand(2, 2, 9, 16, seed=3)
    two = [TwoTensor(t, 2 * t) for t in (q, k, v)]
    out = ht.scaled_dot_product_attention(*two, is_causal=True, enable_gqa=True)
    assert isinstance(out, TwoTensor)
    close(out.a, torch64(q, k, v, is_causal=True, enable_gqa=True), ATOL)
    close(out.b, torch64(2 * q, 2 * k, 2 * v, is_causal=True, enable_gqa=True), 4 * ATOL)
    tq = TwoTensor(q.clone(), q.clone()).requires_grad_(True)
    ht.scaled_dot_product_attention(tq, two[1], two[2], enable_gqa=True).sum().backward()
    assert isinstance(tq.grad, TwoTensor)
    close(tq.grad.a, torch.autograd.grad(F.scaled_dot_product_attention(
        q.requires_grad_(True), k, v, enable_gqa=True).sum(), [q])[0], 2e-5)  # fmt: skip
    with FakeTensorMode():
        fq = torch.empty(2, 9, 4, 16).transpose(1, 2)
        fk = torch.empty(2, 2, 11, 16)
        fo = ht.scaled_dot_product_attention(fq, fk, fk, attn_mask=torch.ones(9, 11, dtype=torch.bool), enable_gqa=True)
    assert isinstance(fo, FakeTensor) and fo.shape == (2, 4, 9, 16)
    assert fo.transpose(1, 2).is_contiguous()  # the real implementation's layout: the query's
    mq, mk = torch.empty(3, 2, 5, 8, device="meta"), torch.empty(3, 2, 6, 8, device="meta")
    mo = ht.scaled_dot_product_attention(mq, mk, mk, is_causal=True)
    assert mo.device.type == "meta" and mo.shape == (3, 2, 5, 8)


# -- values torch computes, refusals torch does not make -----------------------------------------


@pytest.mark.parametrize("options", [{}, {"scale": 0.5}, {"is_causal": True}, {"mask": True}])
def test_head_dim_zero_averages_the_values_as_torch_does(options: dict[str, Any]) -> None:
    """E = 0: every score is 0, so each row averages the visible values. The default scale 1/sqrt(0)
    raised ZeroDivisionError (on the short path too), an explicit one "dims must be positive"."""
    q, k, v = rand(2, 3, 7, 0), rand(2, 3, 9, 0), rand(2, 3, 9, 5, seed=1)
    kw: dict[str, Any] = {key: val for key, val in options.items() if key != "mask"}
    if options.get("mask"):
        kw["attn_mask"] = rand(7, 9, seed=2) > 0
    for _ in range(2):  # the second call would take the short path if a plan existed
        close(ht.scaled_dot_product_attention(q, k, v, **kw), torch64(q, k, v, **kw), ATOL)
    qg, vg = q.clone().requires_grad_(True), v.clone().requires_grad_(True)
    dq, dv = torch.autograd.grad(ht.scaled_dot_product_attention(qg, k, vg, **kw).square().sum(), [qg, vg])
    v64 = v.double().requires_grad_(True)
    (want_dv,) = torch.autograd.grad(torch64(q, k, v64, **kw).square().sum(), [v64])
    assert dq.shape == q.shape
    close(dv, want_dv, 2e-5)


def test_scale_must_be_a_finite_number(cache: ht.PlanCache) -> None:
    """NaN and infinite scales make every score NaN; they were handed to a graph build on every call
    (refused there with INVALID_VALUE); a string raised ValueError from float(). Now a HipdnnError
    up front, and nothing is built. Zero and negative scales are served."""
    q, k, v = rand(1, 2, 5, 8, seed=1), rand(1, 2, 6, 8, seed=2), rand(1, 2, 6, 8, seed=3)
    ht.scaled_dot_product_attention(q, k, v, scale=0.25)  # a plan exists: the short path is live
    builds = cache.stats().builds
    for bad in (float("nan"), float("inf"), float("-inf"), "0.5", object()):
        with pytest.raises(hipdnn.HipdnnError, match="scale must be None or a (finite )?number") as info:
            ht.scaled_dot_product_attention(q, k, v, scale=bad)  # type: ignore[arg-type]
        assert info.value.code == hipdnn.ErrorCode.INVALID_VALUE
    assert cache.stats().builds == builds
    for scale in (0.0, -1.0, 1e-30, 1e4, 2):
        close(ht.scaled_dot_product_attention(q, k, v, scale=scale), torch64(q, k, v, scale=scale), 1e-5, str(scale))


def test_double_backward_raises_instead_of_dropping_the_second_order_term() -> None:
    """hipdnn's backward has no derivative. ``once_differentiable`` only marked the gradients when
    grad_o required grad, so ``autograd.grad(out.sum(), q, create_graph=True)`` gave a gradient that
    silently counted as a constant in a gradient penalty (torch's SDPA raises there)."""
    q, k, v = (rand(2, 4, 7, 16, seed=s).requires_grad_(True) for s in (1, 2, 3))
    for loss in (lambda o: o.sum(), lambda o: o.square().sum()):
        (dq,) = torch.autograd.grad(loss(ht.scaled_dot_product_attention(q, k, v)), [q], create_graph=True)
        assert dq.requires_grad
        with pytest.raises(RuntimeError, match="not differentiable"):
            (dq.square().sum() + q.sum()).backward()
    # without create_graph nothing changes, and retain_graph serves two backward passes
    out = ht.scaled_dot_product_attention(q, k, v, is_causal=True)
    first = torch.autograd.grad(out.sum(), [q, k, v], retain_graph=True)
    for a, b in zip(first, torch.autograd.grad(out.sum(), [q, k, v])):
        assert not a.requires_grad and torch.equal(a, b)


MASK_LAYOUTS = ["expanded query axis", "expanded batch and heads", "transposed", "strided", "offset", "scalar"]


@pytest.mark.parametrize("layout", MASK_LAYOUTS)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_mask_layouts(layout: str, kind: str) -> None:
    q, k, v = rand(2, 4, 7, 16, seed=1), rand(2, 4, 9, 16, seed=2), rand(2, 4, 9, 16, seed=3)
    raw = {
        "expanded query axis": lambda: rand(1, 9, seed=4).expand(7, 9),
        "expanded batch and heads": lambda: rand(1, 1, 7, 9, seed=4).expand(2, 4, 7, 9),
        "transposed": lambda: rand(2, 1, 9, 7, seed=4).transpose(-1, -2),
        "strided": lambda: rand(7, 27, seed=4)[:, ::3],
        "offset": lambda: rand(200, seed=4)[37 : 37 + 63].view(7, 9),
        "scalar": lambda: rand(1, seed=4).expand(7, 9),
    }[layout]()
    mask = raw > -0.3 if kind == "bool" else raw
    want = torch64(q, k, v, attn_mask=mask)
    close(ht.scaled_dot_product_attention(q, k, v, attn_mask=mask), want, ATOL)
    qg = q.clone().requires_grad_(True)
    out = ht.scaled_dot_product_attention(qg, k, v, attn_mask=mask)
    (dq,) = torch.autograd.grad(out, [qg], rand(2, 4, 7, 16, seed=5).transpose(2, 3).contiguous().transpose(2, 3))
    q64 = q.double().requires_grad_(True)
    (want_dq,) = torch.autograd.grad(torch64(q64, k, v, attn_mask=mask), [q64], rand(2, 4, 7, 16, seed=5).double())
    close(dq, want_dq, 2e-5)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_masks_expanded_over_batch_and_heads_reach_the_plan_unrepeated(kind: str) -> None:
    """A mask broadcast over batch and heads by expand() (transformers expands its 4-D masks over the
    batch) is handed to the plan with those axes at length 1, as the engines' [B|1, Hq|1, Sq, Skv]
    bias takes it: neither the bool conversion nor a copy repeats it per batch and head."""
    from hipdnn.torch.attention import _bias

    raw = rand(1, 1, 7, 9, seed=4)
    mask = (raw > -0.3 if kind == "bool" else raw).expand(3, 4, 7, 9)
    q = rand(3, 4, 7, 16, seed=1)
    bias = _bias(mask, q, 4, "4d", (3,), 4, 7, 9)
    assert bias.shape == (1, 1, 7, 9) and not plans.needs_copy(bias)
    assert bias.untyped_storage().nbytes() <= 7 * 9 * 4
    k, v = rand(3, 4, 9, 16, seed=2), rand(3, 4, 9, 16, seed=3)
    close(ht.scaled_dot_product_attention(q, k, v, attn_mask=mask), torch64(q, k, v, attn_mask=mask), ATOL)
    # Only the heads expanded: the batch axis stays as given.
    per_batch = rand(3, 1, 7, 9, seed=5).expand(3, 4, 7, 9)
    assert _bias(per_batch, q, 4, "4d", (3,), 4, 7, 9).shape == (3, 1, 7, 9)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_padding_mask_reaches_the_cpu_plan_as_one_row_per_batch(kind: str) -> None:
    """A key padding mask [B, 1, 1, Skv] (as given, or expanded over the queries) is handed to the CPU
    plan as it is, one row per batch (the CPU engine broadcasts every dim of 1), not copied to a
    [B, 1, Sq, Skv] plane per call; values and gradients as the definition's."""
    from hipdnn.torch.attention import _bias

    q, k, v = rand(3, 4, 7, 16, seed=1), rand(3, 4, 9, 16, seed=2), rand(3, 4, 9, 16, seed=3)
    keep = torch.arange(9)[None, :] < torch.tensor([9, 5, 1])[:, None]
    raw = keep if kind == "bool" else torch.zeros(3, 9).masked_fill(~keep, float("-inf"))
    for mask in (raw[:, None, None, :], raw[:, None, None, :].expand(3, 1, 7, 9)):
        bias = _bias(mask, q, 4, "4d", (3,), 4, 7, 9)
        assert bias.shape == (3, 1, 1, 9) and not plans.needs_copy(bias)
        close(ht.scaled_dot_product_attention(q, k, v, attn_mask=mask), torch64(q, k, v, attn_mask=mask), ATOL)
        qg = q.clone().requires_grad_(True)
        (dq,) = torch.autograd.grad(ht.scaled_dot_product_attention(qg, k, v, attn_mask=mask).sum(), [qg])
        q64 = q.double().requires_grad_(True)
        (want,) = torch.autograd.grad(torch64(q64, k, v, attn_mask=mask).sum(), [q64])
        close(dq, want, 2e-5)


def test_expanded_mask_of_the_wrong_length_is_refused() -> None:
    """Narrowing expanded axes comes after the broadcast check: a batch of 5 stays wrong for 3."""
    q, k, v = rand(3, 4, 7, 16, seed=1), rand(3, 4, 9, 16, seed=2), rand(3, 4, 9, 16, seed=3)
    with pytest.raises(hipdnn.HipdnnError, match="does not broadcast"):
        ht.scaled_dot_product_attention(q, k, v, attn_mask=rand(1, 1, 7, 9, seed=4).expand(5, 4, 7, 9))


def test_rows_masked_by_the_float32_minimum_average_as_torch_does() -> None:
    """transformers' older additive masks fill with finfo.min; torch gives a row masked everywhere by
    it the average of the values (every score equal). (The CPU engine once scaled such a bias to log2
    units after adding it, and -3.4e38 x 1.44 overflowed: the row came out empty, zeros.)"""
    q, k, v = rand(1, 2, 3, 8, seed=1), rand(1, 2, 5, 8, seed=2), rand(1, 2, 5, 8, seed=3)
    mask = torch.zeros(3, 5)
    mask[1] = torch.finfo(torch.float32).min
    close(ht.scaled_dot_product_attention(q, k, v, attn_mask=mask), torch64(q, k, v, attn_mask=mask), ATOL)


def eager64(q: Any, k: Any, v: Any, mask: Any) -> Any:
    """Attention written out in float64 (transformers' eager path): softmax(q k^T / sqrt(d) + mask) v."""
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5 + mask
    return torch.softmax(s, dim=-1) @ v


@pytest.mark.parametrize("fill", [torch.finfo(torch.float32).min, -1e30, -1e20])
def test_gradients_of_rows_masked_everywhere_by_a_huge_value_are_the_definitions(fill: float) -> None:
    """The backward of such a row: P = 2^(s - lse) cannot come from its stats, whose fp32 lse is the
    mask itself (m + log2 l rounds to m), which would make P l times too large (torch's fused CPU
    backward does that); the engine recomputes the row's max and sum, so the gradients are those of
    attention written out in float64."""
    q, k, v = rand(2, 3, 9, 8, seed=1), rand(2, 3, 21, 8, seed=2), rand(2, 3, 21, 8, seed=3)
    mask = torch.randn(9, 21, generator=torch.Generator().manual_seed(4))
    mask[1] = fill
    mask[4, 3:] = fill
    go = rand(2, 3, 9, 8, seed=5)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ht.scaled_dot_product_attention(*leaves, attn_mask=mask).backward(go)
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    eager64(*ref, mask.double()).backward(go.double())
    for name, got, want in zip(("dq", "dk", "dv"), leaves, ref):
        assert got.grad is not None and want.grad is not None
        close(got.grad, want.grad, 2e-5, name)


# -- the plan cache under churn -------------------------------------------------------------------


def test_distinct_kinds_stay_bounded(cache: ht.PlanCache, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every distinct scale is a kind of its own: the cache keeps MAX_KINDS of them, the oldest
    dropped, and a dropped kind is rebuilt (correctly) when it comes back."""
    monkeypatch.setattr(plans, "MAX_KINDS", 6)
    q, k, v = rand(1, 2, 3, 8, seed=1), rand(1, 2, 5, 8, seed=2), rand(1, 2, 5, 8, seed=3)
    for round_ in range(2):
        for i in range(20):
            scale = 0.1 + i / 64
            out = ht.scaled_dot_product_attention(q, k, v, scale=scale)
            if i % 7 == 0:
                close(out, torch64(q, k, v, scale=scale), 1e-5, f"round {round_} scale {scale}")
            assert len(cache.plans()) <= 6
    assert cache.stats().builds == 40


def test_threads_with_clear_and_evictions(cache: ht.PlanCache, monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads calling forward and backward on kinds that evict one another while another thread
    clears the cache: every result right, no exception."""
    monkeypatch.setattr(plans, "MAX_KINDS", 4)
    failures: list[str] = []
    stop = threading.Event()

    def work(seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        for i in range(30):
            sq, skv = int(torch.randint(1, 40, (1,), generator=g)), int(torch.randint(1, 70, (1,), generator=g))
            q, k, v = (torch.randn(2, 2, s, 8, generator=g) for s in (sq, skv, skv))
            scale = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7)[i % 6]
            try:
                q.requires_grad_(i % 3 == 0)
                out = ht.scaled_dot_product_attention(q, k, v, scale=scale)
                err = (out.detach().double() - reference(q.detach(), k, v, scale=scale)[0]).abs().max().item()
                if err > 1e-5:
                    failures.append(f"seed {seed} call {i}: error {err}")
                if q.requires_grad:
                    (dq,) = torch.autograd.grad(out.sum(), [q])
                    if not torch.isfinite(dq).all():
                        failures.append(f"seed {seed} call {i}: dq not finite")
            except Exception as exc:  # noqa: BLE001 - reported below
                failures.append(f"seed {seed} call {i}: {exc!r}")

    def clearer() -> None:
        while not stop.wait(0.01):
            cache.clear()

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    clearing = threading.Thread(target=clearer)
    clearing.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    clearing.join()
    assert not failures, failures[:5]


# -- torch.compile with layouts that change between calls ----------------------------------------


def test_compiled_calls_with_changing_layouts_and_masks() -> None:
    torch._dynamo.reset()

    def fn(q: Any, k: Any, v: Any, mask: Any) -> Any:
        return ht.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True) * 2

    compiled = torch.compile(fn, backend="aot_eager", dynamic=True)
    for i, (sq, skv) in enumerate(((5, 9), (17, 33), (1, 100))):
        g = torch.Generator().manual_seed(i)
        q = torch.randn(2, sq, 4, 16, generator=g).transpose(1, 2)
        k, v = torch.randn(2, 2, skv, 16, generator=g), torch.randn(2, 2, skv, 16, generator=g)
        variants = [
            (q, k, v, None),
            (q.contiguous(), k.transpose(1, 2).contiguous().transpose(1, 2), v, None),
            (q, k.transpose(-1, -2).contiguous().transpose(-1, -2), v[:1].expand(2, 2, skv, 16), None),
            (q, k, v, torch.rand(sq, skv, generator=g) > 0.3),
            (q, k, v, torch.randn(1, 1, 1, skv, generator=g).expand(2, 4, sq, skv)),
        ]
        for qq, kk, vv, mask in variants:
            qg = qq.detach().requires_grad_(True)
            out = compiled(qg, kk, vv, mask)
            close(out.detach(), 2 * torch64(qq, kk, vv, attn_mask=mask, enable_gqa=True), 2 * ATOL)
            (dq,) = torch.autograd.grad(out.square().sum(), [qg])
            q64 = qq.detach().double().requires_grad_(True)
            want = torch64(q64, kk, vv, attn_mask=mask, enable_gqa=True) * 2
            close(dq, torch.autograd.grad(want.square().sum(), [q64])[0], 1e-4)


def test_nan_and_inf_in_the_mask_give_nan_rows_as_torch_does() -> None:
    """A NaN or +inf in an additive mask makes its row NaN in torch's SDPA; the CPU engine had written
    such rows as empty ones (zeros)."""
    q, k, v = rand(1, 2, 4, 8, seed=1), rand(1, 2, 5, 8, seed=2), rand(1, 2, 5, 8, seed=3)
    mask = torch.zeros(4, 5)
    mask[1, 2] = float("nan")
    mask[2, 3] = float("inf")
    got = ht.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(torch.isnan(got), torch.isnan(want)) and torch.isnan(got[:, :, 1:3]).all()
    close(got[:, :, [0, 3]], want[:, :, [0, 3]], ATOL)
