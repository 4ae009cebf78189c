"""hipdnn.torch.scaled_dot_product_attention's values against a float64 reference written from the
definitions (tests/torch/support.py) and against torch's own SDPA: BHSD and BSHD views, odd lengths,
grouped-query attention, both causal alignments, windows, masks, sequence lengths, the log-sum-exp,
every rank torch takes, half types, layouts read in place or copied, and what is refused.
Outputs are compared in full."""

from __future__ import annotations

from typing import Any

import pytest

from tests.torch.support import bhsd, bshd, close, reference, visible

torch = pytest.importorskip("torch", reason="hipdnn.torch needs PyTorch (pip install 'hipdnn[torch]')")
import torch.nn.functional as F  # noqa: E402

import hipdnn  # noqa: E402
import hipdnn.torch as ht  # noqa: E402

ATOL = 5e-6  # float32 against float64, values of order 1
LENGTHS = [(1, 1), (1, 37), (37, 37), (37, 129), (129, 37), (129, 129)]
HEADS = [(4, 4), (4, 2), (4, 1)]  # (query heads, key/value heads)


def inputs(layout: str, b: int, hq: int, hk: int, sq: int, skv: int, d: int = 16, seed: int = 0) -> Any:
    g = torch.Generator().manual_seed(seed)
    make = bshd if layout == "bshd" else bhsd
    if layout == "bshd":
        return make(b, sq, hq, d, generator=g), make(b, skv, hk, d, generator=g), make(b, skv, hk, d, generator=g)
    return make(b, hq, sq, d, generator=g), make(b, hk, skv, d, generator=g), make(b, hk, skv, d, generator=g)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize(("sq", "skv"), LENGTHS)
@pytest.mark.parametrize(("hq", "hk"), HEADS)
@pytest.mark.parametrize("causal", ["none", "top_left", "bottom_right"])
def test_against_float64(layout: str, sq: int, skv: int, hq: int, hk: int, causal: str) -> None:
    q, k, v = inputs(layout, 2, hq, hk, sq, skv, seed=sq * 1000 + skv)
    is_causal = causal != "none"
    alignment = "bottom_right" if causal == "bottom_right" else "top_left"
    o, lse = ht.scaled_dot_product_attention(
        q, k, v, is_causal=is_causal, causal_alignment=alignment, enable_gqa=hq != hk, return_lse=True
    )
    mask = visible(sq, skv, causal=is_causal, bottom_right=alignment == "bottom_right")
    want, want_lse = reference(q, k, v, mask)
    close(o, want, ATOL, "o")
    close(lse, want_lse.float(), 1e-5, "lse")
    assert o.dtype == torch.float32 and lse.dtype == torch.float32
    # the output keeps the query's layout: a BSHD query gives a BSHD output
    assert (o.transpose(1, 2) if layout == "bshd" else o).is_contiguous()
    if causal != "bottom_right":  # what torch itself expresses: it must agree too
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=hq != hk)
        close(o, ref, ATOL, "o vs torch")


def test_bottom_right_matches_torch_causal_lower_right() -> None:
    from torch.nn.attention.bias import causal_lower_right

    q, k, v = inputs("bhsd", 2, 3, 3, 37, 129)
    o = ht.scaled_dot_product_attention(q, k, v, is_causal=True, causal_alignment="bottom_right")
    close(o, F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(37, 129)), ATOL)


def test_bottom_right_with_more_queries_than_keys_gives_empty_rows() -> None:
    q, k, v = inputs("bhsd", 1, 2, 2, 50, 20)
    o, lse = ht.scaled_dot_product_attention(q, k, v, is_causal=True, causal_alignment="bottom_right", return_lse=True)
    want, want_lse = reference(q, k, v, visible(50, 20, causal=True, bottom_right=True))
    close(o, want, ATOL)
    assert torch.equal(o[:, :, :30], torch.zeros_like(o[:, :, :30]))
    assert torch.isneginf(lse[:, :, :30]).all() and torch.isfinite(lse[:, :, 30:]).all()
    close(lse, want_lse.float(), 1e-5)


@pytest.mark.parametrize(
    ("left", "right", "causal", "alignment"),
    [
        (5, None, True, "top_left"),
        (5, 3, False, "top_left"),
        (None, 3, False, "top_left"),
        (8, None, True, "bottom_right"),
        (0, 2, False, "top_left"),
        (64, 0, False, "bottom_right"),
        (1, None, True, "top_left"),
    ],
)
def test_windows(left: int | None, right: int | None, causal: bool, alignment: str) -> None:
    q, k, v = inputs("bshd", 2, 4, 2, 37, 129, seed=7)
    o = ht.scaled_dot_product_attention(
        q, k, v, is_causal=causal, causal_alignment=alignment, left_bound=left, right_bound=right, enable_gqa=True
    )
    mask = visible(37, 129, causal=causal, bottom_right=alignment == "bottom_right", left=left, right=right)
    close(o, reference(q, k, v, mask)[0], ATOL)


MASK_SHAPES = [(37, 129), (2, 1, 37, 129), (1, 4, 37, 129), (2, 4, 37, 129), (2, 1, 1, 129), (129,), (1, 37, 1)]


@pytest.mark.parametrize("shape", MASK_SHAPES)
@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_masks(shape: tuple[int, ...], kind: str, layout: str) -> None:
    q, k, v = inputs(layout, 2, 4, 4, 37, 129, seed=len(shape))
    g = torch.Generator().manual_seed(sum(shape))
    if kind == "bool":
        mask = torch.rand(shape, generator=g) > 0.3
        want = reference(q, k, v, mask=mask)[0]
    else:
        mask = torch.randn(shape, generator=g)
        want = reference(q, k, v, bias=mask)[0]
    o = ht.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    close(o, want, ATOL)
    # torch on float64 copies, the mask cast too (torch 2.13 gives wrong values for float64 inputs with a
    # float32 mask); torch indexes a 1-D mask's dim -2 and fails, though such a mask broadcasts
    if mask.dim() < 2:
        return
    m64 = mask if kind == "bool" else mask.double()
    close(o, F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=m64), ATOL)


def test_mask_with_causal_intersects_like_torch() -> None:
    q, k, v = inputs("bshd", 2, 4, 2, 37, 37, seed=3)
    mask = torch.rand(2, 1, 37, 37, generator=torch.Generator().manual_seed(3)) > 0.4
    o = ht.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True, enable_gqa=True)
    close(o, reference(q, k, v, mask=mask & visible(37, 37, causal=True))[0], ATOL)
    close(o, F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True, enable_gqa=True), ATOL)


def test_fully_masked_rows_give_zeros_as_torch_does() -> None:
    q, k, v = inputs("bhsd", 2, 2, 2, 9, 13)
    mask = torch.ones(2, 1, 9, 13, dtype=torch.bool)
    mask[:, :, 4] = False
    for m in (mask, torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))):
        o = ht.scaled_dot_product_attention(q, k, v, attn_mask=m)
        assert torch.equal(o[:, :, 4], torch.zeros_like(o[:, :, 4]))
        close(o, F.scaled_dot_product_attention(q, k, v, attn_mask=m), ATOL)


def test_half_precision_float32_mask_with_bfloat16_query() -> None:
    q, k, v = (t.bfloat16() for t in inputs("bhsd", 2, 4, 4, 37, 129))
    mask = torch.randn(37, 129)
    o = ht.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert o.dtype == torch.bfloat16
    want = reference(q, k, v, bias=mask)[0]
    err = (o.double() - want).abs().max().item()
    torch_err = (F.scaled_dot_product_attention(q, k, v, attn_mask=mask.bfloat16()).double() - want).abs().max().item()
    assert err <= max(2 * torch_err, 1e-2), (err, torch_err)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
@pytest.mark.parametrize("length_dtype", [torch.int32, torch.int64])
def test_sequence_lengths(causal: bool, alignment: str, length_dtype: Any) -> None:
    q, k, v = inputs("bshd", 3, 4, 2, 37, 129, seed=11)
    len_q = torch.tensor([30, 37, 1], dtype=length_dtype)
    len_kv = torch.tensor([100, 5, 129], dtype=length_dtype)
    o, lse = ht.scaled_dot_product_attention(
        q, k, v, is_causal=causal, causal_alignment=alignment, seq_len_q=len_q, seq_len_kv=len_kv,
        enable_gqa=True, return_lse=True,
    )  # fmt: skip
    for b in range(3):
        mask = visible(
            37, 129, causal=causal, bottom_right=alignment == "bottom_right", len_q=int(len_q[b]), len_kv=int(len_kv[b])
        )
        want, want_lse = reference(q[b], k[b], v[b], mask)
        close(o[b], want, ATOL, f"o[{b}]")
        close(lse[b], want_lse.float(), 1e-5, f"lse[{b}]")


def test_one_sequence_length_alone_means_the_other_is_full() -> None:
    q, k, v = inputs("bhsd", 2, 2, 2, 9, 40)
    len_kv = torch.tensor([17, 3])
    o = ht.scaled_dot_product_attention(q, k, v, seq_len_kv=len_kv)
    for b in range(2):
        close(o[b], reference(q[b], k[b], v[b], visible(9, 40, len_kv=int(len_kv[b])))[0], ATOL)
    o = ht.scaled_dot_product_attention(q, k, v, seq_len_q=torch.tensor([4, 9]))
    want = reference(q, k, v)[0]
    want[0, :, 4:] = 0
    close(o, want, ATOL)


def test_lengths_outside_the_sequence_count_as_its_ends() -> None:
    q, k, v = inputs("bhsd", 2, 2, 2, 5, 7)
    o = ht.scaled_dot_product_attention(
        q, k, v, seq_len_q=torch.tensor([-3, 100]), seq_len_kv=torch.tensor([-1, 2**40])
    )
    assert torch.equal(o[0], torch.zeros_like(o[0]))
    close(o[1], reference(q[1], k[1], v[1])[0], ATOL)


def test_scale() -> None:
    q, k, v = inputs("bhsd", 1, 2, 2, 37, 37)
    for scale in (0.05, 1.0, 2.5):
        o = ht.scaled_dot_product_attention(q, k, v, scale=scale)
        close(o, reference(q, k, v, scale=scale)[0], 2e-5)
        close(o, F.scaled_dot_product_attention(q, k, v, scale=scale), 2e-5)


@pytest.mark.parametrize(
    ("qs", "ks"),
    [
        ((37, 16), (129, 16)),  # no batch, no heads
        ((3, 37, 16), (3, 129, 16)),  # (N, L, E)
        ((4, 37, 16), (2, 129, 16)),  # (H, L, E) with grouped heads
        ((2, 3, 4, 37, 16), (2, 3, 4, 129, 16)),  # two batch dims
        ((2, 3, 4, 37, 16), (1, 3, 4, 129, 16)),  # broadcast batch
        ((2, 1, 37, 16), (2, 4, 129, 16)),  # one query head broadcast over four key heads
        ((2, 4, 37, 16), (2, 1, 129, 16)),  # one key head broadcast: multi-query attention
    ],
)
def test_every_rank_and_broadcast(qs: tuple[int, ...], ks: tuple[int, ...]) -> None:
    g = torch.Generator().manual_seed(len(qs))
    q, k, v = torch.randn(qs, generator=g), torch.randn(ks, generator=g), torch.randn(ks, generator=g)
    gqa = len(qs) == 3 and qs[0] != ks[0]
    o = ht.scaled_dot_product_attention(q, k, v, enable_gqa=gqa, is_causal=True)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), enable_gqa=gqa, is_causal=True)
    close(o, ref, ATOL)


def test_value_head_dim_may_differ() -> None:
    g = torch.Generator().manual_seed(5)
    q, k, v = torch.randn(2, 4, 37, 16, generator=g), torch.randn(2, 4, 50, 16, generator=g), torch.randn(2, 4, 50, 8)
    o = ht.scaled_dot_product_attention(q, k, v)
    assert o.shape == (2, 4, 37, 8)
    close(o, reference(q, k, v)[0], ATOL)


def test_layouts_read_in_place_or_copied() -> None:
    """Packed QKV views and KV-cache slices are read in place; a non-contiguous last dim is copied."""
    g = torch.Generator().manual_seed(9)
    qkv = torch.randn(2, 37, 3, 4, 16, generator=g)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    ht.plan_cache().clear()
    o = ht.scaled_dot_product_attention(q, k, v, is_causal=True)
    close(o, reference(q, k, v, visible(37, 37, causal=True))[0], ATOL)
    assert ht.plan_cache().stats().bound_calls == 1
    strided = torch.randn(2, 4, 37, 32, generator=g)[..., ::2]  # last stride 2
    o = ht.scaled_dot_product_attention(strided, strided, strided)
    close(o, reference(strided, strided, strided)[0], ATOL)
    cache_k, cache_v = torch.randn(2, 4, 300, 16, generator=g), torch.randn(2, 4, 300, 16, generator=g)
    q1 = torch.randn(2, 4, 1, 16, generator=g)
    for n in (1, 40, 300):
        o = ht.scaled_dot_product_attention(q1, cache_k[:, :, :n], cache_v[:, :, :n])
        close(o, reference(q1, cache_k[:, :, :n], cache_v[:, :, :n])[0], ATOL)


def test_expanded_inputs() -> None:
    g = torch.Generator().manual_seed(2)
    k = torch.randn(1, 4, 1, 16, generator=g).expand(2, 4, 33, 16)  # stride 0 on batch and length
    q, v = torch.randn(2, 4, 9, 16, generator=g), torch.randn(2, 4, 33, 16, generator=g)
    close(ht.scaled_dot_product_attention(q, k, v), reference(q, k, v)[0], ATOL)


def test_empty_inputs() -> None:
    q = torch.randn(2, 3, 5, 8)
    o = ht.scaled_dot_product_attention(q, torch.randn(2, 3, 0, 8), torch.randn(2, 3, 0, 4))
    assert torch.equal(o, torch.zeros(2, 3, 5, 4))
    empty = torch.randn(0, 3, 5, 8)
    assert ht.scaled_dot_product_attention(empty, empty, empty).shape == (0, 3, 5, 8)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_half_types(dtype: Any, layout: str) -> None:
    q, k, v = (t.to(dtype) for t in inputs(layout, 2, 4, 2, 37, 129, seed=4))
    o = ht.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    assert o.dtype == dtype
    want = reference(q, k, v, visible(37, 129, causal=True))[0]
    err = (o.double() - want).abs().max().item()
    torch_err = (
        (F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).double() - want).abs().max().item()
    )
    assert err <= max(2 * torch_err, 1e-3), (err, torch_err)


@pytest.mark.parametrize("seed", range(6))
def test_random_problems(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)

    def pick(*options: Any) -> Any:
        return options[int(torch.randint(len(options), (1,), generator=g))]

    b, hk, group, d = pick(1, 2, 3), pick(1, 2), pick(1, 2, 3), pick(8, 16, 24)
    sq, skv = pick(1, 5, 37, 70), pick(1, 9, 37, 129)
    q, k, v = inputs(pick("bhsd", "bshd"), b, hk * group, hk, sq, skv, d=d, seed=seed)
    causal, alignment = pick(False, True), pick("top_left", "bottom_right")
    mask = pick(None, torch.rand(b, 1, sq, skv, generator=g) > 0.25)
    o = ht.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal, causal_alignment=alignment, enable_gqa=group > 1
    )
    vis = visible(sq, skv, causal=causal, bottom_right=alignment == "bottom_right")
    close(o, reference(q, k, v, vis if mask is None else vis & mask)[0], ATOL)


# -- what is refused, with a message --------------------------------------------------------------


def refused(match: str, *args: Any, **kwargs: Any) -> hipdnn.HipdnnError:
    with pytest.raises(hipdnn.HipdnnError, match=match) as info:
        ht.scaled_dot_product_attention(*args, **kwargs)
    return info.value


def test_refusals() -> None:
    q, k, v = inputs("bhsd", 2, 4, 2, 5, 7)
    k4, v4 = inputs("bhsd", 2, 4, 4, 5, 7)[1:]
    refused("dropout", q, k4, v4, dropout_p=0.1)
    refused("float64 is not served", q.double(), k4.double(), v4.double())
    refused("one dtype", q, k4.half(), v4)
    refused("enable_gqa=True", q, k, v)
    refused("must divide", q, k[:, :1].expand(2, 3, 7, 16).contiguous(), v[:, :1].expand(2, 3, 7, 16).contiguous(),
            enable_gqa=True)  # fmt: skip
    refused("last dim", q, k4[..., :8], v4)
    refused("sequence length", q, k4, v4[:, :, :6])
    refused("attn_mask must be bool, float32", q, k4, v4, attn_mask=torch.ones(5, 7, dtype=torch.int64))
    refused("does not broadcast", q, k4, v4, attn_mask=torch.ones(5, 6, dtype=torch.bool))
    refused("requires grad", q, k4, v4, attn_mask=torch.zeros(5, 7, requires_grad=True))
    refused("causal_alignment", q, k4, v4, is_causal=True, causal_alignment="bottom-right")
    refused("left_bound", q, k4, v4, left_bound=-1)
    refused("right_bound", q, k4, v4, right_bound=True)
    refused("seq_len_kv must be an int32 or int64", q, k4, v4, seq_len_kv=torch.tensor([1.0, 2.0]))
    refused("one length per batch", q, k4, v4, seq_len_kv=torch.tensor([1, 2, 3]))
    refused("torch.Tensors", q.numpy(), k4, v4)
    error = refused("dropout", q, k4, v4, dropout_p=0.5)
    assert error.code == hipdnn.ErrorCode.GRAPH_NOT_SUPPORTED
