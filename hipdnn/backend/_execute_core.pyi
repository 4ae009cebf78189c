# Types of the compiled execute core (hipdnn/backend/native/execute_core.cpp).
from collections.abc import Sequence
from typing import Any

class Gate:
    closed: bool
    def close(self) -> None: ...

class PlanCore:
    location: int
    inflight: int
    released: bool
    def __init__(
        self,
        gate: Gate,
        entries: tuple[int, int, int],
        plugin_handle: int,
        context: int,
        workspace_size: int,
        location: int,
        override_enabled: bool,
        override_refusal: str,
        graph_name: str,
        plugin_name: str,
        engine_id: int,
        tensors: Sequence[tuple[int, str, int, Sequence[int], Sequence[int], bool, bool]],
    ) -> None: ...
    def release(self) -> None: ...
    def execute_payload(
        self,
        uids: Sequence[int],
        ptrs: Sequence[int],
        workspace: int,
        override_uids: Sequence[int],
        override_lengths: Sequence[int],
        override_shapes: Sequence[int],
        override_strides: Sequence[int],
    ) -> None: ...

class Binding:
    uids: list[int]
    override_uids: list[int]
    def __call__(
        self,
        ptrs: Sequence[int],
        workspace: int = 0,
        override_shapes: Sequence[Sequence[int]] | None = None,
        override_strides: Sequence[Sequence[int]] | None = None,
    ) -> None: ...
    def call_tensors(self, tensors: Sequence[Any], workspace: int = 0) -> bool: ...

class SdpaCalls:
    """hipdnn.torch's compiled short path for attention on plain CPU tensors (sdpa_calls.cpp)."""

    hits: int
    def __init__(
        self,
        tensor_type: type,
        empty_permuted: Any,
        is_grad_enabled: Any,
        cpu_device: Any,
        layouts: tuple[tuple[int, ...], ...],
        to_bias: Any,
        bool_dtype: Any,
        float32: Any,
        function_modes: Any,
        dispatch_depth: Any,
    ) -> None: ...
    def __call__(
        self,
        q: Any,
        k: Any,
        v: Any,
        causal: bool,
        scale: float | None,
        enable_gqa: bool,
        bottom_right: bool,
        mask: Any = None,
        /,
    ) -> Any: ...
    def __len__(self) -> int: ...
    def put(
        self,
        binding: Binding,
        dtype: Any,
        heads: int,
        kv_heads: int,
        head_dim: int,
        value_dim: int,
        scale: float,
        causal: bool,
        bottom_right: bool,
        codes: int,
        cap_b: int,
        cap_sq: int,
        cap_skv: int,
        bias_dtype: Any = None,
        bias_batched: bool = False,
        bias_per_head: bool = False,
        bias_code: int = 0,
        /,
    ) -> None: ...
    def clear(self) -> None: ...

class Executor:
    plan: PlanCore
    def __init__(
        self,
        plan: PlanCore,
        keys: dict[Any, int],
        rules: Sequence[Any],
        stream_source: Any,
        outputs: Sequence[int] = (),
    ) -> None: ...
    def execute(
        self,
        variant_pack: Any,
        workspace: Any,
        override_uids: Any,
        override_shapes: Any,
        override_strides: Any,
        overrides: Any,
    ) -> None: ...
    def bind(self, uids: Sequence[Any], override_uids: Sequence[Any]) -> Binding: ...

def configure(**settings: Any) -> None: ...
def thread_workspace(size: int) -> int: ...
def strides_overlap(dims: Sequence[int], strides: Sequence[int]) -> bool: ...
def check_buffer(
    resolved: tuple[Any, ...] | None,
    where: str,
    data_type: int,
    dims: Sequence[int],
    strides: Sequence[int],
    overridden: bool,
) -> None: ...
def elements_meet(
    ptr_a: int,
    itemsize_a: int,
    dims_a: Sequence[int],
    strides_a: Sequence[int],
    ptr_b: int,
    itemsize_b: int,
    dims_b: Sequence[int],
    strides_b: Sequence[int],
) -> bool: ...
