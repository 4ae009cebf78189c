"""The compiled execute path, as the backend's public names (rfcs/0007-native-execute-core.md).

``hipdnn.backend._execute_core`` is a CPython extension built with the package. It holds, per plan,
everything a call is checked against (frozen at build) and runs the whole call: the variant pack,
the override rules of spec 4.2.1, the nodes' shape rules on the effective shapes, the buffer
bounds, the dispatch between the plain and the override entry, and the plugin call with the GIL
released. This module hands it the Python objects it needs once, at import.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from hipdnn.backend import values
from hipdnn.backend.enums import ITEMSIZE, DataType
from hipdnn.backend.errors import ErrorCode, HipdnnError

log = logging.getLogger("hipdnn.backend")


LOCATION_CODES = {"unknown": 0, "host": 1, "device": 2}


def _load_extension() -> ModuleType:
    """The extension from this package, or, when a source checkout shadows an installed copy
    (python run from the repository root after a non-editable install), from the installation."""
    try:
        from hipdnn.backend import _execute_core

        return _execute_core  # type: ignore[no-any-return, unused-ignore]
    except ImportError as exc:
        first = exc
    try:
        files = importlib.metadata.files("hipdnn") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        parts = Path(str(f)).parts
        if parts[:2] == ("hipdnn", "backend") and parts[-1].startswith("_execute_core."):
            location = Path(str(f.locate()))
            if location.suffix in importlib.machinery.EXTENSION_SUFFIXES or location.name.endswith(".so"):
                spec = importlib.util.spec_from_file_location("hipdnn.backend._execute_core", location)
                if spec is not None and spec.loader is not None:
                    module = importlib.util.module_from_spec(spec)
                    spec.loader.exec_module(module)
                    return module
    raise ImportError(
        f"hipdnn's compiled execute core is missing ({first}); reinstall the package (pip install .)"
    ) from first


_core = _load_extension()
if TYPE_CHECKING:
    from hipdnn.backend._execute_core import Binding, Executor, Gate, PlanCore, SdpaCalls
else:
    Gate, PlanCore, Executor, Binding = _core.Gate, _core.PlanCore, _core.Executor, _core.Binding
    SdpaCalls = _core.SdpaCalls


def _log_refusal(message: str) -> None:
    # spec 7.1: overrides refused on a graph built without the flag leave a record
    log.warning("%s", message)


_settings: dict[str, Any] = {
    "error_type": HipdnnError,
    "error_codes": {code.value: code for code in ErrorCode},
    "ndarray_type": np.ndarray,
    "np_integer_type": np.integer,
    "tensor_type": None,
    "entry_type": None,
    "mapping_abc": Mapping,
    "resolver": values.resolve,
    "torch_test": values.is_torch_tensor,
    "torch_dtype_info": values.torch_dtype_info,
    "refusal_logger": _log_refusal,
    "dtype_names": [{d.value: d.name for d in DataType}.get(i, f"DataType({i})") for i in range(32)],
    "itemsizes": [ITEMSIZE.get(i, 0) for i in range(32)],
}


def configure(**settings: Any) -> None:
    """Replace some of the objects the core uses: the frontend registers its tensor and
    override-entry types here, so that the core names another graph's tensor in its errors and
    type-checks override entries without this layer importing the frontend."""
    unknown = set(settings) - set(_settings)
    if unknown:
        raise TypeError(f"unknown execute-core settings {sorted(unknown)}")
    _settings.update(settings)
    _core.configure(**_settings)


configure()


#: ``strides_overlap(dims, strides) -> bool``: whether two distinct indices of the layout can address
#: one element (conservative for interleaved layouts: see ``layout_overlaps`` in the core). The rule
#: execute applies to the strides of outputs, for graph validation to apply to declared ones.
strides_overlap: Callable[[Sequence[int], Sequence[int]], bool] = _core.strides_overlap


#: ``thread_workspace(size) -> int``: this thread's workspace of at least ``size`` bytes (0 for 0),
#: 64-byte aligned, owned by the core and valid until a larger one is asked for on this thread.
thread_workspace: Callable[[int], int] = _core.thread_workspace


def check_buffer(
    resolved: tuple[Any, ...] | None,
    where: str,
    data_type: int,
    dims: Any,
    strides: Any,
    overridden: bool,
) -> None:
    """The core's buffer rule for one resolved value (exact dtype, layout, bytes in bounds); raises
    HipdnnError(INVALID_VALUE). None (a bare pointer) passes: it cannot be checked."""
    _core.check_buffer(resolved, where, int(data_type), list(dims), list(strides), bool(overridden))


__all__ = [
    "ITEMSIZE",
    "LOCATION_CODES",
    "Binding",
    "Executor",
    "Gate",
    "PlanCore",
    "SdpaCalls",
    "check_buffer",
    "configure",
    "strides_overlap",
    "thread_workspace",
]
