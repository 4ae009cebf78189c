"""Bad graph inputs: every error a caller can cause through the public API is a ``HipdnnError`` with
the right code and a message naming the argument at fault (issue #16) - never a bare ValueError,
TypeError, KeyError or OverflowError from deep inside (an enum constructor, ``float()``, the wire
packer, a hostile object's property).

One table covers each entry point (Graph(), tensor(), every op builder, the tensor setters, build,
bind, execute, OverrideEntry values, deserialize, Handle) with hostile values: wrong enum numbers,
enums of another kind, strings, floats, bools and None where ints belong, ints beyond int64,
negative dims, non-finite float options. Python's own signature errors (an unknown keyword) stay
TypeError, as for any Python function.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import numpy as np
import pytest

import hipdnn
from hipdnn import (
    DataType,
    DiagonalAlignment,
    ErrorCode,
    Graph,
    HeurMode,
    HipdnnError,
    NormFwdPhase,
    OverrideEntry,
    PointwiseMode,
    ReductionMode,
    TensorAttributes,
)
from hipdnn.backend import AttributeName, AttributeType, BackendError, Status, VariantPackDescriptor
from hipdnn.backend.values import resolve
from hipdnn.frontend import memory
from hipdnn.wire.Graph import GraphT

F = DataType.FLOAT
INVALID = ErrorCode.INVALID_VALUE
PACK = ErrorCode.INVALID_VARIANT_PACK
ATTN = [1, 2, 4, 8]
ATTN_STRIDE = [64, 32, 8, 1]


# -- the graphs the cases act on ------------------------------------------------------------------
@dataclass
class World:
    """A fresh graph with one 2-D input ``x``, plus a built relu graph ``bg`` (x -> y) on ``handle``."""

    handle: hipdnn.Handle
    g: Graph = field(default_factory=lambda: Graph(io_data_type=F))
    x: TensorAttributes = field(init=False)
    bg: Graph = field(init=False)
    bx: TensorAttributes = field(init=False)
    by: TensorAttributes = field(init=False)

    def __post_init__(self) -> None:
        self.x = self.g.tensor(name="x", dim=[4, 8], stride=[8, 1], data_type=F)
        self.bg = Graph(name="built", io_data_type=F, is_override_shape_enabled=True)
        self.bx = self.bg.tensor(name="bx", dim=[4, 8], stride=[8, 1], data_type=F)
        self.by = self.bg.pointwise(PointwiseMode.RELU_FWD, self.bx, name="relu")
        self.by.set_output(True)
        self.bg.build(self.handle)

    def attn(self) -> tuple[TensorAttributes, TensorAttributes, TensorAttributes]:
        return tuple(self.g.tensor(name=n, dim=ATTN, stride=ATTN_STRIDE, data_type=F) for n in "qkv")  # type: ignore[return-value]

    def pack(self, **replace: Any) -> dict[Any, Any]:
        vp: dict[Any, Any] = {self.bx: np.zeros((4, 8), np.float32), self.by: np.zeros((4, 8), np.float32)}
        vp.update({getattr(self, k): v for k, v in replace.items()})
        return vp

    def execute(self, **kwargs: Any) -> None:
        self.bg.execute(self.handle, kwargs.pop("vp", None) or self.pack(), **kwargs)


@pytest.fixture(scope="module")
def world_handle(cpu_handle: hipdnn.Handle) -> hipdnn.Handle:
    return cpu_handle


@pytest.fixture
def world(world_handle: hipdnn.Handle) -> World:
    return World(world_handle)


def relu_out(w: World, **kw: Any) -> TensorAttributes:
    out = w.g.pointwise(PointwiseMode.RELU_FWD, w.x, **kw)
    out.set_output(True)
    return out


def validated(build: Callable[[World], Any]) -> Callable[[World], Any]:
    """The case builds a graph; the error is expected from validate()."""

    def act(w: World) -> None:
        build(w)
        w.g.validate()

    return act


def sdpa(w: World, **kw: Any) -> None:
    q, k, v = w.attn()
    o, _ = w.g.sdpa(q, k, v, **kw)
    o.set_output(True)


def sdpa_backward(w: World, **kw: Any) -> None:
    q, k, v = w.attn()
    o, do = (w.g.tensor(name=n, dim=ATTN, stride=ATTN_STRIDE, data_type=F) for n in ("o", "do"))
    stats = w.g.tensor(name="stats", dim=[1, 2, 4, 1], stride=[8, 4, 1, 1], data_type=F)
    for t in w.g.sdpa_backward(q, k, v, o, do, stats, **kw):
        t.set_output(True)


def norm(kind: str, **kw: Any) -> Callable[[World], None]:
    def act(w: World) -> None:
        getattr(w.g, kind)(w.x, **kw)[0].set_output(True)

    return act


class Raising:
    """A value whose every protocol attribute raises."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __getattr__(self, name: str) -> Any:
        raise self.exc


class RaisingEntry(OverrideEntry):
    @property  # type: ignore[override]
    def shape(self) -> list[int]:
        raise RuntimeError("the entry's shape is gone")

    @shape.setter
    def shape(self, value: list[int]) -> None:
        pass


class BadIndex:
    def __index__(self) -> int:
        raise RuntimeError("no index")


# (id, action, code, fragments the message must hold)
CASES: list[tuple[str, Callable[[World], Any], ErrorCode, tuple[str, ...]]] = [
    # Graph()
    ("graph-io-dtype-99", lambda w: Graph(io_data_type=99), INVALID, ("io_data_type", "99", "DataType")),
    ("graph-inter-dtype-neg", lambda w: Graph(intermediate_data_type=-1), INVALID, ("intermediate_data_type", "-1")),
    ("graph-compute-dtype-str", lambda w: Graph(compute_data_type="FLOAT"), INVALID, ("compute_data_type", "'FLOAT'")),
    ("graph-dtype-other-enum", lambda w: Graph(io_data_type=ReductionMode.ADD), INVALID, ("io_data_type", "ADD")),
    ("graph-dtype-float", lambda w: Graph(io_data_type=1.0), INVALID, ("io_data_type", "1.0")),
    ("graph-name-int", lambda w: Graph(name=5), INVALID, ("name", "5")),
    ("graph-flag-str", lambda w: Graph(is_override_shape_enabled="no"), INVALID, ("is_override_shape_enabled", "'no'")),
    ("graph-engine-huge", lambda w: Graph(preferred_engine_id=1 << 70), INVALID, ("preferred_engine_id",)),
    ("graph-engine-float", lambda w: Graph(preferred_engine_id=1.5), INVALID, ("preferred_engine_id", "1.5")),
    ("graph-engine-bool", lambda w: Graph(preferred_engine_id=True), INVALID, ("preferred_engine_id", "True")),
    ("graph-assign-io-dtype", lambda w: setattr(w.g, "io_data_type", 99), INVALID, ("io_data_type", "99")),
    ("graph-assign-name", lambda w: setattr(w.g, "name", None), INVALID, ("name", "None")),
    ("graph-assign-engine", lambda w: setattr(w.g, "preferred_engine_id", "7"), INVALID, ("preferred_engine_id",)),
    ("graph-set-flag-none", lambda w: w.g.set_override_shape_enabled(None), INVALID, ("set_override_shape_enabled",)),
    # tensor()
    ("tensor-dtype-99", lambda w: w.g.tensor(data_type=99), INVALID, ("data_type", "99")),
    ("tensor-dtype-str", lambda w: w.g.tensor(data_type="float32"), INVALID, ("data_type", "float32")),
    ("tensor-dim-str", lambda w: w.g.tensor(name="t", dim="48"), INVALID, ("'t'", "dim", "'48'")),
    ("tensor-dim-int", lambda w: w.g.tensor(name="t", dim=4), INVALID, ("'t'", "dim", "4")),
    ("tensor-dim-float", lambda w: w.g.tensor(name="t", dim=[4.0, 8]), INVALID, ("'t'", "dim", "float")),
    ("tensor-dim-bool", lambda w: w.g.tensor(name="t", dim=[True, 8]), INVALID, ("'t'", "dim", "bool")),
    ("tensor-dim-none", lambda w: w.g.tensor(name="t", dim=[None]), INVALID, ("'t'", "dim", "NoneType")),
    ("tensor-dim-enum", lambda w: w.g.tensor(name="t", dim=[DataType.HALF]), INVALID, ("'t'", "dim")),
    ("tensor-stride-obj", lambda w: w.g.tensor(name="t", stride=[object()]), INVALID, ("'t'", "stride")),
    ("tensor-uid-str", lambda w: w.g.tensor(name="t", uid="1"), INVALID, ("'t'", "uid", "'1'")),
    ("tensor-uid-bool", lambda w: w.g.tensor(name="t", uid=True), INVALID, ("'t'", "uid", "True")),
    ("tensor-uid-float", lambda w: w.g.tensor(name="t", uid=1.0), INVALID, ("'t'", "uid", "1.0")),
    ("tensor-uid-huge", lambda w: w.g.tensor(name="t", uid=1 << 64), INVALID, ("'t'", "uid", str(1 << 64))),
    ("tensor-name-none", lambda w: w.g.tensor(name=None), INVALID, ("name", "None")),
    ("tensor-virtual-str", lambda w: w.g.tensor(name="t", is_virtual="yes"), INVALID, ("'t'", "is_virtual")),
    (
        "tensor-dims-negative",
        validated(lambda w: (w.x.set_dim([-3, 8]), relu_out(w))),
        INVALID,
        ("'x'", "dims", "-3"),
    ),
    ("tensor-dims-zero", validated(lambda w: (w.x.set_dim([0, 8]), relu_out(w))), INVALID, ("'x'", "dims", "0")),
    (
        "tensor-dims-beyond-int64",
        validated(lambda w: (w.x.set_dim([1 << 63, 8]), relu_out(w))),
        INVALID,
        ("'x'", "int64"),
    ),
    ("tensor-like-not-tensor", lambda w: w.g.tensor_like("x"), INVALID, ("tensor_like", "other")),
    # the tensor setters
    ("set-dim-str", lambda w: w.x.set_dim("x"), INVALID, ("'x'", "dim")),
    ("set-stride-none-elt", lambda w: w.x.set_stride([8, None]), INVALID, ("'x'", "stride")),
    ("set-dtype-99", lambda w: w.x.set_data_type(99), INVALID, ("'x'", "data_type", "99")),
    ("set-dtype-none", lambda w: w.x.set_data_type(None), INVALID, ("'x'", "data_type", "None")),
    ("set-uid-none", lambda w: w.x.set_uid(None), INVALID, ("'x'", "uid", "None")),
    ("set-uid-neg-huge", lambda w: w.x.set_uid(-(1 << 63) - 1), INVALID, ("'x'", "uid")),
    ("set-name-bytes", lambda w: w.x.set_name(b"x"), INVALID, ("name", "b'x'")),
    ("set-virtual-none", lambda w: w.x.set_is_virtual(None), INVALID, ("'x'", "is_virtual")),
    ("set-dynamic-int", lambda w: w.x.set_is_dynamic(1), INVALID, ("'x'", "is_dynamic")),
    ("set-output-str", lambda w: w.x.set_output("false"), INVALID, ("'x'", "is_output", "'false'")),
    # pointwise and its shorthands
    ("pointwise-mode-999", lambda w: w.g.pointwise(999, w.x), INVALID, ("pointwise", "mode", "999", "PointwiseMode")),
    (
        "pointwise-mode-other-enum",
        lambda w: w.g.pointwise(ReductionMode.MAX, w.x),
        INVALID,
        ("mode", "ReductionMode.MAX"),
    ),
    ("pointwise-mode-str", lambda w: w.g.pointwise("RELU_FWD", w.x), INVALID, ("mode", "'RELU_FWD'")),
    ("pointwise-mode-none", lambda w: w.g.pointwise(None, w.x), INVALID, ("mode", "None")),
    (
        "pointwise-compute-dtype",
        lambda w: w.g.pointwise(PointwiseMode.ABS, w.x, compute_data_type=77),
        INVALID,
        ("compute_data_type", "77"),
    ),
    ("pointwise-in0-array", lambda w: w.g.pointwise(PointwiseMode.ABS, np.zeros(3)), INVALID, ("in_0", "ndarray")),
    ("pointwise-name-int", lambda w: w.g.pointwise(PointwiseMode.ABS, w.x, name=3), INVALID, ("name", "3")),
    ("add-b-scalar", lambda w: w.g.add(w.x, 3), INVALID, ("in_1", "int")),
    ("mul-foreign-tensor", lambda w: w.g.mul(w.x, TensorAttributes("stray")), INVALID, ("'stray'", "another graph")),
    # matmul
    ("matmul-b-none", lambda w: w.g.matmul(w.x, None), INVALID, ("b must be a tensor", "NoneType")),
    ("matmul-compute-dtype", lambda w: w.g.matmul(w.x, w.x, compute_data_type=-4), INVALID, ("compute_data_type",)),
    # sdpa
    ("sdpa-scale-str", lambda w: sdpa(w, attn_scale="0.5"), INVALID, ("sdpa", "attn_scale", "'0.5'")),
    ("sdpa-scale-bool", lambda w: sdpa(w, attn_scale=True), INVALID, ("attn_scale", "True")),
    ("sdpa-scale-huge-int", lambda w: sdpa(w, attn_scale=10**400), INVALID, ("attn_scale", "float32")),
    ("sdpa-scale-inf", validated(lambda w: sdpa(w, attn_scale=math.inf)), INVALID, ("attn_scale", "inf")),
    ("sdpa-scale-neg-inf", validated(lambda w: sdpa(w, attn_scale=-math.inf)), INVALID, ("attn_scale", "-inf")),
    ("sdpa-scale-nan", validated(lambda w: sdpa(w, attn_scale=math.nan)), INVALID, ("attn_scale", "NaN")),
    ("sdpa-scale-1e39", validated(lambda w: sdpa(w, attn_scale=1e39)), INVALID, ("attn_scale", "float32")),
    ("sdpa-align-7", lambda w: sdpa(w, diagonal_alignment=7), INVALID, ("diagonal_alignment", "7")),
    (
        "sdpa-align-other-enum",
        lambda w: sdpa(w, diagonal_alignment=NormFwdPhase.TRAINING),
        INVALID,
        ("diagonal_alignment",),
    ),
    ("sdpa-causal-str", lambda w: sdpa(w, use_causal_mask="yes"), INVALID, ("use_causal_mask", "'yes'")),
    ("sdpa-stats-int", lambda w: sdpa(w, generate_stats=2), INVALID, ("generate_stats", "2")),
    ("sdpa-inference-str", lambda w: sdpa(w, is_inference="no"), INVALID, ("is_inference",)),
    ("sdpa-padding-none", lambda w: sdpa(w, use_padding_mask=None), INVALID, ("use_padding_mask",)),
    ("sdpa-alibi-int", lambda w: sdpa(w, use_alibi_mask=0), INVALID, ("use_alibi_mask",)),
    ("sdpa-band-float", lambda w: sdpa(w, diagonal_band_left_bound=1.5), INVALID, ("diagonal_band_left_bound", "1.5")),
    (
        "sdpa-band-negative",
        validated(lambda w: sdpa(w, diagonal_band_right_bound=-1, use_causal_mask=True)),
        INVALID,
        ("diagonal_band_right_bound", "-1"),
    ),
    ("sdpa-q-str", lambda w: w.g.sdpa("q", *w.attn()[1:]), INVALID, ("q must be a tensor", "str")),
    ("sdpa-compute-dtype", lambda w: sdpa(w, compute_data_type="x"), INVALID, ("compute_data_type",)),
    # sdpa_backward
    ("sdpa-bwd-scale-inf", validated(lambda w: sdpa_backward(w, attn_scale=math.inf)), INVALID, ("attn_scale", "inf")),
    ("sdpa-bwd-scale-nan", validated(lambda w: sdpa_backward(w, attn_scale=math.nan)), INVALID, ("attn_scale",)),
    ("sdpa-bwd-scale-list", lambda w: sdpa_backward(w, attn_scale=[1.0]), INVALID, ("attn_scale", "list")),
    ("sdpa-bwd-align-9", lambda w: sdpa_backward(w, diagonal_alignment=9), INVALID, ("diagonal_alignment", "9")),
    ("sdpa-bwd-causal-none", lambda w: sdpa_backward(w, use_causal_mask=None), INVALID, ("use_causal_mask",)),
    # rmsnorm / layernorm
    *[
        (f"{kind}-eps-{label}", validated(norm(kind, epsilon=value)), INVALID, ("epsilon", frag))
        for kind in ("rmsnorm", "layernorm")
        for label, value, frag in (
            ("inf", math.inf, "inf"),
            ("neg-inf", -math.inf, "-inf"),
            ("nan", math.nan, "NaN"),
            ("1e39", 1e39, "float32"),
            ("negative", -1e-5, "non-negative"),
        )
    ],
    *[
        (f"{kind}-{label}", norm(kind, **kw), INVALID, frags)
        for kind in ("rmsnorm", "layernorm")
        for label, kw, frags in (
            ("eps-str", {"epsilon": "1e-5"}, ("epsilon", "'1e-5'")),
            ("eps-none", {"epsilon": None}, ("epsilon", "None")),
            ("phase-5", {"norm_forward_phase": 5}, ("norm_forward_phase", "5")),
            ("phase-other-enum", {"norm_forward_phase": DiagonalAlignment.BOTTOM_RIGHT}, ("norm_forward_phase",)),
            ("count-str", {"normalized_dim_count": "1"}, ("normalized_dim_count", "'1'")),
            ("count-bool", {"normalized_dim_count": True}, ("normalized_dim_count", "True")),
            ("compute-dtype", {"compute_data_type": 1.5}, ("compute_data_type", "1.5")),
            ("scale-array", {"scale": np.ones(8)}, ("scale", "ndarray")),
        )
    ],
    (
        "rmsnorm-count-zero",
        validated(norm("rmsnorm", normalized_dim_count=0)),
        INVALID,
        ("normalized_dim_count", "0"),
    ),
    # reduction
    ("reduction-mode-99", lambda w: w.g.reduction(w.x, 99), INVALID, ("reduction", "mode", "99", "ReductionMode")),
    ("reduction-mode-other-enum", lambda w: w.g.reduction(w.x, PointwiseMode.ADD), INVALID, ("mode",)),
    ("reduction-axes-str", lambda w: w.g.reduction(w.x, ReductionMode.ADD, axes="01"), INVALID, ("axes", "'01'")),
    ("reduction-axes-float", lambda w: w.g.reduction(w.x, ReductionMode.ADD, axes=[0.5]), INVALID, ("axes[0]", "0.5")),
    ("reduction-axes-none-elt", lambda w: w.g.reduction(w.x, ReductionMode.ADD, axes=[None]), INVALID, ("axes[0]",)),
    (
        "reduction-axes-range",
        validated(lambda w: w.g.reduction(w.x, ReductionMode.ADD, axes=[5]).set_output(True)),
        INVALID,
        ("axes", "[5]", "out of range"),
    ),
    # build and the five steps
    ("build-handle-none", lambda w: (relu_out(w), w.g.build(None)), INVALID, ("build", "Handle")),
    ("build-heur-99", lambda w: (relu_out(w), w.g.build(w.handle, [99])), INVALID, ("heur_modes[0]", "99")),
    ("build-heur-str", lambda w: (relu_out(w), w.g.build(w.handle, "A")), INVALID, ("heur_modes", "'A'")),
    (
        "build-heur-second",
        lambda w: (relu_out(w), w.g.build(w.handle, [HeurMode.A, 1.5])),
        INVALID,
        ("heur_modes[1]", "1.5"),
    ),
    (
        "create-plans-heur-7",
        lambda w: (relu_out(w), w.g.build_operation_graph(w.handle).create_execution_plans([7])),
        INVALID,
        ("heur_modes[0]", "7"),
    ),
    ("build-op-graph-handle", lambda w: w.g.build_operation_graph("h"), INVALID, ("Handle",)),
    # bind
    ("bind-uids-none", lambda w: w.bg.bind(w.handle, None), INVALID, ("bind", "uids", "None")),
    ("bind-uids-str", lambda w: w.bg.bind(w.handle, "xy"), INVALID, ("bind", "uids")),
    ("bind-uid-object", lambda w: w.bg.bind(w.handle, [w.bx, object()]), INVALID, ("bind", "object")),
    ("bind-overrides-int", lambda w: w.bg.bind(w.handle, [w.bx, w.by], 5), INVALID, ("bind", "override_uids", "5")),
    ("bind-other-handle", lambda w: w.bg.bind(hipdnn.Handle(plugin_paths=[]), [w.bx, w.by]), INVALID, ("bind",)),
    # execute: the variant pack, the workspace
    ("execute-pack-none", lambda w: w.bg.execute(w.handle, None), PACK, ("variant pack", "mapping")),
    ("execute-pack-list", lambda w: w.bg.execute(w.handle, [1, 2]), PACK, ("variant pack",)),
    ("execute-key-object", lambda w: w.execute(vp={object(): 1, **w.pack()}), PACK, ("variant pack key",)),
    ("execute-key-float", lambda w: w.execute(vp={1.0: 1, **w.pack()}), PACK, ("variant pack key", "1.0")),
    ("execute-key-huge", lambda w: w.execute(vp={1 << 80: 1, **w.pack()}), PACK, ("uid", str(1 << 80))),
    ("execute-value-none", lambda w: w.execute(vp=w.pack(bx=None)), PACK, ("'bx'", "NoneType")),
    ("execute-value-str", lambda w: w.execute(vp=w.pack(bx="buffer")), PACK, ("'bx'", "str")),
    ("execute-value-neg-ptr", lambda w: w.execute(vp=w.pack(bx=-8)), PACK, ("'bx'", "-8")),
    ("execute-value-huge-ptr", lambda w: w.execute(vp=w.pack(bx=1 << 64)), PACK, ("'bx'", str(1 << 64))),
    ("execute-value-bool", lambda w: w.execute(vp=w.pack(bx=True)), PACK, ("'bx'", "True")),
    (
        "execute-value-wrong-dtype",
        lambda w: w.execute(vp=w.pack(bx=np.zeros((4, 8), np.float64))),
        INVALID,
        ("'bx'", "float64"),
    ),
    ("execute-workspace-str", lambda w: w.execute(workspace="ws"), PACK, ("workspace", "str")),
    ("execute-workspace-huge", lambda w: w.execute(workspace=1 << 70), PACK, ("workspace", str(1 << 70))),
    ("execute-other-handle", lambda w: w.bg.execute(None, w.pack()), INVALID, ("execute", "handle")),
    # execute: OverrideEntry values, both call forms
    *[
        (f"override-{label}", (lambda w, e=entry: w.execute(overrides={w.bx: e})), INVALID, frags)
        for label, entry, frags in (
            ("shape-str", OverrideEntry("ab", [8, 1]), ("override shape", "uid", "'ab'")),
            ("shape-none", OverrideEntry(None, [8, 1]), ("override shape", "uid", "None")),
            ("shape-none-elt", OverrideEntry([None, 8], [8, 1]), ("override shape", "uid", "None")),
            ("shape-float", OverrideEntry([4.0, 8], [8, 1]), ("override shape", "uid", "4.0")),
            ("shape-bool", OverrideEntry([True, 8], [8, 1]), ("override shape", "uid", "True")),
            ("shape-huge", OverrideEntry([1 << 70, 8], [8, 1]), ("override shape", "int64")),
            ("shape-negative", OverrideEntry([-4, 8], [8, 1]), ("rule 5", "uid", "-4")),
            ("stride-zero", OverrideEntry([4, 8], [0, 1]), ("rule 6", "uid")),
            ("rank", OverrideEntry([4], [1]), ("rule 4", "uid")),
            ("index-raises", OverrideEntry([BadIndex(), 8], [8, 1]), ("override shape", "__index__", "no index")),
            ("property-raises", RaisingEntry(stride=[8, 1]), ("override for uid", "shape", "is gone")),
        )
    ],
    ("override-not-entry", lambda w: w.execute(overrides={w.bx: ([4, 8], [8, 1])}), INVALID, ("OverrideEntry",)),
    ("override-not-mapping", lambda w: w.execute(overrides=[1]), INVALID, ("overrides", "mapping")),
    (
        "override-parallel-lengths",
        lambda w: w.bg.execute(w.handle, w.pack(), None, [w.bx], [[4, 8]], []),
        INVALID,
        ("rule 1",),
    ),
    (
        "override-parallel-uids-str",
        lambda w: w.bg.execute(w.handle, w.pack(), None, "x", [[4, 8]], [[8, 1]]),
        INVALID,
        ("override_uids",),
    ),
    # deserialize
    ("deserialize-str", lambda w: Graph.deserialize("graph"), INVALID, ("deserialize", "blob", "str")),
    ("deserialize-int", lambda w: Graph.deserialize(64), INVALID, ("deserialize", "blob", "int")),
    ("deserialize-garbage", lambda w: Graph.deserialize(b"\xff" * 64), INVALID, ("graph buffer",)),
    # Handle
    ("handle-mode-99", lambda w: hipdnn.Handle(plugin_loading_mode=99), INVALID, ("plugin_loading_mode", "99")),
    ("handle-paths-str", lambda w: hipdnn.Handle(plugin_paths="/lib"), INVALID, ("plugin_paths", "'/lib'")),
    ("handle-paths-int", lambda w: hipdnn.Handle(plugin_paths=5), INVALID, ("plugin_paths", "5")),
    ("handle-paths-none-elt", lambda w: hipdnn.Handle(plugin_paths=[None]), INVALID, ("plugin_paths[0]", "None")),
    ("handle-stream-str", lambda w: w.handle.set_stream("s"), INVALID, ("stream", "'s'")),
    ("handle-stream-negative", lambda w: w.handle.set_stream(-1), INVALID, ("stream", "-1")),
    ("handle-stream-huge", lambda w: w.handle.set_stream(1 << 64), INVALID, ("stream",)),
]


@pytest.mark.parametrize(("action", "code", "fragments"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_a_hipdnn_error_naming_the_argument(
    world: World, action: Callable[[World], Any], code: ErrorCode, fragments: tuple[str, ...]
) -> None:
    with pytest.raises(HipdnnError) as info:
        action(world)
    assert info.value.code is code, str(info.value)
    for fragment in fragments:
        assert fragment in info.value.message, f"{fragment!r} not in {info.value.message!r}"


def test_case_ids_are_unique() -> None:
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


def test_a_refused_builder_call_leaves_the_graph_as_it_was(world: World) -> None:
    """Arguments are checked before the graph changes: no orphaned outputs after a refusal."""
    q, k, v = world.attn()
    before = len(world.g.tensors), len(world.g.nodes)
    for bad in ({"attn_scale": "x"}, {"diagonal_alignment": 3}, {"use_causal_mask": "no"}):
        with pytest.raises(HipdnnError):
            world.g.sdpa(q, k, v, **bad)
    with pytest.raises(HipdnnError):
        world.g.layernorm(world.x, norm_forward_phase=9)
    with pytest.raises(HipdnnError):
        world.g.reduction(world.x, ReductionMode.ADD, axes=["0"])
    assert (len(world.g.tensors), len(world.g.nodes)) == before
    world.g.sdpa(q, k, v, attn_scale=0.5)[0].set_output(True)
    relu_out(world)
    world.g.validate()


def test_members_ints_and_numpy_ints_are_accepted() -> None:
    """The checks refuse what is wrong, not what is merely spelled differently."""
    g = Graph(io_data_type=int(DataType.FLOAT), is_override_shape_enabled=np.bool_(True))
    x = g.tensor(name="x", dim=[np.int64(4), 8], stride=(8, np.int32(1)), data_type=np.int8(1), uid=np.uint16(3))
    y = g.pointwise(int(PointwiseMode.RELU_FWD), x, compute_data_type=DataType.FLOAT)
    y.set_output(np.bool_(True))
    r = g.reduction(y, np.int64(int(ReductionMode.ADD)), axes=(np.int64(-1),))
    r.set_output(True)
    n, _ = g.rmsnorm(y, epsilon=np.float32(1e-5), normalized_dim_count=np.int64(1))
    n.set_output(True)
    g.validate()
    assert x.get_dim() == [4, 8] and x.get_uid() == 3 and x.get_data_type() is DataType.FLOAT


# -- variant-pack values whose protocol attributes raise -------------------------------------------
class ArrayInterfaceRaises:
    @property
    def __array_interface__(self) -> dict[str, Any]:
        raise RuntimeError("marker: __array_interface__")


class CudaArrayInterfaceRaises:
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        raise RuntimeError("marker: __cuda_array_interface__")


class DLPackPropertyRaises:
    @property
    def __dlpack__(self) -> Any:
        raise RuntimeError("marker: __dlpack__")


class DLPackCallRaises:
    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)

    def __dlpack__(self, **kwargs: Any) -> Any:
        raise RuntimeError("marker: __dlpack__()")


class DLPackDeviceRaises:
    def __dlpack_device__(self) -> tuple[int, int]:
        raise RuntimeError("marker: __dlpack_device__")

    def __dlpack__(self, **kwargs: Any) -> Any:
        raise AssertionError("never reached")


class TorchLookalikeRaises:
    """Declares itself part of torch, and its accessors raise: the kind test itself must not leak."""

    @property
    def data_ptr(self) -> Any:
        raise RuntimeError("marker: torch accessor")


TorchLookalikeRaises.__module__ = "torch"

HOSTILE = [
    ArrayInterfaceRaises,
    CudaArrayInterfaceRaises,
    DLPackPropertyRaises,
    DLPackCallRaises,
    DLPackDeviceRaises,
    TorchLookalikeRaises,
]


def assert_chained(info: pytest.ExceptionInfo[HipdnnError], label: str) -> None:
    err = info.value
    assert err.code is PACK, str(err)
    assert label in err.message, err.message
    assert isinstance(err.__cause__, RuntimeError), repr(err.__cause__)
    assert str(err.__cause__).startswith("marker: "), str(err.__cause__)
    assert str(err.__cause__) in err.message, err.message


@pytest.mark.parametrize("kind", HOSTILE, ids=lambda k: k.__name__)
def test_raising_protocol_through_graph_execute(world: World, kind: type) -> None:
    with pytest.raises(HipdnnError) as info:
        world.execute(vp=world.pack(bx=kind()))
    assert_chained(info, "tensor 'bx' (uid")


@pytest.mark.parametrize("kind", HOSTILE, ids=lambda k: k.__name__)
def test_raising_protocol_as_the_workspace(world: World, kind: type) -> None:
    with pytest.raises(HipdnnError) as info:
        world.execute(workspace=kind())
    assert_chained(info, "workspace")


@pytest.mark.parametrize("kind", HOSTILE, ids=lambda k: k.__name__)
def test_raising_protocol_through_the_backend_reader(kind: type) -> None:
    """hipdnn.backend.values.resolve, the reader the execute core hands such values to, and the
    frontend's memory.to_buffer on top of it."""
    with pytest.raises(HipdnnError) as info:
        resolve(kind(), "tensor 'q' (uid 7)")
    assert_chained(info, "tensor 'q' (uid 7)")
    with pytest.raises(HipdnnError) as info:
        memory.to_buffer(kind(), "tensor 'q' (uid 7)")
    assert_chained(info, "tensor 'q' (uid 7)")


@pytest.mark.parametrize("kind", HOSTILE, ids=lambda k: k.__name__)
def test_raising_protocol_through_the_bound_call(world: World, kind: type) -> None:
    """The bound call takes int pointers only: anything else is refused unread, naming the tensor."""
    bound = world.bg.bind(world.handle, [world.bx, world.by])
    out = np.zeros((4, 8), np.float32)
    with pytest.raises(HipdnnError) as info:
        bound([kind(), out.ctypes.data])
    assert info.value.code is PACK
    assert "tensor 'bx' (uid" in info.value.message


@pytest.mark.parametrize("kind", HOSTILE, ids=lambda k: k.__name__)
def test_raising_protocol_through_the_backend_descriptors(kind: type) -> None:
    """The descriptor API takes bare addresses: a hostile object is a BAD_PARAM naming the attribute."""
    vp = VariantPackDescriptor()
    with pytest.raises(BackendError) as info:
        vp.set_attribute(AttributeName.VARIANT_PACK_DATA_POINTERS, AttributeType.VOID_PTR, [kind()])
    assert info.value.status == Status.BAD_PARAM
    assert "VARIANT_PACK_DATA_POINTERS" in str(info.value)


def test_a_mapping_whose_iteration_raises(world: World) -> None:
    from collections.abc import Mapping

    class Broken(Mapping[Any, Any]):
        def __getitem__(self, key: Any) -> Any:
            raise RuntimeError("marker: getitem")

        def __iter__(self) -> Iterator[Any]:
            raise RuntimeError("marker: iter")

        def __len__(self) -> int:
            return 2

    with pytest.raises(HipdnnError) as info:
        world.bg.execute(world.handle, Broken())
    assert info.value.code is PACK and "variant pack" in info.value.message
    assert isinstance(info.value.__cause__, RuntimeError)
    with pytest.raises(HipdnnError) as info:
        world.execute(overrides=Broken())
    assert info.value.code is INVALID and "overrides" in info.value.message
    assert isinstance(info.value.__cause__, RuntimeError)


# -- non-finite options read back from the wire ----------------------------------------------------
def _reserialized(g: Graph, edit: Callable[[Any], None]) -> bytes:
    wire = GraphT.InitFromPackedBuf(g.serialize(), 0)
    edit(wire.nodes[0].attributes)
    builder = flatbuffers.Builder(0)
    builder.Finish(wire.Pack(builder))
    return bytes(builder.Output())


def _wire_graph(kind: str) -> Graph:
    g = Graph(io_data_type=F)
    if kind == "sdpa":
        q, k, v = (g.tensor(name=n, dim=ATTN, stride=ATTN_STRIDE, data_type=F) for n in "qkv")
        g.sdpa(q, k, v, attn_scale=0.5)[0].set_output(True)
    elif kind == "pointwise":
        x = g.tensor(name="x", dim=[4, 8], stride=[8, 1], data_type=F)
        g.pointwise(PointwiseMode.SWISH_FWD, x).set_output(True)
    else:
        x = g.tensor(name="x", dim=[4, 8], stride=[8, 1], data_type=F)
        getattr(g, kind)(x, epsilon=1e-5)[0].set_output(True)
    return g


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan], ids=["inf", "-inf", "nan"])
@pytest.mark.parametrize(
    ("kind", "wire_field"),
    [
        ("sdpa", "attnScaleValue"),
        ("sdpa", "dropoutProbability"),
        ("rmsnorm", "epsilonValue"),
        ("layernorm", "epsilonValue"),
        ("pointwise", "swishBeta"),
        ("pointwise", "reluLowerClip"),
        ("pointwise", "eluAlpha"),
        ("pointwise", "softplusBeta"),
    ],
)
def test_non_finite_wire_options_are_refused(kind: str, wire_field: str, value: float) -> None:
    blob = _reserialized(_wire_graph(kind), lambda t: setattr(t, wire_field, value))
    with pytest.raises(HipdnnError) as info:
        Graph.deserialize(blob)
    assert info.value.code is INVALID
    assert wire_field in info.value.message and str(value) in info.value.message


@pytest.mark.parametrize(
    ("where", "edit", "fragment"),
    [
        ("graph", lambda w: setattr(w, "ioDataType", 99), "io_data_type"),
        ("tensor", lambda w: setattr(w.tensors[0], "dataType", 77), "data_type"),
        ("node", lambda w: setattr(w.nodes[0], "computeDataType", -5), "compute_data_type"),
        ("pointwise", lambda w: setattr(w.nodes[0].attributes, "operation", 99), "pointwise mode"),
    ],
)
def test_unknown_enum_values_on_the_wire(where: str, edit: Callable[[Any], None], fragment: str) -> None:
    wire = GraphT.InitFromPackedBuf(_wire_graph("pointwise").serialize(), 0)
    edit(wire)
    builder = flatbuffers.Builder(0)
    builder.Finish(wire.Pack(builder))
    with pytest.raises(HipdnnError) as info:
        Graph.deserialize(bytes(builder.Output()))
    assert info.value.code is INVALID and fragment in info.value.message, info.value.message


def test_finite_wire_options_still_load() -> None:
    for kind in ("sdpa", "rmsnorm", "layernorm", "pointwise"):
        Graph.deserialize(_wire_graph(kind).serialize()).validate()


# -- a value that runs another execute in the middle of a call -------------------------------------
def _neg_graph(handle: hipdnn.Handle, n: int) -> tuple[Graph, TensorAttributes, TensorAttributes]:
    g = Graph(io_data_type=F, is_override_shape_enabled=True)
    x = g.tensor(name="x", dim=[n], stride=[1], data_type=F)
    y = g.pointwise(PointwiseMode.NEG, x)
    y.set_output(True)
    g.build(handle)
    return g, x, y


def test_an_execute_nested_in_a_value_keeps_both_calls_apart(world_handle: hipdnn.Handle) -> None:
    """A value's __array_interface__ executes another graph on the same thread; the outer call must
    still hand its plugin its own buffers (shared scratch gave it the inner call's)."""
    h = world_handle
    outer, x, y = _neg_graph(h, 4)
    inner, a, b = _neg_graph(h, 2)  # uids 1 and 2 again, smaller buffers
    xs, ys = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    a2, b2 = np.full(2, 5, np.float32), np.zeros(2, np.float32)

    class Sneaky:
        @property
        def __array_interface__(self) -> dict[str, Any]:
            inner.execute(h, {a: a2, b: b2})
            return ys.__array_interface__

    outer.execute(h, {x: xs, y: Sneaky()})
    np.testing.assert_array_equal(ys, -xs)
    np.testing.assert_array_equal(b2, -a2)


def test_a_bound_call_nested_in_an_override_value(world_handle: hipdnn.Handle) -> None:
    h = world_handle
    outer, x, y = _neg_graph(h, 4)
    inner, a, b = _neg_graph(h, 2)
    outer_bound = outer.bind(h, [x, y], override_uids=[x, y])
    inner_bound = inner.bind(h, [a, b], override_uids=[a, b])
    xs, ys = np.arange(4, dtype=np.float32), np.zeros(4, np.float32)
    a2, b2 = np.full(2, 5, np.float32), np.zeros(2, np.float32)

    class Three:
        def __index__(self) -> int:
            inner_bound([a2.ctypes.data, b2.ctypes.data], 0, [[2], [2]], [[1], [1]])
            return 3

    outer_bound([xs.ctypes.data, ys.ctypes.data], 0, [[Three()], [3]], [[1], [1]])
    np.testing.assert_array_equal(ys[:3], -xs[:3])
    np.testing.assert_array_equal(b2, -a2)
