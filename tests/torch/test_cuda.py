"""hipdnn.torch on CUDA tensors (engine 202, bf16/fp16): values and gradients against the float64
reference of tests/torch/support.py, grouped-query attention, BSHD views, causal alignments and sequence
lengths; calls follow torch's current stream; a captured CUDA graph replays with new input values and
new device-side lengths; torch.compile (inductor) traces the custom op; a tiny random-weight Llama on
the GPU gives sdpa's logits. Skips where no CUDA device or no GPU engine is present (CI has neither)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="hipdnn.torch needs PyTorch (pip install 'hipdnn[torch]')")

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device (torch.cuda.is_available() is False)", allow_module_level=True)

import hipdnn  # noqa: E402
import hipdnn.torch as ht  # noqa: E402
from tests.torch.support import reference as reference64  # noqa: E402
from tests.torch.support import visible  # noqa: E402

try:
    hipdnn.Handle(device="cuda")
except hipdnn.HipdnnError as exc:  # pragma: no cover - depends on the machine
    pytest.skip(f"no GPU engine loads here: {exc}", allow_module_level=True)

DEV = torch.device("cuda")
TOL = {torch.bfloat16: 3e-2, torch.float16: 4e-3}


def reference(q: Any, k: Any, v: Any, causal: bool, bottom_right: bool, seq_kv: Any = None) -> Any:
    """The float64 reference of tests/torch/support.py, masked per sequence by its key length."""
    sq, skv = q.shape[2], k.shape[2]
    lengths = [skv] * q.shape[0] if seq_kv is None else [int(n) for n in seq_kv.tolist()]
    mask = torch.stack([visible(sq, skv, causal=causal, bottom_right=bottom_right, len_kv=n) for n in lengths])
    return reference64(q, k, v, mask=mask[:, None].to(q.device))[0]


def close(got: Any, want: Any, tol: float, what: str) -> None:
    assert torch.isfinite(got).all(), f"{what}: non-finite values"
    err = (got.float() - want.float()).abs().max().item()
    assert err <= tol * max(1.0, want.float().abs().max().item()), f"{what}: max error {err}"


def inputs(b: int, hq: int, hk: int, sq: int, skv: int, d: int, dtype: Any, layout: str, seed: int) -> tuple[Any, ...]:
    gen = torch.Generator(device=DEV).manual_seed(seed)

    def make(h: int, s: int) -> Any:
        if layout == "bshd":
            return torch.randn(b, s, h, d, device=DEV, dtype=dtype, generator=gen).transpose(1, 2)
        return torch.randn(b, h, s, d, device=DEV, dtype=dtype, generator=gen)

    return make(hq, sq), make(hk, skv), make(hk, skv)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize(("sq", "skv"), [(1, 37), (1, 1056), (37, 37), (129, 300), (512, 512)])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", ["none", "top_left", "bottom_right"])
def test_forward_values(dtype: Any, layout: str, sq: int, skv: int, d: int, causal: str) -> None:
    q, k, v = inputs(2, 8, 2, sq, skv, d, dtype, layout, seed=sq * 7 + skv + d)
    got = ht.scaled_dot_product_attention(
        q, k, v, is_causal=causal != "none", enable_gqa=True,
        causal_alignment="bottom_right" if causal == "bottom_right" else "top_left",
    )  # fmt: skip
    want = reference(q, k, v, causal != "none", causal == "bottom_right")
    assert got.shape == want.shape and got.dtype == dtype and got.is_cuda
    close(got, want, TOL[dtype], f"{dtype} {layout} sq={sq} skv={skv} d={d} {causal}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sequence_lengths(dtype: Any) -> None:
    """Per-sequence key lengths (a KV cache filled to different depths), int32 and int64, with a
    bottom-right causal query block: each sequence's diagonal ends at its own last key."""
    q, k, v = inputs(3, 8, 8, 16, 300, 128, dtype, "bshd", seed=5)
    for lengths in (
        torch.tensor([300, 17, 129], device=DEV),
        torch.tensor([1, 300, 64], device=DEV, dtype=torch.int32),
    ):
        got = ht.scaled_dot_product_attention(
            q, k, v, is_causal=True, causal_alignment="bottom_right", seq_len_kv=lengths
        )
        close(got, reference(q, k, v, True, True, lengths), TOL[dtype], f"lengths {lengths.tolist()}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
def test_gradients(dtype: Any, causal: bool) -> None:
    q, k, v = inputs(2, 8, 2, 200, 200, 128, dtype, "bshd", seed=11)
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    refs = [t.detach().double().clone().requires_grad_(True) for t in (q, k, v)]
    go = torch.randn(2, 8, 200, 128, device=DEV, dtype=dtype)
    ht.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=True).backward(go)
    reference(*refs, causal, False).backward(go.double())
    for name, a, r in zip("qkv", leaves, refs):
        assert a.grad is not None and r.grad is not None
        close(a.grad, r.grad, 2 * TOL[dtype], f"d{name} causal={causal}")


def test_follows_current_stream() -> None:
    """Inputs written on a side stream behind a long kernel: the attention call made on that stream
    must wait for them (it runs on torch's current stream, not the handle's default one)."""
    side = torch.cuda.Stream()
    q, k, v = inputs(1, 8, 8, 1, 4096, 128, torch.bfloat16, "bhsd", seed=3)
    want = reference(q, k, v, False, False)
    qs, ks, vs = (torch.zeros_like(t) for t in (q, k, v))
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # ~25 ms of GPU time ahead of the copies
        for dst, src in ((qs, q), (ks, k), (vs, v)):
            dst.copy_(src)
        got = ht.scaled_dot_product_attention(qs, ks, vs)
    side.synchronize()
    close(got, want, TOL[torch.bfloat16], "on a side stream")


def test_cuda_graph_replay() -> None:
    """Capture one decode step (KV cache at its full size, its filled length a device tensor), then
    replay it with new query values and new lengths written into the captured tensors."""
    b, h, skv, d = 2, 8, 1024, 128
    q, k, v = inputs(b, h, h, 1, skv, d, torch.bfloat16, "bshd", seed=21)
    lengths = torch.tensor([100, 700], device=DEV, dtype=torch.int32)
    static_q = q.clone()
    for _ in range(2):  # warm up: plans are built before capture
        ht.scaled_dot_product_attention(
            static_q, k, v, is_causal=True, causal_alignment="bottom_right", seq_len_kv=lengths
        )
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ht.scaled_dot_product_attention(
            static_q, k, v, is_causal=True, causal_alignment="bottom_right", seq_len_kv=lengths
        )
    for step, new_lengths in enumerate(([100, 700], [101, 701], [1024, 5])):
        static_q.copy_(torch.randn_like(static_q))
        lengths.copy_(torch.tensor(new_lengths, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        close(out, reference(static_q, k, v, True, True, lengths), TOL[torch.bfloat16], f"replay {step}")


def test_bool_mask_bias_reuse_follows_streams_and_capture() -> None:
    """hipdnn.torch's reuse of a boolean mask's bias (attention._BoolMaskMemo) on a GPU: reused on the
    stream it was made on, made anew on another stream, and never reused while a CUDA graph captures,
    so a replay converts the mask's values of that replay (mask changed in place between replays)."""
    from hipdnn.torch import attention

    b, h, sq, skv, d = 2, 4, 37, 300, 64
    q, k, v = inputs(b, h, h, sq, skv, d, torch.bfloat16, "bhsd", seed=31)

    def padded(lengths: list[int]) -> Any:
        # (top-left causal and a padded tail: key 0 stays visible to every row)
        return torch.stack([visible(sq, skv, causal=True, len_kv=n) for n in lengths])[:, None]

    def want(mask: Any) -> Any:
        return reference64(q, k, v, mask=mask)[0]

    mask = padded([300, 120]).to(DEV)
    first = attention._bias(mask, q, 4, "4d", (b,), h, sq, skv)
    assert attention._bias(mask, q, 4, "4d", (b,), h, sq, skv) is first
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        assert attention._bias(mask, q, 4, "4d", (b,), h, sq, skv) is not first, "another stream, another bias"
        got = ht.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    side.synchronize()
    close(got, want(mask), TOL[torch.bfloat16], "bool mask on a side stream")

    # Warm up on the stream that then captures, as torch's docs do: a bias of that stream is left
    # behind, and only the capture check keeps the capture from reusing it.
    capture = torch.cuda.Stream()
    capture.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(capture):
        for _ in range(2):
            ht.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=capture):
        out = ht.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    for step, lengths in enumerate(([300, 120], [7, 299], [1, 300])):
        mask.copy_(padded(lengths))
        graph.replay()
        torch.cuda.synchronize()
        close(out, want(mask), TOL[torch.bfloat16], f"replay {step} with lengths {lengths}")


def test_compiled_inductor() -> None:
    q, k, v = inputs(2, 8, 2, 129, 129, 64, torch.bfloat16, "bshd", seed=8)

    def layer(q: Any, k: Any, v: Any) -> Any:
        return ht.scaled_dot_product_attention(q * 1.0, k, v, is_causal=True, enable_gqa=True) + 1.0

    torch._dynamo.reset()
    compiled = torch.compile(layer, backend="inductor", fullgraph=True)
    close(compiled(q, k, v), reference(q, k, v, True, False) + 1.0, TOL[torch.bfloat16], "inductor")


def test_transformers_llama_logits() -> None:
    transformers = pytest.importorskip("transformers")
    ht.register_transformers()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).to(DEV, torch.bfloat16).eval()
    ids = torch.randint(0, 256, (2, 77), device=DEV)
    logits = {}
    for impl in ("sdpa", "hipdnn"):
        model.set_attn_implementation(impl)
        with torch.no_grad():
            logits[impl] = model(ids).logits.float()
        calls = ht.plan_cache().stats().bound_calls
        with torch.no_grad():
            tokens = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
        assert tokens.shape == (2, 85)
        if impl == "hipdnn":
            assert ht.plan_cache().stats().bound_calls - calls == 8 * config.num_hidden_layers
    close(logits["hipdnn"], logits["sdpa"], 5e-2, "llama logits")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("mask_kind", "sq", "skv"), [("bool_b1", 37, 300), ("bool_b1", 1, 1056),
                                                       ("additive_1h", 129, 129), ("bool_bh", 5, 77)])  # fmt: skip
def test_dense_masks(dtype: Any, mask_kind: str, sq: int, skv: int) -> None:
    """Dense masks (transformers' padding masks and static caches hand them) reach engine 202 as an
    additive bias: boolean [B, 1, Sq, Skv] with padded keys and whole rows masked (zeros out, as
    torch's), additive [1, H, Sq, Skv], boolean per (batch, head); BSHD views, GQA; values and
    gradients against the float64 reference."""
    b, hq, hk, d = 2, 8, 2, 128
    q, k, v = inputs(b, hq, hk, sq, skv, d, dtype, "bshd", seed=sq + skv)
    gen = torch.Generator(device=DEV).manual_seed(5)
    if mask_kind == "additive_1h":
        mask = torch.randn(1, hq, sq, skv, device=DEV, generator=gen, dtype=dtype)
        mask[:, :, :, skv // 2 :] = float("-inf")
        want_mask, want_bias = None, mask
    else:
        heads = hq if mask_kind == "bool_bh" else 1
        mask = torch.rand(b, heads, sq, skv, device=DEV, generator=gen) > 0.3
        mask[0, :, :, skv - 3 :] = False  # padded keys
        mask[1, :, 0] = False  # a row that sees no key
        want_mask, want_bias = mask, None
    for t in (q, k, v):
        t.requires_grad_(True)
    got = ht.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    want = reference64(q, k, v, mask=want_mask, bias=want_bias)[0]
    close(got, want, TOL[dtype], f"{mask_kind} forward")
    if mask_kind != "additive_1h":
        assert (got[1, :, 0] == 0).all(), "a row with no visible key must give zeros"
    grad = torch.randn_like(got)
    dq, dk, dv = torch.autograd.grad(got, (q, k, v), grad)
    wq, wk, wv = torch.autograd.grad(want, (q, k, v), grad.double())
    for name, g, w in (("dq", dq, wq), ("dk", dk, wk), ("dv", dv, wv)):
        close(g, w, 2 * TOL[dtype], f"{mask_kind} {name}")


def masked_everywhere(b: int, sq: int, skv: int, dtype: Any, low: str, gen: Any) -> Any:
    """A random additive mask [b, 1, sq, skv] with rows at finfo(dtype).min (or -1e30) on every key:
    batch 0's first row, batch 1's second half, and batch 1's first half past key 5."""
    fill = torch.finfo(dtype).min if low == "finfo_min" else float(low)
    mask = torch.randn(b, 1, sq, skv, device=DEV, generator=gen).to(dtype)
    mask[0, :, 0] = fill
    mask[1, :, sq // 2 :] = fill
    mask[1, :, : sq // 2, 5:] = fill
    return mask


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("sq", "skv"), [(37, 300), (1, 1056), (129, 129)])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_padding_mask_reaches_engine_202_as_one_row_per_batch(dtype: Any, sq: int, skv: int, kind: str) -> None:
    """A key padding mask [B, 1, 1, Skv] (as given, or expanded over the queries) reaches the GPU plan
    as one row per batch (engine 202 broadcasts a query dim of 1), not as a [B, 1, Sq, Skv] copy per
    call; a mask broadcast over the keys [B, 1, Sq, 1] is expanded (the engine reads keys
    contiguously). Values and gradients against the float64 reference, prefill and decode."""
    from hipdnn.torch.attention import _bias

    b, hq, hk, d = 3, 8, 2, 128
    q, k, v = inputs(b, hq, hk, sq, skv, d, dtype, "bhsd", seed=sq * 3 + skv)
    keep = torch.arange(skv, device=DEV)[None, :] < torch.tensor([skv, skv // 3, 1], device=DEV)[:, None]
    raw = keep if kind == "bool" else torch.zeros(b, skv, device=DEV, dtype=dtype).masked_fill(~keep, float("-inf"))
    row = raw[:, None, None, :]
    for mask in (row, row.expand(b, 1, sq, skv)):
        bias = _bias(mask, q, 4, "4d", (b,), hq, sq, skv)
        assert bias.shape == (b, 1, 1, skv) and bias.stride()[-1] == 1
        want_mask = mask if kind == "bool" else None
        want_bias = None if kind == "bool" else mask
        qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
        got = ht.scaled_dot_product_attention(qg, kg, vg, attn_mask=mask, enable_gqa=True)
        want = reference64(qg, kg, vg, mask=want_mask, bias=want_bias)[0]
        close(got, want, TOL[dtype], f"{kind} forward")
        grad = torch.randn_like(got)
        got_g = torch.autograd.grad(got, (qg, kg, vg), grad)
        want_g = torch.autograd.grad(want, (qg, kg, vg), grad.double())
        for name, g, w in zip(("dq", "dk", "dv"), got_g, want_g):
            close(g, w, 2 * TOL[dtype], f"{kind} {name}")
    per_query = torch.randn(b, 1, sq, 1, device=DEV, dtype=dtype)
    assert _bias(per_query, q, 4, "4d", (b,), hq, sq, skv).shape == (b, 1, sq, skv)
    got = ht.scaled_dot_product_attention(q, k, v, attn_mask=per_query, enable_gqa=True)
    close(got, reference64(q, k, v, bias=per_query)[0], TOL[dtype], "bias over the keys")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("sq", "skv"), [(37, 300), (1, 1056), (129, 129)])
@pytest.mark.parametrize("low", ["finfo_min", "-1e30"])
@pytest.mark.parametrize("scale", [None, 3.0])
def test_rows_masked_everywhere_by_finfo_min_average(dtype: Any, sq: int, skv: int, low: str, scale: Any) -> None:
    """transformers' older additive masks fill with finfo(dtype).min: a row masked everywhere by it has
    every score equal, and torch (and the definition) average v. bf16's minimum times log2(e)
    overflows in the kernels' log2 units: the engine counts a finite bias beyond +-2^127 as +-2^127
    (as the CPU engine does), so such rows are not emptied. The prefill kernel adds the bias in raw
    units (bias / scale), where the limit is lower, and takes score differences before scaling them
    (else the rounding error of a score near -2^100 lands in the exponent: the -1e30 cases). Prefill
    and decode (Sq = 1) builds, the default scale and one above 1."""
    if low == "-1e30" and dtype == torch.float16:
        pytest.skip("fp16 has no finite -1e30")
    b, hq, hk, d = 2, 8, 2, 128
    q, k, v = inputs(b, hq, hk, sq, skv, d, dtype, "bhsd", seed=sq * 7 + skv)
    mask = masked_everywhere(b, sq, skv, dtype, low, torch.Generator(device=DEV).manual_seed(9))
    got = ht.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True, scale=scale)
    want = reference64(q, k, v, bias=mask, scale=scale)[0]
    close(got, want, TOL[dtype], "forward")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("low", ["finfo_min", "-1e30"])
@pytest.mark.parametrize("dout", ["random", "zero_on_masked_rows"])
def test_gradients_of_rows_masked_everywhere_by_finfo_min(dtype: Any, low: str, dout: str) -> None:
    """The backward of the rows above: their scores lie near -1e30, where the forward's stats hold
    their max but not their softmax sum, and the probabilities taken from the stats came out wrong
    (bf16 finfo.min: dQ 8 % off) or NaN (-1e30: NaN everywhere, even with dO = 0 on those rows, as a
    language model's loss leaves padding rows). Values and gradients against float64."""
    if low == "-1e30" and dtype == torch.float16:
        pytest.skip("fp16 has no finite -1e30")
    b, hq, hk, sq, skv, d = 2, 8, 2, 37, 300, 128
    q, k, v = (x.requires_grad_() for x in inputs(b, hq, hk, sq, skv, d, dtype, "bhsd", seed=41))
    gen = torch.Generator(device=DEV).manual_seed(10)
    mask = masked_everywhere(b, sq, skv, dtype, low, gen)
    grad = torch.randn(b, hq, sq, d, device=DEV, dtype=dtype, generator=gen)
    if dout == "zero_on_masked_rows":
        grad[0, :, 0] = 0
        grad[1, :, sq // 2 :] = 0
    got = ht.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    got_g = torch.autograd.grad(got, (q, k, v), grad)
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    want = reference64(q64, k64, v64, bias=mask)[0]
    want_g = torch.autograd.grad(want, (q64, k64, v64), grad.double())
    close(got, want, TOL[dtype], "forward")
    for name, g, w in zip(("dq", "dk", "dv"), got_g, want_g):
        close(g, w, 2 * TOL[dtype], name)


def same_greedy_tokens(got: Any, want: Any, what: str) -> None:
    """Greedy sequences equal, except from a step where the reference's best two logits were a near
    tie (fp16 rounding may pick either): up to there they must agree."""
    for b in range(want.sequences.shape[0]):
        for t, scores in enumerate(want.scores):
            top = scores[b].float().topk(2).values
            step = want.sequences.shape[1] - len(want.scores) + t
            if got.sequences[b, step] != want.sequences[b, step]:
                assert (top[0] - top[1]).item() < 5e-2, f"{what}: batch {b} differs at step {t}"
                break


def test_transformers_padded_batch_and_static_cache() -> None:
    """A tiny Llama on the GPU with a left-padded batch (a boolean padding mask reaches the engines)
    and with a static cache (whose unfilled slots transformers masks densely): logits and greedy
    tokens as with "sdpa"."""
    transformers = pytest.importorskip("transformers")
    ht.register_transformers()
    torch.manual_seed(1)
    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).to(DEV, torch.float16).eval()
    ids = torch.randint(1, 256, (2, 40), device=DEV)
    attention_mask = torch.ones_like(ids)
    attention_mask[1, :13] = 0  # left padding
    common = {"attention_mask": attention_mask, "max_new_tokens": 6, "do_sample": False, "pad_token_id": 0,
              "output_scores": True, "return_dict_in_generate": True}  # fmt: skip
    out: dict[str, Any] = {}
    for impl in ("sdpa", "hipdnn"):
        model.set_attn_implementation(impl)
        with torch.no_grad():
            logits = model(ids, attention_mask=attention_mask).logits.float()
            dynamic = model.generate(ids, **common)
            static = model.generate(ids, cache_implementation="static", disable_compile=True, **common)
        out[impl] = (logits, dynamic, static)
    valid = attention_mask.bool()
    close(out["hipdnn"][0][valid], out["sdpa"][0][valid], 2e-2, "padded logits")
    same_greedy_tokens(out["hipdnn"][1], out["sdpa"][1], "dynamic cache")
    same_greedy_tokens(out["hipdnn"][2], out["sdpa"][2], "static cache")


def test_compiled_reduce_overhead_cuda_graph_trees() -> None:
    """torch.compile(mode="reduce-overhead"): inductor's CUDA graph trees warm up and record in their
    own memory pool, which must hold nothing but the graph's outputs after a run (a workspace kept
    between calls would be "a tensor in the cudagraph pool not tracked as outputs"). Decode-shaped
    calls (the split-KV path, which takes a workspace), replayed with new values."""
    q, k, v = inputs(2, 8, 2, 1, 1056, 128, torch.bfloat16, "bshd", seed=31)

    def step(q: Any, k: Any, v: Any) -> Any:
        return ht.scaled_dot_product_attention(q, k, v, enable_gqa=True) * 2.0

    torch._dynamo.reset()
    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    for n in range(4):  # warm-up, record, replays
        q = torch.randn_like(q)
        got = compiled(q, k, v)
        torch.cuda.synchronize()
        close(got, reference(q, k, v, False, False) * 2.0, 2 * TOL[torch.bfloat16], f"run {n}")
    torch._dynamo.reset()


def eager_softcap(q: Any, k: Any, v: Any, cap: float, causal: bool) -> Any:
    """Gemma 2's eager attention in float64: scores capped (c tanh(s / c)), then masked (top-left, as
    torch's is_causal), GQA by repeating K/V."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    s = cap * torch.tanh(s / cap)
    if causal:
        s = s.masked_fill(~visible(q.shape[2], k.shape[2], causal=True, bottom_right=False).to(s.device), -torch.inf)
    return torch.softmax(s, dim=-1) @ v


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("sq", "skv"), [(1, 300), (37, 129), (256, 256)])
def test_softcap_values_and_gradients(dtype: Any, sq: int, skv: int) -> None:
    """softcap= on the GPU engine (API 1.4.0): values and gradients of a BSHD GQA call against the float64
    eager definition, at a cap that bends the scores (the uncapped answer differs)."""
    q, k, v = inputs(2, 8, 2, sq, skv, 128, dtype, "bshd", seed=sq + skv)
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    refs = [t.detach().double().clone().requires_grad_(True) for t in (q, k, v)]
    out = ht.scaled_dot_product_attention(*leaves, is_causal=True, enable_gqa=True, softcap=0.7)
    want = eager_softcap(*refs, 0.7, True)
    close(out, want, TOL[dtype], "o")
    if sq > 1:  # the cap bites (a single query row sees one key under top-left causal: nothing to cap)
        assert (eager_softcap(*refs, 1e6, True) - want).abs().max().item() > 2e-2
    go = torch.randn(out.shape, device=DEV, dtype=dtype)
    out.backward(go)
    want.backward(go.double())
    for name, a, r in zip("qkv", leaves, refs):
        assert a.grad is not None and r.grad is not None
        close(a.grad, r.grad, 2 * TOL[dtype], f"d{name}")
