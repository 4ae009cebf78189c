"""``Graph.relu(x)``, ``Graph.add(a, b)``, ``Graph.relu_backward(dy, x)``, ...: one table of pointwise
shortcuts, each a ``Graph.pointwise`` call with its mode filled in.

The table is the one place a shortcut is defined; ``Graph`` names each entry once (``relu =
UnaryShortcut("relu")``) so that type checkers see it, and a test holds the two together. The
shortcuts know the graph only through :class:`PointwiseBuilder` (its ``pointwise`` method), since the
graph imports this module."""

from __future__ import annotations

import types
from typing import Protocol, cast, overload

from hipdnn.frontend.tensor import TensorAttributes
from hipdnn.frontend.types import POINTWISE_ARITY, DataType, PointwiseMode

P = PointwiseMode

#: shortcut name -> (mode, what it computes). Arity comes from POINTWISE_ARITY; backward forms take
#: ``(dy, x)``: the gradient flowing in and the forward's input, as cudnn-frontend's ``(loss, input)``.
POINTWISE_SHORTCUTS: dict[str, tuple[PointwiseMode, str]] = {
    # binary, numpy-style broadcasting
    "add": (P.ADD, "a + b"),
    "sub": (P.SUB, "a - b"),
    "mul": (P.MUL, "a * b"),
    "div": (P.DIV, "a / b"),
    "max": (P.MAX, "the elementwise maximum of a and b"),
    "min": (P.MIN, "the elementwise minimum of a and b"),
    # unary activations and math
    "relu": (P.RELU_FWD, "max(x, 0)"),
    "gelu": (P.GELU_FWD, "x * Phi(x) (exact, erf-based GELU)"),
    "gelu_approx_tanh": (P.GELU_APPROX_TANH_FWD, "GELU, tanh approximation"),
    "silu": (P.SWISH_FWD, "x * sigmoid(x) (SiLU, swish with beta 1)"),
    "sigmoid": (P.SIGMOID_FWD, "1 / (1 + exp(-x))"),
    "tanh": (P.TANH_FWD, "tanh(x)"),
    "elu": (P.ELU_FWD, "x if x > 0 else exp(x) - 1"),
    "softplus": (P.SOFTPLUS_FWD, "log(1 + exp(x))"),
    "exp": (P.EXP, "exp(x)"),
    "log": (P.LOG, "log(x), natural"),
    "sqrt": (P.SQRT, "sqrt(x)"),
    "rsqrt": (P.RSQRT, "1 / sqrt(x)"),
    "reciprocal": (P.RECIPROCAL, "1 / x"),
    "neg": (P.NEG, "-x"),
    "abs": (P.ABS, "``|x|``"),
    "erf": (P.ERF, "erf(x)"),
    "sin": (P.SIN, "sin(x)"),
    "tan": (P.TAN, "tan(x)"),
    "floor": (P.FLOOR, "floor(x)"),
    "ceil": (P.CEIL, "ceil(x)"),
    "identity": (P.IDENTITY, "x (a copy)"),
    # backward forms: (dy, x) -> dx
    "relu_backward": (P.RELU_BWD, "dx of relu: dy where x > 0, else 0"),
    "gelu_backward": (P.GELU_BWD, "dx of gelu"),
    "gelu_approx_tanh_backward": (P.GELU_APPROX_TANH_BWD, "dx of gelu_approx_tanh"),
    "silu_backward": (P.SWISH_BWD, "dx of silu"),
    "sigmoid_backward": (P.SIGMOID_BWD, "dx of sigmoid"),
    "tanh_backward": (P.TANH_BWD, "dx of tanh"),
    "elu_backward": (P.ELU_BWD, "dx of elu"),
    "softplus_backward": (P.SOFTPLUS_BWD, "dx of softplus"),
}


class PointwiseBuilder(Protocol):
    """What a shortcut calls: ``Graph.pointwise``, with the same signature."""

    def pointwise(
        self,
        mode: PointwiseMode,
        in_0: TensorAttributes,
        in_1: TensorAttributes | None = None,
        in_2: TensorAttributes | None = None,
        compute_data_type: DataType = DataType.NOT_SET,
        name: str | None = None,
    ) -> TensorAttributes: ...


class UnboundUnaryOp(Protocol):
    def __call__(
        _,  # the protocol's own self; the graph is the first argument
        self: PointwiseBuilder,
        x: TensorAttributes,
        name: str | None = None,
        *,
        compute_data_type: DataType = DataType.NOT_SET,
    ) -> TensorAttributes: ...


class UnboundBinaryOp(Protocol):
    def __call__(
        _,  # the protocol's own self; the graph is the first argument
        self: PointwiseBuilder,
        a: TensorAttributes,
        b: TensorAttributes,
        name: str | None = None,
        *,
        compute_data_type: DataType = DataType.NOT_SET,
    ) -> TensorAttributes: ...


class UnaryOp(Protocol):
    def __call__(
        self, x: TensorAttributes, name: str | None = None, *, compute_data_type: DataType = DataType.NOT_SET
    ) -> TensorAttributes: ...


class BinaryOp(Protocol):
    def __call__(
        self,
        a: TensorAttributes,
        b: TensorAttributes,
        name: str | None = None,
        *,
        compute_data_type: DataType = DataType.NOT_SET,
    ) -> TensorAttributes: ...


def _unary(mode: PointwiseMode, doc: str) -> types.FunctionType:
    def op(
        self: PointwiseBuilder,
        x: TensorAttributes,
        name: str | None = None,
        *,
        compute_data_type: DataType = DataType.NOT_SET,
    ) -> TensorAttributes:
        return self.pointwise(mode, x, compute_data_type=compute_data_type, name=name)

    op.__doc__ = f"{doc}: ``pointwise(PointwiseMode.{mode.name}, x)``; returns the output tensor."
    return cast(types.FunctionType, op)


def _binary(mode: PointwiseMode, doc: str, names: str) -> types.FunctionType:
    def op(
        self: PointwiseBuilder,
        a: TensorAttributes,
        b: TensorAttributes,
        name: str | None = None,
        *,
        compute_data_type: DataType = DataType.NOT_SET,
    ) -> TensorAttributes:
        return self.pointwise(mode, a, b, compute_data_type=compute_data_type, name=name)

    op.__doc__ = f"{doc}: ``pointwise(PointwiseMode.{mode.name}, {names})``; returns the output tensor."
    return cast(types.FunctionType, op)


def _function(key: str) -> types.FunctionType:
    mode, doc = POINTWISE_SHORTCUTS[key]
    arity = POINTWISE_ARITY.get(mode, 2)
    operands = "dy, x" if key.endswith("_backward") else "a, b"
    fn = _unary(mode, doc) if arity == 1 else _binary(mode, doc, operands)
    fn.__name__ = fn.__qualname__ = key
    return fn


class _Shortcut:
    """A Graph method from the table: bound on attribute access like a function; on the class
    (``Graph.add``) it is the plain function, so ``inspect.signature`` and ``help()`` see its
    parameters and docstring."""

    arity = 0

    def __init__(self, key: str) -> None:
        if shortcut_arity(key) != self.arity:  # a programming error in Graph's class body
            raise TypeError(f"pointwise shortcut {key!r} takes {shortcut_arity(key)} input(s), not {self.arity}")
        self._fn = _function(key)
        self.__doc__ = self._fn.__doc__

    def _bind(self, graph: PointwiseBuilder | None) -> object:
        return self._fn if graph is None else types.MethodType(self._fn, graph)


class UnaryShortcut(_Shortcut):
    arity = 1

    @overload
    def __get__(self, graph: None, owner: type) -> UnboundUnaryOp: ...
    @overload
    def __get__(self, graph: PointwiseBuilder, owner: type) -> UnaryOp: ...
    def __get__(self, graph: PointwiseBuilder | None, owner: type) -> UnboundUnaryOp | UnaryOp:
        return cast("UnboundUnaryOp | UnaryOp", self._bind(graph))


class BinaryShortcut(_Shortcut):
    arity = 2

    @overload
    def __get__(self, graph: None, owner: type) -> UnboundBinaryOp: ...
    @overload
    def __get__(self, graph: PointwiseBuilder, owner: type) -> BinaryOp: ...
    def __get__(self, graph: PointwiseBuilder | None, owner: type) -> UnboundBinaryOp | BinaryOp:
        return cast("UnboundBinaryOp | BinaryOp", self._bind(graph))


def shortcut_arity(key: str) -> int:
    return POINTWISE_ARITY.get(POINTWISE_SHORTCUTS[key][0], 2)


__all__ = ["POINTWISE_SHORTCUTS", "BinaryShortcut", "UnaryShortcut", "shortcut_arity"]
