"""hipdnn.Graph: describe, validate, lower, plan and execute an operation graph."""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import flatbuffers

from hipdnn.backend import (
    AttributeName,
    AttributeType,
    BackendError,
    EngineConfigDescriptor,
    EngineHeurDescriptor,
    ExecutionPlanDescriptor,
    OperationGraphDescriptor,
    PreferredEngineError,
    Status,
)
from hipdnn.backend.execute_core import Binding, Executor, strides_overlap
from hipdnn.backend.execute_core import configure as configure_execute_core
from hipdnn.backend.graph_summary import GraphDecodeError, check_decoded_size
from hipdnn.backend.plan_cache import PlanKey
from hipdnn.frontend.args import (
    INT64_MAX,
    INT64_MIN,
    bool_arg,
    enum_arg,
    int_arg,
    number_arg,
    optional_int_arg,
    refuse,
    sequence_arg,
    show,
    str_arg,
)
from hipdnn.frontend.handle import Handle
from hipdnn.frontend.ops import (
    OPERATIONS,
    LayerNormNode,
    MatmulNode,
    Operation,
    PointwiseNode,
    ReductionNode,
    RMSNormNode,
    SdpaBackwardNode,
    SdpaNode,
)
from hipdnn.frontend.ops.attention_options import SdpaAttributes, options_from
from hipdnn.frontend.ops.sdpa_fp8 import SCALE_ROLES, Fp8Scaling
from hipdnn.frontend.ops.sdpa_fp8_backward import BACKWARD_AMAX_ROLES, BACKWARD_SCALE_ROLES, Fp8BackwardScaling
from hipdnn.frontend.ops.shape_rules import ShapeRules
from hipdnn.frontend.overrides import OverrideEntry
from hipdnn.frontend.shortcuts import BinaryShortcut, UnaryShortcut
from hipdnn.frontend.tensor import DYNAMIC_DIM, TensorAttributes, layout_of
from hipdnn.frontend.types import (
    DataType,
    ErrorCode,
    HeurMode,
    HipdnnError,
    NormFwdPhase,
    PointwiseMode,
    ReductionMode,
)
from hipdnn.wire.Graph import Graph as WireGraph
from hipdnn.wire.Graph import GraphT
from hipdnn.wire.Node import NodeT
from hipdnn.wire.TensorAttributes import TensorAttributesT

A = AttributeName
T = AttributeType
_INT64_MAX = (1 << 63) - 1

#: A variant pack: tensors or uids (or both) to buffers. Spelled as a union because a Mapping is
#: invariant in its key type: a ``dict[TensorAttributes, ndarray]`` is not a ``Mapping[TensorAttributes
#: | int, Any]``, but it is a ``Mapping[TensorAttributes, Any]``.
VariantPack = Mapping[TensorAttributes, Any] | Mapping[int, Any] | Mapping[TensorAttributes | int, Any]
#: Overrides as a mapping: tensors or uids (or both) to their shape for one call.
OverrideMapping = (
    Mapping[TensorAttributes, OverrideEntry]
    | Mapping[int, OverrideEntry]
    | Mapping[TensorAttributes | int, OverrideEntry]
)


class _Required:
    """The default of execute's leading arguments, so that a call missing them (or passing them in
    another order) reaches the checks that say so."""

    def __repr__(self) -> str:
        return "<required>"


_REQUIRED: Any = _Required()
#: ``Graph._ready_handle`` while there is no plan: no handle is this object
_NOT_BUILT: Any = _Required()


def _described(value: object) -> str:
    """A value as a refusal shows it: a tensor by name, a mapping by its size, else its repr (cut
    short) and its type."""
    if isinstance(value, TensorAttributes):
        return f"tensor {value.get_name()!r}"
    if isinstance(value, Mapping):
        try:
            return f"a {type(value).__name__} of {len(value)} entries"
        except Exception:  # a hostile __len__ must not replace the error being reported
            return f"a {type(value).__name__}"
    return f"{show(value)} (a {type(value).__name__})"


_EXECUTE_FORM = "g.execute(handle, variant_pack, workspace)"


def _heur_modes(heur_modes: Sequence[HeurMode], what: str) -> list[HeurMode]:
    modes = sequence_arg(heur_modes, what)
    return [enum_arg(HeurMode, m, f"{what}[{i}]") for i, m in enumerate(modes)] or [HeurMode.FALLBACK]


def _check_wire_floats(node_name: str, table: Any) -> None:
    """Every float field of a node's wire table must be finite, whether this frontend reads it
    (attn_scale, epsilon) or not (dropout probability, clips, swish beta): an engine reading the
    buffer would get the infinity or NaN."""
    for field, value in vars(table).items():
        if isinstance(value, float) and not math.isfinite(value):
            raise refuse(f"node {node_name!r}: wire field {field}", f"is {value}: it must be a finite number")


def _undecodable(exc: Exception, size: int) -> HipdnnError:
    """Bytes the FlatBuffers decoder could not read as a graph, said in words (the decoder's own
    exceptions speak of struct offsets)."""
    if isinstance(exc, (struct.error, IndexError)):
        why = "an offset in it points outside the buffer"
    elif isinstance(exc, UnicodeDecodeError):
        why = "a string in it is not UTF-8"
    else:
        why = "its tables do not decode"
    return HipdnnError(
        ErrorCode.INVALID_VALUE,
        f"corrupted graph buffer: these {size} bytes are not a serialized hipdnn graph (the bytes of "
        f"Graph.serialize()), or a damaged one: {why}",
    )


def _backend_error(exc: BackendError, doing: str) -> HipdnnError:
    code = ErrorCode.GRAPH_NOT_SUPPORTED if exc.status == Status.NOT_SUPPORTED else ErrorCode.HIPDNN_BACKEND_ERROR
    return HipdnnError(code, f"{doing}: {exc}")


# The compiled core names another graph's tensors and type-checks override entries by these types.
configure_execute_core(tensor_type=TensorAttributes, entry_type=OverrideEntry)


#: an SDPA backward's q, k, v, o, dO and stats
_BackwardOperands = tuple[
    TensorAttributes, TensorAttributes, TensorAttributes, TensorAttributes, TensorAttributes, TensorAttributes
]


class Graph:
    """A DNN operation graph. Build it with :meth:`tensor` and the op methods, then
    ``build(handle)`` (or the five steps) and ``execute``."""

    def __init__(
        self,
        name: str = "",
        io_data_type: DataType = DataType.NOT_SET,
        intermediate_data_type: DataType = DataType.NOT_SET,
        compute_data_type: DataType = DataType.NOT_SET,
        is_override_shape_enabled: bool = False,
        preferred_engine_id: int | None = None,
    ) -> None:
        self.name = name
        self.io_data_type = io_data_type
        self.intermediate_data_type = intermediate_data_type
        self.compute_data_type = compute_data_type
        self._override_shape_enabled = bool_arg(is_override_shape_enabled, "Graph: is_override_shape_enabled")
        self.preferred_engine_id = preferred_engine_id
        self._tensors: list[TensorAttributes] = []
        #: the same tensors as a set (identity hashing), so that checking ownership is O(1) per operand
        self._tensor_set: set[TensorAttributes] = set()
        self._nodes: list[Operation] = []
        self._validated = False
        #: how the graph changed since its last plan was built (None: it did not, or never had one)
        self._changed_after_build: str | None = None
        self._reset_build()

    # -- graph attributes: assignable, checked like the constructor's arguments ----------------
    @property
    def name(self) -> str:
        """The graph's name (in messages and the serialized graph); assignable."""
        return self._name

    @name.setter
    def name(self, value: str) -> None:
        self._name = str_arg(value, "Graph: name")

    @property
    def io_data_type(self) -> DataType:
        """Element type of tensors that set none (NOT_SET: FLOAT); assignable."""
        return self._io_data_type

    @io_data_type.setter
    def io_data_type(self, value: DataType) -> None:
        self._io_data_type = enum_arg(DataType, value, "Graph: io_data_type")

    @property
    def intermediate_data_type(self) -> DataType:
        """Element type of virtual tensors between nodes (NOT_SET: the io type); assignable."""
        return self._intermediate_data_type

    @intermediate_data_type.setter
    def intermediate_data_type(self, value: DataType) -> None:
        self._intermediate_data_type = enum_arg(DataType, value, "Graph: intermediate_data_type")

    @property
    def compute_data_type(self) -> DataType:
        """Arithmetic type of nodes that set none (NOT_SET: the engine's choice); assignable."""
        return self._compute_data_type

    @compute_data_type.setter
    def compute_data_type(self, value: DataType) -> None:
        self._compute_data_type = enum_arg(DataType, value, "Graph: compute_data_type")

    @property
    def preferred_engine_id(self) -> int | None:
        """The only engine ``build()`` may use, or None to let hipdnn choose; assignable."""
        return self._preferred_engine_id

    @preferred_engine_id.setter
    def preferred_engine_id(self, value: int | None) -> None:
        self._preferred_engine_id = optional_int_arg(value, "Graph: preferred_engine_id", INT64_MIN, INT64_MAX)

    # -- graph flags -------------------------------------------------------------------------
    def set_override_shape_enabled(self, enabled: bool) -> Graph:
        """Declare that execute may override tensor shapes (spec 4.1); declared dims become maxima."""
        enabled = bool_arg(enabled, f"graph {self.name!r}: set_override_shape_enabled")
        if enabled != self._override_shape_enabled:
            self._override_shape_enabled = enabled
            self._invalidate(f"the override flag was set to {enabled}")
        return self

    def is_override_shape_enabled(self) -> bool:
        """Whether execute may override tensor shapes (declared dims are then maxima)."""
        return self._override_shape_enabled

    # -- building the graph ------------------------------------------------------------------
    def tensor(
        self,
        name: str = "",
        dim: Sequence[int] | None = None,
        stride: Sequence[int] | None = None,
        data_type: DataType | None = None,
        uid: int | None = None,
        is_virtual: bool = False,
    ) -> TensorAttributes:
        """A graph input (or, with ``is_virtual``, an intermediate)."""
        t = TensorAttributes(name, dim, stride, data_type, uid, is_virtual)
        self._add_tensor(t)
        return t

    def tensor_like(
        self, other: Any, name: str = "", data_type: DataType | None = None, uid: int | None = None
    ) -> TensorAttributes:
        """A graph input shaped like ``other``: a tensor of any graph (dims, strides, data type and
        dynamic flag copied), or an array-like value as a variant pack takes it — a numpy array, a
        torch tensor on the CPU or a GPU, or an object exposing ``__array_interface__``,
        ``__cuda_array_interface__`` or ``__dlpack__``: dims, strides (in elements) and element type
        are read from it, nothing is copied or kept. ``data_type`` overrides the element type (needed
        when the value's own type has no DataType)."""
        what = (f"tensor_like({name!r})" if name else "tensor_like") + ": other"
        if isinstance(other, TensorAttributes):
            t = self.tensor(name or other.get_name(), other.get_dim(), other.get_stride(), other.get_data_type(), uid)
            t.set_is_dynamic(other.is_dynamic())
        else:
            dims, strides, dt = layout_of(other, what, data_type)
            return self.tensor(name, dims, strides, dt, uid)
        if data_type is not None:
            t.set_data_type(data_type)
        return t

    def _add_tensor(self, t: TensorAttributes) -> None:
        self._tensors.append(t)
        self._tensor_set.add(t)
        self._invalidate(f"tensor {t.get_name()!r} was added")

    def _output(self, name: str) -> TensorAttributes:
        """A node's output tensor. The node, added right after, invalidates the graph (and names itself
        in the message of a plan it drops)."""
        t = TensorAttributes(name, is_virtual=True)
        self._tensors.append(t)
        self._tensor_set.add(t)
        self._validated = False
        return t

    def _own(self, t: Any, role: str, node: str) -> TensorAttributes:
        if not isinstance(t, TensorAttributes):
            raise HipdnnError(
                ErrorCode.INVALID_VALUE, f"node {node!r}: {role} must be a tensor, got {type(t).__name__}"
            )
        if t not in self._tensor_set:
            raise HipdnnError(
                ErrorCode.INVALID_VALUE, f"node {node!r}: {role} tensor {t.get_name()!r} belongs to another graph"
            )
        return t

    def _node_name(self, name: str | None, kind: str) -> str:
        if name is not None:
            str_arg(name, f"{kind}: name")
        return name or f"{kind}_{len(self._nodes)}"

    @staticmethod
    def _scalar_option(value: float | TensorAttributes | None, what: str) -> float | TensorAttributes | None:
        """A float option that may instead be a tensor: numbers are checked (finite, float32) here."""
        if value is None or isinstance(value, TensorAttributes):
            return value
        return number_arg(value, what)

    def _add_node(self, node: Operation) -> None:
        self._nodes.append(node)
        self._invalidate(f"{node.kind} node {node.name!r} was added")

    def sdpa(
        self,
        q: TensorAttributes,
        k: TensorAttributes,
        v: TensorAttributes,
        options: SdpaAttributes | None = None,
        *,
        compute_data_type: DataType = DataType.NOT_SET,
        name: str | None = None,
        **keywords: Any,
    ) -> tuple[TensorAttributes, TensorAttributes | None]:
        """Scaled dot-product attention forward; returns ``(o, stats)``, stats None unless
        ``generate_stats`` (cudnn-frontend's ``is_inference=False`` means the same). Options come as
        a :class:`hipdnn.SdpaAttributes` (``options=``), as keywords named like its fields
        (``attn_scale=0.125, use_causal_mask=True``), or both: keywords override the object's fields.
        Paged K/V caches take cudnn-frontend's ``paged_attention_k_table`` / ``_v_table`` /
        ``_max_seq_len_kv``, and q, k, v, o, stats may be ragged (``set_ragged_offset``;
        rfcs/0012-ragged-and-paged.md). cudnn-frontend's other keywords are accepted at their off
        values (``dropout=None``, ``block_mask=None``, ``implementation=AttentionImplementation.AUTO``,
        ...) and refused, naming the feature, at any other (rfcs/0011-cudnn-frontend-compatibility.md)."""
        node_name = self._node_name(name, "sdpa")
        opts, compute_data_type = self._forward_args("sdpa", node_name, options, keywords, compute_data_type)
        q, k, v = self._own(q, "q", node_name), self._own(k, "k", node_name), self._own(v, "v", node_name)
        o = self._output(f"{node_name}::O")
        stats = self._output(f"{node_name}::Stats") if opts.stats_wanted else None
        self._add_node(SdpaNode(node_name, compute_data_type, q, k, v, o, stats, opts))
        return o, stats

    def sdpa_fp8(
        self,
        q: TensorAttributes,
        k: TensorAttributes,
        v: TensorAttributes,
        descale_q: TensorAttributes,
        descale_k: TensorAttributes,
        descale_v: TensorAttributes,
        descale_s: TensorAttributes,
        scale_s: TensorAttributes,
        scale_o: TensorAttributes,
        options: SdpaAttributes | None = None,
        *,
        compute_data_type: DataType = DataType.NOT_SET,
        name: str | None = None,
        **keywords: Any,
    ) -> tuple[TensorAttributes, TensorAttributes | None, TensorAttributes, TensorAttributes]:
        """FP8 attention forward, cudnn-frontend's ``sdpa_fp8``: q, k, v hold FP8 (E4M3 or E5M2)
        values, each one-element FLOAT ``descale_*`` / ``scale_*`` tensor a per-tensor factor. Returns
        ``(o, stats, amax_s, amax_o)``: stats None unless ``generate_stats``; amax_s the largest
        probability (before ``scale_s``), amax_o the largest ``|o|`` before ``scale_o`` (FLOAT
        [1, 1, 1, 1] each). The masks and options are sdpa's (causal both ways, padding, bounds, GQA,
        ``attn_scale`` as a number); a bias, ALiBi, softcapping and paged K/V are refused. The
        definition, step by step: hipdnn/frontend/ops/sdpa_fp8.py and rfcs/0014-fp8-attention.md."""
        node_name = self._node_name(name, "sdpa_fp8")
        opts, compute_data_type = self._forward_args("sdpa_fp8", node_name, options, keywords, compute_data_type)
        q, k, v = self._own(q, "q", node_name), self._own(k, "k", node_name), self._own(v, "v", node_name)
        factors = (descale_q, descale_k, descale_v, descale_s, scale_s, scale_o)  # in SCALE_ROLES' order
        owned = {role: self._own(t, role, node_name) for role, t in zip(SCALE_ROLES, factors)}
        o = self._output(f"{node_name}::O")
        stats = self._output(f"{node_name}::Stats") if opts.stats_wanted else None
        amax_s, amax_o = self._output(f"{node_name}::Amax_S"), self._output(f"{node_name}::Amax_O")
        fp8 = Fp8Scaling(**owned, amax_s=amax_s, amax_o=amax_o)
        self._add_node(SdpaNode(node_name, compute_data_type, q, k, v, o, stats, opts, fp8=fp8))
        return o, stats, amax_s, amax_o

    def _forward_args(
        self,
        kind: str,
        node_name: str,
        options: SdpaAttributes | None,
        keywords: Mapping[str, Any],
        compute_data_type: DataType,
    ) -> tuple[SdpaAttributes, DataType]:
        """An SDPA forward's options (the backward's own option, when a shared options object carries
        it, does not concern the forward) and compute type, checked."""
        at = f"{kind} node {node_name!r}: "
        opts = self._sdpa_options(options, keywords, at, node_name, "sdpa").for_op("sdpa")
        return opts, enum_arg(DataType, compute_data_type, at + "compute_data_type")

    def _sdpa_options(
        self, options: SdpaAttributes | None, keywords: Mapping[str, Any], at: str, node_name: str, kind: str
    ) -> SdpaAttributes:
        opts = options_from(options, keywords, at.rstrip(": "), kind).checked(at)
        for role, t in opts.tensors():
            self._own(t, role, node_name)
        if isinstance(opts.attn_scale, TensorAttributes):
            self._own(opts.attn_scale, "attn_scale", node_name)
        return opts

    def matmul(
        self,
        a: TensorAttributes,
        b: TensorAttributes,
        compute_data_type: DataType = DataType.NOT_SET,
        name: str | None = None,
    ) -> TensorAttributes:
        """``c = a @ b`` over the last two dims, the leading (batch) dims broadcast numpy-style:
        a [..., M, K] and b [..., K, N] give c [..., M, N]. Returns c (virtual until
        ``set_output(True)``)."""
        node_name = self._node_name(name, "matmul")
        dt = enum_arg(DataType, compute_data_type, f"matmul node {node_name!r}: compute_data_type")
        a, b = self._own(a, "a", node_name), self._own(b, "b", node_name)
        c = self._output(f"{node_name}::C")
        self._add_node(MatmulNode(node_name, dt, a, b, c))
        return c

    def pointwise(
        self,
        mode: PointwiseMode,
        in_0: TensorAttributes,
        in_1: TensorAttributes | None = None,
        in_2: TensorAttributes | None = None,
        compute_data_type: DataType = DataType.NOT_SET,
        name: str | None = None,
    ) -> TensorAttributes:
        """``mode`` applied elementwise to one, two or three inputs (``POINTWISE_ARITY``), broadcast
        numpy-style; returns the output tensor. The shortcuts (``g.relu(x)``, ``g.add(a, b)``, ...)
        call this with the mode filled in."""
        node_name = self._node_name(name, "pointwise")
        # members pass as they are; messages are built only for the values that need checking
        if type(mode) is not PointwiseMode:
            mode = enum_arg(PointwiseMode, mode, f"pointwise node {node_name!r}: mode")
        dt = compute_data_type
        if type(dt) is not DataType:
            dt = enum_arg(DataType, dt, f"pointwise node {node_name!r}: compute_data_type")
        first = self._own(in_0, "in_0", node_name)
        second = self._own(in_1, "in_1", node_name) if in_1 is not None else None
        third = self._own(in_2, "in_2", node_name) if in_2 is not None else None
        out = self._output(f"{node_name}::OUT_0")
        self._add_node(PointwiseNode(node_name, dt, mode, first, second, third, out))
        return out

    # Shortcuts for pointwise modes (g.relu(x), g.add(a, b), g.relu_backward(dy, x), ...): each entry
    # of hipdnn.frontend.shortcuts.POINTWISE_SHORTCUTS, named here once so type checkers see it.
    add = BinaryShortcut("add")
    sub = BinaryShortcut("sub")
    mul = BinaryShortcut("mul")
    div = BinaryShortcut("div")
    max = BinaryShortcut("max")
    min = BinaryShortcut("min")
    relu = UnaryShortcut("relu")
    gelu = UnaryShortcut("gelu")
    gelu_approx_tanh = UnaryShortcut("gelu_approx_tanh")
    silu = UnaryShortcut("silu")
    sigmoid = UnaryShortcut("sigmoid")
    tanh = UnaryShortcut("tanh")
    elu = UnaryShortcut("elu")
    softplus = UnaryShortcut("softplus")
    exp = UnaryShortcut("exp")
    log = UnaryShortcut("log")
    sqrt = UnaryShortcut("sqrt")
    rsqrt = UnaryShortcut("rsqrt")
    reciprocal = UnaryShortcut("reciprocal")
    neg = UnaryShortcut("neg")
    abs = UnaryShortcut("abs")
    erf = UnaryShortcut("erf")
    sin = UnaryShortcut("sin")
    tan = UnaryShortcut("tan")
    floor = UnaryShortcut("floor")
    ceil = UnaryShortcut("ceil")
    identity = UnaryShortcut("identity")
    relu_backward = BinaryShortcut("relu_backward")
    gelu_backward = BinaryShortcut("gelu_backward")
    gelu_approx_tanh_backward = BinaryShortcut("gelu_approx_tanh_backward")
    silu_backward = BinaryShortcut("silu_backward")
    sigmoid_backward = BinaryShortcut("sigmoid_backward")
    tanh_backward = BinaryShortcut("tanh_backward")
    elu_backward = BinaryShortcut("elu_backward")
    softplus_backward = BinaryShortcut("softplus_backward")

    def scale(
        self,
        x: TensorAttributes,
        factor: TensorAttributes,
        name: str | None = None,
        *,
        compute_data_type: DataType = DataType.NOT_SET,
    ) -> TensorAttributes:
        """``x * factor`` where ``factor`` is a tensor (say dims ``[1] * rank``, broadcast): pointwise
        nodes take tensor operands only, the wire format has no scalar operand, so a constant scale is
        a one-element input tensor given at execute."""
        return self.pointwise(PointwiseMode.MUL, x, factor, compute_data_type=compute_data_type, name=name)

    def sdpa_backward(
        self,
        q: TensorAttributes,
        k: TensorAttributes,
        v: TensorAttributes,
        o: TensorAttributes,
        dO: TensorAttributes,  # noqa: N803 (cudnn-frontend's spelling)
        stats: TensorAttributes,
        options: SdpaAttributes | None = None,
        *,
        compute_data_type: DataType = DataType.NOT_SET,
        name: str | None = None,
        **keywords: Any,
    ) -> tuple[TensorAttributes, TensorAttributes, TensorAttributes]:
        """Scaled dot-product attention backward; returns ``(dQ, dK, dV)``. ``stats`` is the forward's
        log-sum-exp output; masks and options must be those the forward ran with: pass the forward's
        :class:`hipdnn.SdpaAttributes` (its stats fields concern the forward and are ignored here),
        keywords named like its fields, or both (keywords override). ``use_deterministic_algorithm``
        asks for bit-reproducible gradients (engines that cannot promise them decline the graph);
        cudnn-frontend's other keywords are taken as ``sdpa`` takes them."""
        node_name = self._node_name(name, "sdpa_backward")
        opts, compute_data_type, operands = self._backward_args(
            "sdpa_backward", node_name, (q, k, v, o, dO, stats), options, keywords, compute_data_type
        )
        dq, dk, dv = (self._output(f"{node_name}::{n}") for n in ("dQ", "dK", "dV"))
        self._add_node(SdpaBackwardNode(node_name, compute_data_type, *operands, dq, dk, dv, opts))
        return dq, dk, dv

    def _backward_args(
        self,
        kind: str,
        node_name: str,
        operands: tuple[TensorAttributes, ...],
        options: SdpaAttributes | None,
        keywords: Mapping[str, Any],
        compute_data_type: DataType,
    ) -> tuple[SdpaAttributes, DataType, _BackwardOperands]:
        """An SDPA backward's options (forward-only ones refused), compute type and its q, k, v, o, dO,
        stats, each checked to belong to this graph."""
        at = f"{kind} node {node_name!r}: "
        forward_only = sorted({"generate_stats", "is_inference"} & set(keywords))
        if forward_only:
            raise HipdnnError(
                ErrorCode.INVALID_VALUE,
                f"{at}{', '.join(forward_only)}: forward-only option(s); the backward reads stats",
            )
        opts = self._sdpa_options(options, keywords, at, node_name, "sdpa_backward").for_op("sdpa_backward")
        dt = enum_arg(DataType, compute_data_type, at + "compute_data_type")
        q, k, v, o, do, stats = (
            self._own(t, role, node_name) for role, t in zip(("q", "k", "v", "o", "dO", "stats"), operands)
        )
        return opts, dt, (q, k, v, o, do, stats)

    def sdpa_fp8_backward(
        self,
        q: TensorAttributes,
        k: TensorAttributes,
        v: TensorAttributes,
        o: TensorAttributes,
        dO: TensorAttributes,  # noqa: N803 (cudnn-frontend's spelling)
        stats: TensorAttributes,
        descale_q: TensorAttributes,
        descale_k: TensorAttributes,
        descale_v: TensorAttributes,
        descale_o: TensorAttributes,
        descale_dO: TensorAttributes,  # noqa: N803
        descale_s: TensorAttributes,
        descale_dP: TensorAttributes,  # noqa: N803
        scale_s: TensorAttributes,
        scale_dQ: TensorAttributes,  # noqa: N803
        scale_dK: TensorAttributes,  # noqa: N803
        scale_dV: TensorAttributes,  # noqa: N803
        scale_dP: TensorAttributes,  # noqa: N803
        options: SdpaAttributes | None = None,
        *,
        compute_data_type: DataType = DataType.NOT_SET,
        name: str | None = None,
        **keywords: Any,
    ) -> tuple[
        TensorAttributes,
        TensorAttributes,
        TensorAttributes,
        TensorAttributes,
        TensorAttributes,
        TensorAttributes,
        TensorAttributes,
    ]:
        """FP8 attention backward, cudnn-frontend's ``sdpa_fp8_backward``: q, k, v, o, dO hold FP8
        values (o may be FLOAT / HALF / BFLOAT16 too), stats the forward's log-sum-exp, each
        one-element FLOAT ``descale_*`` / ``scale_*`` tensor a per-tensor factor. Returns
        ``(dQ, dK, dV, amax_dQ, amax_dK, amax_dV, amax_dP)``: the gradients in their own data type
        (the graph's io type unless set; FP8, FLOAT, HALF or BFLOAT16), each amax the largest magnitude
        before its scale (FLOAT [1, 1, 1, 1]). Masks and options are ``sdpa_backward``'s (causal both
        ways, padding, bounds, GQA, ``attn_scale`` as a number); a bias, ALiBi and softcapping are
        refused. The definition, step by step: hipdnn/frontend/ops/sdpa_fp8_backward.py."""
        node_name = self._node_name(name, "sdpa_fp8_backward")
        opts, compute_data_type, operands = self._backward_args(
            "sdpa_fp8_backward", node_name, (q, k, v, o, dO, stats), options, keywords, compute_data_type
        )
        factors = (
            descale_q,
            descale_k,
            descale_v,
            descale_o,
            descale_dO,
            descale_s,
            descale_dP,
            scale_s,
            scale_dQ,
            scale_dK,
            scale_dV,
            scale_dP,
        )  # in BACKWARD_SCALE_ROLES' order
        owned = {role: self._own(t, role, node_name) for role, t in zip(BACKWARD_SCALE_ROLES, factors)}
        dq, dk, dv = (self._output(f"{node_name}::{n}") for n in ("dQ", "dK", "dV"))
        amax = {role: self._output(f"{node_name}::{role[0].upper()}{role[1:]}") for role in BACKWARD_AMAX_ROLES}
        fp8 = Fp8BackwardScaling(**owned, **amax)
        node = SdpaBackwardNode(node_name, compute_data_type, *operands, dq, dk, dv, opts, fp8=fp8)
        self._add_node(node)
        return dq, dk, dv, amax["amax_dQ"], amax["amax_dK"], amax["amax_dV"], amax["amax_dP"]

    def _norm_args(
        self,
        kind: str,
        node_name: str,
        input: TensorAttributes,
        scale: TensorAttributes | None,
        bias: TensorAttributes | None,
        epsilon: float | TensorAttributes,
        norm_forward_phase: NormFwdPhase,
        normalized_dim_count: int | None,
        compute_data_type: DataType,
    ) -> tuple[TensorAttributes, float | TensorAttributes, NormFwdPhase, int | None, DataType]:
        """Every argument of rmsnorm and layernorm checked, before the graph changes."""
        at = f"{kind} node {node_name!r}: "
        phase = enum_arg(NormFwdPhase, norm_forward_phase, at + "norm_forward_phase")
        count = optional_int_arg(normalized_dim_count, at + "normalized_dim_count")
        dt = enum_arg(DataType, compute_data_type, at + "compute_data_type")
        if epsilon is None:
            raise refuse(at + "epsilon", "must be a number or a tensor, not None")
        eps = self._scalar_option(epsilon, at + "epsilon")
        assert eps is not None
        x = self._own(input, "input", node_name)
        for role, t in (("scale", scale), ("bias", bias)):
            if t is not None:
                self._own(t, role, node_name)
        if isinstance(eps, TensorAttributes):
            self._own(eps, "epsilon", node_name)
        return x, eps, phase, count, dt

    def rmsnorm(
        self,
        input: TensorAttributes,  # noqa: A002 (cudnn-frontend's keyword)
        scale: TensorAttributes | None = None,
        bias: TensorAttributes | None = None,
        epsilon: float | TensorAttributes = 1e-5,
        norm_forward_phase: NormFwdPhase = NormFwdPhase.INFERENCE,
        normalized_dim_count: int | None = None,
        compute_data_type: DataType = DataType.NOT_SET,
        name: str | None = None,
    ) -> tuple[TensorAttributes, TensorAttributes | None]:
        """RMS normalization over the trailing axes (see ``hipdnn.frontend.ops.norms``); returns
        ``(y, inv_rms)``, inv_rms None unless ``norm_forward_phase`` is TRAINING."""
        node_name = self._node_name(name, "rmsnorm")
        x, eps, phase, count, dt = self._norm_args(
            "rmsnorm",
            node_name,
            input,
            scale,
            bias,
            epsilon,
            norm_forward_phase,
            normalized_dim_count,
            compute_data_type,
        )
        y = self._output(f"{node_name}::Y")
        inv_rms = self._output(f"{node_name}::INV_RMS") if phase == NormFwdPhase.TRAINING else None
        self._add_node(RMSNormNode(node_name, dt, x, scale, bias, eps, y, [inv_rms], phase, count))
        return y, inv_rms

    def layernorm(
        self,
        input: TensorAttributes,  # noqa: A002 (cudnn-frontend's keyword)
        scale: TensorAttributes | None = None,
        bias: TensorAttributes | None = None,
        epsilon: float | TensorAttributes = 1e-5,
        norm_forward_phase: NormFwdPhase = NormFwdPhase.INFERENCE,
        normalized_dim_count: int | None = None,
        compute_data_type: DataType = DataType.NOT_SET,
        name: str | None = None,
    ) -> tuple[TensorAttributes, TensorAttributes | None, TensorAttributes | None]:
        """Layer normalization over the trailing axes; returns ``(y, mean, inv_variance)``, the
        statistics None unless ``norm_forward_phase`` is TRAINING."""
        node_name = self._node_name(name, "layernorm")
        x, eps, phase, count, dt = self._norm_args(
            "layernorm",
            node_name,
            input,
            scale,
            bias,
            epsilon,
            norm_forward_phase,
            normalized_dim_count,
            compute_data_type,
        )
        training = phase == NormFwdPhase.TRAINING
        y = self._output(f"{node_name}::Y")
        mean = self._output(f"{node_name}::MEAN") if training else None
        inv_var = self._output(f"{node_name}::INV_VARIANCE") if training else None
        self._add_node(LayerNormNode(node_name, dt, x, scale, bias, eps, y, [mean, inv_var], phase, count))
        return y, mean, inv_var

    def reduction(
        self,
        input: TensorAttributes,  # noqa: A002 (cudnn-frontend's keyword)
        mode: ReductionMode,
        axes: Sequence[int] | None = None,
        compute_data_type: DataType = DataType.NOT_SET,
        name: str | None = None,
    ) -> TensorAttributes:
        """Reduce ``input`` over ``axes`` (negative counts from the end); the output keeps the rank with
        1 on each reduced axis. Without ``axes``, the output's dims (set before validation) say which
        axes are reduced; with neither, every axis is."""
        node_name = self._node_name(name, "reduction")
        at = f"reduction node {node_name!r}: "
        mode = enum_arg(ReductionMode, mode, at + "mode")
        dt = enum_arg(DataType, compute_data_type, at + "compute_data_type")
        if axes is not None:
            axes = [int_arg(a, f"{at}axes[{i}]") for i, a in enumerate(sequence_arg(axes, at + "axes"))]
        x = self._own(input, "input", node_name)
        y = self._output(f"{node_name}::Y")
        self._add_node(ReductionNode(node_name, dt, mode, x, y, axes))
        return y

    # -- introspection -----------------------------------------------------------------------
    @property
    def tensors(self) -> list[TensorAttributes]:
        """The graph's tensors, in the order they were added (a copy of the list)."""
        return list(self._tensors)

    @property
    def nodes(self) -> list[Operation]:
        """The graph's nodes, in the order they were added (a copy of the list)."""
        return list(self._nodes)

    def tensor_by_uid(self, uid: int) -> TensorAttributes | None:
        """The tensor with uid ``uid``, or None."""
        return next((t for t in self._tensors if t.get_uid() == uid), None)

    # -- validation --------------------------------------------------------------------------
    def _invalidate(self, change: str) -> None:
        """The graph changed (``change`` says how): validate again, and drop any plan built."""
        self._validated = False
        if self._executor is not None:
            self._changed_after_build = change
        if self._op_graph is not None:  # every later build step sets this one first
            self._reset_build()

    def _reset_build(self) -> None:
        # Plans may be shared through the handle's plan cache: drop the reference, never destroy here.
        self._op_graph: OperationGraphDescriptor | None = None
        self._heur: EngineHeurDescriptor | None = None
        self._configs: list[EngineConfigDescriptor] = []
        self._plan: ExecutionPlanDescriptor | None = None
        self._handle: Handle | None = None
        self._serialized: bytes | None = None
        #: the compiled execute path of the built plan, with this graph's tensors and shape rules as
        #: they were at build (changing a tensor afterwards does not reach it: rebuild to apply)
        self._executor: Executor | None = None
        #: the handle of that plan, or _NOT_BUILT: execute's one check per call
        self._ready_handle: Any = _NOT_BUILT

    def validate(self) -> Graph:
        """Check the graph (unique uids, topological order, no orphans, per-op rules), infer the shapes
        of outputs, and give every tensor without a uid a fresh one."""
        if not self._nodes:
            raise HipdnnError(ErrorCode.INVALID_VALUE, f"graph {self.name!r} has no nodes")
        io_dt = self.io_data_type if self.io_data_type != DataType.NOT_SET else DataType.FLOAT
        inter_dt = self.intermediate_data_type if self.intermediate_data_type != DataType.NOT_SET else io_dt
        self._check_ragged_placement()
        # Sets of tensors (identity hashing): one pass over the nodes, one over the tensors.
        produced_by: dict[TensorAttributes, str] = {}
        consumed: set[TensorAttributes] = set()
        for node in self._nodes:
            for t in node.outputs():
                if t in produced_by:
                    raise HipdnnError(
                        ErrorCode.INVALID_VALUE,
                        f"tensor {t.get_name()!r} is written by both {produced_by[t]!r} and {node.name!r}",
                    )
                produced_by[t] = node.name
        ready: set[TensorAttributes] = {t for t in self._tensors if t not in produced_by}
        checked: set[TensorAttributes] = set()  # each tensor's own checks run once, however many nodes read it
        for node in self._nodes:
            for t in node.inputs():
                if t not in ready:
                    raise HipdnnError(
                        ErrorCode.INVALID_VALUE,
                        f"node {node.name!r} reads tensor {t.get_name()!r} before any node writes it "
                        "(nodes must be in topological order, without cycles)",
                    )
                consumed.add(t)
                if t not in checked:
                    self._check_tensor(t, io_dt)
                    checked.add(t)
            node.infer_and_validate(io_dt, inter_dt)
            for t in node.outputs():
                self._check_tensor(t, io_dt)
                self._check_written_layout(t, node)
                checked.add(t)
                ready.add(t)
        for t in self._tensors:
            if t not in consumed and t not in produced_by:
                raise HipdnnError(ErrorCode.INVALID_VALUE, f"tensor {t.get_name()!r} is an orphan: no node uses it")
            if t.get_is_virtual() and t not in produced_by:
                raise HipdnnError(
                    ErrorCode.INVALID_VALUE, f"virtual tensor {t.get_name()!r} is read but no node writes it"
                )
            if t.get_is_virtual() and t not in consumed:
                raise HipdnnError(
                    ErrorCode.INVALID_VALUE,
                    f"tensor {t.get_name()!r} is virtual and never read: mark it set_output(True) to keep it",
                )
        self._assign_uids()
        self._validated = True
        return self

    def _check_ragged_placement(self) -> None:
        """A ragged offset (rfcs/0012) belongs to this graph and is only read through the SDPA roles
        that can be ragged; any other node reading or writing a ragged tensor would address it as
        padded memory."""
        for t in self._tensors:
            off = t.get_ragged_offset()
            if off is not None and off not in self._tensor_set:
                raise HipdnnError(
                    ErrorCode.INVALID_VALUE,
                    f"tensor {t.get_name()!r}: its ragged offset {off.get_name()!r} belongs to another graph",
                )
        for node in self._nodes:
            allowed = set(node.ragged_roles())
            for t in node.inputs() + node.outputs():
                if t.get_ragged_offset() is not None and t not in allowed:
                    raise HipdnnError(
                        ErrorCode.GRAPH_NOT_SUPPORTED,
                        f"{node.kind} node {node.name!r}: tensor {t.get_name()!r} has a ragged offset, which only "
                        "SDPA's q, k, v, o, stats (and the backward's dO, dQ, dK, dV) may have",
                    )

    def _check_tensor(self, t: TensorAttributes, io_dt: DataType) -> None:
        name = t.get_name()
        dims, strides = t.get_dim(), t.get_stride()
        if not dims:
            raise HipdnnError(ErrorCode.ATTRIBUTE_NOT_SET, f"tensor {name!r} has no dims")
        if not strides:
            raise HipdnnError(ErrorCode.ATTRIBUTE_NOT_SET, f"tensor {name!r} has no strides")
        if len(dims) != len(strides):
            raise HipdnnError(ErrorCode.INVALID_VALUE, f"tensor {name!r}: {len(dims)} dims but {len(strides)} strides")
        if t.is_dynamic():
            # Dims: positive maxima or -1 (given at execute). Strides: an axis order, 0 = innermost.
            if any(d <= 0 and d != DYNAMIC_DIM for d in dims):
                raise HipdnnError(
                    ErrorCode.INVALID_VALUE,
                    f"dynamic tensor {name!r}: dims {dims} must be positive or DYNAMIC_DIM (-1)",
                )
            if sorted(strides) != list(range(len(strides))):
                raise HipdnnError(
                    ErrorCode.INVALID_VALUE,
                    f"dynamic tensor {name!r}: strides {strides} must be an axis order, a permutation of "
                    f"0..{len(strides) - 1} (0 = innermost)",
                )
            if not self._override_shape_enabled:
                raise HipdnnError(
                    ErrorCode.INVALID_VALUE,
                    f"dynamic tensor {name!r} needs the graph's override flag: call "
                    "set_override_shape_enabled(True) (spec 6.4)",
                )
        elif min(dims) <= 0 or min(strides) <= 0:
            if DYNAMIC_DIM in dims:
                raise HipdnnError(
                    ErrorCode.INVALID_VALUE,
                    f"tensor {name!r}: dims {dims} contain -1 but the tensor is static; call mark_dynamic()",
                )
            if min(dims) <= 0:
                raise HipdnnError(ErrorCode.INVALID_VALUE, f"tensor {name!r}: dims {dims} must be positive")
            raise HipdnnError(ErrorCode.INVALID_VALUE, f"tensor {name!r}: strides {strides} must be positive")
        if max(dims) > _INT64_MAX or max(strides) > _INT64_MAX:
            raise HipdnnError(
                ErrorCode.INVALID_VALUE, f"tensor {name!r}: dims {dims} or strides {strides} exceed the int64 range"
            )
        if t.get_data_type() == DataType.NOT_SET:
            t.set_data_type(io_dt)

    @staticmethod
    def _check_written_layout(t: TensorAttributes, node: Operation) -> None:
        """A tensor a node writes must give each element its own memory: strides under which two
        indices meet ([1, 1] on dims [4, 4]) would have the engine race with itself. Inputs may share
        (a broadcast reads one element many times). Dynamic tensors' strides are an axis order; their
        execute-time strides are checked by the execute core, by the same rule."""
        if t.is_dynamic():
            return
        dims, strides = t.get_dim(), t.get_stride()
        if len(dims) > 1 and strides_overlap(dims, strides):
            raise HipdnnError(
                ErrorCode.INVALID_VALUE,
                f"tensor {t.get_name()!r} written by node {node.name!r}: strides {strides} with dims {dims} map "
                "distinct elements to one address; an output needs each element in its own memory",
            )

    def _assign_uids(self) -> None:
        seen: dict[int, str] = {}
        for t in self._tensors:
            if t.has_uid():
                uid = t.get_uid()
                assert uid is not None
                if uid in seen:
                    raise HipdnnError(
                        ErrorCode.INVALID_VALUE,
                        f"uid {uid} is used by both {seen[uid]!r} and {t.get_name()!r}",
                    )
                seen[uid] = t.get_name()
        next_uid = 1
        for t in self._tensors:
            if not t.has_uid():
                while next_uid in seen:
                    next_uid += 1
                t._auto_uid(next_uid)
                seen[next_uid] = t.get_name()

    # -- wire format -------------------------------------------------------------------------
    def _to_wire(self) -> GraphT:
        g = GraphT()
        g.name = self.name
        g.ioDataType = int(self.io_data_type)
        g.intermediateDataType = int(self.intermediate_data_type)
        g.computeDataType = int(self.compute_data_type)
        g.isOverrideShapeEnabled = self._override_shape_enabled
        g.preferredEngineId = self.preferred_engine_id
        g.tensors = []
        for t in self._tensors:
            wt = TensorAttributesT()
            wt.uid = t.get_uid()
            wt.name = t.get_name()
            wt.dataType = int(t.get_data_type())
            wt.dims = t.get_dim()
            wt.strides = t.get_stride()
            wt.virtual = t.get_is_virtual()
            wt.isDynamic = t.is_dynamic()
            off = t.get_ragged_offset()
            if off is not None:
                wt.raggedOffsetTensorUid = off.get_uid()
            g.tensors.append(wt)
        g.nodes = []
        for node in self._nodes:
            n = NodeT()
            n.name = node.name
            n.computeDataType = int(node.compute_data_type)
            n.attributesType = node.wire_type
            n.attributes = node.to_wire()
            g.nodes.append(n)
        return g

    def serialize(self) -> bytes:
        """The graph as a hipdnn.wire.Graph FlatBuffer (validated first: tensors may have changed since)."""
        self.validate()
        builder = flatbuffers.Builder(1024)
        try:
            builder.Finish(self._to_wire().Pack(builder))
        except (TypeError, OverflowError, struct.error) as exc:
            raise HipdnnError(
                ErrorCode.INVALID_VALUE, f"graph {self.name!r} holds a value the wire format cannot store: {exc}"
            ) from None
        return bytes(builder.Output())

    @classmethod
    def deserialize(cls, blob: bytes | bytearray | memoryview) -> Graph:
        """Rebuild a graph from :meth:`serialize` output. Damaged buffers raise HipdnnError."""
        graph = cls._parse(blob)
        graph.validate()
        return graph

    @classmethod
    def _parse(cls, blob: bytes | bytearray | memoryview) -> Graph:
        """A graph decoded from its buffer, not validated (``inspect --emit parsed``). Bytes that are
        not a graph raise HipdnnError saying so, in words: never the decoder's internals (offsets
        ``struct`` could not unpack)."""
        if not isinstance(blob, (bytes, bytearray, memoryview)):
            raise refuse("deserialize: blob", f"must be bytes, bytearray or memoryview, not {type(blob).__name__}")
        data = bytes(blob)
        if len(data) < 8:
            raise HipdnnError(
                ErrorCode.INVALID_VALUE, f"graph buffer of {len(data)} bytes is truncated (a graph takes more)"
            )
        try:
            # before anything is decoded: a buffer whose tables share storage decodes to gigabytes
            check_decoded_size(WireGraph.GetRootAs(data, 0), len(data))
            wire = GraphT.InitFromPackedBuf(data, 0)
        except GraphDecodeError as exc:
            raise HipdnnError(ErrorCode.INVALID_VALUE, f"corrupted graph buffer: {exc}") from None
        except Exception as exc:
            raise _undecodable(exc, len(data)) from None
        try:
            return cls._from_wire(wire)
        except HipdnnError:
            raise
        except Exception as exc:  # decoded, but a value of it makes no graph (the message says which)
            raise HipdnnError(
                ErrorCode.INVALID_VALUE, f"corrupted graph buffer ({type(exc).__name__}: {exc})"
            ) from None

    @classmethod
    def _from_wire(cls, wire: GraphT) -> Graph:
        def text(v: Any) -> str:
            return v.decode("utf-8", "replace") if isinstance(v, bytes) else (v or "")

        graph = cls(
            name=text(wire.name),
            io_data_type=wire.ioDataType,
            intermediate_data_type=wire.intermediateDataType,
            compute_data_type=wire.computeDataType,
            is_override_shape_enabled=bool(wire.isOverrideShapeEnabled),
            preferred_engine_id=wire.preferredEngineId,
        )
        by_uid: dict[int, TensorAttributes] = {}
        for wt in wire.tensors or []:
            uid = int(wt.uid)
            if uid in by_uid:
                raise HipdnnError(ErrorCode.INVALID_VALUE, f"graph buffer declares uid {uid} twice")
            t = graph.tensor(
                name=text(wt.name),
                dim=[int(d) for d in (wt.dims if wt.dims is not None else [])],
                stride=[int(s) for s in (wt.strides if wt.strides is not None else [])],
                data_type=wt.dataType,
                uid=uid,
                is_virtual=bool(wt.virtual),
            )
            t.set_is_dynamic(bool(wt.isDynamic))
            by_uid[uid] = t
        for wt in wire.tensors or []:
            if wt.raggedOffsetTensorUid is not None:
                off = by_uid.get(int(wt.raggedOffsetTensorUid))
                if off is None:
                    raise HipdnnError(
                        ErrorCode.INVALID_VALUE,
                        f"tensor uid {wt.uid}: ragged offset uid {wt.raggedOffsetTensorUid}, which no tensor has",
                    )
                by_uid[int(wt.uid)].set_ragged_offset(off)

        def resolve(uid: int | None) -> TensorAttributes | None:
            if uid is None:
                return None
            t = by_uid.get(int(uid))
            if t is None:
                raise HipdnnError(ErrorCode.INVALID_VALUE, f"a node refers to uid {uid}, which no tensor has")
            return t

        for wn in wire.nodes or []:
            op_cls = OPERATIONS.get(int(wn.attributesType))
            if op_cls is None or wn.attributes is None:
                raise HipdnnError(
                    ErrorCode.UNSUPPORTED_GRAPH_FORMAT, f"node {text(wn.name)!r} has unknown kind {wn.attributesType}"
                )
            _check_wire_floats(text(wn.name), wn.attributes)
            dt = enum_arg(DataType, wn.computeDataType, f"node {text(wn.name)!r}: compute_data_type")
            node = op_cls.from_wire(text(wn.name), dt, wn.attributes, resolve)
            for role, group in (("input", node.inputs()), ("output", node.outputs())):
                if any(x is None for x in group):
                    raise HipdnnError(ErrorCode.INVALID_VALUE, f"node {node.name!r} lacks a required {role}")
            graph._nodes.append(node)
        return graph

    # -- building plans ----------------------------------------------------------------------
    def build_operation_graph(self, handle: Handle) -> Graph:
        """Validate, serialize and lower the graph into a backend operation graph on ``handle``."""
        if not isinstance(handle, Handle):
            raise HipdnnError(ErrorCode.INVALID_VALUE, "build_operation_graph needs a hipdnn.Handle")
        return self._lower(handle, self.serialize())

    def _lower(self, handle: Handle, blob: bytes) -> Graph:
        self._reset_build()
        desc = OperationGraphDescriptor(blob)
        try:
            desc.set_attribute(A.OPERATIONGRAPH_HANDLE, T.HANDLE, handle.backend)
            desc.set_attribute(A.OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT, T.BOOLEAN, self._override_shape_enabled)
            desc.finalize()
        except BackendError as exc:
            raise _backend_error(exc, f"lowering graph {self.name!r}") from None
        self._op_graph, self._handle, self._serialized = desc, handle, blob
        return self

    def _freeze(self) -> None:
        """Hand the plan's compiled execute path this graph's keys (tensor objects) and every node's
        shape rules, over the plan's own tensor table (the tensors as the serialized graph told
        the plugin). From here on execute checks against this snapshot only."""
        assert self._plan is not None and self._plan.core is not None and self._handle is not None
        index = {uid: i for i, uid in enumerate(self._plan.tensor_uids())}

        def index_of(t: TensorAttributes) -> int:
            uid = t.get_uid()
            assert uid is not None
            return index[uid]

        rules = []
        for node in self._nodes:
            builder = ShapeRules(index_of)
            node.shape_rules(builder)
            rules.append((f"{node.kind} node {node.name!r}: ", node.name, builder.rules))
        keys = {t: uid for t in self._tensors if (uid := t.get_uid()) is not None}
        # the tensors nodes write: the core refuses calls where their memory meets another tensor's
        outputs = [uid for node in self._nodes for t in node.outputs() if (uid := t.get_uid()) is not None]
        self._executor = Executor(self._plan.core, keys, rules, self._handle.backend, outputs)
        self._ready_handle = self._handle
        self._changed_after_build = None

    def create_execution_plans(self, heur_modes: Sequence[HeurMode] = (HeurMode.FALLBACK,)) -> Graph:
        """Ask the handle's plugins which engines apply (plugins below the graph's API version are
        skipped unasked). GRAPH_NOT_SUPPORTED lists every plugin and its answer when none applies.
        With ``preferred_engine_id`` set, that engine is the only candidate: INVALID_VALUE (listing
        the engine ids loaded) when no loaded plugin provides it, GRAPH_NOT_SUPPORTED with the
        engine's reason when it cannot serve the graph; another engine is never chosen instead."""
        if self._op_graph is None:
            raise HipdnnError(ErrorCode.ATTRIBUTE_NOT_SET, "create_execution_plans before build_operation_graph")
        modes = _heur_modes(heur_modes, "create_execution_plans: heur_modes")
        heur = EngineHeurDescriptor()
        try:
            heur.set_attribute(A.ENGINEHEUR_OPERATION_GRAPH, T.BACKEND_DESCRIPTOR, self._op_graph)
            heur.set_attribute(A.ENGINEHEUR_MODE, T.HEUR_MODE, int(modes[0]))
            heur.finalize()
            configs = heur.get_attribute(A.ENGINEHEUR_RESULTS)
        except PreferredEngineError as exc:
            self._heur, self._configs = heur, []  # plugin_report() says what every plugin answered
            code = ErrorCode.INVALID_VALUE if exc.status == Status.BAD_PARAM else ErrorCode.GRAPH_NOT_SUPPORTED
            raise HipdnnError(code, f"graph {self.name!r}: {exc.reason}") from None
        except BackendError as exc:
            raise _backend_error(exc, "querying engines") from None
        self._heur, self._configs = heur, configs
        if not configs:
            raise HipdnnError(
                ErrorCode.GRAPH_NOT_SUPPORTED,
                f"no applicable engines for graph {self.name!r}; plugins consulted: {heur.report()}",
            )
        return self

    def check_support(self) -> Graph:
        """Raise GRAPH_NOT_SUPPORTED, listing every plugin's answer, when no engine applies to the graph
        (after ``create_execution_plans``); else return the graph."""
        if self._heur is None:
            raise HipdnnError(ErrorCode.ATTRIBUTE_NOT_SET, "check_support before create_execution_plans")
        if not self._configs:
            raise HipdnnError(
                ErrorCode.GRAPH_NOT_SUPPORTED, f"no applicable engines; plugins consulted: {self._heur.report()}"
            )
        return self

    def build_plans(self) -> Graph:
        """Create an execution plan from the first engine config that succeeds. The preferred
        engine, when the graph names one, is the only config: its failure is the error."""
        if self._handle is None or not self._configs:
            raise HipdnnError(ErrorCode.ATTRIBUTE_NOT_SET, "build_plans before check_support")
        failures: list[str] = []
        for config in self._configs:
            plan = ExecutionPlanDescriptor()
            try:
                plan.set_attribute(A.EXECUTION_PLAN_HANDLE, T.HANDLE, self._handle.backend)
                plan.set_attribute(A.EXECUTION_PLAN_ENGINE_CONFIG, T.BACKEND_DESCRIPTOR, config)
                plan.finalize()
            except BackendError as exc:
                failures.append(f"engine {config.engine_id}: {exc}")
                continue
            self._plan = plan
            self._freeze()
            return self
        preferred = self._op_graph.preferred_engine_id if self._op_graph is not None else None
        if preferred is not None:
            plugin = self._handle.backend.plugin_for(preferred)
            owner = plugin.name if plugin is not None else "?"
            raise HipdnnError(
                ErrorCode.GRAPH_EXECUTION_PLAN_CREATION_FAILED,
                f"graph {self.name!r}: preferred engine {preferred} (plugin {owner!r}) could not build its "
                "plan, and no other engine is tried in place of a preferred one: " + "; ".join(failures),
            )
        raise HipdnnError(
            ErrorCode.GRAPH_EXECUTION_PLAN_CREATION_FAILED, "no plan could be built: " + "; ".join(failures)
        )

    def build(self, handle: Handle, heur_modes: Sequence[HeurMode] = (HeurMode.FALLBACK,)) -> Graph:
        """validate -> build_operation_graph -> create_execution_plans -> check_support -> build_plans,
        unless the handle's plan cache already holds a plan for this exact graph (same serialized
        bytes, heuristic mode and plugin fingerprints): then that plan is reused."""
        if not isinstance(handle, Handle):
            raise HipdnnError(ErrorCode.INVALID_VALUE, "build needs a hipdnn.Handle")
        mode = _heur_modes(heur_modes, "build: heur_modes")[0]
        blob = self.serialize()
        key = PlanKey.for_graph(blob, int(mode), handle.backend.fingerprints)
        cached = handle.backend.plan_cache.get(key)
        # build() put every plan there; the cache itself types them only by what it uses (CachedPlan)
        if isinstance(cached, ExecutionPlanDescriptor) and cached.graph is not None:
            self._reset_build()
            self._op_graph, self._handle, self._serialized, self._plan = cached.graph, handle, blob, cached
            self._freeze()
            return self
        self._lower(handle, blob)
        self.create_execution_plans([mode])
        self.check_support()
        self.build_plans()
        assert self._plan is not None
        handle.backend.plan_cache.put(key, self._plan)
        return self

    def bind(
        self,
        handle: Handle,
        uids: Sequence[int | TensorAttributes],
        override_uids: Sequence[int | TensorAttributes] = (),
    ) -> Binding:
        """A pre-bound execute for the serving loop: ``bound(ptrs, workspace=0, override_shapes=None,
        override_strides=None)`` with int pointers in the order of ``uids`` and override values for
        ``override_uids``. Everything that does not change per call is resolved here. Pointers are
        trusted to hold the tensor at its declared maximum shape and strides; every override is
        checked by the same rules as execute, and must address no more memory than that maximum."""
        executor = self._require_executor(handle, "bind")
        return executor.bind(sequence_arg(uids, "bind: uids"), sequence_arg(override_uids, "bind: override_uids"))

    def get_workspace_size(self) -> int:
        """Bytes of workspace the built plan needs at the declared (maximum) shapes; pass ``execute`` a
        buffer at least this large (host or device memory, as the engine takes). 0: none needed."""
        return self._require_plan("get_workspace_size()").workspace_size

    def get_engine_id(self) -> int:
        """The id of the engine the built plan runs on (101: the CPU engine, 201/202: the GPU engine)."""
        engine_id = self._require_plan("get_engine_id()").engine_id
        assert engine_id is not None
        return engine_id

    def plugin_report(self) -> str:
        """What each plugin said about this graph at create_execution_plans."""
        return self._heur.report() if self._heur is not None else ""

    def _require_plan(self, doing: str = "asking for its plan") -> ExecutionPlanDescriptor:
        if self._plan is None:
            raise self._no_plan(doing)
        return self._plan

    def _no_plan(self, doing: str) -> HipdnnError:
        if self._changed_after_build is not None:
            return HipdnnError(
                ErrorCode.ATTRIBUTE_NOT_SET,
                f"graph {self.name!r} changed after build(): {self._changed_after_build}, which drops the plan "
                f"built before; call build(handle) again before {doing}",
            )
        return HipdnnError(
            ErrorCode.ATTRIBUTE_NOT_SET, f"graph {self.name!r} has no execution plan: call build(handle) before {doing}"
        )

    # -- execution ---------------------------------------------------------------------------
    def _require_executor(self, handle: object, doing: str) -> Executor:
        if not isinstance(handle, Handle):
            hint = (
                "; it looks like a variant pack: cudnn-frontend's order (variant_pack, workspace, handle=...) does "
                "not apply, hipdnn takes the handle first"
                if isinstance(handle, Mapping)
                else ""
            )
            raise HipdnnError(
                ErrorCode.INVALID_VALUE,
                f"{doing}: the handle passed is {_described(handle)}; expected the hipdnn.Handle graph "
                f"{self.name!r} was built on{hint}: {_EXECUTE_FORM if doing == 'execute' else doing + '(handle, ...)'}",
            )
        if self._executor is None:
            raise self._no_plan(doing)
        if handle is not self._handle:
            raise HipdnnError(
                ErrorCode.INVALID_VALUE,
                f"{doing}: the handle passed, {handle!r}, is another hipdnn.Handle than the one graph "
                f"{self.name!r} was built on; pass the handle build() was given, or build the graph on this one",
            )
        return self._executor

    def _refuse_call(self, handle: Any, variant_pack: Any, unexpected: dict[str, Any]) -> tuple[Executor, Any]:
        """execute's checks off the success path: what was passed, against what execute takes. The
        handle and the variant pack may also come as keywords (``handle=h, variant_pack=vp``)."""
        extra = dict(unexpected)
        if handle is _REQUIRED and "handle" in extra:
            handle = extra.pop("handle")
        if variant_pack is None and "variant_pack" in extra:
            variant_pack = extra.pop("variant_pack")
        if "handle" in extra:
            raise HipdnnError(
                ErrorCode.INVALID_VALUE,
                f"execute: got cudnn-frontend's argument order, execute(variant_pack, workspace, handle=...): the "
                f"first argument is {_described(handle)}, handle= is {_described(extra['handle'])}; hipdnn takes "
                f"the handle first: {_EXECUTE_FORM}",
            )
        if extra:
            raise HipdnnError(
                ErrorCode.INVALID_VALUE,
                f"execute: unexpected keyword argument(s) {', '.join(sorted(extra))}; execute takes handle, "
                "variant_pack, workspace, override_uids, override_shapes, override_strides and overrides",
            )
        if handle is _REQUIRED:
            raise HipdnnError(
                ErrorCode.INVALID_VALUE,
                f"execute: no handle given; expected the hipdnn.Handle graph {self.name!r} was built on, then the "
                f"variant pack: {_EXECUTE_FORM}",
            )
        return self._require_executor(handle, "execute"), variant_pack

    if TYPE_CHECKING:

        def execute(
            self,
            handle: Handle,
            variant_pack: VariantPack,
            workspace: Any = None,
            override_uids: Sequence[int | TensorAttributes] | OverrideMapping | None = None,
            override_shapes: Sequence[Sequence[int]] | None = None,
            override_strides: Sequence[Sequence[int]] | None = None,
            *,
            overrides: OverrideMapping | None = None,
        ) -> None:
            """Run the built plan (documented on the definition below)."""

    else:

        def execute(
            self,
            handle=_REQUIRED,
            variant_pack=None,
            /,
            workspace=None,
            override_uids=None,
            override_shapes=None,
            override_strides=None,
            *,
            overrides=None,
            **unexpected,
        ):
            """``execute(handle, variant_pack, workspace=None, override_uids=None, override_shapes=None,
            override_strides=None, *, overrides=None)``: run the built plan (a variant pack of None is
            refused by the core like any other non-mapping).

            ``handle`` is the hipdnn.Handle the graph was built on; ``variant_pack`` maps tensors (or
            uids) to buffers. Overrides give tensors a smaller shape (and its strides) for this call
            only, as a mapping ``{tensor or uid: OverrideEntry(shape=..., stride=...)}`` (fourth
            positional argument or ``overrides=``) or in the parallel-array form (``override_uids``,
            ``override_shapes``, ``override_strides``). Everything is checked in the compiled core
            before the plugin is called. cudnn-frontend's order, ``execute(variant_pack, workspace,
            handle=...)``, is refused with a message saying so."""
            # The success path: one identity check (the plan's handle; no plan: nothing matches) and
            # an empty **unexpected. Everything else is _refuse_call's.
            if handle is not self._ready_handle or unexpected:
                executor, variant_pack = self._refuse_call(handle, variant_pack, unexpected)
            else:
                executor = self._executor
            executor.execute(variant_pack, workspace, override_uids, override_shapes, override_strides, overrides)

    def __repr__(self) -> str:
        return (
            f"Graph(name={self.name!r}, tensors={len(self._tensors)}, nodes={[n.name for n in self._nodes]}, "
            f"override_shape_enabled={self._override_shape_enabled})"
        )


__all__ = ["Graph"]
