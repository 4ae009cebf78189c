"""What a type checker, ``print`` and ``help()`` see of the public API (issue #31): the README's own
examples pass ``mypy --strict`` as written (variant packs keyed by tensors, uids or both), enums
print by name, the pointwise shortcuts have signatures, and every public method says what it does."""

from __future__ import annotations

import inspect
import pydoc
import re
import subprocess
import sys
from pathlib import Path

import pytest

import hipdnn
from hipdnn import DataType, Graph

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_examples() -> str:
    """The Python blocks of the README's "Using it" section (its main example and the ones after),
    joined in order: each continues the one before."""
    text = README.read_text()
    section = text[text.index("## Using it") :]
    section = section[: section.index("\n## ", 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks and "g.execute(handle, arrays, workspace" in blocks[0]
    return "\n".join(blocks)


#: Calls a type checker must accept (they run), besides the README's.
ACCEPTED = """
import numpy as np
import hipdnn
g = hipdnn.Graph()
x = g.tensor(name="x", dim=[4], data_type=hipdnn.DataType.FLOAT)
y = g.relu(x)
h = hipdnn.Handle()
by_tensor = {x: np.zeros(4, np.float32), y: np.zeros(4, np.float32)}
by_uid = {1: np.zeros(4, np.float32), 2: np.zeros(4, np.float32)}
mixed: dict[hipdnn.TensorAttributes | int, np.ndarray] = {x: np.zeros(4, np.float32), 2: np.zeros(4, np.float32)}
entries = {x: hipdnn.OverrideEntry(shape=[2]), y: hipdnn.OverrideEntry(shape=[2])}
g.execute(h, by_tensor)
g.execute(h, by_uid, None)
g.execute(h, mixed, None, entries)
g.execute(h, by_tensor, overrides={1: hipdnn.OverrideEntry(shape=[2])})
g.execute(h, by_tensor, None, [x, y], [[2], [2]], [[1], [1]])
unbound = hipdnn.Graph.add
z: hipdnn.TensorAttributes = unbound(g, x, y)
"""

#: Calls a type checker must flag, one per line (numbered from 1 in this text).
REFUSED = """import numpy as np
import hipdnn
g = hipdnn.Graph()
x = g.tensor(name="x", dim=[4])
h = hipdnn.Handle()
vp = {x: np.zeros(4, np.float32)}
g.execute(vp, None, handle=h)
g.execute(h, vp, overide_uids=[x])
g.execute(h, [np.zeros(4)])
"""


def test_the_readme_examples_pass_mypy_strict(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    (tmp_path / "readme_example.py").write_text(readme_examples())
    (tmp_path / "accepted.py").write_text(ACCEPTED)
    (tmp_path / "refused.py").write_text(REFUSED)
    command = [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / ".cache"), "--no-error-summary"]
    result = subprocess.run(
        [*command, "readme_example.py", "accepted.py", "refused.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    ours = [e for e in errors if not e.startswith("refused.py:")]
    assert ours == [], result.stdout + result.stderr
    flagged = {int(e.split(":")[1]) for e in errors if e.startswith("refused.py:")}
    assert flagged == {7, 8, 9}, result.stdout


def test_enums_print_by_name() -> None:
    g = Graph()
    x = g.tensor(name="x", dim=[4, 64], data_type=DataType.FLOAT)
    assert str(x.data_type) == f"{x.data_type}" == "DataType.FLOAT"
    assert f"{x.data_type:>16}" == "  DataType.FLOAT" and f"{x.data_type:d}" == "1"
    assert x.data_type == 1 and int(x.data_type) == 1  # still an int for comparisons and the wire
    for member in (hipdnn.PointwiseMode.ADD, hipdnn.HeurMode.FALLBACK, hipdnn.DiagonalAlignment.BOTTOM_RIGHT):
        assert str(member) == f"{type(member).__name__}.{member.name}"
    assert str(hipdnn.AttentionImplementation.AUTO) == "AttentionImplementation.AUTO"


@pytest.mark.parametrize("name", ["add", "relu", "gelu", "relu_backward"])
def test_shortcuts_have_signatures_and_help(name: str) -> None:
    method = getattr(Graph, name)
    params = list(inspect.signature(method).parameters)
    assert params[0] == "self" and "name" in params and "compute_data_type" in params
    assert "pointwise(PointwiseMode." in (inspect.getdoc(method) or "")
    assert list(inspect.signature(getattr(Graph(), name)).parameters)[0] != "self"  # bound on an instance


def _public(cls: type) -> list[str]:
    return [
        n
        for n in dir(cls)
        if not n.startswith("_") and (callable(getattr(cls, n)) or isinstance(getattr(cls, n), property))
    ]


@pytest.mark.parametrize("cls", [hipdnn.Graph, hipdnn.Handle, hipdnn.TensorAttributes], ids=lambda c: c.__name__)
def test_every_public_member_says_what_it_does(cls: type) -> None:
    missing = [n for n in _public(cls) if not inspect.getdoc(getattr(cls, n))]
    assert missing == []
    for n in _public(cls):
        member = getattr(cls, n)
        if callable(member) and not isinstance(member, type):
            inspect.signature(member)


def test_help_shows_the_methods_the_issue_named() -> None:
    text = pydoc.render_doc(Graph, renderer=pydoc.plaintext)
    for name in ("matmul", "pointwise", "check_support", "get_workspace_size", "add"):
        block = text[text.index(f" |  {name}(") :].split("\n |  \n", 1)[0]
        assert len(block.splitlines()) > 1, block  # a docstring under the signature
