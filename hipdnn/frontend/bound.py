"""Pre-bound execute: the serving loop's fast path.

``Graph.execute`` checks everything on every call. A :class:`BoundExecute` resolves at bind time
everything that does not change between calls (uid order, the plugin entry, the safety-net checks,
each overridable tensor's maxima and declared axis order, the cffi argument arrays), so a call only
writes pointers and override values into per-thread arrays and calls the plugin.

Pointers are trusted here (bare ints, no bounds check); override values are still checked against
the declared maxima, positivity and axis order, because a plugin must never be handed a shape that
lets it read or write out of bounds of what the graph declared.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hipdnn.backend import BackendHandle, ExecutionPlanDescriptor
from hipdnn.frontend.overrides import axis_order
from hipdnn.frontend.tensor import TensorAttributes
from hipdnn.frontend.types import ErrorCode, HipdnnError
from hipdnn.plugins.loader import ffi

if TYPE_CHECKING:
    from hipdnn.frontend.graph import Graph

_SUCCESS = 0
_UNBOUNDED = (1 << 63) - 1


def _uid_of(key: int | TensorAttributes, graph: Graph) -> int:
    if isinstance(key, TensorAttributes):
        uid = key.get_uid()
        if uid is None or graph.tensor_by_uid(uid) is not key:
            raise HipdnnError(ErrorCode.INVALID_VALUE, f"tensor {key.get_name()!r} is not a tensor of this graph")
        return uid
    if isinstance(key, bool) or not isinstance(key, int):
        raise HipdnnError(ErrorCode.INVALID_VALUE, f"{key!r} is neither a tensor nor a uid")
    return key


class _Scratch:
    """One thread's cffi argument arrays, allocated once."""

    def __init__(self, uids: Sequence[int], ranks: Sequence[int], override_uids: Sequence[int]) -> None:
        n = len(uids)
        self.buffers = ffi.new("hipdnnPluginDeviceBuffer_t[]", max(n, 1))
        for i, uid in enumerate(uids):
            self.buffers[i].uid = uid
        # The same memory seen as (uid, ptr) integer pairs: writing ints is cheaper than casting.
        self.words = ffi.cast("uint64_t*", self.buffers)
        total = sum(ranks)
        self.shapes = ffi.new("int64_t[]", max(total, 1))
        self.strides = ffi.new("int64_t[]", max(total, 1))
        count = len(override_uids)
        self.override_uids = ffi.new("int64_t[]", list(override_uids) or [0])
        self.lengths = ffi.new("uint32_t[]", list(ranks) or [0])
        self.shape_ptrs = ffi.new("int64_t*[]", max(count, 1))
        self.stride_ptrs = ffi.new("int64_t*[]", max(count, 1))
        offset = 0
        for i, rank in enumerate(ranks):
            self.shape_ptrs[i] = self.shapes + offset
            self.stride_ptrs[i] = self.strides + offset
            offset += rank
        self.workspace_int = 0
        self.workspace = ffi.NULL


class BoundExecute:
    """Call as ``bound(ptrs, workspace=0, override_shapes=None, override_strides=None)``."""

    def __init__(
        self,
        graph: Graph,
        plan: ExecutionPlanDescriptor,
        handle: BackendHandle,
        uids: Sequence[int | TensorAttributes],
        override_uids: Sequence[int | TensorAttributes] = (),
    ) -> None:
        built = graph._built_tensors
        order = [_uid_of(u, graph) for u in uids]
        if len(set(order)) != len(order):
            raise HipdnnError(ErrorCode.INVALID_VALUE, "bind: a uid appears twice")
        for uid in order:
            info = built.get(uid)
            if info is None:
                raise HipdnnError(ErrorCode.INVALID_VALUE, f"bind: uid {uid} is not a tensor of this graph")
            if info.is_virtual:
                raise HipdnnError(ErrorCode.INVALID_VALUE, f"bind: tensor {info.name!r} (uid {uid}) is virtual")
        missing = [t.name for u, t in built.items() if not t.is_virtual and u not in order]
        if missing:
            raise HipdnnError(ErrorCode.INVALID_VALUE, f"bind: no pointer slot for tensor(s) {missing}")
        o_uids = [_uid_of(u, graph) for u in override_uids]
        if len(set(o_uids)) != len(o_uids):
            raise HipdnnError(ErrorCode.INVALID_VALUE, "bind: an override uid appears twice")
        plugin = plan.plugin
        assert plugin is not None
        if o_uids:
            if not graph.is_override_shape_enabled():
                raise HipdnnError(
                    ErrorCode.INVALID_VALUE,
                    f"graph {graph.name!r} was built without set_override_shape_enabled(True); overrides refused",
                )
            if not plugin.supports_overrides():
                raise HipdnnError(
                    ErrorCode.GRAPH_NOT_SUPPORTED, f"plugin {plugin.name!r} cannot execute with overrides"
                )
        # Per override: (uid, rank, upper bounds with wildcards unbounded, outer-to-inner axis picker).
        self._specs: list[tuple[int, int, tuple[int, ...], tuple[int, ...]]] = []
        for uid in o_uids:
            info = built.get(uid)
            if info is None or info.is_virtual:
                raise HipdnnError(
                    ErrorCode.INVALID_VALUE, f"bind: uid {uid} is not an overridable tensor of this graph"
                )
            bounds = tuple(_UNBOUNDED if d == -1 else d for d in info.dims)
            outer_first = tuple(axis_order(info.strides))  # dynamic strides are an order: larger = outer too
            self._specs.append((uid, len(outer_first), bounds, outer_first))
        self._graph_name = graph.name
        self._plan = plan  # keeps the execution context alive
        self._handle = handle
        self._plugin = plugin
        self._context = plan.context
        self._plugin_handle = plugin.handle
        self._uids = order
        self._override_uids = o_uids
        self._ranks = [rank for _, rank, _, _ in self._specs]
        self._workspace_size = plan.workspace_size
        self._plain = plugin.library._entries["hipdnnEnginePluginExecuteOpGraph"]
        self._with_overrides = plugin.library._entries.get("hipdnnEnginePluginExecuteOpGraphWithOverrides")
        self._local = threading.local()

    @property
    def uids(self) -> list[int]:
        return list(self._uids)

    @property
    def override_uids(self) -> list[int]:
        return list(self._override_uids)

    def _scratch(self) -> _Scratch:
        scratch: _Scratch | None = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = _Scratch(self._uids, self._ranks, self._override_uids)
            self._local.scratch = scratch
        return scratch

    def _check_overrides(self, shapes: Sequence[Sequence[int]], strides: Sequence[Sequence[int]]) -> None:
        # Rules 1 and 4-8, in Graph.execute's order and with its messages. Plain loops: for rank-4
        # tensors they beat map/itemgetter constructions (measured).
        if len(shapes) != len(self._override_uids) or len(strides) != len(self._override_uids):
            raise HipdnnError(
                ErrorCode.INVALID_VALUE,
                f"rule 1 (length consistency): bound for {len(self._override_uids)} overrides, got "
                f"{len(shapes)} shapes and {len(strides)} strides",
            )
        for shape, stride, (uid, rank, bounds, outer_first) in zip(shapes, strides, self._specs):
            if len(shape) != rank or len(stride) != rank:
                raise HipdnnError(ErrorCode.INVALID_VALUE, f"rule 4 (rank mismatch): uid {uid} has rank {rank}")
            if min(shape) <= 0:
                raise HipdnnError(ErrorCode.INVALID_VALUE, f"rule 5 (positive shape): uid {uid} shape {list(shape)}")
            if min(stride) <= 0:
                raise HipdnnError(ErrorCode.INVALID_VALUE, f"rule 6 (positive stride): uid {uid} stride {list(stride)}")
            for d, m in zip(shape, bounds):
                if d > m:
                    raise HipdnnError(
                        ErrorCode.INVALID_VALUE,
                        f"rule 7 (max shape exceeded): uid {uid} shape {list(shape)} exceeds {list(bounds)}",
                    )
            previous = _UNBOUNDED
            for axis in outer_first:
                if shape[axis] != 1:
                    st = stride[axis]
                    if st > previous:
                        raise HipdnnError(
                            ErrorCode.INVALID_VALUE,
                            f"rule 8 (stride order): uid {uid} strides {list(stride)} reorder the layout",
                        )
                    previous = st

    def __call__(
        self,
        ptrs: Sequence[int],
        workspace: int = 0,
        override_shapes: Sequence[Sequence[int]] | None = None,
        override_strides: Sequence[Sequence[int]] | None = None,
    ) -> None:
        if self._handle.closed or self._plan.context is None:
            raise HipdnnError(ErrorCode.INVALID_VALUE, "the handle or plan of this bound execute was released")
        if len(ptrs) != len(self._uids):
            raise HipdnnError(ErrorCode.INVALID_VARIANT_PACK, f"expected {len(self._uids)} pointers, got {len(ptrs)}")
        if self._workspace_size and not workspace:
            raise HipdnnError(ErrorCode.INVALID_VALUE, f"the plan needs a workspace of {self._workspace_size} bytes")
        scratch = self._scratch()
        words = scratch.words
        for i, p in enumerate(ptrs):
            if not p:
                raise HipdnnError(ErrorCode.INVALID_VARIANT_PACK, f"null pointer for uid {self._uids[i]}")
            words[2 * i + 1] = p
        if workspace != scratch.workspace_int:
            scratch.workspace = ffi.cast("void*", workspace)
            scratch.workspace_int = workspace
        if self._override_uids and override_shapes is not None:
            self._check_overrides(override_shapes, override_strides or ())
            flat_shapes = [d for s in override_shapes for d in s]
            flat_strides = [d for s in override_strides or () for d in s]
            scratch.shapes[0 : len(flat_shapes)] = flat_shapes
            scratch.strides[0 : len(flat_strides)] = flat_strides
            assert self._with_overrides is not None  # bind() refused plugins without the entry
            status = self._with_overrides(
                self._plugin_handle,
                self._context,
                scratch.workspace,
                scratch.buffers,
                len(self._uids),
                len(self._override_uids),
                scratch.override_uids,
                scratch.lengths,
                scratch.shape_ptrs,
                scratch.stride_ptrs,
            )
            entry = "hipdnnEnginePluginExecuteOpGraphWithOverrides"
        else:
            if override_shapes is not None or override_strides is not None:
                raise HipdnnError(ErrorCode.INVALID_VALUE, "override values given, but no override uids were bound")
            status = self._plain(
                self._plugin_handle, self._context, scratch.workspace, scratch.buffers, len(self._uids)
            )
            entry = "hipdnnEnginePluginExecuteOpGraph"
        if status != _SUCCESS:
            raise HipdnnError(
                ErrorCode.HIPDNN_BACKEND_ERROR,
                f"executing graph {self._graph_name!r}: plugin {self._plugin.name!r}: {entry} failed with status "
                f"{int(status)}: {self._plugin.library.last_error()}",
            )

    def __repr__(self) -> str:
        return f"BoundExecute(graph={self._graph_name!r}, uids={self._uids}, override_uids={self._override_uids})"


__all__ = ["BoundExecute"]
