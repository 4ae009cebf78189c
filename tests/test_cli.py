"""The hipdnn command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import hipdnn
from hipdnn.cli import main, progress

F32 = hipdnn.DataType.FLOAT


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hipdnn", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture
def graph_file(tmp_path: Path) -> Path:
    g = hipdnn.Graph(name="cli graph", io_data_type=F32, is_override_shape_enabled=True)
    dims, strides = [1, 2, 9, 8], [144, 72, 8, 1]
    q, k, v = (g.tensor(name=n, dim=dims, stride=strides, data_type=F32) for n in "qkv")
    g.sdpa(q, k, v, attn_scale=0.5, use_causal_mask=True)[0].set_output(True)
    path = tmp_path / "graph.bin"
    path.write_bytes(g.serialize())
    return path


def test_plugins_json_lists_the_cpu_engine() -> None:
    result = run_cli("plugins", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    cpu = [p for p in data["loaded"] if p["name"] == "hipdnn_cpu_engine"]
    assert cpu and cpu[0]["engine_ids"] == [101] and cpu[0]["api_version"]


def test_demo_serves_every_length_from_one_plan() -> None:
    result = run_cli("demo", "--max-seq-len", "64", "--seq-lens", "1", "37", "64")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK: every sequence length served by one plan" in result.stdout
    assert result.stdout.count("overridden shape") == 3


@pytest.mark.parametrize("stage", ["parsed", "validated", "lowered", "planned"])
def test_inspect_stops_at_each_stage(graph_file: Path, stage: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(graph_file), "--emit", stage, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stage"] == stage
    assert out["graph"]["name"] == "cli graph" and len(out["graph"]["tensors"]) == 4
    assert ("lowered" in out) == (stage in ("lowered", "planned"))
    assert ("planned" in out) == (stage == "planned")
    if stage in ("lowered", "planned"):
        assert out["lowered"]["required_plugin_api_version"] == "1.1.0"
    if stage == "planned":
        assert out["planned"]["engine_id"] == 101


def test_inspect_text_and_corrupted_file(graph_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(graph_file)]) == 0
    text = capsys.readouterr().out
    assert "graph 'cli graph'" in text and "node 'sdpa_0' (sdpa)" in text
    bad = tmp_path / "bad.bin"
    bad.write_bytes(graph_file.read_bytes()[:20])
    assert main(["inspect", str(bad)]) == 2
    assert "error:" in capsys.readouterr().err


def test_doctor_reports_loaded_plugins(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["doctor"])
    out = capsys.readouterr().out
    assert "plugin hipdnn_cpu_engine" in out
    assert code == (0 if "problem(s) found" not in out else 1)


def test_bench_without_a_checkout_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--repo", str(tmp_path)]) == 2
    assert "benchmark scripts not found" in capsys.readouterr().err


def test_progress_reports_only_slow_steps() -> None:
    import io
    import time

    quick, slow = io.StringIO(), io.StringIO()
    with progress("quick step", quick):
        pass
    with progress("slow step", slow):
        time.sleep(1.7)
    assert quick.getvalue() == ""
    assert "slow step" in slow.getvalue() and "done in" in slow.getvalue()
