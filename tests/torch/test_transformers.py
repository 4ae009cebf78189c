"""transformers with attn_implementation="hipdnn": a tiny random-weight Llama (nothing downloaded)
generates the same greedy tokens as with "sdpa", with dynamic and static caches and left padding;
logits and training gradients agree; what hipdnn cannot express is refused with a message."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="hipdnn.torch needs PyTorch (pip install 'hipdnn[torch]')")
transformers = pytest.importorskip("transformers", reason="the transformers backend test needs transformers")

import hipdnn  # noqa: E402
import hipdnn.torch as ht  # noqa: E402

PROMPT = 11
NEW = 16


@pytest.fixture(scope="module")
def model() -> Iterator[Any]:
    ht.register_transformers()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention
        max_position_embeddings=256,
    )
    m = transformers.LlamaForCausalLM(config).eval()
    yield m
    m.set_attn_implementation("sdpa")


def prompt(batch: int, pad: bool) -> tuple[Any, Any]:
    ids = torch.randint(0, 128, (batch, PROMPT), generator=torch.Generator().manual_seed(batch))
    mask = torch.ones_like(ids)
    if pad:
        mask[-1, :4] = 0  # left padding on the last row
    return ids, mask


def generate(model: Any, impl: str, ids: Any, mask: Any, cache: str | None) -> Any:
    model.set_attn_implementation(impl)
    with torch.no_grad():
        return model.generate(
            ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False, pad_token_id=0, cache_implementation=cache
        )


@pytest.mark.parametrize("cache", [None, "static"])
@pytest.mark.parametrize(("batch", "pad"), [(1, False), (2, True)])
def test_greedy_tokens_match_sdpa(model: Any, cache: str | None, batch: int, pad: bool) -> None:
    ids, mask = prompt(batch, pad)
    want = generate(model, "sdpa", ids, mask, cache)
    calls = ht.plan_cache().stats().bound_calls
    got = generate(model, "hipdnn", ids, mask, cache)
    assert got.shape == (batch, PROMPT + NEW)
    assert torch.equal(got, want), (got.tolist(), want.tolist())
    served = ht.plan_cache().stats().bound_calls - calls
    assert served == NEW * model.config.num_hidden_layers  # every attention call went through hipdnn


def test_compiled_model_with_static_cache(model: Any) -> None:
    """The whole model's forward under torch.compile(fullgraph=True), as transformers compiles decoding
    with a static cache: no graph break in hipdnn's attention, the same tokens."""
    ids, mask = prompt(2, False)
    tokens = {}
    for impl in ("sdpa", "hipdnn"):
        model.set_attn_implementation(impl)
        torch._dynamo.reset()
        model.forward = torch.compile(type(model).forward.__get__(model), backend="aot_eager", fullgraph=True)
        calls = ht.plan_cache().stats().bound_calls
        try:
            tokens[impl] = generate(model, impl, ids, mask, "static")
        finally:
            del model.forward
        served = ht.plan_cache().stats().bound_calls - calls
        assert served == (NEW * model.config.num_hidden_layers if impl == "hipdnn" else 0)
    assert torch.equal(tokens["hipdnn"], tokens["sdpa"])


def test_logits_match_and_model_selection(model: Any) -> None:
    ids, mask = prompt(2, True)
    model.set_attn_implementation("sdpa")
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
    built = transformers.AutoModelForCausalLM.from_config(model.config, attn_implementation="hipdnn").eval()
    built.load_state_dict(model.state_dict())
    assert built.config._attn_implementation == "hipdnn"
    with torch.no_grad():
        got = built(ids, attention_mask=mask).logits
    assert (got - want).abs().max().item() < 1e-5


def test_training_step_gradients_match(model: Any) -> None:
    ids, _ = prompt(2, False)
    labels = torch.randint(0, 128, ids.shape, generator=torch.Generator().manual_seed(5))
    grads = {}
    for impl in ("sdpa", "hipdnn"):
        model.set_attn_implementation(impl)
        model.zero_grad()
        model(ids, labels=labels).loss.backward()
        grads[impl] = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    worst = max((a - b).abs().max().item() for a, b in zip(grads["sdpa"], grads["hipdnn"]))
    assert worst < 1e-5


def test_refusals(model: Any) -> None:
    attention = model.model.layers[0].self_attn
    q, k, v = torch.randn(1, 4, 5, 16), torch.randn(1, 2, 5, 16), torch.randn(1, 2, 5, 16)
    for kwargs, match in (
        ({"s_aux": torch.zeros(4)}, "attention sinks"),
        ({"position_bias": torch.zeros(1, 4, 5, 5)}, "position bias"),
    ):
        with pytest.raises(hipdnn.HipdnnError, match=match):
            ht.hipdnn_attention_forward(attention, q, k, v, None, **kwargs)
    with pytest.raises(hipdnn.HipdnnError, match="2-D attention mask"):
        ht.hipdnn_attention_forward(attention, q, k, v, torch.ones(1, 5, dtype=torch.bool))
    with pytest.raises(hipdnn.HipdnnError, match="dropout"):
        ht.hipdnn_attention_forward(attention, q, k, v, None, dropout=0.1)
    out, weights = ht.hipdnn_attention_forward(attention, q, k, v, None)
    assert out.shape == (1, 5, 4, 16) and weights is None
    # softcap is honored (tests/torch/test_sdpa_softcap.py checks the values), not refused
    capped, _ = ht.hipdnn_attention_forward(attention, q, k, v, None, softcap=0.5)
    assert capped.shape == out.shape and (capped - out).abs().max().item() > 1e-3
