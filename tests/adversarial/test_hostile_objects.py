"""Hostile Python objects against the execute core (issue #26), each case in a child process of its own.

The core reads Python objects in C: mappings and their items, lists of ints, int-likes, array
interfaces. Each bug kind of issue #26 gets several variants across ``Graph.execute``'s variant pack,
the ``overrides=`` map form, the parallel form and the bound call (``tests/adversarial/hostile_cases.py``
holds them and says what each does):

1. a Mapping whose ``items()`` yields things that are not (key, value) pairs;
2. lists changed (cleared, extended, replaced) by an ``__index__`` while the core reads them;
3. variant-pack values dropped by the pack's own values mid-call, and a pack mutated by another
   thread while two threads execute with it;
4. array interfaces with impossible strides, pointers and shapes, and numpy integers whose
   ``__index__`` raises or returns a str: every one a ``HipdnnError``;
5. 40,000 and 1,000,000 override entries, refused without quadratic work;
6. byte strides that are not whole elements;
7. a workspace that is not one contiguous writable byte range;
8. pointers not aligned to the element type;
9. a max-size array with a smaller override (refused: the array's shape disagrees), and views of one
   (right, against a float64 reference);
10. read-only inputs (accepted, right) and read-only outputs or workspaces (refused);
11. dQ, dK, dV interleaved in one buffer (accepted, right) and gradients whose elements overlap
    (refused).

(Kind 12, the engine choice, is covered elsewhere.) A child that crashes fails its case with the
signal, one that hangs with its timeout. A refusal must be a ``HipdnnError`` naming the tensor or the
argument at fault (a loose substring). The tests are written to the fixed behaviour.

The children of the selected cases run in parallel, once per session, before the first case is
judged.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.adversarial.hostile_cases import CASES, MARKER, Case

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = "test_no_case_leaves_a_foreign_exception"


@dataclass(frozen=True)
class Run:
    """How one child ended: ``rc`` None when it ran past its timeout; outcome ``refused``, ``ok``,
    ``wrong``, ``escaped`` or ``skipped`` as the child reported it, ``none`` when it reported nothing."""

    name: str
    rc: int | None
    outcome: str
    type: str
    message: str
    stderr: str

    def describe(self) -> str:
        if self.rc is None:
            return f"{self.name}: hang (no result within {CASES[self.name].timeout:.0f} s)"
        if self.rc != 0:
            sig = ""
            if self.rc < 0:
                try:
                    sig = f" ({signal.Signals(-self.rc).name})"
                except ValueError:
                    sig = ""
            return f"{self.name}: crash, exit status {self.rc}{sig}; stderr tail:\n{self.stderr[-2500:]}"
        return f"{self.name}: {self.outcome} {self.type}: {self.message[:1500]}"


def run_child(name: str) -> Run:
    case = CASES[name]
    try:
        proc = subprocess.run(
            [sys.executable, "-X", "faulthandler", "-m", "tests.adversarial.hostile_cases", name],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=case.timeout,
        )
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return Run(name, None, "none", "", "", err)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARKER)]
    if not lines:
        return Run(name, proc.returncode, "none", "", proc.stdout[-1000:], proc.stderr)
    result = json.loads(lines[-1][len(MARKER) :])
    return Run(name, proc.returncode, result["outcome"], result["type"], result["message"], proc.stderr)


_RUNS: dict[str, Run] = {}


def _selected(session: pytest.Session) -> list[str]:
    """The cases this session will judge (all of them when the summary test is selected)."""
    mine = [item for item in session.items if getattr(getattr(item, "module", None), "__name__", None) == __name__]
    if any(item.name == SUMMARY for item in mine):
        return list(CASES)
    names = []
    for item in mine:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "name" in callspec.params:
            names.append(callspec.params["name"])
    return names


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest) -> dict[str, Run]:
    """Every selected case's child, run in parallel once."""
    todo = [n for n in _selected(request.session) if n not in _RUNS]
    workers = max(2, min(8, os.cpu_count() or 2))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for run in pool.map(run_child, todo):
            _RUNS[run.name] = run
    return _RUNS


def judge(runs: dict[str, Run], name: str) -> None:
    case: Case = CASES[name]
    run = runs.get(name) or run_child(name)
    what = run.describe()
    assert run.rc is not None, what
    assert run.rc == 0, what
    if run.outcome == "skipped":
        pytest.skip(run.message)
    assert run.outcome != "none", f"{name}: the child printed no result: {what}"
    assert run.outcome != "escaped", f"escaped as a non-HipdnnError: {what}"
    if case.expect == "refused":
        assert run.outcome == "refused", f"accepted wrongly (expected a HipdnnError): {what}"
    elif case.expect == "ok":
        assert run.outcome == "ok", f"expected the call to run and be right: {what}"
    else:
        assert run.outcome in ("ok", "refused"), f"expected a right result or a HipdnnError: {what}"
    if run.outcome == "refused" and case.names:
        assert any(n in run.message for n in case.names), (
            f"{name}: the refusal names none of {case.names}: {run.message!r}"
        )


def _cases(kind: int) -> list[str]:
    return [n for n, c in CASES.items() if c.kind == kind]


@pytest.mark.parametrize("name", _cases(1))
def test_k1_mapping_items_that_are_not_pairs(runs: dict[str, Run], name: str) -> None:
    judge(runs, name)


@pytest.mark.parametrize("name", _cases(2))
def test_k2_lists_changed_while_read(runs: dict[str, Run], name: str) -> None:
    judge(runs, name)


@pytest.mark.parametrize("name", _cases(3))
def test_k3_values_kept_alive_for_the_call(runs: dict[str, Run], name: str) -> None:
    judge(runs, name)


@pytest.mark.parametrize("name", _cases(4))
def test_k4_no_foreign_exception_escapes(runs: dict[str, Run], name: str) -> None:
    judge(runs, name)


@pytest.mark.parametrize("name", _cases(5))
def test_k5_many_overrides_refused_without_quadratic_work(runs: dict[str, Run], name: str) -> None:
    judge(runs, name)


@pytest.mark.parametrize("name", _cases(6))
def test_k6_strides_not_whole_elements(runs: dict[str, Run], name: str) -> None:
    judge(runs, name)


@pytest.mark.parametrize("name", _cases(7))
def test_k7_workspace_one_contiguous_writable_range(runs: dict[str, Run], name: str) -> None:
    judge(runs, name)


@pytest.mark.parametrize("name", _cases(8))
def test_k8_misaligned_pointers(runs: dict[str, Run], name: str) -> None:
    judge(runs, name)


@pytest.mark.parametrize("name", _cases(9))
def test_k9_max_size_arrays_and_smaller_overrides(runs: dict[str, Run], name: str) -> None:
    judge(runs, name)


@pytest.mark.parametrize("name", _cases(10))
def test_k10_read_only_buffers(runs: dict[str, Run], name: str) -> None:
    judge(runs, name)


@pytest.mark.parametrize("name", _cases(11))
def test_k11_gradients_in_one_buffer(runs: dict[str, Run], name: str) -> None:
    judge(runs, name)


def test_every_kind_has_cases() -> None:
    kinds = {c.kind for c in CASES.values()}
    assert kinds == set(range(1, 12)), sorted(kinds)
    assert all(len(_cases(k)) >= 2 for k in kinds)


def test_no_case_leaves_a_foreign_exception(runs: dict[str, Run]) -> None:
    """Across every case: no child crashed, hung, or ended with an exception other than HipdnnError."""
    bad = []
    for name in CASES:
        run = runs.get(name) or run_child(name)
        if run.rc is None or run.rc != 0 or run.outcome in ("escaped", "none"):
            bad.append(run.describe().splitlines()[0])
    assert not bad, f"{len(bad)} of {len(CASES)} cases crashed, hung or leaked a foreign exception:\n" + "\n".join(bad)
