"""A Llama-shaped transformers model (random weights, nothing downloaded) on the CPU, with attention
through hipdnn.torch ("hipdnn", the CPU engine) and through torch's own SDPA ("sdpa"), in one run:
the time of a prefill forward (a left-padded batch, so a boolean mask reaches attention in every
layer), decode tokens/s of ``generate`` with a dynamic cache, and a training step (forward and
backward of the causal-LM loss on the same batch), fp32 and bf16. The two implementations alternate
round by round on the same model and inputs; the best round of each is kept. The greedy tokens of
both are compared (they must agree up to a near tie of the top logits), and so are the training
step's weight gradients (``train_grad_rel_err``: layer 0's q_proj and the last layer's o_proj, max
abs difference over max abs value). ``decode_attention_calls``: the attention calls of ``generate``'s
decode steps timed inside the model, each implementation's function wrapped in a timer (median per
call), for a batch of one without padding and for the padded batch.

    python bench/torch_model_cpu.py --out bench/results        # writes torch_model_cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import transformers

import hipdnn.torch as ht

IMPLS = ("hipdnn", "sdpa")


def build(dtype: torch.dtype, layers: int) -> Any:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=4096, hidden_size=1024, intermediate_size=2816, num_hidden_layers=layers,
        num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=8192,
    )  # fmt: skip
    model: Any = transformers.LlamaForCausalLM(config)  # (transformers' typing of .to rejects a dtype)
    return model.to(dtype).eval()


def inputs(batch: int, prompt: int, pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(1, 4096, (batch, prompt), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[-1, :pad] = 0  # the last row left-padded
    ids[-1, :pad] = 0
    return ids, mask


def best_of(fns: dict[str, Any], rounds: int) -> dict[str, float]:
    best = dict.fromkeys(fns, float("inf"))
    for r in range(rounds + 1):  # round 0 warms up (plans, caches)
        for name, fn in fns.items():
            time.sleep(0.2)
            t0 = time.perf_counter()
            fn()
            took = time.perf_counter() - t0
            if r:
                best[name] = min(best[name], took)
    return best


def case(dtype: torch.dtype, args: argparse.Namespace) -> dict[str, Any]:
    model = build(dtype, args.layers)
    ids, mask = inputs(args.batch, args.prompt, args.pad)

    def prefill(impl: str) -> Any:
        model.set_attn_implementation(impl)
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask).logits

    def generate(impl: str) -> Any:
        model.set_attn_implementation(impl)
        with torch.no_grad():
            return model.generate(
                ids, attention_mask=mask, max_new_tokens=args.new, min_new_tokens=args.new, do_sample=False,
                pad_token_id=0, output_scores=True, return_dict_in_generate=True,
            )  # fmt: skip

    logits = {impl: prefill(impl).float() for impl in IMPLS}
    live = mask.bool()  # (padded positions' logits are not compared)
    err = ((logits["hipdnn"] - logits["sdpa"])[live].abs().max() / logits["sdpa"][live].abs().max()).item()
    gen = {impl: generate(impl) for impl in IMPLS}
    agree = tokens_agree(gen["hipdnn"], gen["sdpa"])
    labels = ids.masked_fill(~mask.bool(), -100)  # (no loss on the padding)
    watched = [model.model.layers[0].self_attn.q_proj.weight, model.model.layers[-1].self_attn.o_proj.weight]

    def train_step(impl: str) -> list[torch.Tensor]:
        model.set_attn_implementation(impl)
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        return [w.grad.float() for w in watched]

    grads = {impl: train_step(impl) for impl in IMPLS}
    grad_err = max(((a - b).abs().max() / b.abs().max()).item() for a, b in zip(grads["hipdnn"], grads["sdpa"]))
    pre = best_of({impl: lambda impl=impl: prefill(impl) for impl in IMPLS}, args.rounds)
    dec = best_of({impl: lambda impl=impl: generate(impl) for impl in IMPLS}, args.rounds)
    trn = best_of({impl: lambda impl=impl: train_step(impl) for impl in IMPLS}, args.rounds)
    model.zero_grad(set_to_none=True)
    row: dict[str, Any] = {
        "dtype": str(dtype).removeprefix("torch."), "batch": args.batch, "prompt": args.prompt,
        "padded": args.pad, "new_tokens": args.new, "layers": args.layers,
        "prefill_logits_rel_err": err, "greedy_tokens_agree": agree, "train_grad_rel_err": grad_err,
    }  # fmt: skip
    for impl in IMPLS:
        row[f"{impl}_prefill_ms"] = pre[impl] * 1e3
        row[f"{impl}_generate_ms"] = dec[impl] * 1e3
        row[f"{impl}_train_step_ms"] = trn[impl] * 1e3
    row["prefill_hipdnn_over_sdpa"] = pre["hipdnn"] / pre["sdpa"]
    row["generate_hipdnn_over_sdpa"] = dec["hipdnn"] / dec["sdpa"]
    row["train_step_hipdnn_over_sdpa"] = trn["hipdnn"] / trn["sdpa"]
    print(json.dumps(row), flush=True)
    return row


def decode_attention_calls(dtype: torch.dtype, args: argparse.Namespace) -> dict[str, Any]:
    """Attention as the model calls it in ``generate``: each attention function wrapped in a timer
    (registered as "<impl>_timed" with sdpa's mask function, as "hipdnn" itself is), the model
    generating ``--new`` tokens after the prompt with each in turn, rounds alternating; per
    implementation the median wall time of its decode calls (one query row), best round. Unpadded
    batches get no mask at decode; the padded batch of the other rows gets a boolean one each step."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    times: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    inner = {"hipdnn": ht.hipdnn_attention_forward, "sdpa": sdpa_attention_forward}
    for impl in IMPLS:

        def timed(*a: Any, impl: str = impl, **k: Any) -> Any:
            t0 = time.perf_counter()
            out = inner[impl](*a, **k)
            if a[1].shape[2] == 1:  # query rows: a decode step
                times[impl].append(time.perf_counter() - t0)
            return out

        AttentionInterface.register(f"{impl}_timed", timed)
        AttentionMaskInterface.register(f"{impl}_timed", sdpa_mask)
    model = build(dtype, args.layers)
    row: dict[str, Any] = {"dtype": str(dtype).removeprefix("torch."), "layers": args.layers, "new_tokens": args.new}
    for label, batch, pad in (("unpadded", 1, 0), ("padded", args.batch, args.pad)):
        ids, mask = inputs(batch, args.decode_prompt, min(pad, args.decode_prompt - 1))
        best = {impl: float("inf") for impl in IMPLS}
        for r in range(args.rounds + 1):
            for impl in IMPLS:
                times[impl].clear()
                model.set_attn_implementation(f"{impl}_timed")
                time.sleep(0.2)
                with torch.no_grad():
                    model.generate(
                        ids, attention_mask=mask, max_new_tokens=args.new, min_new_tokens=args.new,
                        do_sample=False, pad_token_id=0,
                    )  # fmt: skip
                if r:
                    best[impl] = min(best[impl], statistics.median(times[impl]))
        row[f"{label}_batch"] = batch
        row[f"{label}_prompt"] = args.decode_prompt
        for impl in IMPLS:
            row[f"{label}_{impl}_decode_call_us"] = best[impl] * 1e6
        row[f"{label}_hipdnn_over_sdpa"] = best["hipdnn"] / best["sdpa"]
    print(json.dumps(row), flush=True)
    return row


def tokens_agree(got: Any, want: Any) -> bool:
    """Greedy tokens equal up to the first step where the reference's best two logits nearly tie."""
    for b in range(want.sequences.shape[0]):
        for t, scores in enumerate(want.scores):
            step = want.sequences.shape[1] - len(want.scores) + t
            if got.sequences[b, step] != want.sequences[b, step]:
                top = scores[b].float().topk(2).values
                if (top[0] - top[1]).item() >= 5e-2:
                    return False
                break
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--pad", type=int, default=300, help="left padding of the last row")
    ap.add_argument("--new", type=int, default=32, help="tokens generate adds")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--decode-prompt", type=int, default=256, help="prompt of the decode-call timing")
    ap.add_argument("--decode-calls-only", action="store_true", help="skip the prefill / generate / train rows")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    ht.register_transformers()
    rows = [] if args.decode_calls_only else [case(getattr(torch, name), args) for name in args.dtypes.split(",")]
    decode = [decode_attention_calls(getattr(torch, name), args) for name in args.dtypes.split(",")]
    result = {
        "command": "python " + " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "method": "wall time of one prefill forward, of one generate call (prefill + new tokens) and of one "
        "training step (forward + backward of the loss), best of rounds, the implementations alternating on "
        "one model; a 0.2 s sleep before each",
        "rows": rows,
        "decode_attention_calls": decode,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "torch_model_cpu.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
