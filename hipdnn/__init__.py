"""hipdnn: a DNN graph runtime whose engines are C-ABI plugins, with execute-time shape overrides.

The public names are those of ``__all__`` (``hipdnn.torch`` and ``hipdnn.device`` add their own). A start::

    import hipdnn
    handle = hipdnn.Handle()
    g = hipdnn.Graph(name="attn", io_data_type=hipdnn.DataType.FLOAT)
    ...
"""

import logging as _logging
from importlib import metadata as _metadata

from hipdnn.frontend import (
    DYNAMIC_DIM,
    AttentionImplementation,
    DataType,
    DeviceChoice,
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
    SdpaAttributes,
    TensorAttributes,
)
from hipdnn.plugins import LoadedPlugin, PluginFingerprint, SkippedPlugin

# A library logs and the application decides where records go: without this, Python's last-resort
# handler would print hipdnn's warnings on stderr in programs that never configured logging.
_logging.getLogger("hipdnn").addHandler(_logging.NullHandler())

# Written once, in pyproject.toml; the engines report the same string (HIPDNN_VERSION in CMake).
try:
    #: The installed distribution's version ("0+unknown" for a source tree imported uninstalled).
    __version__ = _metadata.version("hipdnn")
except _metadata.PackageNotFoundError:  # a source tree imported without being installed
    __version__ = "0+unknown"

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
    "LoadedPlugin",
    "OverrideEntry",
    "PluginFingerprint",
    "PluginLoadingMode",
    "PointwiseMode",
    "ReductionMode",
    "SdpaAttributes",
    "SkippedPlugin",
    "TensorAttributes",
    "__version__",
]
