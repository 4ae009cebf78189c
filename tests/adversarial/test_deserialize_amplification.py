"""Graph buffers that decode to far more than their size (the audit of issue #16's deserialize surface).

FlatBuffers references are offsets, so one small buffer can point thousands of tensors at one dims
vector or one name, or list one node table thousands of times. Nothing in such a buffer is out of
bounds, so the decoder reads it happily: a 760 KB file made ``Graph.deserialize`` take 7.7 GB and 40 s
(every tensor got its own copy of a 200 KB name), and a 184 KB file of 2,000 tensors sharing one
8,000-long dims vector kept the backend's ``summarize`` busy for 73 s and then accepted it. Each is
now refused before anything is decoded (``hipdnn.backend.graph_summary.check_decoded_size``), on
every path: ``Graph.deserialize``, the backend operation graph on raw bytes, and ``hipdnn inspect``.

Each case runs in a child process under a 2 GiB address-space limit and a timeout, so that a
regression fails one test (MemoryError, a timeout) instead of taking the machine's memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import flatbuffers
import pytest

import hipdnn
from hipdnn.backend.graph_summary import GraphDecodeError, summarize
from hipdnn.wire import Graph as WG
from hipdnn.wire import Node as WN
from hipdnn.wire import SdpaBackwardAttributes as SB
from hipdnn.wire import TensorAttributes as TA
from hipdnn.wire.NodeAttributes import NodeAttributes
from tests.adversarial.fuzz_corpus import regression_blobs, seed_blobs

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS, /proc")


def _graph(b: flatbuffers.Builder, tensors: list[int], nodes: list[int], name: int | None = None) -> bytes:
    WG.GraphStartTensorsVector(b, len(tensors))
    for o in reversed(tensors):
        b.PrependUOffsetTRelative(o)
    tv = b.EndVector()
    WG.GraphStartNodesVector(b, len(nodes))
    for o in reversed(nodes):
        b.PrependUOffsetTRelative(o)
    nv = b.EndVector()
    WG.GraphStart(b)
    if name is not None:
        WG.GraphAddName(b, name)
    WG.GraphAddTensors(b, tv)
    WG.GraphAddNodes(b, nv)
    WG.GraphAddIoDataType(b, 1)
    b.Finish(WG.GraphEnd(b))
    return bytes(b.Output())


def _tensor(b: flatbuffers.Builder, uid: int, name: int | None = None, dims: int | None = None) -> int:
    TA.TensorAttributesStart(b)
    TA.TensorAttributesAddUid(b, uid)
    if name is not None:
        TA.TensorAttributesAddName(b, name)
    if dims is not None:
        TA.TensorAttributesAddDims(b, dims)
        TA.TensorAttributesAddStrides(b, dims)
    TA.TensorAttributesAddDataType(b, 1)
    return int(TA.TensorAttributesEnd(b))


def shared_name(tensors: int = 20_000, length: int = 200_000) -> bytes:
    """``tensors`` distinct tensors, all naming one ``length``-byte string (760 KB: 4 GB decoded)."""
    b = flatbuffers.Builder(0)
    name = b.CreateString("n" * length)
    return _graph(b, [_tensor(b, i + 1, name=name) for i in range(tensors)], [])


def shared_dims(tensors: int = 2_000, rank: int = 8_000) -> bytes:
    """``tensors`` distinct tensors sharing one dims (and strides) vector of ``rank`` ones (184 KB)."""
    b = flatbuffers.Builder(0)
    TA.TensorAttributesStartDimsVector(b, rank)
    for _ in range(rank):
        b.PrependInt64(1)
    dims = b.EndVector()
    return _graph(b, [_tensor(b, i + 1, dims=dims) for i in range(tensors)], [])


def shared_node(count: int = 100_000) -> bytes:
    """One SDPA backward node table listed ``count`` times (each entry unpacks ~40 fields)."""
    b = flatbuffers.Builder(0)
    SB.SdpaBackwardAttributesStart(b)
    for add in (SB.AddQTensorUid, SB.AddKTensorUid, SB.AddVTensorUid, SB.AddOTensorUid):
        add(b, 1)
    attrs = SB.SdpaBackwardAttributesEnd(b)
    WN.NodeStart(b)
    WN.NodeAddAttributesType(b, NodeAttributes.SdpaBackwardAttributes)
    WN.NodeAddAttributes(b, attrs)
    node = WN.NodeEnd(b)
    return _graph(b, [_tensor(b, 1)], [node] * count)


def shared_graph_name(tensors: int = 40_000) -> bytes:
    """The graph's own name reused as the name of every tensor."""
    b = flatbuffers.Builder(0)
    name = b.CreateString("g" * 4096)
    return _graph(b, [_tensor(b, i + 1, name=name) for i in range(tensors)], [], name=name)


CASES = {
    "shared_name": shared_name,
    "shared_dims": shared_dims,
    "shared_node": shared_node,
    "shared_graph_name": shared_graph_name,
}

_CHILD = textwrap.dedent(
    """
    import faulthandler, json, os, resource, sys, time
    faulthandler.enable()
    if "libasan" not in os.environ.get("LD_PRELOAD", ""):  # ASan reserves terabytes of address space
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    import hipdnn
    from hipdnn.backend import AttributeName as A, AttributeType as T, BackendError, OperationGraphDescriptor
    from hipdnn.backend.graph_summary import GraphDecodeError, summarize

    path, way = sys.argv[1], sys.argv[2]
    blob = open(path, "rb").read()
    start = time.monotonic()
    try:
        if way == "deserialize":
            hipdnn.Graph.deserialize(blob)
        elif way == "parse":
            hipdnn.Graph._parse(blob)
        elif way == "summarize":
            summarize(blob)
        else:
            with hipdnn.Handle(plugin_paths=[], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE) as h:
                d = OperationGraphDescriptor(blob)
                d.set_attribute(A.OPERATIONGRAPH_HANDLE, T.HANDLE, h.backend)
                d.finalize()
        outcome = "accepted"
    except (hipdnn.HipdnnError, GraphDecodeError, BackendError) as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"outcome": outcome, "seconds": time.monotonic() - start}))
    """
)


def _run(path: Path, way: str) -> dict[str, object]:
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path), way],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{way} of {path.name} ran past 60 s")
    assert proc.returncode == 0, f"{way} of {path.name}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    result: dict[str, object] = json.loads(proc.stdout.splitlines()[-1])
    return result


@pytest.mark.parametrize("way", ["deserialize", "parse", "summarize", "backend"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_buffer_decoding_to_more_than_its_size_is_refused_at_once(tmp_path: Path, case: str, way: str) -> None:
    path = tmp_path / f"{case}.bin"
    path.write_bytes(CASES[case]())
    result = _run(path, way)
    assert "point into shared storage" in str(result["outcome"]), result
    assert isinstance(result["seconds"], float) and result["seconds"] < 5, result


@pytest.mark.parametrize("emit", ["parsed", "validated", "lowered"])
def test_inspect_refuses_an_amplifying_file_quickly(tmp_path: Path, emit: str) -> None:
    path = tmp_path / "shared_name.bin"
    path.write_bytes(shared_name())
    script = "import os, resource, sys\n"
    script += 'if "libasan" not in os.environ.get("LD_PRELOAD", ""):\n'  # ASan reserves terabytes of address space
    script += "    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
    script += "from hipdnn.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run(
        [sys.executable, "-c", script, "inspect", "--emit", emit, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "INVALID_VALUE" in proc.stderr and "point into shared storage" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_every_seed_and_regression_buffer_is_within_its_size() -> None:
    """The bound never refuses what a serializer writes: every corpus graph still reads."""
    for name, blob in {**seed_blobs(), **regression_blobs()}.items():
        try:
            summarize(blob)
        except GraphDecodeError as exc:
            assert "shared storage" not in str(exc), name


def test_large_honest_graphs_are_within_their_size() -> None:
    """A wide graph (many tensors, long names, rank 8) and a long chain of nodes with empty names."""
    f32 = hipdnn.DataType.FLOAT
    g = hipdnn.Graph(name="w" * 1000, io_data_type=f32)
    dims = [1, 1, 1, 1, 1, 1, 2, 3]
    strides = [6, 6, 6, 6, 6, 6, 3, 1]
    xs = [g.tensor(name=f"input_{i}_" + "n" * 300, dim=dims, stride=strides, data_type=f32) for i in range(300)]
    y = xs[0]
    for x in xs[1:]:
        y = g.pointwise(hipdnn.PointwiseMode.ADD, y, x)
    y.set_output(True)
    chain = hipdnn.Graph(io_data_type=f32)
    z = chain.tensor(dim=[4], stride=[1], data_type=f32)
    for _ in range(2000):
        z = chain.pointwise(hipdnn.PointwiseMode.RELU_FWD, z)
    z.set_output(True)
    for graph in (g, chain):
        blob = graph.serialize()
        back = hipdnn.Graph.deserialize(blob)
        assert len(back.tensors) == len(graph.tensors)
        assert len(summarize(blob).tensors) == len(graph.tensors)
