"""Backend descriptors, shaped like hipDNN's backend C API.

Each descriptor is created empty, filled with typed ``set_attribute`` calls,
``finalize``d (which validates it and does its work: asking plugins, creating
execution contexts) and then read with ``get_attribute``. Failures raise
:class:`BackendError` carrying a :class:`Status`, as the C API would return it.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from packaging.version import Version

from hipdnn.backend.enums import AttributeName, AttributeType, BackendError, DescriptorType, HeurMode, Status
from hipdnn.backend.execute_core import LOCATION_CODES, PlanCore
from hipdnn.backend.graph_summary import GraphDecodeError, GraphSummary, TensorInfo, summarize, with_override_flag
from hipdnn.backend.handle import BackendHandle
from hipdnn.backend.placement import (
    memory_location,
    memory_rank,
    rank_by_memory,
    read_behavior_notes,
    read_knob_ids,
    serialized_engine_config,
)
from hipdnn.plugins import OVERRIDE_API_VERSION, EnginePlugin, PluginError
from hipdnn.wire.TensorAttributes import TensorAttributesT

A = AttributeName
T = AttributeType


@dataclass(frozen=True)
class _Spec:
    attr_type: AttributeType
    many: bool = False
    writable: bool = True


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


#: the most elements an array attribute takes: far above any rank, tensor count or override payload,
#: and a bound on what an endless (or lying) sequence can make set_attribute read
MAX_ATTRIBUTE_ELEMENTS = 1 << 22


def _attribute_name(name: Any) -> AttributeName:
    """``name`` as an AttributeName (a plain int of one is taken); anything else is BAD_PARAM."""
    if isinstance(name, AttributeName):
        return name
    if isinstance(name, int) and not isinstance(name, bool):
        with contextlib.suppress(ValueError):
            return AttributeName(operator.index(name))
    raise BackendError(Status.BAD_PARAM, f"{name!r} is not an AttributeName")


def _check_element(attr_type: AttributeType, value: Any, name: AttributeName) -> Any:
    """The value as stored: integers as exact ints (an int subclass's own comparisons and arithmetic
    would otherwise decide the range checks here and at finalize), floats as floats."""
    ok: bool
    if attr_type in (T.INT64, T.DATA_TYPE, T.HEUR_MODE, T.VOID_PTR):
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok:
            value = operator.index(value)  # an exact int of the subclass's value; its __index__ is not called
            low, high = (0, (1 << 64) - 1) if attr_type is T.VOID_PTR else (_INT64_MIN, _INT64_MAX)
            ok = low <= value <= high
    elif attr_type is T.BOOLEAN:
        ok = isinstance(value, bool)
    elif attr_type in (T.FLOAT, T.DOUBLE):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif attr_type is T.CHAR:
        ok = isinstance(value, str)
    elif attr_type is T.HANDLE:
        ok = isinstance(value, BackendHandle)
    elif attr_type is T.BACKEND_DESCRIPTOR:
        ok = isinstance(value, Descriptor)
    else:
        ok = True
    if not ok:
        raise BackendError(Status.BAD_PARAM, f"{name.name}: value {value!r} is not a valid {attr_type.name}")
    return value


_INT_TYPE = {int}


def _fast_integers(attr_type: AttributeType, items: list[Any]) -> bool:
    """True when every item is a plain int in range for an integer attribute (the common case, checked
    without a Python call per element); False sends the caller to the per-element check."""
    if attr_type not in (T.INT64, T.VOID_PTR) or not items:
        return False
    if set(map(type, items)) != _INT_TYPE:  # checked in C, not per element
        return False
    low, high = (_INT64_MIN, _INT64_MAX) if attr_type is T.INT64 else (0, (1 << 64) - 1)
    return bool(low <= min(items) and max(items) <= high)


class Descriptor:
    """Base of every backend descriptor."""

    descriptor_type: ClassVar[DescriptorType] = DescriptorType.INVALID_TYPE_EXT
    specs: ClassVar[dict[AttributeName, _Spec]] = {}

    def __init__(self) -> None:
        self._values: dict[AttributeName, list[Any]] = {}
        self.finalized = False

    def set_attribute(self, name: AttributeName, attr_type: AttributeType, values: Any) -> None:
        name = _attribute_name(name)
        if self.finalized:
            raise BackendError(Status.BAD_PARAM, f"{self.descriptor_type.name} is finalized; {name.name} is frozen")
        spec = self.specs.get(name)
        if spec is None or not spec.writable:
            raise BackendError(Status.BAD_PARAM, f"{name.name} cannot be set on {self.descriptor_type.name}")
        if attr_type != spec.attr_type:
            shown = attr_type.name if isinstance(attr_type, AttributeType) else repr(attr_type)
            raise BackendError(Status.BAD_PARAM, f"{name.name} takes {spec.attr_type.name}, not {shown}")
        if spec.many:
            if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
                raise BackendError(Status.BAD_PARAM, f"{name.name} takes a sequence of {spec.attr_type.name}")
            try:
                # bounded: never list(values), which trusts __len__ for its allocation and __iter__ to end
                items = list(itertools.islice(iter(values), MAX_ATTRIBUTE_ELEMENTS + 1))
            except Exception as exc:
                raise BackendError(Status.BAD_PARAM, f"{name.name}: cannot read the sequence ({exc!r})") from exc
            if len(items) > MAX_ATTRIBUTE_ELEMENTS:
                raise BackendError(
                    Status.BAD_PARAM, f"{name.name} takes at most {MAX_ATTRIBUTE_ELEMENTS} values; more were given"
                )
            if not _fast_integers(spec.attr_type, items):
                items = [_check_element(spec.attr_type, v, name) for v in items]
        else:
            if isinstance(values, (list, tuple)):
                if len(values) != 1:
                    raise BackendError(Status.BAD_PARAM, f"{name.name} takes exactly one value")
                values = values[0]
            items = [_check_element(spec.attr_type, values, name)]
        self._values[name] = items

    def has_attribute(self, name: AttributeName) -> bool:
        return name in self._values

    def get_attribute(self, name: AttributeName) -> Any:
        """The attribute's value: a list for array attributes, else a scalar."""
        name = _attribute_name(name)
        if not self.finalized:
            raise BackendError(Status.BAD_PARAM_NOT_FINALIZED, f"{self.descriptor_type.name} is not finalized")
        spec = self.specs.get(name)
        if spec is None:
            raise BackendError(Status.BAD_PARAM, f"{name.name} is not an attribute of {self.descriptor_type.name}")
        if name not in self._values:
            raise BackendError(Status.BAD_PARAM, f"{name.name} was never set")
        items = self._values[name]
        return list(items) if spec.many else items[0]

    def _get(self, name: AttributeName, default: Any = None) -> Any:
        items = self._values.get(name)
        if items is None:
            return default
        return list(items) if self.specs[name].many else items[0]

    def _require(self, name: AttributeName) -> Any:
        if name not in self._values:
            raise BackendError(Status.BAD_PARAM, f"{self.descriptor_type.name} needs {name.name} before finalize")
        return self._get(name)

    def _set_computed(self, name: AttributeName, value: Any) -> None:
        self._values[name] = list(value) if self.specs[name].many else [value]

    def finalize(self) -> None:
        if self.finalized:
            raise BackendError(Status.BAD_PARAM, f"{self.descriptor_type.name} is already finalized")
        self._finalize()
        self.finalized = True

    def _finalize(self) -> None:
        raise NotImplementedError


def _require_finalized(desc: Any, cls: type[Descriptor], what: str) -> Any:
    if not isinstance(desc, cls):
        raise BackendError(Status.BAD_PARAM, f"{what} must be a {cls.descriptor_type.name}")
    if not desc.finalized:
        raise BackendError(Status.BAD_PARAM_NOT_FINALIZED, f"{what} is not finalized")
    return desc


# -- tensors ---------------------------------------------------------------------------------
class TensorDescriptor(Descriptor):
    descriptor_type = DescriptorType.TENSOR_DESCRIPTOR
    specs = {
        A.TENSOR_UNIQUE_ID: _Spec(T.INT64),
        A.TENSOR_NAME_EXT: _Spec(T.CHAR),
        A.TENSOR_DATA_TYPE: _Spec(T.DATA_TYPE),
        A.TENSOR_DIMENSIONS: _Spec(T.INT64, many=True),
        A.TENSOR_STRIDES: _Spec(T.INT64, many=True),
        A.TENSOR_IS_VIRTUAL: _Spec(T.BOOLEAN),
        A.TENSOR_IS_DYNAMIC_EXT: _Spec(T.BOOLEAN),
    }

    def _finalize(self) -> None:
        self._require(A.TENSOR_UNIQUE_ID)
        self._require(A.TENSOR_DATA_TYPE)
        dims = self._require(A.TENSOR_DIMENSIONS)
        strides = self._require(A.TENSOR_STRIDES)
        if len(dims) != len(strides) or not dims:
            raise BackendError(Status.BAD_PARAM, f"rank mismatch: {len(dims)} dims, {len(strides)} strides")
        if self._get(A.TENSOR_IS_DYNAMIC_EXT, False):
            # dims: positive or -1 (given at execute); strides: an axis order, lower = inner
            if any(d <= 0 and d != -1 for d in dims):
                raise BackendError(Status.BAD_PARAM, f"dynamic dims {dims} must be positive or -1")
            if sorted(strides) != list(range(len(strides))):
                raise BackendError(
                    Status.BAD_PARAM, f"dynamic strides {strides} must be an axis order 0..{len(strides) - 1}"
                )
        elif any(d <= 0 for d in dims) or any(s <= 0 for s in strides):
            raise BackendError(Status.BAD_PARAM, f"dims {dims} and strides {strides} must be positive")
        self._values.setdefault(A.TENSOR_IS_VIRTUAL, [False])
        self._values.setdefault(A.TENSOR_IS_DYNAMIC_EXT, [False])
        self._values.setdefault(A.TENSOR_NAME_EXT, [""])

    def to_wire(self) -> TensorAttributesT:
        """The finalized tensor as a wire table (what a graph buffer carries)."""
        if not self.finalized:
            raise BackendError(Status.BAD_PARAM_NOT_FINALIZED, "TENSOR_DESCRIPTOR is not finalized")
        t = TensorAttributesT()
        t.uid = self._get(A.TENSOR_UNIQUE_ID)
        t.name = self._get(A.TENSOR_NAME_EXT)
        t.dataType = self._get(A.TENSOR_DATA_TYPE)
        t.dims = self._get(A.TENSOR_DIMENSIONS)
        t.strides = self._get(A.TENSOR_STRIDES)
        t.virtual = self._get(A.TENSOR_IS_VIRTUAL)
        t.isDynamic = self._get(A.TENSOR_IS_DYNAMIC_EXT)
        return t

    @classmethod
    def from_info(cls, info: TensorInfo) -> TensorDescriptor:
        """A finalized descriptor for a tensor read from a graph buffer."""
        desc = cls()
        desc.set_attribute(A.TENSOR_UNIQUE_ID, T.INT64, info.uid)
        desc.set_attribute(A.TENSOR_NAME_EXT, T.CHAR, info.name)
        desc.set_attribute(A.TENSOR_DATA_TYPE, T.DATA_TYPE, info.data_type)
        desc.set_attribute(A.TENSOR_DIMENSIONS, T.INT64, list(info.dims))
        desc.set_attribute(A.TENSOR_STRIDES, T.INT64, list(info.strides))
        desc.set_attribute(A.TENSOR_IS_VIRTUAL, T.BOOLEAN, info.is_virtual)
        desc.set_attribute(A.TENSOR_IS_DYNAMIC_EXT, T.BOOLEAN, info.is_dynamic)
        desc.finalize()
        return desc


# -- operation graph -------------------------------------------------------------------------
class OperationGraphDescriptor(Descriptor):
    """A graph lowered from the frontend as its serialized FlatBuffer (cf. hipDNN's
    hipdnnBackendCreateAndDeserializeGraph_ext), plus the handle and graph flags."""

    descriptor_type = DescriptorType.OPERATIONGRAPH_DESCRIPTOR
    specs = {
        A.OPERATIONGRAPH_HANDLE: _Spec(T.HANDLE),
        A.OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT: _Spec(T.BOOLEAN),
        A.OPERATIONGRAPH_PREFERRED_ENGINE_ID_EXT: _Spec(T.INT64),
        A.OPERATIONGRAPH_NAME_EXT: _Spec(T.CHAR, writable=False),
        A.OPERATIONGRAPH_COMPUTE_DATA_TYPE_EXT: _Spec(T.DATA_TYPE, writable=False),
        A.OPERATIONGRAPH_INTERMEDIATE_DATA_TYPE_EXT: _Spec(T.DATA_TYPE, writable=False),
        A.OPERATIONGRAPH_IO_DATA_TYPE_EXT: _Spec(T.DATA_TYPE, writable=False),
        A.OPERATIONGRAPH_ENGINE_GLOBAL_COUNT: _Spec(T.INT64, writable=False),
    }

    def __init__(self, serialized_graph: bytes) -> None:
        super().__init__()
        self.serialized_graph = bytes(serialized_graph)
        self.summary: GraphSummary | None = None
        self.required_api_version: Version | None = None

    @property
    def handle(self) -> BackendHandle:
        handle: BackendHandle = self._require(A.OPERATIONGRAPH_HANDLE)
        return handle

    @property
    def preferred_engine_id(self) -> int | None:
        """The engine the graph asks for (the attribute, else the buffer's field), or None."""
        engine_id: int | None = self._get(A.OPERATIONGRAPH_PREFERRED_ENGINE_ID_EXT)
        return engine_id

    def tensor_descriptors(self) -> list[TensorDescriptor]:
        """The graph's tensors as finalized backend tensor descriptors, in buffer order."""
        if self.summary is None:
            raise BackendError(Status.BAD_PARAM_NOT_FINALIZED, "OPERATIONGRAPH_DESCRIPTOR is not finalized")
        return [TensorDescriptor.from_info(info) for info in self.summary.tensors.values()]

    def _finalize(self) -> None:
        handle = self.handle
        if handle.closed:
            raise BackendError(Status.BAD_PARAM, "the handle is closed: its plugin instances were destroyed")
        try:
            summary = summarize(self.serialized_graph)
        except GraphDecodeError as exc:
            raise BackendError(Status.BAD_PARAM, str(exc)) from None
        flag = self._get(A.OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT)
        if flag is not None and flag != summary.is_override_shape_enabled:
            # The attribute is authoritative: plugins read the flag from the buffer.
            self.serialized_graph = with_override_flag(self.serialized_graph, flag)
            summary = summarize(self.serialized_graph)
        self.summary = summary
        self.required_api_version = summary.required_api_version()
        self._set_computed(A.OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT, summary.is_override_shape_enabled)
        self._set_computed(A.OPERATIONGRAPH_NAME_EXT, summary.name)
        self._set_computed(A.OPERATIONGRAPH_COMPUTE_DATA_TYPE_EXT, summary.compute_data_type)
        self._set_computed(A.OPERATIONGRAPH_INTERMEDIATE_DATA_TYPE_EXT, summary.intermediate_data_type)
        self._set_computed(A.OPERATIONGRAPH_IO_DATA_TYPE_EXT, summary.io_data_type)
        self._set_computed(A.OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, len(handle.engine_to_plugin))
        if summary.preferred_engine_id is not None and not self.has_attribute(A.OPERATIONGRAPH_PREFERRED_ENGINE_ID_EXT):
            self._set_computed(A.OPERATIONGRAPH_PREFERRED_ENGINE_ID_EXT, summary.preferred_engine_id)


# -- engines and configs ---------------------------------------------------------------------
# Behavior notes and memory locations live in hipdnn.backend.placement.


@dataclass
class PluginVerdict:
    """What one plugin said (or why it was not asked) about one graph."""

    plugin: str
    api_version: str
    verdict: str
    engine_ids: list[int] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.plugin} (api {self.api_version}): {self.verdict}"


class EngineDescriptor(Descriptor):
    descriptor_type = DescriptorType.ENGINE_DESCRIPTOR
    specs = {
        A.ENGINE_OPERATION_GRAPH: _Spec(T.BACKEND_DESCRIPTOR),
        A.ENGINE_GLOBAL_INDEX: _Spec(T.INT64),
    }

    def __init__(self) -> None:
        super().__init__()
        self.plugin: EnginePlugin | None = None
        self.details: bytes = b""
        self.behavior_notes: tuple[int, ...] = ()
        #: the knob ids the engine declares in its details
        self.knob_ids: tuple[str, ...] = ()

    @property
    def operation_graph(self) -> OperationGraphDescriptor:
        graph: OperationGraphDescriptor = self._require(A.ENGINE_OPERATION_GRAPH)
        return graph

    def _finalize(self) -> None:
        graph = _require_finalized(self._require(A.ENGINE_OPERATION_GRAPH), OperationGraphDescriptor, "graph")
        engine_id = self._require(A.ENGINE_GLOBAL_INDEX)
        plugin = graph.handle.engine_to_plugin.get(engine_id)
        if plugin is None:
            raise BackendError(Status.BAD_PARAM, f"no loaded plugin provides engine {engine_id}")
        if plugin.api_version < graph.required_api_version:
            raise BackendError(
                Status.NOT_SUPPORTED,
                f"engine {engine_id} of plugin {plugin.name!r}: api {plugin.api_version} "
                f"< required {graph.required_api_version}",
            )
        try:
            self.details = plugin.engine_details(engine_id, graph.serialized_graph)
        except PluginError as exc:
            raise BackendError(Status.PLUGIN_ERROR, str(exc)) from None
        try:
            self.behavior_notes = read_behavior_notes(self.details)
            self.knob_ids = read_knob_ids(self.details)
        except ValueError as exc:
            raise BackendError(
                Status.PLUGIN_ERROR, f"plugin {plugin.name!r} returned unreadable engine details: {exc}"
            ) from None
        self.plugin = plugin

    @property
    def memory_location(self) -> str:
        """Where the engine expects tensor memory: "host", "device" or "unknown" (not declared)."""
        return memory_location(self.behavior_notes)


class PreferredEngineError(BackendError):
    """The graph's preferred engine cannot be honoured. ``status`` is BAD_PARAM when no loaded plugin
    provides the engine, NOT_SUPPORTED when it is refused; ``reason`` says why, in the plugin's own
    words where it gave any. hipdnn never substitutes another engine for a preferred one."""

    def __init__(self, status: Status, engine_id: int, reason: str) -> None:
        self.engine_id = engine_id
        self.reason = reason
        super().__init__(status, reason)


class EngineConfigDescriptor(Descriptor):
    descriptor_type = DescriptorType.ENGINECFG_DESCRIPTOR
    specs = {
        A.ENGINECFG_ENGINE: _Spec(T.BACKEND_DESCRIPTOR),
        A.ENGINECFG_WORKSPACE_SIZE: _Spec(T.INT64, writable=False),
    }

    def __init__(self) -> None:
        super().__init__()
        self.serialized_config = b""

    @property
    def engine(self) -> EngineDescriptor:
        engine: EngineDescriptor = self._require(A.ENGINECFG_ENGINE)
        return engine

    @property
    def engine_id(self) -> int:
        engine_id: int = self.engine._get(A.ENGINE_GLOBAL_INDEX)
        return engine_id

    def _finalize(self) -> None:
        engine = _require_finalized(self._require(A.ENGINECFG_ENGINE), EngineDescriptor, "engine")
        # the handle's knob settings that this engine declares (Handle(cpu_threads=...) and the like)
        wanted = engine.operation_graph.handle.engine_knobs
        knobs = [(knob, wanted[knob]) for knob in engine.knob_ids if knob in wanted]
        self.serialized_config = serialized_engine_config(engine._get(A.ENGINE_GLOBAL_INDEX), knobs)
        assert engine.plugin is not None
        try:
            size = engine.plugin.workspace_size(self.serialized_config, engine.operation_graph.serialized_graph)
        except PluginError as exc:
            raise BackendError(Status.PLUGIN_ERROR, str(exc)) from None
        self._set_computed(A.ENGINECFG_WORKSPACE_SIZE, size)


class EngineHeurDescriptor(Descriptor):
    """Finalize asks every eligible plugin which of its engines apply (spec 4.5): plugins whose API
    version is below the graph's requirement are skipped without being asked. The results rank
    engines by the memory they declare under the handle's device, then by load order; engines that
    declare none come last. A graph with a preferred engine gets that engine's config alone, or
    PreferredEngineError saying why it cannot have it (rfcs/0004-plugin-loading.md, section 9)."""

    descriptor_type = DescriptorType.ENGINEHEUR_DESCRIPTOR
    specs = {
        A.ENGINEHEUR_OPERATION_GRAPH: _Spec(T.BACKEND_DESCRIPTOR),
        A.ENGINEHEUR_MODE: _Spec(T.HEUR_MODE),
        A.ENGINEHEUR_RESULTS: _Spec(T.BACKEND_DESCRIPTOR, many=True, writable=False),
    }

    def __init__(self) -> None:
        super().__init__()
        self.verdicts: list[PluginVerdict] = []

    def _finalize(self) -> None:
        graph = _require_finalized(self._require(A.ENGINEHEUR_OPERATION_GRAPH), OperationGraphDescriptor, "graph")
        mode = self._get(A.ENGINEHEUR_MODE, int(HeurMode.FALLBACK))
        if mode not in set(HeurMode):
            raise BackendError(Status.BAD_PARAM, f"unknown heuristic mode {mode}")
        required = graph.required_api_version
        assert required is not None
        handle = graph.handle
        preferred = graph.preferred_engine_id
        if preferred is not None and preferred not in handle.engine_to_plugin:
            raise PreferredEngineError(Status.BAD_PARAM, preferred, unknown_engine_text(handle, preferred))
        engine_ids: list[int] = []
        # per plugin (by position in handle.plugins): its verdict, and the error its query raised
        verdicts: list[PluginVerdict] = []
        query_errors: dict[int, PluginError] = {}
        for index, plugin in enumerate(handle.plugins):
            verdict = PluginVerdict(plugin.name, str(plugin.api_version), "")
            self.verdicts.append(verdict)
            verdicts.append(verdict)
            if plugin.api_version < required:
                verdict.verdict = f"api {plugin.api_version} < required {required}"
                continue
            try:
                found = plugin.applicable_engine_ids(graph.serialized_graph)
            except PluginError as exc:
                verdict.verdict = f"error: {exc}"
                query_errors[index] = exc
                continue
            verdict.engine_ids = found
            verdict.verdict = f"applicable engines {found}" if found else "not applicable"
            engine_ids.extend(found)
        if preferred is not None:
            # An explicit choice: that engine's config alone, or an error saying why not.
            config = self._preferred_config(graph, preferred, engine_ids, verdicts, query_errors)
            self._set_computed(A.ENGINEHEUR_RESULTS, [config])
            return
        configs: list[EngineConfigDescriptor] = []
        for engine_id in engine_ids:
            try:
                config = make_engine_config(graph, engine_id)
            except BackendError as exc:
                for v in self.verdicts:
                    if engine_id in v.engine_ids:
                        v.verdict += f"; engine {engine_id} dropped: {exc.message}"
                continue
            configs.append(config)
        # Engines that declare where their memory lives rank before those that do not, and the
        # handle's device ranks them before load order; "cpu"/"cuda" also drop the other kind.
        preference = handle.memory_preference
        configs, dropped = rank_by_memory(configs, [c.engine.memory_location for c in configs], preference)
        if not configs:
            self._explain_refusals(handle, graph, verdicts)
        for config, location in dropped:
            for v in self.verdicts:
                if config.engine_id in v.engine_ids:
                    v.verdict += (
                        f"; engine {config.engine_id} left out: it takes {location} memory and the handle's "
                        f"device is {handle.device_name!r}"
                    )
        self._set_computed(A.ENGINEHEUR_RESULTS, configs)

    @staticmethod
    def _explain_refusals(handle: Any, graph: OperationGraphDescriptor, verdicts: list[PluginVerdict]) -> None:
        """Nothing will run the graph: each engine of a plugin that answered "not applicable" is
        asked why (its own reason, e.g. "engine 202: head dim 192 not served (8-128 in steps of 8)"), so that
        the GRAPH_NOT_SUPPORTED message says it, not only the log. Only on this error path."""
        for plugin, verdict in zip(handle.plugins, verdicts):
            if verdict.verdict != "not applicable":
                continue
            reasons = [
                f"engine {engine_id}: {_not_applicable_reason(plugin, engine_id, graph)}"
                for engine_id in plugin.engine_ids
            ]
            if reasons:
                verdict.verdict += " (" + "; ".join(reasons) + ")"

    def _preferred_config(
        self,
        graph: OperationGraphDescriptor,
        preferred: int,
        applicable: list[int],
        verdicts: list[PluginVerdict],
        query_errors: dict[int, PluginError],
    ) -> EngineConfigDescriptor:
        """The config of the graph's preferred engine, or PreferredEngineError (NOT_SUPPORTED) naming
        the engine, its plugin and why it cannot serve the graph. No other engine is tried."""
        handle = graph.handle
        plugin = handle.engine_to_plugin[preferred]
        index = next(i for i, p in enumerate(handle.plugins) if p is plugin)
        required = graph.required_api_version
        assert required is not None
        reason = ""
        config: EngineConfigDescriptor | None = None
        if plugin.api_version < required:
            reason = (
                f"its plugin reports api {plugin.api_version} and this graph needs {required} "
                f"({_api_need(graph)}); the plugin is not asked"
            )
        elif index in query_errors:
            reason = f"asking its plugin which engines apply failed: {query_errors[index]}"
        elif preferred not in applicable:
            why = _not_applicable_reason(plugin, preferred, graph)
            reason = f"the plugin reports it not applicable to this graph: {why}"
        else:
            try:
                config = make_engine_config(graph, preferred)
            except BackendError as exc:
                reason = exc.message
        if config is not None:
            location = config.engine.memory_location
            if memory_rank(location, handle.memory_preference) is not None:
                return config
            reason = (
                f"it takes {location} memory and the handle's device is {handle.device_name!r} "
                "(create the handle with a device that admits it, or leave preferred_engine_id unset)"
            )
        verdicts[index].verdict += f"; preferred engine {preferred} refused: {reason}"
        raise PreferredEngineError(
            Status.NOT_SUPPORTED,
            preferred,
            f"preferred engine {preferred} (plugin {plugin.name!r}) cannot serve this graph: {reason}",
        )

    def report(self) -> str:
        graph = self._get(A.ENGINEHEUR_OPERATION_GRAPH)
        parts = [str(v) for v in self.verdicts]
        if graph is not None:
            parts += [f"{s.path.name}: skipped at load ({s.reason})" for s in graph.handle.skipped]
        return "; ".join(parts) or "no plugins loaded"


def make_engine_config(graph: OperationGraphDescriptor, engine_id: int) -> EngineConfigDescriptor:
    """A finalized config of ``engine_id`` for ``graph`` (its details read, its workspace asked);
    BackendError when the engine's plugin refuses either."""
    engine = EngineDescriptor()
    engine.set_attribute(A.ENGINE_OPERATION_GRAPH, T.BACKEND_DESCRIPTOR, graph)
    engine.set_attribute(A.ENGINE_GLOBAL_INDEX, T.INT64, engine_id)
    engine.finalize()
    config = EngineConfigDescriptor()
    config.set_attribute(A.ENGINECFG_ENGINE, T.BACKEND_DESCRIPTOR, engine)
    config.finalize()
    return config


def unknown_engine_text(handle: BackendHandle, engine_id: int) -> str:
    """Why ``engine_id`` cannot be preferred on ``handle``: no loaded plugin provides it. Lists the
    engine ids loaded, by plugin, and the plugins skipped at load (one of them may have had it)."""
    ids = sorted(handle.engine_to_plugin)
    by_plugin = ", ".join(f"{p.name} {list(p.engine_ids)}" for p in handle.plugins)
    text = f"preferred engine {engine_id}: no loaded plugin provides it; engine ids loaded: {ids}"
    if by_plugin:
        text += f" ({by_plugin})"
    if handle.skipped:
        text += "; skipped at load: " + "; ".join(f"{s.path.name} ({s.reason})" for s in handle.skipped)
    return text


def _api_need(graph: OperationGraphDescriptor) -> str:
    summary = graph.summary
    if summary is not None and summary.has_fp8_backward:
        return "it has an FP8 attention backward (sdpa_fp8_backward)"
    if summary is not None and summary.has_fp8:
        return "it has FP8 attention (sdpa_fp8)"
    if summary is not None and summary.has_softcap:
        return "it has score softcapping"
    if summary is not None and summary.has_ragged_or_paged:
        return "it has ragged offsets or paged K/V"
    if summary is not None and summary.has_dynamic_tensors:
        return "it has dynamic tensors"
    if summary is not None and summary.is_override_shape_enabled:
        return "it enables shape overrides"
    return "its features"


def _not_applicable_reason(plugin: EnginePlugin, engine_id: int, graph: OperationGraphDescriptor) -> str:
    """The plugin's own reason for not serving ``graph`` with ``engine_id``, read from its last error
    after asking the engine's workspace size, which plugins refuse for a graph they cannot run (the
    SDK's C++ layer answers NOT_APPLICABLE, "engine N cannot run this graph: ..."). Asked only when
    the engine was preferred or when no engine applies; a plugin that accepts the question gave no
    reason."""
    try:
        plugin.workspace_size(serialized_engine_config(engine_id), graph.serialized_graph)
    except PluginError as exc:
        return exc.detail or str(exc)
    return "it gives no reason"


def override_refusal(plugin: EnginePlugin) -> str:
    """Why ``plugin`` cannot take overrides (spec 4.6 safety net), or "" when it can."""
    if plugin.api_version < OVERRIDE_API_VERSION:
        return (
            f"plugin {plugin.name!r} reports api {plugin.api_version} < {OVERRIDE_API_VERSION}; "
            "it cannot take overrides"
        )
    if not plugin.has_override_execute:
        return (
            f"plugin {plugin.name!r} reports api {plugin.api_version} but does not export "
            "hipdnnEnginePluginExecuteOpGraphWithOverrides"
        )
    return ""


# -- execution plan --------------------------------------------------------------------------
class ExecutionPlanDescriptor(Descriptor):
    """Finalize creates the plugin's execution context; the plan owns it until destroy()."""

    descriptor_type = DescriptorType.EXECUTION_PLAN_DESCRIPTOR
    specs = {
        A.EXECUTION_PLAN_HANDLE: _Spec(T.HANDLE),
        A.EXECUTION_PLAN_ENGINE_CONFIG: _Spec(T.BACKEND_DESCRIPTOR),
        A.EXECUTION_PLAN_WORKSPACE_SIZE: _Spec(T.INT64, writable=False),
        A.OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT: _Spec(T.BOOLEAN, writable=False),
    }

    def __init__(self) -> None:
        super().__init__()
        self.plugin: EnginePlugin | None = None
        self.context: Any = None
        self.engine_id: int | None = None
        self.graph: OperationGraphDescriptor | None = None
        self.is_override_shape_enabled = False
        self.workspace_size = 0
        #: the compiled execute path of this plan (hipdnn.backend.execute_core): everything a call
        #: is checked against, frozen here, and the guard that lets destroy() wait for calls in flight
        self.core: PlanCore | None = None
        self._memory_location = "unknown"

    def _finalize(self) -> None:
        handle = self._require(A.EXECUTION_PLAN_HANDLE)
        config = _require_finalized(self._require(A.EXECUTION_PLAN_ENGINE_CONFIG), EngineConfigDescriptor, "config")
        engine = config.engine
        graph = engine.operation_graph
        if graph.handle is not handle:
            raise BackendError(Status.BAD_PARAM, "the engine config belongs to another handle")
        plugin = engine.plugin
        assert plugin is not None and graph.summary is not None
        try:
            context = plugin.create_execution_context(config.serialized_config, graph.serialized_graph)
        except PluginError as exc:
            raise BackendError(Status.PLUGIN_ERROR, str(exc)) from None
        try:
            size = plugin.workspace_size_from_context(context)
        except PluginError as exc:
            with contextlib.suppress(PluginError):  # the original failure is the one to report
                plugin.destroy_execution_context(context)
            raise BackendError(Status.PLUGIN_ERROR, str(exc)) from None
        self.plugin, self.context, self.engine_id, self.graph = plugin, context, config.engine_id, graph
        self._handle = handle
        self.is_override_shape_enabled = graph.summary.is_override_shape_enabled
        self.workspace_size = size
        self._memory_location = engine.memory_location
        self.core = PlanCore(
            handle.gate,
            plugin.execute_entry_addresses(),
            plugin.address,
            plugin.context_address(context),
            size,
            LOCATION_CODES[engine.memory_location],
            self.is_override_shape_enabled,
            override_refusal(plugin),
            graph.summary.name,
            plugin.name,
            config.engine_id,
            [
                (t.uid, t.name, t.data_type, t.dims, t.strides, t.is_virtual, t.is_dynamic)
                for t in graph.summary.tensors.values()
            ],
        )
        self._set_computed(A.EXECUTION_PLAN_WORKSPACE_SIZE, size)
        self._set_computed(A.OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT, self.is_override_shape_enabled)
        self._context_key = handle.register_context(plugin, context, self.core)

    def tensor_uids(self) -> list[int]:
        """The uids of the plan's tensors, in the order of its graph buffer (the order of the
        compiled core's tensor table)."""
        assert self.graph is not None and self.graph.summary is not None
        return list(self.graph.summary.tensors)

    @property
    def memory_location(self) -> str:
        """Where the engine takes tensor memory: "host", "device" or "unknown" (not declared)."""
        return self._memory_location

    @memory_location.setter
    def memory_location(self, location: str) -> None:
        self._memory_location = location
        if self.core is not None:
            self.core.location = LOCATION_CODES[location]

    def __del__(self) -> None:
        # Safe at any time: the plan keeps its handle (and so the plugin instance) alive.
        with contextlib.suppress(Exception):
            self.destroy()

    def destroy(self) -> None:
        """Destroy the plugin's execution context (idempotent). Calls in flight on other threads are
        waited for; later calls raise HipdnnError."""
        if self.context is not None:
            self._handle.destroy_context(self._context_key)
            self.context = None


# -- variant pack ----------------------------------------------------------------------------
_OVERRIDE_ATTRIBUTES = (
    A.VARIANT_PACK_OVERRIDE_UNIQUE_IDS_EXT,
    A.VARIANT_PACK_OVERRIDE_SHAPES_EXT,
    A.VARIANT_PACK_OVERRIDE_STRIDES_EXT,
    A.VARIANT_PACK_OVERRIDE_LENGTHS_EXT,
)


class VariantPackDescriptor(Descriptor):
    """Per-execute payload: tensor pointers, workspace and (spec 4.3) the flat override payload."""

    descriptor_type = DescriptorType.VARIANT_PACK_DESCRIPTOR
    specs = {
        A.VARIANT_PACK_UNIQUE_IDS: _Spec(T.INT64, many=True),
        A.VARIANT_PACK_DATA_POINTERS: _Spec(T.VOID_PTR, many=True),
        A.VARIANT_PACK_WORKSPACE: _Spec(T.VOID_PTR),
        A.VARIANT_PACK_OVERRIDE_UNIQUE_IDS_EXT: _Spec(T.INT64, many=True),
        A.VARIANT_PACK_OVERRIDE_SHAPES_EXT: _Spec(T.INT64, many=True),
        A.VARIANT_PACK_OVERRIDE_STRIDES_EXT: _Spec(T.INT64, many=True),
        A.VARIANT_PACK_OVERRIDE_LENGTHS_EXT: _Spec(T.INT64, many=True),
    }

    def __init__(self) -> None:
        super().__init__()
        self.buffers: list[tuple[int, int]] = []
        self.workspace = 0
        self.override_uids: list[int] = []
        self.override_lengths: list[int] = []
        self.override_shapes: list[int] = []
        self.override_strides: list[int] = []

    @property
    def has_overrides(self) -> bool:
        return bool(self.override_uids)

    def _finalize(self) -> None:
        uids = self._get(A.VARIANT_PACK_UNIQUE_IDS, [])
        ptrs = self._get(A.VARIANT_PACK_DATA_POINTERS, [])
        if len(uids) != len(ptrs):
            raise BackendError(Status.BAD_PARAM, f"{len(uids)} unique ids but {len(ptrs)} data pointers")
        if len(set(uids)) != len(uids):
            raise BackendError(Status.BAD_PARAM, "duplicate unique ids in the variant pack")
        self.buffers = list(zip(uids, ptrs))
        self.workspace = self._get(A.VARIANT_PACK_WORKSPACE, 0)
        present = [a for a in _OVERRIDE_ATTRIBUTES if self.has_attribute(a)]
        if not present:
            return
        if len(present) != len(_OVERRIDE_ATTRIBUTES):
            missing = [a.name for a in _OVERRIDE_ATTRIBUTES if a not in present]
            raise BackendError(Status.BAD_PARAM, f"override attributes incomplete: missing {', '.join(missing)}")
        o_uids = self._get(A.VARIANT_PACK_OVERRIDE_UNIQUE_IDS_EXT)
        o_shapes = self._get(A.VARIANT_PACK_OVERRIDE_SHAPES_EXT)
        o_strides = self._get(A.VARIANT_PACK_OVERRIDE_STRIDES_EXT)
        o_lengths = self._get(A.VARIANT_PACK_OVERRIDE_LENGTHS_EXT)
        if len(o_lengths) != len(o_uids):
            raise BackendError(Status.BAD_PARAM, f"{len(o_uids)} override uids but {len(o_lengths)} override lengths")
        if any(n <= 0 or n > 0xFFFFFFFF for n in o_lengths):
            raise BackendError(Status.BAD_PARAM, f"override lengths {o_lengths} must be positive ranks")
        total = sum(o_lengths)
        if len(o_shapes) != total or len(o_strides) != total:
            raise BackendError(
                Status.BAD_PARAM,
                f"override lengths add up to {total} but there are {len(o_shapes)} shape and "
                f"{len(o_strides)} stride values",
            )
        if len(set(o_uids)) != len(o_uids):
            raise BackendError(Status.BAD_PARAM, "duplicate uids in the override payload")
        known = set(uids)
        unknown = [u for u in o_uids if u not in known]
        if unknown:
            raise BackendError(Status.BAD_PARAM, f"override uids {unknown} have no data pointer in the pack")
        if any(v <= 0 for v in o_shapes):
            raise BackendError(Status.BAD_PARAM, "override shape values must be positive")
        if any(v <= 0 for v in o_strides):
            raise BackendError(Status.BAD_PARAM, "override stride values must be positive")
        self.override_uids, self.override_lengths = o_uids, o_lengths
        self.override_shapes, self.override_strides = o_shapes, o_strides
