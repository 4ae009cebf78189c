"""The error every layer above the plugins raises to users: a code and a message naming the culprit.

Defined here, in the backend, because the compiled execute core raises it directly; the frontend
re-exports it as ``hipdnn.HipdnnError``."""

from __future__ import annotations

from enum import Enum


class ErrorCode(Enum):
    """What kind of failure a :class:`HipdnnError` reports (its ``.code``): hipdnn_frontend::ErrorCode."""

    OK = 0
    INVALID_VALUE = 1
    HIPDNN_BACKEND_ERROR = 2
    ATTRIBUTE_NOT_SET = 3
    GRAPH_NOT_SUPPORTED = 4
    SHAPE_DEDUCTION_FAILED = 5
    INVALID_TENSOR_NAME = 6
    INVALID_VARIANT_PACK = 7
    GRAPH_EXECUTION_PLAN_CREATION_FAILED = 8
    GRAPH_EXECUTION_FAILED = 9
    HEURISTIC_QUERY_FAILED = 10
    UNSUPPORTED_GRAPH_FORMAT = 11


class HipdnnError(Exception):
    """Every failure of the frontend: ``code`` is an :class:`ErrorCode`, the message names the
    tensor, node or plugin at fault."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"[{code.name}] {message}")
        self.code = code
        self.message = message
