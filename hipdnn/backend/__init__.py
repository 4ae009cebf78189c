"""Backend layer: descriptors shaped like hipDNN's backend C API, and the host dispatcher.

It also passes on the part of the plugin layer the frontend needs (where plugins are found and what
a loaded or skipped plugin looks like), so that the frontend imports from ``hipdnn.backend`` only.
"""

from hipdnn.backend.descriptors import (
    Descriptor,
    EngineConfigDescriptor,
    EngineDescriptor,
    EngineHeurDescriptor,
    ExecutionPlanDescriptor,
    OperationGraphDescriptor,
    PluginVerdict,
    PreferredEngineError,
    TensorDescriptor,
    VariantPackDescriptor,
)
from hipdnn.backend.dispatch import execute
from hipdnn.backend.enums import AttributeName, AttributeType, BackendError, DescriptorType, HeurMode, Status
from hipdnn.backend.handle import BackendHandle
from hipdnn.plugins import (
    ENV_PLUGIN_DIR,
    Discovery,
    LoadedPlugin,
    PluginLoadingMode,
    SkippedPlugin,
    builtin_engine_dirs,
    describe,
    discover_candidates,
    env_plugin_dirs,
)

__all__ = [
    "ENV_PLUGIN_DIR",
    "AttributeName",
    "AttributeType",
    "BackendError",
    "BackendHandle",
    "Descriptor",
    "DescriptorType",
    "Discovery",
    "EngineConfigDescriptor",
    "EngineDescriptor",
    "EngineHeurDescriptor",
    "ExecutionPlanDescriptor",
    "HeurMode",
    "LoadedPlugin",
    "OperationGraphDescriptor",
    "PluginLoadingMode",
    "PluginVerdict",
    "PreferredEngineError",
    "SkippedPlugin",
    "Status",
    "TensorDescriptor",
    "VariantPackDescriptor",
    "builtin_engine_dirs",
    "describe",
    "discover_candidates",
    "env_plugin_dirs",
    "execute",
]
