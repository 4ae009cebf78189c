"""hipdnnBackendExecute (spec 4.6, 5.4): the descriptor path into the compiled execute core."""

from __future__ import annotations

from hipdnn.backend.descriptors import ExecutionPlanDescriptor, VariantPackDescriptor
from hipdnn.backend.enums import BackendError, Status
from hipdnn.backend.errors import ErrorCode, HipdnnError
from hipdnn.backend.handle import BackendHandle

# The core's error codes, as the backend API's statuses.
_STATUS = {
    ErrorCode.GRAPH_NOT_SUPPORTED: Status.NOT_SUPPORTED,
    ErrorCode.HIPDNN_BACKEND_ERROR: Status.PLUGIN_ERROR,
}


def execute(handle: BackendHandle, plan: ExecutionPlanDescriptor, variant_pack: VariantPackDescriptor) -> None:
    """Run ``plan`` with ``variant_pack``. Override attributes present -> the plugin's override entry;
    absent -> the plain entry. A plugin that cannot take overrides is refused (NOT_SUPPORTED), never
    silently handed the plain entry. The override rules and the call itself are the compiled core's,
    the same that Graph.execute runs; pointers here are bare addresses, trusted."""
    if handle.closed:
        raise BackendError(Status.BAD_PARAM, "the handle is closed")
    if not plan.finalized or plan.context is None or plan.core is None:
        raise BackendError(Status.BAD_PARAM_NOT_FINALIZED, "execution plan is not finalized (or was destroyed)")
    if not variant_pack.finalized:
        raise BackendError(Status.BAD_PARAM_NOT_FINALIZED, "variant pack is not finalized")
    if plan.graph is None or plan.graph.handle is not handle:
        raise BackendError(Status.BAD_PARAM, "the plan was built on another handle")
    if plan.workspace_size > 0 and variant_pack.workspace == 0:
        raise BackendError(
            Status.BAD_PARAM_NULL_POINTER, f"the plan needs {plan.workspace_size} bytes of workspace; none given"
        )
    try:
        plan.core.execute_payload(
            [u for u, _ in variant_pack.buffers],
            [p for _, p in variant_pack.buffers],
            variant_pack.workspace,
            variant_pack.override_uids,
            variant_pack.override_lengths,
            variant_pack.override_shapes,
            variant_pack.override_strides,
        )
    except HipdnnError as exc:
        raise BackendError(_STATUS.get(exc.code, Status.BAD_PARAM), exc.message) from None
