"""Messages that say what happened (issue #31): a wrong first argument to ``execute`` is named with what
is expected (never "a different handle than the graph was built on"), a graph changed after
``build()`` says so (never "build it first"), and bytes that are not a graph never show the
FlatBuffers decoder's ``struct`` internals, from the API or from ``hipdnn inspect``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hipdnn
from hipdnn import DataType, ErrorCode, Graph, HipdnnError
from hipdnn.cli import main

F32 = DataType.FLOAT
INTERNALS = ("unpack", "struct", "requires a buffer of at least", "Traceback", "error:  ")


@pytest.fixture(scope="module")
def cpu() -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle(device="cpu")
    yield h
    h.close()


def relu(name: str = "relu") -> tuple[Graph, Any, Any]:
    g = Graph(name=name, io_data_type=F32)
    x = g.tensor(name="x", dim=[4], data_type=F32)
    y = g.relu(x)
    y.set_output(True)
    return g, x, y


def pack(x: Any, y: Any) -> dict[Any, np.ndarray]:
    return {x: np.zeros(4, np.float32), y: np.zeros(4, np.float32)}


@pytest.mark.parametrize(
    ("handle", "shown"),
    [(None, "None (a NoneType)"), ("cuda", "'cuda' (a str)"), (0, "0 (a int)"), ({}, "a dict of 0 entries")],
)
def test_a_wrong_handle_is_named_with_what_is_expected(cpu: hipdnn.Handle, handle: Any, shown: str) -> None:
    g, x, y = relu()
    g.build(cpu)
    with pytest.raises(HipdnnError) as err:
        g.execute(handle, pack(x, y))
    message = err.value.message
    assert err.value.code == ErrorCode.INVALID_VALUE
    assert f"the handle passed is {shown}" in message
    assert "expected the hipdnn.Handle graph 'relu' was built on" in message
    assert "g.execute(handle, variant_pack, workspace)" in message and "different handle" not in message


def test_a_wrong_handle_is_named_before_the_missing_plan() -> None:
    g, x, y = relu()
    with pytest.raises(HipdnnError) as err:
        g.execute(None, pack(x, y))  # type: ignore[arg-type]
    assert "the handle passed is None" in err.value.message


def test_another_handle_is_said_to_be_another_one(cpu: hipdnn.Handle) -> None:
    g, x, y = relu()
    g.build(cpu)
    with hipdnn.Handle(device="cpu") as other, pytest.raises(HipdnnError) as err:
        g.execute(other, pack(x, y))
    assert "is another hipdnn.Handle than the one graph 'relu' was built on" in err.value.message


def test_bind_names_a_wrong_handle_too(cpu: hipdnn.Handle) -> None:
    g, x, y = relu()
    g.build(cpu)
    with pytest.raises(HipdnnError) as err:
        g.bind(None, [x, y])  # type: ignore[arg-type]
    assert "bind: the handle passed is None (a NoneType)" in err.value.message


def test_never_built_says_to_build() -> None:
    g, x, y = relu()
    with hipdnn.Handle(device="cpu") as h, pytest.raises(HipdnnError) as err:
        g.execute(h, pack(x, y))
    assert err.value.code == ErrorCode.ATTRIBUTE_NOT_SET
    assert "has no execution plan: call build(handle) before execute" in err.value.message


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda g, y: g.relu(y).set_output(True), "pointwise node 'pointwise_1' was added"),
        (lambda g, y: g.tensor(name="extra", dim=[4], data_type=F32), "tensor 'extra' was added"),
        (lambda g, y: g.set_override_shape_enabled(True), "the override flag was set to True"),
    ],
)
def test_a_change_after_build_says_so(cpu: hipdnn.Handle, change: Any, said: str) -> None:
    g, x, y = relu()
    g.build(cpu)
    g.execute(cpu, pack(x, y))
    change(g, y)
    for call, doing in (
        (lambda: g.execute(cpu, pack(x, y)), "execute"),
        (g.get_workspace_size, "get_workspace_size()"),
        (lambda: g.bind(cpu, [x, y]), "bind"),
    ):
        with pytest.raises(HipdnnError) as err:
            call()
        message = err.value.message
        assert err.value.code == ErrorCode.ATTRIBUTE_NOT_SET
        assert f"graph 'relu' changed after build(): {said}" in message, message
        assert f"call build(handle) again before {doing}" in message and "build it first" not in message


def test_a_rebuilt_graph_runs_again(cpu: hipdnn.Handle) -> None:
    g, x, y = relu()
    g.build(cpu)
    z = g.relu(y)
    z.set_output(True)
    g.build(cpu)
    g.execute(cpu, {**pack(x, y), z: np.zeros(4, np.float32)})


@pytest.mark.parametrize(
    "blob",
    [os.urandom(200), b"hello world, this is not a graph" * 3, b"\xff" * 64, b"\x01\x02\x03"],
    ids=["random", "text", "ones", "short"],
)
def test_bytes_that_are_no_graph_are_said_to_be_none(blob: bytes, tmp_path: Path, capsys: Any) -> None:
    with pytest.raises(HipdnnError) as err:
        Graph.deserialize(blob)
    message = err.value.message
    assert err.value.code == ErrorCode.INVALID_VALUE and "graph buffer" in message
    assert not any(word in message for word in INTERNALS), message
    path = tmp_path / "graph.bin"
    path.write_bytes(blob)
    for stage in ("parsed", "validated", "lowered", "planned"):
        assert main(["inspect", str(path), "--emit", stage]) == 2, stage
        err_text = capsys.readouterr().err
        assert err_text.startswith("error: [INVALID_VALUE]") and "graph buffer" in err_text, err_text
        assert not any(word in err_text for word in INTERNALS), err_text
