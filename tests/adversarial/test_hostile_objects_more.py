"""More hostile objects against the execute core: borrowed pointers held across Python code, element
sizes and types the core read but did not check. Each case runs in a child process of its own
(``python -m tests.adversarial.test_hostile_objects_more CASE``), so that a crash fails its case with
the signal instead of ending pytest.

Before the fixes:

* ``Executor(plan, keys, ...)`` read each uid of ``keys`` through its ``__index__`` while holding the
  dict's key by a borrowed pointer: an ``__index__`` that empties the dict freed the key, which the
  core then took a reference to (a segfault at exit).
* ``PlanCore(..., tensors)`` read a tensor's dims (``__index__`` again) while holding the entry, and
  the name read from it, by borrowed pointers: emptying the list freed both (a segfault).
* ``Executor(plan, keys, rules, ...)`` read its shape rules the same way: a rule's message was copied
  from a freed string (read garbage in the plain build, a heap-use-after-free under ASan).
* A torch tensor's dtype name was copied from the core's dtype cache after the tensor's accessors ran:
  a tensor subclass whose ``shape`` made a nested call meet a dtype comparing equal to its own
  replaced the cache's record and freed the name (the refusal then named "is_cuda" or garbage).
* A torch dtype stating an element size of 2**40 (``itemsize`` of a foreign dtype) was truncated to
  an int 0, which the layout code shifted by ``ctz(0)`` (undefined; UBSan's shift report).
* ``Binding.call_tensors`` never read a tensor's dtype: float16 tensors for a float32 graph had the
  engine read and write twice their bytes (a write past the output, seen in its guard band).
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hipdnn
from hipdnn import DataType, HipdnnError

ROOT = Path(__file__).resolve().parents[2]
MARKER = "HOSTILE-MORE-RESULT "
F = DataType.FLOAT
HAS_TORCH = importlib.util.find_spec("torch") is not None


# -- building blocks (run in the child) --------------------------------------------------------------
def _handle() -> hipdnn.Handle:
    return hipdnn.Handle(device="cpu")


def _add(h: hipdnn.Handle, flag: bool = True) -> tuple[hipdnn.Graph, Any, Any, Any]:
    """A built graph z = x + y, all [3, 7] fp32, row-major."""
    g = hipdnn.Graph(name="add", io_data_type=F, is_override_shape_enabled=flag)
    x = g.tensor(name="x", dim=[3, 7], stride=[7, 1], data_type=F)
    y = g.tensor(name="y", dim=[3, 7], stride=[7, 1], data_type=F)
    z = g.add(x, y)
    z.set_name("z").set_output(True).set_stride([7, 1])
    g.build(h)
    return g, x, y, z


def _churn(size: int) -> list[Any]:
    """Reuses freed memory: strings of ``size`` characters (a freed string's size class) and tuples."""
    gc.collect()
    return [("#" * (size - 6)) + f"{i:06d}" for i in range(4000)] + [(i, -i, None) for i in range(4000)]


class Evil:
    """An int-like whose ``__index__`` runs ``act`` once (then collects and churns the heap)."""

    def __init__(self, value: int, act: Callable[[], object], churn: int = 64) -> None:
        self.value = value
        self.act: Callable[[], object] | None = act
        self.churn = churn
        self.junk: list[Any] = []

    def __index__(self) -> int:
        act, self.act = self.act, None
        if act is not None:
            act()
            self.junk = _churn(self.churn)
        return self.value


# -- the cases ---------------------------------------------------------------------------------------
class Key:
    """A tensor key of no graph (Executor takes any hashable object)."""


def case_executor_keys_emptied() -> None:
    """Executor's keys dict is emptied by a uid's __index__; its key lived in the dict only. Keys
    made right after reuse the freed one's memory: the core's reference must not land on one."""
    from hipdnn.backend.execute_core import Executor

    h = _handle()
    g, x, y, z = _add(h)
    assert g._executor is not None
    keys: dict[Any, Any] = {}
    spawned: list[Key] = []

    def act() -> None:
        keys.clear()
        spawned.extend(Key() for _ in range(64))

    key = Key()
    keys[key] = Evil(int(x.get_uid()), act)
    del key
    ex = Executor(g._executor.plan, keys, [], h.backend)
    counts = {sys.getrefcount(k) for k in spawned}
    assert len(counts) == 1, f"the core took a reference to a key that was freed and reused: {counts}"
    del ex
    gc.collect()


def case_plan_core_tensors_emptied() -> None:
    """PlanCore's tensor list is emptied by a dim's __index__; the entry and its name lived in it only."""
    from hipdnn.backend.execute_core import PlanCore

    h = _handle()
    tensors: list[Any] = []
    name = "tensor-" + "n" * 40 + str(id(tensors))
    tensors.append((1, name, int(F), [Evil(3, tensors.clear, len(name)), 7], [7, 1], False, False))
    del name
    core = PlanCore(h.backend.gate, (1, 0, 0), 0, 0, 0, 1, 0, "", "g", "p", 0, tensors)
    del core
    gc.collect()


RULE_MESSAGE_SIZE = 72


def case_executor_rules_emptied() -> None:
    """A shape rule's tensor list holds an __index__ that empties the rules list: the rule (and its
    message) lived in that list only. The message must reach the refusal intact."""
    from hipdnn.backend.execute_core import Executor

    h = _handle()
    g, x, y, z = _add(h)
    assert g._executor is not None
    rules: list[Any] = []
    message = ("rule message " + "m" * RULE_MESSAGE_SIZE)[: RULE_MESSAGE_SIZE - 8] + f"{id(rules) % 10**8:08d}"
    want = message.encode().decode()  # an equal string, not the same object: the rule holds the message
    rules.append(("eq", [(0, 0), (1, 0)], [0, Evil(1, rules.clear, RULE_MESSAGE_SIZE)], message))
    del message
    ex = Executor(
        g._executor.plan,
        {x: x.get_uid(), y: y.get_uid(), z: z.get_uid()},
        [("n: ", "n", rules)],
        h.backend,
        [z.get_uid()],
    )
    a = np.ones((3, 7), np.float32)
    # an override of x alone breaks the rule x.dim[0] == y.dim[0]: the refusal shows the message
    with_override = ({x: a[:2], y: a.copy(), z: np.zeros((3, 7), np.float32)}, None, [x], [[2, 7]], [[7, 1]], None)
    try:
        ex.execute(*with_override)
    except HipdnnError as e:
        assert e.message == "n: " + want, repr(e.message)
        return
    raise AssertionError("the rule was not applied")


def case_executor_refs_emptied() -> None:
    """A rule's refs list is emptied by an __index__ inside one of its (tensor, axis) pairs: the pair
    was read by a borrowed pointer while its own items were converted (ASan: heap-use-after-free)."""
    from hipdnn.backend.execute_core import Executor

    h = _handle()
    g, x, y, z = _add(h)
    assert g._executor is not None
    refs: list[Any] = [(0, 0)]
    refs.append((Evil(1, refs.clear, 40), 0))
    Executor(g._executor.plan, {x: x.get_uid()}, [("n: ", "n", [("eq", refs, [], "m")])], h.backend)


def _torch_float64_name_case() -> None:
    import torch

    h = _handle()
    g, x, y, z = _add(h)
    g2, x2, y2, z2 = _add(h)
    ya = np.ones((3, 7), np.float32)

    def refused_dtype(g: hipdnn.Graph, pack: dict[Any, Any]) -> str:
        try:
            g.execute(h, pack)
        except HipdnnError as e:
            return e.message
        raise AssertionError("a float64 tensor was accepted by a float32 graph")

    first = refused_dtype(g, {x: torch.ones(3, 7, dtype=torch.float64), y: ya, z: np.zeros((3, 7), np.float32)})
    assert "buffer dtype torch.float64 disagrees" in first, first  # torch.float64's record is cached now

    class Twin:
        """Hashes as torch.float64, and equals it once str() was asked (after the core's cache lookup
        missed): storing it replaces the cached record of torch.float64."""

        itemsize = 8

        def __init__(self) -> None:
            self.on = False

        def __hash__(self) -> int:
            return hash(torch.float64)

        def __eq__(self, other: object) -> bool:
            return self.on and other is torch.float64

        def __str__(self) -> str:
            self.on = True
            return "torch.float64-twin"

    class Inner(torch.Tensor):
        @property
        def dtype(self) -> Any:  # type: ignore[override]
            return Twin()

    class Outer(torch.Tensor):
        junk: list[Any] = []

        @property
        def shape(self) -> Any:  # type: ignore[override]
            if not Outer.junk:
                inner = torch.ones(3, 7).as_subclass(Inner)
                with contextlib.suppress(HipdnnError):
                    g2.execute(h, {x2: inner, y2: ya, z2: np.zeros((3, 7), np.float32)})
                Outer.junk = _churn(len("torch.float64"))
            return torch.Tensor.shape.__get__(self)  # type: ignore[attr-defined]

    outer = torch.ones(3, 7, dtype=torch.float64).as_subclass(Outer)
    message = refused_dtype(g, {x: outer, y: ya, z: np.zeros((3, 7), np.float32)})
    assert "buffer dtype torch.float64 disagrees with FLOAT" in message, message


def case_torch_dtype_name_outlives_the_cache_record() -> None:
    _torch_float64_name_case()


def case_torch_dtype_itemsize_past_int() -> None:
    """A torch tensor subclass whose dtype states 2**40-byte elements: refused by dtype, with no
    arithmetic on a truncated element size (UBSan: shift exponent 64)."""
    import torch

    class Foreign:
        itemsize = 2**40

        def __str__(self) -> str:
            return "foreign.thing"

    class T(torch.Tensor):
        @property
        def dtype(self) -> Any:  # type: ignore[override]
            return Foreign()

    h = _handle()
    g, x, y, z = _add(h)
    g.execute(h, {x: torch.ones(3, 7).as_subclass(T), y: np.ones((3, 7), np.float32), z: np.zeros((3, 7), np.float32)})


def _call_tensors_case(dtype_name: str) -> None:
    import torch

    dtype = getattr(torch, dtype_name)
    h = _handle()
    g, x, y, z = _add(h)
    bound = g.bind(h, [x, y, z], override_uids=[x, y, z])
    arena = torch.full((256,), 7, dtype=dtype)
    xt, yt = torch.ones(3, 7, dtype=dtype), torch.ones(3, 7, dtype=dtype)
    zt = arena[64:85].view(3, 7)
    zt.zero_()
    try:
        bound.call_tensors([xt, yt, zt], 0)
    finally:
        assert bool((arena[:64] == 7).all()) and bool((arena[85:] == 7).all()), "wrote outside the output tensor"
        assert bool((zt == 0).all()), "wrote into a tensor of the wrong element type"


def case_call_tensors_float16_for_float32() -> None:
    _call_tensors_case("float16")


def case_call_tensors_int32_for_float32() -> None:
    _call_tensors_case("int32")


def case_call_tensors_float64_for_float32() -> None:
    _call_tensors_case("float64")


def case_call_tensors_float32_runs() -> None:
    """The right element type still runs, and the duck tensors of test_call_tensors (no dtype) too."""
    import torch

    h = _handle()
    g, x, y, z = _add(h)
    bound = g.bind(h, [x, y, z], override_uids=[x, y, z])
    xt, yt, zt = torch.rand(2, 7), torch.rand(2, 7), torch.zeros(2, 7)
    assert bound.call_tensors([xt, yt, zt], 0) is True
    assert torch.allclose(zt, xt + yt)


CASES: dict[str, tuple[Callable[[], None], str, bool]] = {
    # name: (run, expected outcome "ok" or "refused: <fragment>", needs torch)
    "executor-keys-emptied": (case_executor_keys_emptied, "ok", False),
    "plan-core-tensors-emptied": (case_plan_core_tensors_emptied, "ok", False),
    "executor-rules-emptied": (case_executor_rules_emptied, "ok", False),
    "executor-refs-emptied": (case_executor_refs_emptied, "ok", False),
    "torch-dtype-name-outlives-the-cache-record": (case_torch_dtype_name_outlives_the_cache_record, "ok", True),
    "torch-dtype-itemsize-past-int": (
        case_torch_dtype_itemsize_past_int,
        "refused: tensor 'x' (uid 1): buffer dtype foreign.thing disagrees with FLOAT",
        True,
    ),
    "call-tensors-float16-for-float32": (
        case_call_tensors_float16_for_float32,
        "refused: call_tensors: tensor 'x' (uid 1): dtype torch.float16 disagrees with FLOAT",
        True,
    ),
    "call-tensors-int32-for-float32": (
        case_call_tensors_int32_for_float32,
        "refused: call_tensors: tensor 'x' (uid 1): dtype torch.int32 disagrees with FLOAT",
        True,
    ),
    "call-tensors-float64-for-float32": (
        case_call_tensors_float64_for_float32,
        "refused: call_tensors: tensor 'x' (uid 1): dtype torch.float64 disagrees with FLOAT",
        True,
    ),
    "call-tensors-float32-runs": (case_call_tensors_float32_runs, "ok", True),
}


def run_here(name: str) -> dict[str, str]:
    run = CASES[name][0]
    try:
        run()
    except HipdnnError as e:
        return {"outcome": "refused", "message": e.message}
    except BaseException as e:  # noqa: BLE001 - the point is to see what escapes
        return {"outcome": "escaped", "message": f"{type(e).__qualname__}: {e}"}
    return {"outcome": "ok", "message": ""}


@pytest.mark.parametrize("name", list(CASES))
def test_case(name: str) -> None:
    _, expect, needs_torch = CASES[name]
    if needs_torch and not HAS_TORCH:
        pytest.skip("torch is not installed")
    proc = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-m", "tests.adversarial.test_hostile_objects_more", name],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        sig = ""
        if proc.returncode < 0:
            sig = f" ({signal.Signals(-proc.returncode).name})"
        pytest.fail(f"{name}: crash, exit status {proc.returncode}{sig}; stderr tail:\n{proc.stderr[-2500:]}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARKER)]
    assert lines, f"{name}: the child printed no result; stderr tail:\n{proc.stderr[-2500:]}"
    result = json.loads(lines[-1][len(MARKER) :])
    got = result["outcome"] if result["outcome"] != "refused" else f"refused: {result['message']}"
    assert got == expect, f"{name}: expected {expect!r}, got {got!r}"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] not in CASES:
        print(f"usage: python -m {__spec__.name if __spec__ else __name__} CASE", file=sys.stderr)
        return 2
    result = run_here(argv[1])
    gc.collect()  # a heap the call corrupted tends to show here
    print(MARKER + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
