"""hipdnnBackendExecute and the host dispatch switch (spec 4.6, 5.4)."""

from __future__ import annotations

from hipdnn.backend.descriptors import ExecutionPlanDescriptor, VariantPackDescriptor
from hipdnn.backend.enums import BackendError, Status
from hipdnn.backend.handle import BackendHandle
from hipdnn.plugins import OVERRIDE_API_VERSION, PluginError


def execute(handle: BackendHandle, plan: ExecutionPlanDescriptor, variant_pack: VariantPackDescriptor) -> None:
    """Run ``plan`` with ``variant_pack``. Override attributes present -> the plugin's override entry;
    absent -> the plain entry. A plugin that cannot take overrides is refused (NOT_SUPPORTED), never
    silently handed the plain entry."""
    if handle.closed:
        raise BackendError(Status.BAD_PARAM, "the handle is closed")
    if not plan.finalized or plan.context is None or plan.plugin is None:
        raise BackendError(Status.BAD_PARAM_NOT_FINALIZED, "execution plan is not finalized (or was destroyed)")
    if not variant_pack.finalized:
        raise BackendError(Status.BAD_PARAM_NOT_FINALIZED, "variant pack is not finalized")
    if plan.graph is None or plan.graph.handle is not handle:
        raise BackendError(Status.BAD_PARAM, "the plan was built on another handle")
    plugin = plan.plugin
    if plan.workspace_size > 0 and variant_pack.workspace == 0:
        raise BackendError(
            Status.BAD_PARAM_NULL_POINTER, f"the plan needs {plan.workspace_size} bytes of workspace; none given"
        )
    try:
        if variant_pack.has_overrides:
            if plugin.api_version < OVERRIDE_API_VERSION:
                raise BackendError(
                    Status.NOT_SUPPORTED,
                    f"plugin {plugin.name!r} reports api {plugin.api_version} < {OVERRIDE_API_VERSION}; "
                    "it cannot take overrides",
                )
            if not plugin.has_override_execute:
                raise BackendError(
                    Status.NOT_SUPPORTED,
                    f"plugin {plugin.name!r} reports api {plugin.api_version} but does not export "
                    "hipdnnEnginePluginExecuteOpGraphWithOverrides",
                )
            if not plan.is_override_shape_enabled:
                # The engine was chosen for a graph whose shapes are fixed; it was never asked
                # whether it can serve other shapes.
                raise BackendError(
                    Status.BAD_PARAM,
                    "override attributes on a plan whose graph was built without IS_OVERRIDE_SHAPE_ENABLED_EXT",
                )
            plugin.execute_with_overrides(
                plan.context,
                variant_pack.workspace,
                variant_pack.buffers,
                variant_pack.override_uids,
                variant_pack.override_lengths,
                variant_pack.override_shapes,
                variant_pack.override_strides,
            )
        else:
            plugin.execute(plan.context, variant_pack.workspace, variant_pack.buffers)
    except PluginError as exc:
        raise BackendError(Status.PLUGIN_ERROR, str(exc)) from None
