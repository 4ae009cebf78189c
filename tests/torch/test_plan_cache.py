"""hipdnn.torch's plan cache: no maxima to choose. A kind's plan is built at a power-of-two capacity,
every call that fits is served by it through overrides (the bound call), a call past it builds the
next capacity step (one build per step, counted), and kinds are told apart by what a plan bakes in."""

from __future__ import annotations

import threading

import pytest

from tests.torch.support import close, rand, reference, visible

torch = pytest.importorskip("torch", reason="hipdnn.torch needs PyTorch (pip install 'hipdnn[torch]')")

import hipdnn.torch as ht  # noqa: E402
from hipdnn.torch.plans import compact_in_order, next_capacity, order_code  # noqa: E402


def test_next_capacity_and_layout_helpers() -> None:
    assert [next_capacity(n, 16) for n in (1, 16, 17, 100, 129, 1024, 1025)] == [16, 16, 32, 128, 256, 1024, 2048]
    assert [next_capacity(n, 1) for n in (1, 2, 3, 5)] == [1, 2, 4, 8]
    assert compact_in_order([2, 4, 8, 16], (0, 2, 1, 3)) == [512, 16, 64, 1]
    assert order_code(rand(2, 8, 4, 16).transpose(1, 2).stride()) == 1  # BSHD
    assert order_code(rand(2, 4, 8, 16).stride()) == 0  # BHSD


def test_decode_loop_builds_once_per_capacity_step(cache: ht.PlanCache) -> None:
    """A decode loop: one query token against a cache growing from 1 to 300 keys. Capacities 16,
    32, ..., 512: six builds; the other 294 calls reuse a plan through overrides."""
    k_all, v_all = rand(2, 4, 300, 16, seed=1), rand(2, 4, 300, 16, seed=2)
    for n in range(1, 301):
        q = rand(2, 4, 1, 16, seed=n)
        k, v = k_all[:, :, :n].contiguous(), v_all[:, :, :n].contiguous()
        o = ht.scaled_dot_product_attention(q, k, v)
        if n in (1, 16, 17, 100, 300):
            close(o, reference(q, k, v)[0], 5e-6)
    stats = cache.stats()
    assert stats.builds == 6
    assert stats.hits == 294
    assert stats.bound_calls == 300
    [(_, caps)] = stats.capacities
    assert caps == {"B": 2, "SQ": 16, "SKV": 512}


def test_only_the_axis_that_outgrows_its_capacity_grows(cache: ht.PlanCache) -> None:
    def call(b: int, sq: int, skv: int) -> None:
        q, k, v = rand(b, 2, sq, 8), rand(b, 2, skv, 8, seed=1), rand(b, 2, skv, 8, seed=2)
        close(
            ht.scaled_dot_product_attention(q, k, v, is_causal=True),
            reference(q, k, v, visible(sq, skv, causal=True))[0],
            5e-6,
        )

    call(1, 37, 37)
    assert cache.stats().capacities[0][1] == {"B": 1, "SQ": 64, "SKV": 64}
    call(3, 5, 5)  # the batch grows, the lengths keep their capacity
    assert cache.stats().capacities[0][1] == {"B": 4, "SQ": 64, "SKV": 64}
    call(1, 1, 129)
    assert cache.stats().capacities[0][1] == {"B": 4, "SQ": 64, "SKV": 256}
    for b, sq, skv in ((4, 64, 256), (1, 1, 1), (2, 37, 200), (4, 3, 256)):
        call(b, sq, skv)  # all served by the last plan
    stats = cache.stats()
    assert stats.builds == 3 and stats.hits == 4 and len(stats.capacities) == 1


def test_kinds_are_told_apart(cache: ht.PlanCache) -> None:
    """Each thing a plan bakes in makes a kind of its own; lengths do not."""
    q, k, v = rand(2, 4, 9, 16), rand(2, 4, 20, 16, seed=1), rand(2, 4, 20, 16, seed=2)
    calls = [
        lambda: ht.scaled_dot_product_attention(q, k, v),
        lambda: ht.scaled_dot_product_attention(q, k, v, is_causal=True),
        lambda: ht.scaled_dot_product_attention(q, k, v, is_causal=True, causal_alignment="bottom_right"),
        lambda: ht.scaled_dot_product_attention(q, k, v, scale=0.3),
        lambda: ht.scaled_dot_product_attention(q, k[:, :2], v[:, :2], enable_gqa=True),
        lambda: ht.scaled_dot_product_attention(q.transpose(1, 2).contiguous().transpose(1, 2), k, v),
        lambda: ht.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(9, 20, dtype=torch.bool)),
        lambda: ht.scaled_dot_product_attention(q.bfloat16(), k.bfloat16(), v.bfloat16()),
        lambda: ht.scaled_dot_product_attention(q, k, v, left_bound=4),
        lambda: ht.scaled_dot_product_attention(q, k, v, seq_len_kv=torch.tensor([3, 20])),
        lambda: ht.scaled_dot_product_attention(q, k, v, return_lse=True),
    ]
    for call in calls:
        call()
    assert cache.stats().builds == len(calls)
    for call in calls:
        call()
    assert cache.stats().builds == len(calls)
    assert cache.stats().hits == len(calls)


def test_the_backward_has_its_own_growing_plan(cache: ht.PlanCache) -> None:
    for s in (5, 9, 16, 17, 40):
        q, k, v = (rand(1, 2, s, 8, seed=i).requires_grad_() for i in range(3))
        ht.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    kinds = cache.stats().capacities
    assert sorted(d.split(",")[0] for d, _ in kinds) == ["sdpa on cpu", "sdpa_backward on cpu"]
    assert all(caps == {"B": 1, "SQ": 64, "SKV": 64} for _, caps in kinds)
    assert cache.stats().builds == 6  # forward and backward: 16, 32, 64 each


def test_views_wider_than_dense_raise_the_stride_floors(cache: ht.PlanCache) -> None:
    """A packed [B, S, 3, H, D] QKV tensor's q, k, v views span about three times what a dense plan
    declares; the kind's plan declares them with stride floors that cover them (one build), and
    every call still goes through the bound call. A KV-cache slice likewise."""
    qkv = rand(2, 64, 3, 4, 16)
    for s in (37, 5, 64):
        q, k, v = (qkv[:, :s, i].transpose(1, 2) for i in range(3))
        close(ht.scaled_dot_product_attention(q, k, v), reference(q, k, v)[0], 5e-6)
    stats = cache.stats()
    assert stats.builds == 1 and stats.bound_calls == 3
    [plan] = cache.plans()
    assert plan.floors[0] == (16384, 16, 256, 1)  # q's batch and sequence strides (12288, 192), rounded up
    assert plan.input_extents[0][1] >= 1 + 12288 + 3 * 16 + 63 * 192 + 15  # what q spans at s = 64
    cache.clear()
    cache_k, cache_v = rand(2, 4, 1000, 16, seed=1), rand(2, 4, 1000, 16, seed=2)
    for n in range(1, 200):
        q = rand(2, 4, 1, 16, seed=n)
        k, v = cache_k[:, :, :n], cache_v[:, :, :n]
        o = ht.scaled_dot_product_attention(q, k, v)
        if n % 37 == 1:
            close(o, reference(q, k, v)[0], 5e-6)
    # key capacities 16, 32, ..., 256; the first build already floors the cache's strides (64000 -> 65536)
    assert cache.stats().builds == 5 and cache.stats().bound_calls == 199
    assert cache.plans()[0].floors[1] == (65536, 16384, 1, 1)


def test_threads_share_the_cache(cache: ht.PlanCache) -> None:
    failures: list[str] = []
    longest: list[int] = []

    def work(seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        for _ in range(25):
            sq = int(torch.randint(1, 200, (1,), generator=g))
            skv = sq + int(torch.randint(0, 60, (1,), generator=g))
            longest.append(skv)
            q, k, v = (torch.randn(1, 2, s, 16, generator=g) for s in (sq, skv, skv))
            o = ht.scaled_dot_product_attention(q, k, v, is_causal=True, causal_alignment="bottom_right")
            want = reference(q, k, v, visible(sq, skv, causal=True, bottom_right=True))[0]
            err = (o.double() - want).abs().max().item()
            if err > 5e-6:
                failures.append(f"sq={sq} skv={skv}: {err}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    [(_, caps)] = cache.stats().capacities
    assert caps["SKV"] == next_capacity(max(longest), 16)
    assert cache.stats().builds <= 10  # at most one build per capacity step of each length (16 ... 512)


def test_cached_calls_still_refuse_what_the_first_call_would(cache: ht.PlanCache) -> None:
    """Once a kind's plan exists, calls take hipdnn.torch's short path; whatever that path does not
    serve exactly (another dtype or device for k or v, a shape mismatch, a gradient, a mask, strides
    it cannot read in place) falls to the general path, which serves or refuses it as before."""
    from hipdnn.frontend import HipdnnError

    q, k, v = rand(2, 4, 5, 16, seed=1), rand(2, 4, 37, 16, seed=2), rand(2, 4, 37, 16, seed=3)
    want = reference(q, k, v)[0]
    for _ in range(3):  # the first builds; the others take the short path
        close(ht.scaled_dot_product_attention(q, k, v), want, 5e-6)
    assert cache.stats().builds == 1 and cache.stats().hits == 2
    with pytest.raises(HipdnnError, match="one dtype"):
        ht.scaled_dot_product_attention(q, k.double(), v)
    with pytest.raises(HipdnnError, match="last dim"):
        ht.scaled_dot_product_attention(q, rand(2, 4, 37, 8), rand(2, 4, 37, 16))
    with pytest.raises(HipdnnError, match="sequence length"):
        ht.scaled_dot_product_attention(q, k, rand(2, 4, 36, 16))
    with pytest.raises(HipdnnError, match="dropout"):
        ht.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
    with pytest.raises(HipdnnError, match="causal_alignment"):
        ht.scaled_dot_product_attention(q, k, v, causal_alignment="center")  # type: ignore[arg-type]
    # served by the general path, with the same values as a fresh process would give
    close(ht.scaled_dot_product_attention(q, k.transpose(2, 3).contiguous().transpose(2, 3), v), want, 5e-6)
    qg = q.clone().requires_grad_(True)
    o = ht.scaled_dot_product_attention(qg, k, v)
    assert o.grad_fn is not None
    close(o.detach(), want, 5e-6)

    class Sub(torch.Tensor):
        pass

    close(ht.scaled_dot_product_attention(q.as_subclass(Sub), k, v), want, 5e-6)
    # a bigger call outgrows the plan and builds the next one; the short path then serves it
    q2, k2, v2 = rand(2, 4, 5, 16, seed=4), rand(2, 4, 300, 16, seed=5), rand(2, 4, 300, 16, seed=6)
    for _ in range(2):
        close(ht.scaled_dot_product_attention(q2, k2, v2), reference(q2, k2, v2)[0], 5e-6)
