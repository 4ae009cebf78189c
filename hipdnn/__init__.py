"""hipdnn: a DNN graph runtime whose engines are C-ABI plugins, with execute-time shape overrides.

import hipdnn
handle = hipdnn.Handle()
g = hipdnn.Graph(name="attn", io_data_type=hipdnn.DataType.FLOAT)
...
"""

from hipdnn.frontend import (
    DYNAMIC_DIM,
    DataType,
    DiagonalAlignment,
    ErrorCode,
    Graph,
    Handle,
    HeurMode,
    HipdnnError,
    NormFwdPhase,
    OverrideEntry,
    PluginLoadingMode,
    PointwiseMode,
    ReductionMode,
    TensorAttributes,
)
from hipdnn.plugins import LoadedPlugin, PluginFingerprint, SkippedPlugin

__version__ = "0.1.0"

__all__ = [
    "DYNAMIC_DIM",
    "DataType",
    "DiagonalAlignment",
    "ErrorCode",
    "Graph",
    "Handle",
    "HeurMode",
    "HipdnnError",
    "NormFwdPhase",
    "LoadedPlugin",
    "OverrideEntry",
    "PluginFingerprint",
    "PluginLoadingMode",
    "PointwiseMode",
    "ReductionMode",
    "SkippedPlugin",
    "TensorAttributes",
    "__version__",
]
