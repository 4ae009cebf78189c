"""Backend layer: descriptors shaped like hipDNN's backend C API, and the host dispatcher."""

from hipdnn.backend.descriptors import (
    Descriptor,
    EngineConfigDescriptor,
    EngineDescriptor,
    EngineHeurDescriptor,
    ExecutionPlanDescriptor,
    OperationGraphDescriptor,
    PluginVerdict,
    TensorDescriptor,
    VariantPackDescriptor,
)
from hipdnn.backend.dispatch import execute
from hipdnn.backend.enums import AttributeName, AttributeType, BackendError, DescriptorType, HeurMode, Status
from hipdnn.backend.handle import BackendHandle

__all__ = [
    "AttributeName",
    "AttributeType",
    "BackendError",
    "BackendHandle",
    "Descriptor",
    "DescriptorType",
    "EngineConfigDescriptor",
    "EngineDescriptor",
    "EngineHeurDescriptor",
    "ExecutionPlanDescriptor",
    "HeurMode",
    "OperationGraphDescriptor",
    "PluginVerdict",
    "Status",
    "TensorDescriptor",
    "VariantPackDescriptor",
    "execute",
]
