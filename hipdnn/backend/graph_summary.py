"""What the backend needs to know about a serialized graph, read once at finalize."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import flatbuffers
from packaging.version import Version

from hipdnn.plugins.version import required_api_version
from hipdnn.wire.Graph import Graph as WireGraph
from hipdnn.wire.Graph import GraphT
from hipdnn.wire.NodeAttributes import NodeAttributes
from hipdnn.wire.SdpaAttributes import SdpaAttributes as WireSdpa
from hipdnn.wire.SdpaBackwardAttributes import SdpaBackwardAttributes as WireSdpaBackward


@dataclass(frozen=True)
class TensorInfo:
    uid: int
    name: str
    data_type: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    is_virtual: bool
    is_dynamic: bool = False
    ragged_offset_uid: int | None = None


@dataclass(frozen=True)
class GraphSummary:
    name: str
    io_data_type: int
    intermediate_data_type: int
    compute_data_type: int
    is_override_shape_enabled: bool
    preferred_engine_id: int | None
    tensors: dict[int, TensorInfo]
    node_count: int
    #: some SDPA node names page tables (paged K/V)
    has_page_tables: bool = False
    #: some SDPA node (forward or backward) has a softcap other than 0 (NaN and negative included)
    has_softcap: bool = False
    #: some SDPA node names an FP8 descale / scale / amax tensor (Graph.sdpa_fp8)
    has_fp8: bool = False
    #: some SDPA backward node names an FP8 descale / scale / amax tensor (Graph.sdpa_fp8_backward)
    has_fp8_backward: bool = False

    @property
    def has_dynamic_tensors(self) -> bool:
        return any(t.is_dynamic for t in self.tensors.values())

    @property
    def has_ragged_or_paged(self) -> bool:
        """Some tensor has a ragged offset, or some SDPA node pages its K/V (plugin API >= 1.3.0)."""
        return self.has_page_tables or any(t.ragged_offset_uid is not None for t in self.tensors.values())

    def required_api_version(self) -> Version:
        """The lowest plugin API version allowed to serve the graph (every feature it uses)."""
        return required_api_version(
            is_override_shape_enabled=self.is_override_shape_enabled,
            has_dynamic_tensors=self.has_dynamic_tensors,
            has_ragged_or_paged=self.has_ragged_or_paged,
            has_softcap=self.has_softcap,
            has_fp8=self.has_fp8,
            has_fp8_backward=self.has_fp8_backward,
        )


class GraphDecodeError(ValueError):
    """The bytes are not a readable hipdnn.wire.Graph."""


def _string_length(table: Any, slot: int) -> int:
    """The length of the string (or vector) in field ``slot`` of a FlatBuffers table, read without
    copying it (0 when the field is absent)."""
    o = table.Offset(slot)
    return int(table.VectorLen(o)) if o else 0


# vtable slots of the string fields (the generated accessors' constants)
_GRAPH_NAME, _TENSOR_NAME, _NODE_NAME = 4, 6, 4


def check_decoded_size(g: WireGraph, size: int) -> None:
    """Refuse a graph whose decoded content would be larger than the ``size`` bytes it came in.

    FlatBuffers references are offsets, so one buffer can point many tensors at one dims vector or
    one name, or list one table many times: a 200 KB file then decodes to gigabytes of Python
    lists and takes minutes. In a buffer whose parts do not overlap (anything a serializer writes)
    every tensor and node entry takes at least 8 bytes (its offset and its table), a node's
    attributes table 4 more, each dim and stride 8 and each name its length; so these, summed
    from the lengths alone (nothing is copied), never exceed the buffer. The walk stops as soon as
    they do, so it costs at most one step per 8 bytes. GraphDecodeError says so; flatbuffers' own
    errors on damaged offsets propagate to the caller."""
    total = _string_length(g._tab, _GRAPH_NAME)
    for i in range(g.TensorsLength()):
        if total > size:
            break
        t = g.Tensors(i)
        total += 8 + _string_length(t._tab, _TENSOR_NAME) + 8 * (t.DimsLength() + t.StridesLength())
    for i in range(g.NodesLength()):
        if total > size:
            break
        n = g.Nodes(i)
        total += 8 + _string_length(n._tab, _NODE_NAME) + (4 if n.AttributesType() != 0 else 0)
    if total > size:
        raise GraphDecodeError(
            f"the buffer's tensors and nodes point into shared storage: their dims, strides, names and "
            f"tables add up to more than the {size} bytes of the buffer, which a serializer never "
            "writes (decoding it would take far more memory and time than its size)"
        )


def summarize(blob: bytes) -> GraphSummary:
    """Read a serialized Graph; any structural damage raises GraphDecodeError (never crashes)."""
    if len(blob) < 8:
        raise GraphDecodeError(f"buffer of {len(blob)} bytes is too short to hold a graph")
    try:
        g = WireGraph.GetRootAs(blob, 0)
        check_decoded_size(g, len(blob))
        tensors: dict[int, TensorInfo] = {}
        for i in range(g.TensorsLength()):
            t = g.Tensors(i)
            if t is None:
                raise GraphDecodeError(f"tensor {i} is missing")
            dims = tuple(int(t.Dims(j)) for j in range(t.DimsLength()))
            strides = tuple(int(t.Strides(j)) for j in range(t.StridesLength()))
            uid = int(t.Uid())
            if uid in tensors:
                raise GraphDecodeError(f"duplicate tensor uid {uid}")
            # the schema's rule; the compiled core refuses a tensor table that breaks it
            if len(dims) != len(strides):
                raise GraphDecodeError(f"tensor uid {uid} has {len(dims)} dims but {len(strides)} strides")
            name = t.Name()
            tensors[uid] = TensorInfo(
                uid=uid,
                name=name.decode("utf-8", "replace") if name else "",
                data_type=int(t.DataType()),
                dims=dims,
                strides=strides,
                is_virtual=bool(t.Virtual()),
                is_dynamic=bool(t.IsDynamic()),
                ragged_offset_uid=t.RaggedOffsetTensorUid(),
            )
        has_page_tables = has_softcap = has_fp8 = has_fp8_backward = False
        for i in range(g.NodesLength()):
            n = g.Nodes(i)
            kind = n.AttributesType() if n is not None else None
            if n is None or kind not in (NodeAttributes.SdpaAttributes, NodeAttributes.SdpaBackwardAttributes):
                continue
            table = n.Attributes()
            if table is None:
                continue
            if kind == NodeAttributes.SdpaBackwardAttributes:
                bwd = WireSdpaBackward()
                bwd.Init(table.Bytes, table.Pos)
                # != 0.0 is also true for NaN: any written value but 0 needs a plugin that reads it
                has_softcap = has_softcap or bwd.Softcap() != 0.0
                has_fp8_backward = has_fp8_backward or any(u is not None for u in _fp8_backward_uids(bwd))
                continue
            sdpa = WireSdpa()
            sdpa.Init(table.Bytes, table.Pos)
            if sdpa.PageTableKTensorUid() is not None or sdpa.PageTableVTensorUid() is not None:
                has_page_tables = True
            has_softcap = has_softcap or sdpa.Softcap() != 0.0
            has_fp8 = has_fp8 or any(u is not None for u in _fp8_forward_uids(sdpa))
        name = g.Name()
        return GraphSummary(
            name=name.decode("utf-8", "replace") if name else "",
            io_data_type=int(g.IoDataType()),
            intermediate_data_type=int(g.IntermediateDataType()),
            compute_data_type=int(g.ComputeDataType()),
            is_override_shape_enabled=bool(g.IsOverrideShapeEnabled()),
            preferred_engine_id=g.PreferredEngineId(),
            tensors=tensors,
            node_count=int(g.NodesLength()),
            has_page_tables=has_page_tables,
            has_softcap=has_softcap,
            has_fp8=has_fp8,
            has_fp8_backward=has_fp8_backward,
        )
    except GraphDecodeError:
        raise
    except Exception as exc:  # flatbuffers raises assorted errors on damaged input
        raise GraphDecodeError(f"corrupted graph buffer ({type(exc).__name__}: {exc})") from None


def with_override_flag(blob: bytes, enabled: bool) -> bytes:
    """The same graph with is_override_shape_enabled set to ``enabled``."""
    graph = GraphT.InitFromPackedBuf(blob, 0)
    graph.isOverrideShapeEnabled = enabled
    builder = flatbuffers.Builder(len(blob) + 64)
    builder.Finish(graph.Pack(builder))
    return bytes(builder.Output())


def _fp8_forward_uids(sdpa: WireSdpa) -> tuple[int | None, ...]:
    """Every FP8 field of a forward node (any of them set makes it an FP8 forward)."""
    return (
        sdpa.DescaleQTensorUid(),
        sdpa.DescaleKTensorUid(),
        sdpa.DescaleVTensorUid(),
        sdpa.DescaleSTensorUid(),
        sdpa.ScaleSTensorUid(),
        sdpa.ScaleOTensorUid(),
        sdpa.AmaxSTensorUid(),
        sdpa.AmaxOTensorUid(),
    )


def _fp8_backward_uids(bwd: WireSdpaBackward) -> tuple[int | None, ...]:
    """Every FP8 field of a backward node (any of them set makes it an FP8 backward)."""
    return (
        bwd.DescaleQTensorUid(),
        bwd.DescaleKTensorUid(),
        bwd.DescaleVTensorUid(),
        bwd.DescaleOTensorUid(),
        bwd.DescaleDoTensorUid(),
        bwd.DescaleSTensorUid(),
        bwd.DescaleDpTensorUid(),
        bwd.ScaleSTensorUid(),
        bwd.ScaleDqTensorUid(),
        bwd.ScaleDkTensorUid(),
        bwd.ScaleDvTensorUid(),
        bwd.ScaleDpTensorUid(),
        bwd.AmaxDqTensorUid(),
        bwd.AmaxDkTensorUid(),
        bwd.AmaxDvTensorUid(),
        bwd.AmaxDpTensorUid(),
    )
