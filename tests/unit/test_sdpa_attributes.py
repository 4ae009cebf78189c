"""hipdnn.SdpaAttributes: SDPA's options as one value, shared by Graph.sdpa, Graph.sdpa_backward, both
nodes and the wire mapping; keywords keep working and override the object's fields."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

import hipdnn
from hipdnn import DataType, DiagonalAlignment, ErrorCode, Graph, HipdnnError, SdpaAttributes

F32 = DataType.FLOAT
DIMS = [1, 2, 8, 4]


def attention(g: Graph) -> tuple[Any, Any, Any]:
    q, k, v = (g.tensor(name=n, dim=DIMS, data_type=F32) for n in "qkv")
    return q, k, v


def forward(**kw: Any) -> bytes:
    g = Graph(name="a", io_data_type=F32)
    q, k, v = attention(g)
    o, stats = g.sdpa(q, k, v, name="s", **kw)
    o.set_output(True)
    if stats is not None:
        stats.set_output(True)
    return g.serialize()


def test_keywords_and_the_object_build_the_same_graph() -> None:
    keywords: dict[str, Any] = {"attn_scale": 0.25, "use_causal_mask_bottom_right": True, "diagonal_band_left_bound": 3}
    same = forward(**keywords)
    assert forward(options=SdpaAttributes(**keywords)) == same
    assert forward(options=SdpaAttributes(attn_scale=0.25), use_causal_mask_bottom_right=True,
                   diagonal_band_left_bound=3) == same  # fmt: skip
    assert forward(options=SdpaAttributes(generate_stats=True)) == forward(is_inference=False)


def test_keywords_override_the_object() -> None:
    g = Graph()
    q, k, v = attention(g)
    opts = SdpaAttributes(attn_scale=0.5, use_causal_mask=True)
    g.sdpa(q, k, v, opts, use_causal_mask=False)
    node_opts = g._nodes[0].options  # type: ignore[attr-defined]
    assert node_opts.attn_scale == 0.5 and node_opts.use_causal_mask is False
    assert opts.use_causal_mask is True  # the caller's object is not changed


def test_the_options_survive_the_wire() -> None:
    g = Graph(io_data_type=F32)
    q, k, v = attention(g)
    opts = SdpaAttributes(attn_scale=0.5, use_causal_mask=True, diagonal_alignment=DiagonalAlignment.BOTTOM_RIGHT)
    g.sdpa(q, k, v, opts)[0].set_output(True)
    (node,) = Graph.deserialize(g.serialize()).nodes
    assert node.options.attn_scale == 0.5 and node.options.use_causal_mask  # type: ignore[attr-defined]
    assert node.options.diagonal_alignment == DiagonalAlignment.BOTTOM_RIGHT  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda g, q, k, v: g.sdpa(q, k, v, attn_scal=1.0), "unknown option(s) attn_scal"),
        (lambda g, q, k, v: g.sdpa(q, k, v, 0.125), "options must be a hipdnn.SdpaAttributes, not float"),
        (lambda g, q, k, v: g.sdpa(q, k, v, SdpaAttributes(use_causal_mask="yes")), "use_causal_mask"),  # type: ignore[arg-type]
        (lambda g, q, k, v: g.sdpa(q, k, v, SdpaAttributes(seq_len_q=3)), "seq_len_q must be a tensor"),  # type: ignore[arg-type]
        (lambda g, q, k, v: g.sdpa(q, k, v, generate_stats=True, is_inference=True), "contradict"),
        (
            lambda g, q, k, v: g.sdpa_backward(q, k, v, q, q, q, generate_stats=True),
            "generate_stats: forward-only",
        ),
    ],
)
def test_bad_options_are_hipdnn_errors(call: Any, fragment: str) -> None:
    g = Graph()
    q, k, v = attention(g)
    with pytest.raises(HipdnnError) as err:
        call(g, q, k, v)
    assert err.value.code == ErrorCode.INVALID_VALUE and fragment in err.value.message


@pytest.mark.parametrize("scale", [math.inf, math.nan, 1e39])
@pytest.mark.parametrize("form", ["keyword", "object"])
def test_non_finite_scales_are_refused_either_way(scale: float, form: str) -> None:
    g = Graph(io_data_type=F32)
    q, k, v = attention(g)
    with pytest.raises(HipdnnError) as err:
        if form == "keyword":
            g.sdpa(q, k, v, attn_scale=scale)[0].set_output(True)
        else:
            g.sdpa(q, k, v, options=SdpaAttributes(attn_scale=scale))[0].set_output(True)
        g.validate()
    assert err.value.code == ErrorCode.INVALID_VALUE and "attn_scale" in err.value.message


def test_one_object_serves_forward_and_backward() -> None:
    g = Graph(name="fb", io_data_type=F32, intermediate_data_type=F32, compute_data_type=F32)
    q, k, v = attention(g)
    opts = SdpaAttributes(attn_scale=0.5, use_causal_mask=True, generate_stats=True)
    o, stats = g.sdpa(q, k, v, opts)
    assert stats is not None
    o.set_output(True)
    stats.set_output(True)
    do = g.tensor(name="do", dim=DIMS, data_type=F32)
    for t in g.sdpa_backward(q, k, v, o, do, stats, opts):
        t.set_output(True)
    g.validate()
    back = g._nodes[1]
    assert back.options.use_causal_mask and back.options.generate_stats is None  # type: ignore[attr-defined]


def test_the_option_list_is_spelled_once() -> None:
    """The graph's two SDPA methods and both nodes name no option field; attention_options does."""
    frontend = Path(hipdnn.__file__).parent / "frontend"
    for path in (frontend / "graph.py", frontend / "ops" / "sdpa.py", frontend / "ops" / "sdpa_backward.py"):
        text = path.read_text()
        for option in (
            "use_alibi_mask",
            "diagonal_band_left_bound",
            "use_padding_mask",
            "use_causal_mask_bottom_right",
        ):
            assert option not in text, (path.name, option)
