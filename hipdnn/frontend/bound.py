"""Pre-bound execute: the serving loop's fast path.

``Graph.bind`` returns a :class:`BoundExecute`, the compiled core's binding: uid order, the plugin
entry and the override uids are resolved once, so a call only reads pointers and override values,
checks the overrides by the same rules as ``Graph.execute`` and calls the plugin. Pointers are
trusted to hold each tensor at its declared maximum shape and strides, and no override may address
more memory than that.

:class:`SdpaCalls` is a table of such bindings by attention kind that reads torch tensors itself:
hipdnn.torch's CPU short path (rfcs/0010-torch-integration.md, "The short path"); ``thread_workspace``
is the per-thread CPU workspace both it and hipdnn.torch's bound calls use.
"""

from __future__ import annotations

from hipdnn.backend.execute_core import Binding as BoundExecute
from hipdnn.backend.execute_core import SdpaCalls, thread_workspace

__all__ = ["BoundExecute", "SdpaCalls", "thread_workspace"]
