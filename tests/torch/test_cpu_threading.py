"""hipdnn.torch's CPU handle runs the attention forward on torch's own OpenMP threads where they are
the CPU engine's (``Handle(cpu_threading="openmp")``): torch's parallel backend is OpenMP and the
process holds one OpenMP runtime, GNU's libgomp.so.1, which the engine links. Otherwise, or when
``HIPDNN_TORCH_CPU_THREADING`` says so, on the engine's worker pool. Either way the values match a
float64 reference and each other bit for bit (prefill, decode with key chunks, GQA, bf16)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.torch.support import bhsd, bshd, close, reference

torch = pytest.importorskip("torch", reason="hipdnn.torch needs PyTorch (pip install 'hipdnn[torch]')")

import hipdnn  # noqa: E402
import hipdnn.torch as ht  # noqa: E402
from hipdnn.torch import plans  # noqa: E402


@pytest.fixture
def fresh_handles(cache: ht.PlanCache, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """hipdnn.torch's handles and plans made anew (under the environment the test sets), and the
    process's own put back after."""
    saved = dict(plans._handles)
    plans._handles.clear()
    yield
    for h in plans._handles.values():
        h.close()
    plans._handles.clear()
    plans._handles.update(saved)


def test_the_rule_in_this_process(fresh_handles: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(plans.CPU_THREADING_ENV, raising=False)
    q = bhsd(1, 4, 3, 16)
    ht.scaled_dot_product_attention(q, q, q)  # the engine is loaded now
    runtimes = plans.openmp_runtimes()
    shared = (
        "parallel backend: OpenMP" in torch.__config__.parallel_info()
        and len(runtimes) == 1
        and next(iter(runtimes)).endswith("/libgomp.so.1")
    )
    assert plans.torch_shares_engine_openmp() is shared
    assert plans.cpu_threading() == ("openmp" if shared else "pool")
    knobs = plans.handle_for(q.device)._backend.engine_knobs
    assert knobs == {"CPU_THREADING": 1 if shared else 0}


def test_the_engine_and_torch_hold_one_openmp_runtime_here() -> None:
    """Where torch runs on GNU OpenMP (its Linux wheels), the engine binds to torch's libgomp rather
    than load a second runtime: one team of threads serves both."""
    if "parallel backend: OpenMP" not in torch.__config__.parallel_info() or not plans.openmp_runtimes():
        pytest.skip("torch does not run on OpenMP here")
    q = bhsd(1, 4, 3, 16)
    ht.scaled_dot_product_attention(q, q, q)
    assert len(plans.openmp_runtimes()) == 1, plans.openmp_runtimes()


@pytest.mark.parametrize(("value", "choice"), [("pool", "pool"), (" OpenMP\n", "openmp"), ("POOL", "pool")])
def test_the_environment_decides(monkeypatch: pytest.MonkeyPatch, value: str, choice: str) -> None:
    monkeypatch.setenv(plans.CPU_THREADING_ENV, value)
    assert plans.cpu_threading() == choice


@pytest.mark.parametrize("value", ["auto", "", " Auto "])
def test_auto_is_the_rule(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(plans.CPU_THREADING_ENV, value)
    assert plans.cpu_threading() == ("openmp" if plans.torch_shares_engine_openmp() else "pool")


def test_a_bad_value_is_refused_naming_the_variable(fresh_handles: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(plans.CPU_THREADING_ENV, "gomp")
    with pytest.raises(hipdnn.HipdnnError, match="HIPDNN_TORCH_CPU_THREADING='gomp' is not one of auto, pool, openmp"):
        plans.cpu_threading()
    q = bhsd(1, 2, 3, 16)
    with pytest.raises(hipdnn.HipdnnError, match="HIPDNN_TORCH_CPU_THREADING"):
        ht.scaled_dot_product_attention(q, q, q)


# (batch, q heads, kv heads, Sq, Skv, head dim, dtype, BSHD views): prefill (the panel kernel), decode
# on one kv head (key chunks merged after), GQA decode, bf16 prefill (the AMX tile kernel where the
# CPU has it) and bf16 decode
CALLS = {
    "prefill_bshd": (2, 4, 4, 129, 129, 64, torch.float32, True),
    "decode_mqa_chunks": (1, 4, 1, 1, 2100, 64, torch.float32, False),
    "decode_gqa": (2, 8, 2, 1, 700, 128, torch.float32, False),
    "prefill_bf16": (1, 4, 4, 200, 200, 64, torch.bfloat16, False),
    "decode_bf16": (1, 8, 8, 1, 1037, 128, torch.bfloat16, False),
}


def make(name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    b, hq, hk, sq, skv, d, dtype, bshd_views = CALLS[name]
    g = torch.Generator().manual_seed(len(name))
    if bshd_views:
        return bshd(b, sq, hq, d, dtype, g), bshd(b, skv, hk, d, dtype, g), bshd(b, skv, hk, d, dtype, g)
    return bhsd(b, hq, sq, d, dtype, g), bhsd(b, hk, skv, d, dtype, g), bhsd(b, hk, skv, d, dtype, g)


@pytest.mark.parametrize("name", list(CALLS))
def test_both_give_the_same_values(fresh_handles: None, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    q, k, v = make(name)
    gqa = q.shape[1] != k.shape[1]
    got = {}
    for choice in ("pool", "openmp"):
        monkeypatch.setenv(plans.CPU_THREADING_ENV, choice)
        for h in plans._handles.values():
            h.close()
        plans._handles.clear()
        ht.plan_cache().clear()
        got[choice] = ht.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
        assert plans.handle_for(q.device)._backend.engine_knobs == {"CPU_THREADING": int(choice == "openmp")}
    assert torch.equal(got["pool"], got["openmp"])
    want, _ = reference(q, k, v)
    close(got["openmp"].double(), want, 2e-2 if q.dtype == torch.bfloat16 else 2e-5, name)
