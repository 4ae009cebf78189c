"""Enumerations and errors of the user-facing API (names as in cudnn-frontend and hipDNN)."""

from __future__ import annotations

from hipdnn.backend.enums import DataType, HeurMode, NamedIntEnum
from hipdnn.backend.errors import ErrorCode, HipdnnError


class PointwiseMode(NamedIntEnum):
    """Pointwise operations, numbered as hipDNN numbers them."""

    ABS = 1
    ADD = 2
    ADD_SQUARE = 3
    BINARY_SELECT = 4
    CEIL = 5
    CMP_EQ = 6
    CMP_GE = 7
    CMP_GT = 8
    CMP_LE = 9
    CMP_LT = 10
    CMP_NEQ = 11
    DIV = 12
    ELU_BWD = 13
    ELU_FWD = 14
    ERF = 15
    EXP = 16
    FLOOR = 17
    GELU_APPROX_TANH_BWD = 18
    GELU_APPROX_TANH_FWD = 19
    GELU_BWD = 20
    GELU_FWD = 21
    GEN_INDEX = 22
    IDENTITY = 23
    LOG = 24
    LOGICAL_AND = 25
    LOGICAL_NOT = 26
    LOGICAL_OR = 27
    MAX = 28
    MIN = 29
    MUL = 30
    NEG = 31
    RECIPROCAL = 32
    RELU_BWD = 33
    RELU_FWD = 34
    RSQRT = 35
    SIGMOID_BWD = 36
    SIGMOID_FWD = 37
    SIN = 38
    SOFTPLUS_BWD = 39
    SOFTPLUS_FWD = 40
    SQRT = 41
    SUB = 42
    SWISH_BWD = 43
    SWISH_FWD = 44
    TAN = 45
    TANH_BWD = 46
    TANH_FWD = 47

    # Spellings used by the wire format.
    MAX_OP = 28
    MIN_OP = 29


#: How many inputs each pointwise mode takes; modes missing here take 2.
POINTWISE_ARITY: dict[PointwiseMode, int] = {
    **{
        m: 1
        for m in (
            PointwiseMode.ABS,
            PointwiseMode.CEIL,
            PointwiseMode.ELU_FWD,
            PointwiseMode.ERF,
            PointwiseMode.EXP,
            PointwiseMode.FLOOR,
            PointwiseMode.GELU_APPROX_TANH_FWD,
            PointwiseMode.GELU_FWD,
            PointwiseMode.IDENTITY,
            PointwiseMode.LOG,
            PointwiseMode.LOGICAL_NOT,
            PointwiseMode.NEG,
            PointwiseMode.RECIPROCAL,
            PointwiseMode.RELU_FWD,
            PointwiseMode.RSQRT,
            PointwiseMode.SIGMOID_FWD,
            PointwiseMode.SIN,
            PointwiseMode.SOFTPLUS_FWD,
            PointwiseMode.SQRT,
            PointwiseMode.SWISH_FWD,
            PointwiseMode.TAN,
            PointwiseMode.TANH_FWD,
            PointwiseMode.GEN_INDEX,
        )
    },
    PointwiseMode.BINARY_SELECT: 3,
}


class DiagonalAlignment(NamedIntEnum):
    """Where a causal mask or band's diagonal starts: at the top-left corner of the scores, or at the
    bottom-right (offset by Skv - Sq)."""

    TOP_LEFT = 0
    BOTTOM_RIGHT = 1


class ReductionMode(NamedIntEnum):
    """Reduction operations, numbered as hipDNN numbers them."""

    ADD = 1
    MUL = 2
    MIN = 3
    MAX = 4
    AMAX = 5
    AVG = 6
    NORM1 = 7
    NORM2 = 8
    MUL_NO_ZEROS = 9

    # Spellings used by the wire format.
    MIN_OP = 3
    MAX_OP = 4


class NormFwdPhase(NamedIntEnum):
    """INFERENCE writes y only; TRAINING also the statistics (inv_rms, or mean and inv_variance)."""

    INFERENCE = 0
    TRAINING = 1


__all__ = [
    "POINTWISE_ARITY",
    "DataType",
    "DiagonalAlignment",
    "ErrorCode",
    "HeurMode",
    "HipdnnError",
    "NormFwdPhase",
    "PointwiseMode",
    "ReductionMode",
]
