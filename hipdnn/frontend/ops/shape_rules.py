"""Execute-time shape rules of a node, as data for the compiled execute core.

With overrides (and dynamic tensors) the shapes change per call, so each call re-checks every node
on the effective shapes: operands that must agree, and the shape each output must have. An op
states these once, in ``Operation.shape_rules``, with the builders below; the core evaluates them
in compiled code and formats the op's messages from the templates (``{0}``, ``{1}``... are the
values of the rule's dims, ``{s0}``, ``{s1}``... the shapes of the tensors it names, ``{S}`` all of
them as a list, ``{want}`` the shape a ``produce`` rule expected).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hipdnn.frontend.tensor import TensorAttributes

Ref = tuple[int, int]
Rule = tuple[Any, ...]
Expr = tuple[Any, ...]


class ShapeRules:
    """Builds one node's rules; tensors become indices into the plan's tensor table."""

    def __init__(self, index_of: Callable[[TensorAttributes], int]) -> None:
        self._index_of = index_of
        self.rules: list[Rule] = []

    def dim(self, t: TensorAttributes, axis: int) -> Ref:
        """A dim of ``t``; a negative axis counts from the end (ranks are fixed at build)."""
        rank = t.get_rank()
        return (self._index_of(t), axis % rank)

    def dims(self, t: TensorAttributes) -> list[Ref]:
        return [self.dim(t, a) for a in range(t.get_rank())]

    def _shapes(self, shapes: Sequence[TensorAttributes]) -> list[int]:
        return [self._index_of(t) for t in shapes]

    def equal(self, refs: Sequence[Ref], message: str, shapes: Sequence[TensorAttributes] = ()) -> None:
        """Every dim in ``refs`` has the same value."""
        self.rules.append(("eq", list(refs), self._shapes(shapes), message))

    def multiple(self, a: Ref, b: Ref, message: str, shapes: Sequence[TensorAttributes] = ()) -> None:
        """``a`` is a multiple of ``b``."""
        self.rules.append(("multiple", [a, b], self._shapes(shapes), message))

    def one_or_equal(self, a: Ref, b: Ref, message: str, shapes: Sequence[TensorAttributes] = ()) -> None:
        """``a`` is 1 (broadcast) or equals ``b``."""
        self.rules.append(("one_or_eq", [a, b], self._shapes(shapes), message))

    @staticmethod
    def ref(r: Ref) -> Expr:
        return ("ref", r)

    @staticmethod
    def const(value: int) -> Expr:
        return ("const", int(value))

    def broadcast(self, refs: Sequence[Ref], message: str, shapes: Sequence[TensorAttributes] = ()) -> Expr:
        """numpy broadcasting of ``refs`` (1 stretches); ``message`` when they disagree."""
        return ("bcast", list(refs), self._shapes(shapes), message)

    def produce(
        self, t: TensorAttributes, exprs: Sequence[Expr], message: str = "", shapes: Sequence[TensorAttributes] = ()
    ) -> None:
        """``t`` has the dims ``exprs`` evaluate to. A virtual ``t`` takes them; any other must match
        (``message`` then, or the generic "has shape ... but node ... produces ..." for outputs)."""
        self.rules.append(("produce", self._index_of(t), list(exprs), self._shapes(shapes), message))


def right_aligned_broadcast(b: ShapeRules, inputs: Sequence[TensorAttributes], rank: int, message: str) -> list[Expr]:
    """Per output axis (of ``rank``), the broadcast of the inputs' right-aligned dims."""
    exprs = []
    for axis in range(rank):
        refs = []
        for t in inputs:
            offset = rank - t.get_rank()
            if axis >= offset:
                refs.append(b.dim(t, axis - offset))
        exprs.append(b.broadcast(refs, message, inputs))
    return exprs


__all__ = ["ShapeRules", "right_aligned_broadcast"]
