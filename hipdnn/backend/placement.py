"""Where an engine takes tensor memory (host or device), and how a handle's device ranks engines.

Engines say where their memory lives through behavior notes in their EngineDetails. A handle's
memory preference ("auto", "host" or "device") orders the applicable engines by it before load
order, and "host"/"device" also drop the engines that declare the other memory. Engines that
declare nothing (older plugins, third-party no-ops) are kept but ranked after every engine that
declares a location, under every preference: the host cannot check what memory they are handed,
so they serve a graph only when asked for by ``preferred_engine_id`` or when no declared engine
applies (rfcs/0004-plugin-loading.md, section 9)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import flatbuffers

from hipdnn.plugins import EnginePlugin, PluginError
from hipdnn.wire.EngineConfig import EngineConfigT
from hipdnn.wire.EngineDetails import EngineDetails
from hipdnn.wire.Graph import GraphT
from hipdnn.wire.IntValue import IntValueT
from hipdnn.wire.KnobSetting import KnobSettingT
from hipdnn.wire.KnobValue import KnobValue
from hipdnn.wire.Node import NodeT
from hipdnn.wire.NodeAttributes import NodeAttributes
from hipdnn.wire.PointwiseAttributes import PointwiseAttributesT
from hipdnn.wire.SdpaAttributes import SdpaAttributesT
from hipdnn.wire.TensorAttributes import TensorAttributesT

#: Behavior notes an engine lists in its EngineDetails to say where tensor memory must live
#: (hipDNN's notes stop at 4; these are our extensions, see PluginApiDataTypes.h).
BEHAVIOR_NOTE_HOST_MEMORY = 1000
BEHAVIOR_NOTE_DEVICE_MEMORY = 1001

#: A handle's memory preference: "auto" ranks device engines first (they answer applicable only
#: where they can run), then host engines; "host" and "device" admit only engines of that memory.
#: Undeclared ("unknown") engines are admitted by each, always last.
MEMORY_PREFERENCES = ("auto", "host", "device")

_C = TypeVar("_C")
_R = TypeVar("_R")


def _from_details(details: bytes, read: Callable[[EngineDetails], tuple[_R, ...]]) -> tuple[_R, ...]:
    """``read`` of a serialized EngineDetails (empty buffer: nothing). Damage -> ValueError."""
    if not details:
        return ()
    if len(details) < 8:
        raise ValueError(f"{len(details)} bytes cannot hold EngineDetails")
    try:
        return read(EngineDetails.GetRootAs(details, 0))
    except Exception as exc:  # flatbuffers raises assorted errors on damaged input
        raise ValueError(f"{type(exc).__name__}: {exc}") from None


def read_behavior_notes(details: bytes) -> tuple[int, ...]:
    """The behavior notes of a serialized EngineDetails (empty buffer: none). Damage -> ValueError."""
    return _from_details(details, lambda t: tuple(int(t.BehaviorNotes(i)) for i in range(t.BehaviorNotesLength())))


def read_knob_ids(details: bytes) -> tuple[str, ...]:
    """The knob ids (``knob_id_str``) a serialized EngineDetails declares (empty buffer: none).
    Damage -> ValueError."""

    def ids(t: EngineDetails) -> tuple[str, ...]:
        knobs = (t.Knobs(i) for i in range(t.KnobsLength()))
        return tuple(k.KnobIdStr().decode() for k in knobs if k is not None and k.KnobIdStr())

    return _from_details(details, ids)


def memory_location(notes: Iterable[int]) -> str:
    """The memory location ("host", "device" or "unknown": not declared) of behavior notes."""
    notes = tuple(notes)
    if BEHAVIOR_NOTE_DEVICE_MEMORY in notes:
        return "device"
    if BEHAVIOR_NOTE_HOST_MEMORY in notes:
        return "host"
    return "unknown"


def _tensor(uid: int, name: str, data_type: int, dims: list[int]) -> TensorAttributesT:
    t = TensorAttributesT()
    t.uid, t.name, t.dataType, t.dims = uid, name, data_type, dims
    t.strides = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        t.strides[i] = t.strides[i + 1] * dims[i + 1]
    return t


def _packed(name: str, io_type: int, tensors: list[TensorAttributesT], node: NodeT) -> bytes:
    g = GraphT()
    g.name, g.ioDataType, g.intermediateDataType, g.computeDataType = name, io_type, 1, 1  # 1: FLOAT
    g.tensors, g.nodes = tensors, [node]
    builder = flatbuffers.Builder(256)
    builder.Finish(g.Pack(builder))
    return bytes(builder.Output())


@functools.lru_cache(maxsize=1)
def probe_graph() -> bytes:
    """A minimal valid graph (fp32 identity of one element) to ask engines for their details when
    no real graph is at hand. Engines built on the SDK answer details for any well-formed graph."""
    node = NodeT()
    node.name, node.computeDataType = "probe", 1
    node.attributesType = NodeAttributes.PointwiseAttributes
    attrs = PointwiseAttributesT()
    attrs.operation, attrs.in0TensorUid, attrs.out0TensorUid = 23, 1, 2  # 23: IDENTITY
    node.attributes = attrs
    return _packed("memory_probe", 1, [_tensor(1, "x", 1, [1]), _tensor(2, "y", 1, [1])], node)


@functools.lru_cache(maxsize=1)
def sdpa_probe_graph() -> bytes:
    """The smallest attention a GPU engine serves (fp16, one head of dim 64, one query and key):
    asked of device engines to learn whether they can run on this machine at all."""
    node = NodeT()
    node.name, node.computeDataType = "probe", 1
    node.attributesType = NodeAttributes.SdpaAttributes
    attrs = SdpaAttributesT()
    attrs.qTensorUid, attrs.kTensorUid, attrs.vTensorUid, attrs.oTensorUid = 1, 2, 3, 4
    node.attributes = attrs
    tensors = [_tensor(uid, name, 2, [1, 1, 1, 64]) for uid, name in enumerate("qkvo", start=1)]  # 2: HALF
    tensors[3].virtual = False
    return _packed("device_probe", 2, tensors, node)


def serialized_engine_config(engine_id: int, knobs: Sequence[tuple[str, int]] = ()) -> bytes:
    """The EngineConfig buffer plugins are handed for ``engine_id``, with integer ``knobs`` (knob id,
    value) set (only knobs the engine declares: ``read_knob_ids``)."""
    config = EngineConfigT()
    config.engineId = engine_id
    if knobs:
        config.knobs = []
        for knob_id, value in knobs:
            setting = KnobSettingT()
            setting.knobId = knob_id
            setting.valueType = KnobValue.IntValue
            setting.value = IntValueT()
            setting.value.value = int(value)
            config.knobs.append(setting)
    builder = flatbuffers.Builder(64)
    builder.Finish(config.Pack(builder))
    return bytes(builder.Output())


#: what the SDK's layer puts before an engine's own reason: the entry, then "engine N cannot run this graph"
_REASON_PREFIX = re.compile(r"^(hipdnnEnginePlugin\w+: )?(engine -?\d+ cannot run this graph: )?")


def _own_words(exc: PluginError) -> str:
    return _REASON_PREFIX.sub("", exc.detail or str(exc), count=1)


def probe_runs_here(plugin: EnginePlugin, engine_ids: Sequence[int]) -> dict[int, str]:
    """engine id -> "" when the engine applies to one of the probe graphs (the SDPA one, then the
    identity), else its reason for the SDPA probe in its own words (the GPU engine: "no GPU
    device"). Whether a device engine can run on this machine, asked without a real graph: an engine
    that serves neither probe graph is taken as unable to run here (rfcs/0004-plugin-loading.md,
    section 9)."""
    wanted = set(engine_ids)
    applies: set[int] = set()
    errors: list[str] = []
    for graph in (sdpa_probe_graph(), probe_graph()):
        try:
            applies.update(set(plugin.applicable_engine_ids(graph)) & wanted)
        except PluginError as exc:
            errors.append(_own_words(exc))
        if applies == wanted:
            break
    out: dict[int, str] = {}
    for engine_id in engine_ids:
        if engine_id in applies:
            out[engine_id] = ""
            continue
        try:
            plugin.workspace_size(serialized_engine_config(engine_id), sdpa_probe_graph())
            out[engine_id] = errors[0] if errors else "it applies to no probe graph and gives no reason"
        except PluginError as exc:
            out[engine_id] = _own_words(exc)
    return out


def probe_engine_memory(plugin: EnginePlugin) -> dict[int, str]:
    """engine id -> memory location, from each engine's details for the probe graph ("unknown"
    where the plugin declines or answers unreadable details)."""
    out: dict[int, str] = {}
    for engine_id in plugin.engine_ids:
        try:
            out[engine_id] = memory_location(read_behavior_notes(plugin.engine_details(engine_id, probe_graph())))
        except (PluginError, ValueError):
            out[engine_id] = "unknown"
    return out


#: location -> rank (lower first) under each preference; a location missing is not admitted.
#: "unknown" is last everywhere: an engine that declares a location is never outranked by one that
#: does not (the execute core checks host/device memory only for engines that declare it).
_RANKS: dict[str, dict[str, int]] = {
    "auto": {"device": 0, "host": 1, "unknown": 2},
    "host": {"host": 0, "unknown": 1},
    "device": {"device": 0, "unknown": 1},
}


def memory_rank(location: str, preference: str) -> int | None:
    """Sort key of an engine of ``location`` under ``preference`` (lower first); None: not admitted."""
    return _RANKS[preference].get(location)


def rank_by_memory(
    items: Sequence[_C], locations: Sequence[str], preference: str
) -> tuple[list[_C], list[tuple[_C, str]]]:
    """``items`` (in load order) ordered by the preference, stable within a rank, and the ones not
    admitted with their location."""
    ranked: list[tuple[int, int, _C]] = []
    dropped: list[tuple[_C, str]] = []
    for i, (item, location) in enumerate(zip(items, locations, strict=True)):
        rank = memory_rank(location, preference)
        if rank is None:
            dropped.append((item, location))
        else:
            ranked.append((rank, i, item))
    ranked.sort(key=lambda r: (r[0], r[1]))
    return [item for _, _, item in ranked], dropped


__all__ = [
    "BEHAVIOR_NOTE_DEVICE_MEMORY",
    "BEHAVIOR_NOTE_HOST_MEMORY",
    "MEMORY_PREFERENCES",
    "memory_location",
    "memory_rank",
    "probe_engine_memory",
    "probe_graph",
    "probe_runs_here",
    "sdpa_probe_graph",
    "serialized_engine_config",
    "rank_by_memory",
    "read_behavior_notes",
    "read_knob_ids",
]
