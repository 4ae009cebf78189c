"""Code ported from cudnn-frontend runs as written (issue #31): ``pygraph.sdpa`` / ``sdpa_backward``
keywords at their "off" values are accepted and change nothing, a feature hipdnn lacks is refused
naming the feature, ``sliding_window_length`` and ``use_deterministic_algorithm`` are served, and
``execute`` called in cudnn-frontend's argument order says so.

The keyword lists are cudnn-frontend's own (python/pygraph/sdpa.cpp, ``init_pygraph_sdpa_submodule``);
the rules are in rfcs/0011-cudnn-frontend-compatibility.md."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import hipdnn
from hipdnn import AttentionImplementation, DataType, DiagonalAlignment, ErrorCode, Graph, HipdnnError
from hipdnn.frontend.ops.attention_options import CUDNN_FRONTEND_OPTIONS

F32 = DataType.FLOAT
DIMS = [1, 2, 8, 16]

#: every keyword of cudnn-frontend's pygraph.sdpa besides q, k, v, at its default ("off") value
CUDNN_SDPA_DEFAULTS: dict[str, Any] = {
    "is_inference": None,
    "attn_scale": None,
    "bias": None,
    "block_mask": None,
    "use_alibi_mask": False,
    "use_padding_mask": False,
    "seq_len_q": None,
    "seq_len_kv": None,
    "use_causal_mask": False,
    "use_causal_mask_bottom_right": False,
    "sliding_window_length": None,
    "diagonal_alignment": DiagonalAlignment.TOP_LEFT,
    "diagonal_band_left_bound": None,
    "diagonal_band_right_bound": None,
    "dropout": None,
    "rng_dump": None,
    "paged_attention_k_table": None,
    "paged_attention_v_table": None,
    "paged_attention_max_seq_len_kv": None,
    "max_total_seq_len_q": None,
    "max_total_seq_len_kv": None,
    "compute_data_type": DataType.NOT_SET,
    "name": "attn",
    "score_mod": None,
    "generate_stats": None,
    "implementation": AttentionImplementation.AUTO,
    "score_max": None,
    "score_sum_exp": None,
    "sink_token": None,
    "unfuse_fma": False,
    "cu_seq_len_q": None,
    "cu_seq_len_kv": None,
    "stats_use_log2": False,
}

#: every keyword of cudnn-frontend's pygraph.sdpa_backward besides q, k, v, o, dO, stats
CUDNN_SDPA_BACKWARD_DEFAULTS: dict[str, Any] = {
    "attn_scale": None,
    "bias": None,
    "dBias": None,
    "use_alibi_mask": False,
    "use_padding_mask": False,
    "seq_len_q": None,
    "seq_len_kv": None,
    "max_total_seq_len_q": None,
    "max_total_seq_len_kv": None,
    "use_causal_mask": False,
    "use_causal_mask_bottom_right": False,
    "sliding_window_length": None,
    "diagonal_alignment": DiagonalAlignment.TOP_LEFT,
    "diagonal_band_left_bound": None,
    "diagonal_band_right_bound": None,
    "dropout": None,
    "rng_dump": None,
    "use_deterministic_algorithm": False,
    "compute_data_type": DataType.NOT_SET,
    "name": "attn_bwd",
    "score_mod": None,
    "score_mod_bprop": None,
    "sink_token": None,
    "dSink_token": None,
}


def _graph() -> tuple[Graph, Any, Any, Any]:
    g = Graph(name="port", io_data_type=F32, intermediate_data_type=F32, compute_data_type=F32)
    q, k, v = (g.tensor(name=n, dim=DIMS, data_type=F32) for n in "qkv")
    return g, q, k, v


def _forward(**kw: Any) -> bytes:
    g, q, k, v = _graph()
    o, stats = g.sdpa(q, k, v, **kw)
    o.set_output(True)
    if stats is not None:
        stats.set_output(True)
    return g.serialize()


def _backward(**kw: Any) -> bytes:
    g, q, k, v = _graph()
    o, do, stats = (
        g.tensor(name=n, dim=d, data_type=F32) for n, d in (("o", DIMS), ("do", DIMS), ("st", DIMS[:3] + [1]))
    )
    for t in g.sdpa_backward(q, k, v, o, do, stats, **kw):
        t.set_output(True)
    return g.serialize()


def test_every_cudnn_forward_keyword_at_its_default_changes_nothing() -> None:
    plain = _forward(name="attn", use_causal_mask=True, attn_scale=0.25)
    ported = {**CUDNN_SDPA_DEFAULTS, "use_causal_mask": True, "attn_scale": 0.25}
    assert _forward(**ported) == plain
    # cudnn-frontend's training form: is_inference=False outputs the stats
    assert _forward(**{**ported, "is_inference": False}) == _forward(
        name="attn", use_causal_mask=True, attn_scale=0.25, generate_stats=True
    )


def test_every_cudnn_backward_keyword_at_its_default_changes_nothing() -> None:
    plain = _backward(name="attn_bwd", use_causal_mask=True)
    assert _backward(**{**CUDNN_SDPA_BACKWARD_DEFAULTS, "use_causal_mask": True}) == plain


def _on_value(name: str, g: Graph, q: Any) -> Any:
    """A value that asks for the feature behind ``name``."""
    off = CUDNN_FRONTEND_OPTIONS[name].off
    if off is False:
        return True
    if off is AttentionImplementation.AUTO:
        return AttentionImplementation.UNIFIED
    if name == "dropout":
        return (0.1, q, q)
    if name in ("paged_attention_max_seq_len_kv", "max_total_seq_len_q", "max_total_seq_len_kv"):
        return 64
    if name in ("score_mod", "score_mod_bprop"):
        return lambda *a: a
    return g.tensor(name=f"{name}_t", dim=[1, 2, 1, 1], data_type=F32)


@pytest.mark.parametrize(
    ("op", "name"),
    [(op, n) for n, o in sorted(CUDNN_FRONTEND_OPTIONS.items()) for op in sorted(o.ops)],
)
def test_a_feature_hipdnn_lacks_is_refused_by_name(op: str, name: str) -> None:
    g, q, k, v = _graph()
    value = _on_value(name, g, q)
    with pytest.raises(HipdnnError) as err:
        if op == "sdpa":
            g.sdpa(q, k, v, **{name: value})
        else:
            g.sdpa_backward(q, k, v, q, q, q, **{name: value})
    message = err.value.message
    assert err.value.code == ErrorCode.GRAPH_NOT_SUPPORTED, message
    assert f"{name}=" in message and CUDNN_FRONTEND_OPTIONS[name].feature in message
    assert "does not support" in message and "unknown option" not in message


def test_the_features_named_are_cudnn_frontends_keywords() -> None:
    """Every feature refused is a keyword cudnn-frontend really has (no invented names)."""
    assert set(CUDNN_FRONTEND_OPTIONS) <= set(CUDNN_SDPA_DEFAULTS) | set(CUDNN_SDPA_BACKWARD_DEFAULTS)
    for name, option in CUDNN_FRONTEND_OPTIONS.items():
        for op, defaults in (("sdpa", CUDNN_SDPA_DEFAULTS), ("sdpa_backward", CUDNN_SDPA_BACKWARD_DEFAULTS)):
            assert (name in defaults) == (op in option.ops), (name, op)


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda g, q, k, v: g.sdpa(q, k, v, use_deterministic_algorithm=True), "an option of sdpa_backward"),
        (lambda g, q, k, v: g.sdpa(q, k, v, dBias=None), "an option of sdpa_backward"),
        (lambda g, q, k, v: g.sdpa_backward(q, k, v, q, q, q, paged_attention_k_table=None), "an option of sdpa,"),
    ],
)
def test_an_option_of_the_other_direction_says_whose_it_is(call: Any, fragment: str) -> None:
    g, q, k, v = _graph()
    with pytest.raises(HipdnnError) as err:
        call(g, q, k, v)
    assert err.value.code == ErrorCode.INVALID_VALUE and fragment in err.value.message


def test_an_unknown_keyword_is_still_named() -> None:
    g, q, k, v = _graph()
    with pytest.raises(HipdnnError) as err:
        g.sdpa(q, k, v, dropuot=None)
    assert "unknown option(s) dropuot" in err.value.message


def test_sliding_window_length_is_the_left_bound() -> None:
    assert _forward(sliding_window_length=3, use_causal_mask=True) == _forward(
        diagonal_band_left_bound=3, use_causal_mask=True
    )
    assert _backward(sliding_window_length=3) == _backward(diagonal_band_left_bound=3)
    g, q, k, v = _graph()
    with pytest.raises(HipdnnError) as err:
        g.sdpa(q, k, v, sliding_window_length=3, diagonal_band_left_bound=2)
    assert "sliding_window_length and diagonal_band_left_bound are both set" in err.value.message


def test_implementation_auto_is_accepted() -> None:
    assert hipdnn.AttentionImplementation.AUTO == 0
    assert _forward(implementation=AttentionImplementation.AUTO) == _forward()
    g, q, k, v = _graph()
    with pytest.raises(HipdnnError) as err:
        g.sdpa(q, k, v, implementation=AttentionImplementation.COMPOSITE)
    assert "preferred_engine_id" in err.value.message


# -- use_deterministic_algorithm: carried to the engines, which decline what they cannot promise ------
def _backward_graph(deterministic: bool) -> tuple[Graph, dict[str, Any]]:
    g, q, k, v = _graph()
    o, do = g.tensor(name="o", dim=DIMS, data_type=F32), g.tensor(name="do", dim=DIMS, data_type=F32)
    stats = g.tensor(name="stats", dim=DIMS[:3] + [1], data_type=F32)
    dq, dk, dv = g.sdpa_backward(q, k, v, o, do, stats, use_causal_mask=True, use_deterministic_algorithm=deterministic)
    for t in (dq, dk, dv):
        t.set_output(True)
    return g, {"q": q, "k": k, "v": v, "o": o, "do": do, "stats": stats, "dq": dq, "dk": dk, "dv": dv}


def test_deterministic_backward_reaches_the_wire_and_comes_back() -> None:
    g, _ = _backward_graph(True)
    (node,) = Graph.deserialize(g.serialize()).nodes
    assert node.options.use_deterministic_algorithm is True  # type: ignore[attr-defined]
    assert g.serialize() != _backward_graph(False)[0].serialize()


def test_the_forward_ignores_the_backward_option_of_a_shared_object() -> None:
    opts = hipdnn.SdpaAttributes(use_causal_mask=True, use_deterministic_algorithm=True)
    g, q, k, v = _graph()
    o, _ = g.sdpa(q, k, v, options=opts)
    o.set_output(True)
    assert g.serialize() == _forward(use_causal_mask=True)


@pytest.fixture(scope="module")
def cpu() -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle(device="cpu")
    yield h
    h.close()


def test_the_cpu_engine_serves_a_deterministic_backward_bit_for_bit(cpu: hipdnn.Handle) -> None:
    g, t = _backward_graph(True)
    g.build(cpu)
    assert g.get_engine_id() == 101
    rng = np.random.default_rng(3)
    inputs = {n: rng.standard_normal(t[n].get_dim()).astype(np.float32) for n in ("q", "k", "v", "o", "do")}
    inputs["stats"] = np.abs(rng.standard_normal(t["stats"].get_dim())).astype(np.float32) + 1
    runs = []
    for _ in range(2):
        outs = {n: np.full(t[n].get_dim(), np.nan, np.float32) for n in ("dq", "dk", "dv")}
        ws = np.empty(max(g.get_workspace_size(), 1), np.uint8)
        g.execute(cpu, {t[n]: a for n, a in {**inputs, **outs}.items()}, ws)
        runs.append(outs)
    for n in ("dq", "dk", "dv"):
        assert np.isfinite(runs[0][n]).all() and runs[0][n].tobytes() == runs[1][n].tobytes()


def test_the_gpu_engine_declines_a_deterministic_backward_saying_why() -> None:
    from tests.gpu.hip_support import find_plugin

    plugin = find_plugin()
    if plugin is None:
        pytest.skip("the HIP engine is not built here")
    h = hipdnn.Handle(plugin_paths=[plugin], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
    try:
        g = Graph(name="det", io_data_type=DataType.HALF, intermediate_data_type=F32, compute_data_type=F32)
        g.preferred_engine_id = 201
        q, k, v, o, do = (
            g.tensor(name=n, dim=[1, 2, 16, 64], data_type=DataType.HALF) for n in ("q", "k", "v", "o", "do")
        )
        stats = g.tensor(name="stats", dim=[1, 2, 16, 1], data_type=F32)
        for t in g.sdpa_backward(q, k, v, o, do, stats, use_deterministic_algorithm=True):
            t.set_output(True)
        with pytest.raises(HipdnnError) as err:
            g.build(h)
        assert err.value.code == ErrorCode.GRAPH_NOT_SUPPORTED and "deterministic mode" in err.value.message
    finally:
        h.close()


# -- execute in cudnn-frontend's argument order ---------------------------------------------------
@pytest.fixture
def built(cpu: hipdnn.Handle) -> tuple[Graph, dict[Any, np.ndarray]]:
    g = Graph(name="relu", io_data_type=F32)
    x = g.tensor(name="x", dim=[4], data_type=F32)
    y = g.relu(x)
    y.set_output(True)
    g.build(cpu)
    return g, {x: np.arange(-2, 2, dtype=np.float32), y: np.zeros(4, np.float32)}


def test_execute_in_cudnn_frontends_order_says_so(cpu: hipdnn.Handle, built: Any) -> None:
    g, vp = built
    ws = np.empty(0, np.uint8)
    with pytest.raises(HipdnnError) as err:
        g.execute(vp, ws, handle=cpu)  # type: ignore[misc]  # cudnn-frontend: execute(variant_pack, workspace, handle=None)
    message = err.value.message
    assert err.value.code == ErrorCode.INVALID_VALUE
    assert "cudnn-frontend's argument order" in message and "g.execute(handle, variant_pack, workspace)" in message
    assert "different handle" not in message
    with pytest.raises(HipdnnError) as err:
        g.execute(vp, ws)  # type: ignore[arg-type]  # cudnn-frontend's handle-less form
    assert "a dict of 2 entries" in err.value.message and "looks like a variant pack" in err.value.message


def test_execute_by_keyword_still_runs(cpu: hipdnn.Handle, built: Any) -> None:
    g, vp = built
    g.execute(handle=cpu, variant_pack=vp)
    g.execute(cpu, variant_pack=vp, workspace=None)
    assert list(vp.values())[1].tolist() == [0.0, 0.0, 0.0, 1.0]
    with pytest.raises(HipdnnError) as err:
        g.execute(cpu, vp, overide_uids=[])  # type: ignore[call-arg]
    assert "unexpected keyword argument(s) overide_uids" in err.value.message
