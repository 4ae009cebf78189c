"""Frontend layer: Graph, tensors, operations, validation and execute."""

from hipdnn.frontend.graph import Graph
from hipdnn.frontend.handle import DeviceChoice, Handle, PluginLoadingMode
from hipdnn.frontend.ops.attention_options import AttentionImplementation, SdpaAttributes
from hipdnn.frontend.overrides import OverrideEntry
from hipdnn.frontend.tensor import DYNAMIC_DIM, TensorAttributes
from hipdnn.frontend.types import (
    DataType,
    DiagonalAlignment,
    ErrorCode,
    HeurMode,
    HipdnnError,
    NormFwdPhase,
    PointwiseMode,
    ReductionMode,
)

__all__ = [
    "DYNAMIC_DIM",
    "AttentionImplementation",
    "DataType",
    "DeviceChoice",
    "DiagonalAlignment",
    "ErrorCode",
    "Graph",
    "Handle",
    "HeurMode",
    "HipdnnError",
    "NormFwdPhase",
    "OverrideEntry",
    "PluginLoadingMode",
    "PointwiseMode",
    "ReductionMode",
    "SdpaAttributes",
    "TensorAttributes",
]
