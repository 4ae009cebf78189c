"""Which graphs and calls the HIP engine refuses because its kernels would compute them wrongly, and the
reason it gives; through its C ABI with cffi, no torch (issue 27).

Runs wherever the plugin is built or can be (tests/conftest.py's ``hip_plugin``), GPU or not, like
test_hip_dynamic_abi.py: the graph rules run before the engine looks for a device, so a graph the
kernels cannot serve is declined for that reason on any machine, and GetWorkspaceSize answers
NOT_APPLICABLE with it as the last error (the text the host shows). Where a GPU is present, the per-call
refusals are checked too: an override may misalign a pointer or fold an output onto itself, and each is
refused before any launch (the buffers passed are never dereferenced). The numerics of what is served
are in test_hip_applicability.py; the rules themselves, compiled on the host, in
tests/test_hip_call_rules.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import tests.gpu.test_hip_dynamic_abi as dynamic_abi
from tests.engine_abi.test_cpu_engine_abi import BAD_PARAM, NOT_APPLICABLE, SUCCESS, Ctx, config_bytes, const_data
from tests.engine_abi.test_cpu_engine_abi import last_error as abi_last_error
from tests.gpu.hip_support import PORTABLE, TENSOR_CORE, compact
from tests.gpu.test_hip_backward_abi import bwd_bytes
from tests.gpu.test_hip_dynamic_abi import STATIC_SERVABLE, Abi, sdpa_bytes

#: the plugin session (logging callback, handle) of the dynamic-tensor ABI tests, as this module's fixture
abi = dynamic_abi.abi

QID, KID, VID, OID, SID = 1, 2, 3, 4, 5
HEAD_DIMS = list(range(8, 257, 8))
MAX_HEAD_DIM = 128


def fwd(d: int, **kw: Any) -> bytes:
    """A static forward graph (override-enabled) of q, k, v, o [2, 4, 64, d] BHSD and stats."""
    dims = [2, 4, 64, d]
    return sdpa_bytes(dims, order=compact(dims), dynamic=False, **kw)


@pytest.fixture(scope="module")
def probe(abi: Abi) -> tuple[list[int], str]:
    """What the engine says about a graph it runs: its engines here, or why none (no GPU)."""
    return abi.decide(STATIC_SERVABLE)


def workspace_answer(abi: Abi, gb: bytes, engine: int) -> tuple[int, str]:
    """GetWorkspaceSize's status and last error for (graph, engine): how the host asks an engine why."""
    keep: list[Any] = []
    ws = abi.ffi.new("size_t*")
    st = abi.lib.hipdnnEnginePluginGetWorkspaceSize(
        abi.handle, const_data(abi.ffi, config_bytes(engine), keep), const_data(abi.ffi, gb, keep), ws
    )
    return st, abi_last_error(abi.ffi, abi.lib) if st != SUCCESS else ""


REASON = {TENSOR_CORE: "(8-128 in steps of 8)", PORTABLE: "(1-128)"}


@pytest.mark.parametrize("d", HEAD_DIMS)
def test_head_dims_above_128_are_refused_at_build_with_the_reason(
    abi: Abi, probe: tuple[list[int], str], d: int
) -> None:
    """8 .. 256 in steps of 8: up to 128 they pass the graph rules of both engines (declined, if at
    all, only for want of a GPU); above it both decline, and asked directly each engine says why."""
    gb = fwd(d)
    ids, why = abi.decide(gb)
    if d <= MAX_HEAD_DIM:
        assert (ids, why) == probe
        return
    assert ids == []
    for engine in (TENSOR_CORE, PORTABLE):
        st, err = workspace_answer(abi, gb, engine)
        assert st == NOT_APPLICABLE
        want = f"engine {engine} cannot run this graph: node 'sdpa': head dim {d} not served {REASON[engine]}"
        assert want in err, err


@pytest.mark.parametrize("d", [1, 3, 37, 65, 127])
def test_head_dims_off_the_16_byte_grid_are_the_portable_engines(
    abi: Abi, probe: tuple[list[int], str], d: int
) -> None:
    """A head dim that is not a multiple of 8 cannot be moved in 16-byte chunks: engine 202 declines it
    with the reason, engine 201 (single elements) plans it."""
    gb = fwd(d)
    st, err = workspace_answer(abi, gb, TENSOR_CORE)
    assert st == NOT_APPLICABLE
    assert f"head dim {d} not served (8-128 in steps of 8)" in err, err
    st, err = workspace_answer(abi, gb, PORTABLE)
    if PORTABLE in probe[0]:
        assert st == SUCCESS, err
    else:  # no GPU: declined for that reason only, after the graph rules passed
        assert "not served" not in err, err


@pytest.mark.parametrize("d", [8, 72, 96, 120, 192, 256])
def test_backward_head_dims(abi: Abi, probe: tuple[list[int], str], d: int) -> None:
    """The backward serves the forward's head dims: up to 128 the graph rules pass (declined, if at
    all, for want of a GPU), above it both engines decline with the reason."""
    ids, why = abi.decide(bwd_bytes([1, 2, 64, d]))
    if d <= MAX_HEAD_DIM:
        assert "not served" not in why and "differ" not in why, why
        assert ids == probe[0], why
    else:
        assert ids == [] and f"head dim {d} not served (" in why, why


def test_one_head_dim_per_group_of_tensors(abi: Abi, probe: tuple[list[int], str]) -> None:
    """q and k share one head dim, v and o another (d_qk != d_v is served): within a group a second
    value is refused, both tensors named; across the groups it plans."""
    ids, why = abi.decide(sdpa_bytes([2, 4, 64, 128], o=[2, 4, 64, 64]))
    assert ids == [] and "head dims of v (128) and o (64) differ" in why, why
    ids, why = abi.decide(sdpa_bytes([2, 4, 64, 128], kv=[2, 4, 64, 96]))
    assert ids == [] and "head dims of q (128) and k (96) differ" in why, why


def test_an_output_whose_strides_fold_onto_itself_is_refused_at_build(abi: Abi) -> None:
    """o [2, 4, 64, 64] with a row stride of 32: rows overlap, two results for one element."""
    dims = [2, 4, 64, 64]
    gb = sdpa_bytes(dims, order=[4 * 64 * 64, 64 * 64, 32, 1], dynamic=False)
    ids, why = abi.decide(gb)
    assert ids == [] and "o [2,4,64,64] with strides [16384,4096,32,1] writes some element address twice" in why, why


# ---------------------------------------------------------------------------- execute (GPU only)
#: never dereferenced: every call below is refused before a kernel is launched
FAKE = {QID: 0x100000, KID: 0x200000, VID: 0x300000, OID: 0x400000, SID: 0x500000}


def bhsd(dims: list[int]) -> list[int]:
    return compact(dims)


def overrides(b: int = 1, s: int = 8, d: int = 128) -> dict[int, tuple[list[int], list[int]]]:
    dims = [b, 4, s, d]
    ov = {uid: (dims, bhsd(dims)) for uid in (QID, KID, VID, OID)}
    ov[SID] = ([b, 4, s, 1], [4 * s, s, 1, 1])
    return ov


@pytest.fixture(params=[TENSOR_CORE, PORTABLE], ids=["tc202", "portable201"])
def ctx(abi: Abi, probe: tuple[list[int], str], request: pytest.FixtureRequest) -> Iterator[Ctx]:
    """A context of one engine for the static plan q, k, v, o [2, 4, 64, 128] (BHSD) + stats."""
    engine = request.param
    if engine not in probe[0]:
        pytest.skip(f"engine {engine} does not run here: {probe[1].partition('not applicable: ')[2] or probe[1]}")
    keep: list[Any] = []
    g, c = const_data(abi.ffi, fwd(128), keep), const_data(abi.ffi, config_bytes(engine), keep)
    ws = abi.ffi.new("size_t*")
    assert abi.lib.hipdnnEnginePluginGetWorkspaceSize(abi.handle, c, g, ws) == SUCCESS
    p = abi.ffi.new("hipdnnEnginePluginExecutionContext_t*")
    assert abi.lib.hipdnnEnginePluginCreateExecutionContext(abi.handle, c, g, p) == SUCCESS
    context = Ctx(abi.ffi, abi.lib, abi.handle, p[0], ws[0], keep)
    yield context
    context.destroy()


def refused(
    ctx: Ctx, ov: dict[int, tuple[list[int], list[int]]], reason: str, ptrs: dict[int, int] | None = None
) -> None:
    assert ctx.execute(ptrs or FAKE, overrides=ov) == BAD_PARAM
    err = abi_last_error(ctx.ffi, ctx.lib)
    assert reason in err, err


def test_a_misaligned_pointer_is_refused(ctx: Ctx) -> None:
    refused(ctx, overrides(), "q at address 0x100001 is not aligned to its 2-byte elements", {**FAKE, QID: 0x100001})
    refused(
        ctx, overrides(), "stats at address 0x500002 is not aligned to its 4-byte elements", {**FAKE, SID: 0x500002}
    )


def test_an_output_override_that_folds_onto_itself_is_refused(ctx: Ctx) -> None:
    ov = overrides(s=8)
    ov[OID] = ([1, 4, 8, 128], [4096, 1024, 64, 1])  # rows 64 apart, 128 long
    refused(ctx, ov, "o [1,4,8,128] with strides [4096,1024,64,1] writes some element address twice")
    ov = overrides(s=8)
    ov[SID] = ([1, 4, 8, 1], [8, 4, 1, 1])  # heads 4 apart, 8 rows each
    refused(ctx, ov, "stats [1,4,8,1] with strides [8,4,1,1] writes some element address twice")
