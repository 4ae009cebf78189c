"""Numeric identifiers of the backend API, numbered as hipDNN numbers them."""

from __future__ import annotations

from enum import IntEnum


class NamedIntEnum(IntEnum):
    """An IntEnum of the user-facing API: ``str()`` and ``format()`` give ``DataType.FLOAT`` (as
    Python 3.10 printed every IntEnum; from 3.11 IntEnum prints its number), while comparisons,
    arithmetic and ``int()`` stay an int's. Integer format specs (``f"{dt:d}"``) still format the number."""

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __format__(self, spec: str) -> str:
        if spec and spec[-1] in "bcdoxXn":
            return int.__format__(self, spec)
        return format(str(self), spec)


class Status(IntEnum):
    """hipdnnStatus_t."""

    SUCCESS = 0
    NOT_INITIALIZED = 1
    BAD_PARAM = 2
    BAD_PARAM_NULL_POINTER = 3
    BAD_PARAM_NOT_FINALIZED = 4
    BAD_PARAM_OUT_OF_BOUND = 5
    BAD_PARAM_SIZE_INSUFFICIENT = 6
    BAD_PARAM_STREAM_MISMATCH = 7
    NOT_SUPPORTED = 8
    INTERNAL_ERROR = 9
    ALLOC_FAILED = 10
    INTERNAL_ERROR_HOST_ALLOCATION_FAILED = 11
    INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED = 12
    EXECUTION_FAILED = 13
    PLUGIN_ERROR = 14


class DescriptorType(IntEnum):
    """hipdnnBackendDescriptorType_t (the kinds this backend implements)."""

    INVALID_TYPE_EXT = 0
    ENGINE_DESCRIPTOR = 1
    ENGINECFG_DESCRIPTOR = 2
    ENGINEHEUR_DESCRIPTOR = 3
    EXECUTION_PLAN_DESCRIPTOR = 4
    OPERATIONGRAPH_DESCRIPTOR = 10
    VARIANT_PACK_DESCRIPTOR = 11
    TENSOR_DESCRIPTOR = 14


class AttributeType(IntEnum):
    """hipdnnBackendAttributeType_t."""

    HANDLE = 0
    DATA_TYPE = 1
    BOOLEAN = 2
    INT64 = 3
    FLOAT = 4
    DOUBLE = 5
    VOID_PTR = 6
    HEUR_MODE = 7
    CHAR = 19
    BACKEND_DESCRIPTOR = 13
    FLATBUFFER_DATA_STRUCT_EXT = 10000


class AttributeName(IntEnum):
    """hipdnnBackendAttributeName_t (HIPDNN_ATTR_ prefix dropped)."""

    ENGINEHEUR_MODE = 100
    ENGINEHEUR_OPERATION_GRAPH = 101
    ENGINEHEUR_RESULTS = 102
    ENGINECFG_ENGINE = 200
    ENGINECFG_KNOB_CHOICES = 202
    ENGINECFG_WORKSPACE_SIZE = 203
    EXECUTION_PLAN_HANDLE = 300
    EXECUTION_PLAN_ENGINE_CONFIG = 301
    EXECUTION_PLAN_WORKSPACE_SIZE = 302
    OPERATIONGRAPH_HANDLE = 600
    OPERATIONGRAPH_OPS = 601
    OPERATIONGRAPH_ENGINE_GLOBAL_COUNT = 602
    OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED = 603
    OPERATIONGRAPH_COMPUTE_DATA_TYPE_EXT = 604
    OPERATIONGRAPH_INTERMEDIATE_DATA_TYPE_EXT = 605
    OPERATIONGRAPH_IO_DATA_TYPE_EXT = 606
    OPERATIONGRAPH_PREFERRED_ENGINE_ID_EXT = 607
    OPERATIONGRAPH_NAME_EXT = 608
    OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT = 609
    VARIANT_PACK_UNIQUE_IDS = 700
    VARIANT_PACK_DATA_POINTERS = 701
    VARIANT_PACK_INTERMEDIATES = 702
    VARIANT_PACK_WORKSPACE = 703
    VARIANT_PACK_OVERRIDE_UNIQUE_IDS_EXT = 704
    VARIANT_PACK_OVERRIDE_SHAPES_EXT = 705
    VARIANT_PACK_OVERRIDE_STRIDES_EXT = 706
    VARIANT_PACK_OVERRIDE_LENGTHS_EXT = 707
    ENGINE_OPERATION_GRAPH = 1000
    ENGINE_GLOBAL_INDEX = 1001
    ENGINE_KNOB_INFO = 1002
    ENGINE_BEHAVIOR_NOTE = 1005
    TENSOR_UNIQUE_ID = 1300
    TENSOR_NAME_EXT = 1301
    TENSOR_DATA_TYPE = 1302
    TENSOR_DIMENSIONS = 1303
    TENSOR_STRIDES = 1304
    TENSOR_IS_VIRTUAL = 1305
    TENSOR_VALUE_EXT = 1306
    TENSOR_IS_BY_VALUE = 1307
    #: Phase 2; hipDNN had not numbered it in the headers we read, so we take the next free id.
    TENSOR_IS_DYNAMIC_EXT = 1308


class HeurMode(NamedIntEnum):
    """Heuristic modes (hipDNN frontend numbering)."""

    FALLBACK = 0
    A = 1
    B = 2
    OPENSOURCE = 3


class BackendError(Exception):
    """A backend call failed with ``status``."""

    def __init__(self, status: Status, message: str) -> None:
        self.status = status
        super().__init__(f"{status.name}: {message}")
        self.message = message


class DataType(NamedIntEnum):
    """Element types, numbered as the wire format (and hipDNN's schema) numbers them."""

    NOT_SET = 0
    FLOAT = 1
    HALF = 2
    BFLOAT16 = 3
    DOUBLE = 4
    UINT8 = 5
    INT32 = 6
    INT8 = 7
    FP8_E4M3 = 8
    FP8_E5M2 = 9
    FP8_E8M0 = 10
    FP4_E2M1 = 11
    FP6_E2M3 = 12
    FP6_E3M2 = 13
    INT4 = 14
    INT64 = 15
    FP8_E4M3_FNUZ = 16
    FP8_E5M2_FNUZ = 17


#: bytes per element of each data type that is a whole number of bytes
ITEMSIZE: dict[int, int] = {
    DataType.FLOAT: 4,
    DataType.HALF: 2,
    DataType.BFLOAT16: 2,
    DataType.DOUBLE: 8,
    DataType.INT8: 1,
    DataType.UINT8: 1,
    DataType.INT32: 4,
    DataType.INT64: 8,
    DataType.FP8_E4M3: 1,
    DataType.FP8_E5M2: 1,
    DataType.FP8_E4M3_FNUZ: 1,
    DataType.FP8_E5M2_FNUZ: 1,
    DataType.FP8_E8M0: 1,
}
