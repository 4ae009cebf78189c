"""Shapes of SDPA's option tensors (scale, sequence lengths, bias) are checked at validate, for the
forward and the backward node alike."""

from __future__ import annotations

import pytest

import hipdnn

F32, I32 = hipdnn.DataType.FLOAT, hipdnn.DataType.INT32
B, H, SQ, SKV, D = 2, 4, 5, 7, 8


def compact(dims: list[int]) -> list[int]:
    strides = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        strides[i] = strides[i + 1] * dims[i + 1]
    return strides


def graph(backward: bool = False, **options: object) -> hipdnn.Graph:
    g = hipdnn.Graph(name="opts", io_data_type=F32)

    def t(name: str, dims: list[int], dt: hipdnn.DataType = F32) -> hipdnn.TensorAttributes:
        return g.tensor(name=name, dim=dims, stride=compact(dims), data_type=dt)

    q, k, v = t("q", [B, H, SQ, D]), t("k", [B, H, SKV, D]), t("v", [B, H, SKV, D])
    kwargs = {}
    for key, value in options.items():
        if isinstance(value, tuple):  # (dims, dtype) -> a tensor of the graph
            kwargs[key] = t(key, list(value[0]), value[1])
        else:
            kwargs[key] = value
    if backward:
        o, do = t("o", [B, H, SQ, D]), t("dO", [B, H, SQ, D])
        stats = t("stats", [B, H, SQ, 1])
        for out in g.sdpa_backward(q, k, v, o, do, stats, **kwargs):
            out.set_output(True)
    else:
        g.sdpa(q, k, v, **kwargs)[0].set_output(True)
    return g


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"attn_scale": ([1, 2, 1, 1], F32)}, "must hold one value"),
        (
            {"use_padding_mask": True, "seq_len_q": ([B, 2, 1, 1], I32), "seq_len_kv": ([B, 1, 1, 1], I32)},
            "seq_len_q tensor",
        ),
        (
            {"use_padding_mask": True, "seq_len_q": ([B, 1, 1, 1], I32), "seq_len_kv": ([1, 1, 1, 1], I32)},
            "seq_len_kv tensor",
        ),
        ({"bias": ([B, H, SQ, SKV + 1], F32)}, "does not broadcast"),
        ({"bias": ([3, 1, SQ, SKV], F32)}, "does not broadcast"),
        ({"bias": ([SQ, SKV], F32)}, "does not broadcast"),
    ],
)
def test_mis_shaped_option_tensors_are_refused(backward: bool, options: dict, message: str) -> None:
    with pytest.raises(hipdnn.HipdnnError) as err:
        graph(backward, **options).validate()
    assert err.value.code == hipdnn.ErrorCode.INVALID_VALUE and message in err.value.message


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize(
    "options",
    [
        {"attn_scale": ([1, 1, 1, 1], F32)},
        {"use_padding_mask": True, "seq_len_q": ([B, 1, 1, 1], I32), "seq_len_kv": ([B, 1, 1, 1], I32)},
        {"bias": ([B, H, SQ, SKV], F32)},
        {"bias": ([1, H, SQ, SKV], F32)},
        {"bias": ([B, 1, SQ, SKV], F32)},
        {"bias": ([1, 1, 1, SKV], F32)},
    ],
)
def test_well_shaped_option_tensors_pass(backward: bool, options: dict) -> None:
    graph(backward, **options).validate()
