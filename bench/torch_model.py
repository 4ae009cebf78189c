"""A Llama-shaped transformers model (random weights, nothing downloaded: 32 heads, 8 KV heads, head
dim 128, bf16) on one CUDA GPU, with attention through hipdnn.torch ("hipdnn") and through torch's
SDPA pinned to its flash and its cuDNN backends, in one run: prefill and decode tokens/s of
``generate`` (dynamic cache; and a static cache, which transformers compiles with CUDA graphs), a
training step (forward + backward) at S = 4096, and the host time of one attention call at decode
shapes. Writes JSON to --out (bench/results/torch_model.json).

    python3 bench/torch_model.py --out bench/results       # on a CUDA machine with the GPU engine
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch_host_breakdown import host_us_each  # bench/ is the script's directory

import hipdnn.torch as ht

IMPLS = ("hipdnn", "sdpa_flash", "sdpa_cudnn")
BACKENDS = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION}


@contextlib.contextmanager
def attention(model: Any, impl: str) -> Iterator[None]:
    model.set_attn_implementation("hipdnn" if impl == "hipdnn" else "sdpa")
    if impl in BACKENDS:
        with sdpa_kernel([BACKENDS[impl]]):
            yield
    else:
        yield


def gpu_seconds(fn: Callable[[], Any], reps: int) -> float:
    """Median seconds of ``fn`` by CUDA events (one warm-up call first)."""
    fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def make_model(layers: int) -> Any:
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers,
        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=16384,
    )  # fmt: skip
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    return model.eval()


def generate_rows(model: Any, batches: list[int], prompts: list[int], new: int, reps: int) -> list[dict[str, Any]]:
    rows = []
    for b in batches:
        for p in prompts:
            ids = torch.randint(0, 32000, (b, p), device="cuda")
            row: dict[str, Any] = {"batch": b, "prompt": p, "new_tokens": new}
            for impl in IMPLS:
                try:
                    row[impl] = generate_one(model, impl, ids, new, reps)
                except Exception as exc:  # a backend that refuses these shapes (cuDNN at Sq = 1)
                    row[impl] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            for impl in IMPLS[1:]:
                if "error" not in row[impl] and "error" not in row["hipdnn"]:
                    row[f"hipdnn_over_{impl}_decode"] = row["hipdnn"]["decode_tok_s"] / row[impl]["decode_tok_s"]
                    row[f"hipdnn_over_{impl}_generate"] = row[impl]["generate_s"] / row["hipdnn"]["generate_s"]
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def generate_one(model: Any, impl: str, ids: Any, new: int, reps: int) -> dict[str, float]:
    b, p = ids.shape
    with attention(model, impl), torch.no_grad():
        prefill = gpu_seconds(lambda: model(ids, use_cache=False), reps)
        total = gpu_seconds(
            lambda: model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0),
            reps,
        )
    decode = max(total - prefill, 1e-9)
    return {"prefill_tok_s": b * p / prefill, "decode_tok_s": b * (new - 1) / decode, "generate_s": total}


def static_rows(model: Any, batch: int, prompt: int, new: int, reps: int) -> list[dict[str, Any]]:
    """``generate`` with a static cache, which transformers compiles (``torch.compile``, mode
    "reduce-overhead": CUDA graphs) and hands a dense mask (the cache's unfilled slots are masked):
    hipdnn against torch's flash-pinned SDPA. One compile per implementation (warm-up calls)."""
    ids = torch.randint(0, 32000, (batch, prompt), device="cuda")
    row: dict[str, Any] = {"batch": batch, "prompt": prompt, "new_tokens": new, "cache": "static"}
    kwargs = {"max_new_tokens": new, "min_new_tokens": new, "do_sample": False, "pad_token_id": 0}

    def run() -> Any:
        return model.generate(ids, cache_implementation="static", **kwargs)

    for impl in ("hipdnn", "sdpa"):
        try:
            torch.compiler.reset()
            model.set_attn_implementation("hipdnn" if impl == "hipdnn" else "sdpa")
            with torch.no_grad():
                for _ in range(2):  # compiles, then records the CUDA graphs
                    run()
                total = gpu_seconds(run, reps)
            row[impl] = {"generate_s": total, "tok_s": batch * new / total}
        except Exception as exc:
            row[impl] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
    if "error" not in row["hipdnn"] and "error" not in row["sdpa"]:
        row["hipdnn_over_sdpa_generate"] = row["sdpa"]["generate_s"] / row["hipdnn"]["generate_s"]
    torch.compiler.reset()
    print(json.dumps(row), flush=True)
    return [row]


def training_rows(model: Any, seq: int, reps: int) -> list[dict[str, Any]]:
    model.train()
    ids = torch.randint(0, 32000, (1, seq), device="cuda")
    row: dict[str, Any] = {"seq": seq, "batch": 1}

    def step() -> None:
        model.zero_grad(set_to_none=True)
        model(ids, labels=ids).loss.backward()

    for impl in IMPLS:
        try:
            with attention(model, impl):
                row[impl] = {"step_s": gpu_seconds(step, reps)}
        except Exception as exc:
            row[impl] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    for impl in IMPLS[1:]:
        if "error" not in row[impl] and "error" not in row["hipdnn"]:
            row[f"hipdnn_over_{impl}"] = row[impl]["step_s"] / row["hipdnn"]["step_s"]
    model.eval()
    model.zero_grad(set_to_none=True)
    print(json.dumps(row), flush=True)
    return [row]


def host_rows(skvs: list[int], calls: int) -> list[dict[str, Any]]:
    """Host (thread CPU) microseconds per attention call at decode shapes: Sq = 1, 32/8 heads, D 128,
    BSHD views as transformers passes them; the GPU is kept ahead by a long sleep kernel so that
    launches never wait for it."""
    rows = []
    for skv in skvs:
        q = torch.randn(1, 1, 32, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        k = torch.randn(1, skv, 8, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        v = torch.randn_like(k)
        times = host_us_each(
            {
                "hipdnn": lambda q=q, k=k, v=v: ht.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                "sdpa_flash": lambda q=q, k=k, v=v: torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, enable_gqa=True
                ),
            },
            calls,
        )
        row: dict[str, Any] = {"sq": 1, "skv": skv, **{f"{name}_host_us": t for name, t in times.items()}}
        row["hipdnn_over_flash_host"] = row["hipdnn_host_us"] / row["sdpa_flash_host_us"]
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=8, help="decoder layers (Llama-3-8B has 32; default 8)")
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--prompts", default="128,1024,8192")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--train-seq", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--parts", default="host,generate,static,training", help="which measurements to run (default: all)")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    ht.register_transformers()
    torch.manual_seed(0)
    result: dict[str, Any] = {
        "command": "python3 " + " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "model": {"layers": args.layers, "heads": 32, "kv_heads": 8, "head_dim": 128, "dtype": "bfloat16"},
        "method": "CUDA-event medians (one warm-up); decode tok/s = B*(new-1)/(generate - prefill); host: thread "
        "CPU time per call with the GPU kept busy",
    }
    if "host" in parts:
        result["host"] = host_rows([39, 256, 1056, 4096], 200)
    if parts & {"generate", "static", "training"}:
        model = make_model(args.layers)
        if "generate" in parts:
            result["generate"] = generate_rows(
                model, _ints(args.batches), _ints(args.prompts), args.new_tokens, args.reps
            )
        if "static" in parts:
            result["static"] = static_rows(model, 1, 128, args.new_tokens, args.reps)
        if "training" in parts:
            result["training"] = training_rows(model, args.train_seq, args.reps)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = (
        "torch_model.json"
        if parts >= {"host", "generate", "training"}
        else f"torch_model_{'_'.join(sorted(parts))}.json"
    )
    (out / name).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
