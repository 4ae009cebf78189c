"""The hipdnn command line."""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import hipdnn
from hipdnn import cli
from hipdnn.cli import main

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
    assert "OK: S = 1, 37, 64 served by one plan built at S=64" in result.stdout
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


def test_version_prints_the_package_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"hipdnn {hipdnn.__version__}"


def _actions(parser: argparse.ArgumentParser, where: str) -> list[tuple[str, argparse.Action]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _actions(sub, f"{where} {name}")
        else:
            found.append((where, action))
    return found


def test_every_option_of_every_command_is_described() -> None:
    actions = _actions(cli._parser(), "hipdnn")
    assert len({w for w, _ in actions}) == 6  # hipdnn and its five commands
    undescribed = [f"{w} {a.dest}" for w, a in actions if not (a.help and a.help.strip())]
    assert undescribed == []
    for command in ("", "plugins", "demo", "inspect", "doctor", "bench"):
        result = run_cli(*([command] if command else []), "--help")
        assert result.returncode == 0 and "usage: hipdnn" in result.stdout, result.stderr


def test_inspect_of_a_missing_file_is_one_line_and_no_traceback(tmp_path: Path) -> None:
    result = run_cli("inspect", str(tmp_path / "missing.bin"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: cannot read graph file {tmp_path / 'missing.bin'}: No such file or directory"
    ]


def test_a_reader_that_goes_away_ends_the_command_quietly() -> None:
    """`hipdnn plugins | head -1`: the pipe is closed before the command writes."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "hipdnn", "plugins"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 128 + signal.SIGPIPE
    assert err == ""


def test_skip_reasons_are_printed_once(tmp_path: Path) -> None:
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir(mode=0o755)
    (plugin_dir / "libbroken.so").write_text("not a library")
    (plugin_dir / "libbroken.so").chmod(0o644)
    env = {**os.environ, "HIPDNN_PLUGIN_DIR": str(plugin_dir)}
    for command in ("plugins", "doctor"):
        result = subprocess.run(
            [sys.executable, "-m", "hipdnn", command], capture_output=True, text=True, env=env, timeout=120
        )
        both = result.stdout + result.stderr
        assert both.count("libbroken.so") == 1, both
    # --verbose brings hipdnn's log back (on stderr), for whoever wants it.
    result = subprocess.run(
        [sys.executable, "-m", "hipdnn", "-v", "plugins"], capture_output=True, text=True, env=env, timeout=120
    )
    assert "skipping plugin" in result.stderr and "libbroken.so" in result.stdout


def test_demo_refuses_lengths_above_the_plan_and_says_what_to_pass() -> None:
    result = run_cli("demo", "--max-seq-len", "64", "--seq-lens", "1", "100")
    assert result.returncode == 2
    assert "OK" not in result.stdout and "skipped" not in result.stdout
    assert "--seq-lens 100" in result.stderr and "pass --max-seq-len 100" in result.stderr


def test_demo_warms_up_before_the_first_timed_length(monkeypatch: pytest.MonkeyPatch) -> None:
    lengths: list[int] = []
    execute = hipdnn.Graph.execute

    def recording(self: hipdnn.Graph, handle: hipdnn.Handle, *args: Any, **kwargs: Any) -> None:
        lengths.append(next(iter(kwargs["overrides"].values())).shape[2])
        execute(self, handle, *args, **kwargs)

    monkeypatch.setattr(hipdnn.Graph, "execute", recording)
    assert main(["demo", "--max-seq-len", "16", "--seq-lens", "1", "9"]) == 0
    assert lengths == [1, 1, 9]  # the first call is the untimed warm-up


def _plugin(name: str, engine_ids: tuple[int, ...]) -> SimpleNamespace:
    return SimpleNamespace(name=name, version="0.1.0", api_version="1.2.0", engine_ids=engine_ids)


@pytest.mark.parametrize("with_gpu_engine", [True, False])
def test_doctor_on_a_machine_without_a_gpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], with_gpu_engine: bool
) -> None:
    """No GPU and no GPU runtime library: said plainly, never as a warning next to a GPU engine that loaded."""
    import ctypes.util

    import hipdnn.device as hd

    loaded = [_plugin("hipdnn_cpu_engine", (101,))] + ([_plugin("hipdnn_hip_engine", (202, 201))] * with_gpu_engine)
    handle = SimpleNamespace(
        loaded_plugins=lambda: loaded,
        skipped_plugins=lambda: [],
        plugin_search_paths=[],
        close=lambda: None,
        device_choice=lambda gpus: "cpu (no GPU)",
        device_engines_here=lambda: {202: "no GPU device", 201: "no GPU device"} if with_gpu_engine else {},
    )
    monkeypatch.setattr(hipdnn, "Handle", lambda *a, **k: handle)
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    monkeypatch.setattr(shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(
        hd, "runtime", lambda: SimpleNamespace(package="fake-rt", device_count=lambda: (0, "no device"))
    )
    monkeypatch.setattr(hd, "devices", lambda: [])
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "[INFO] no GPU: the CPU engine serves every graph" in out
    assert "[WARN]" not in out and out.rstrip().endswith("no problems found")
    assert ("GPU engine: hipdnn_hip_engine" in out) == with_gpu_engine
    # installed without a GPU, the engine is not reported as ready
    assert ("installed but cannot run here (no GPU device)" in out) == with_gpu_engine


def test_bench_measures_an_installed_package_from_anywhere(tmp_path: Path) -> None:
    """No source tree in sight (the working directory is empty): the installed package is measured; the
    output, redirected, carries no progress bar."""
    result = subprocess.run(
        [sys.executable, "-m", "hipdnn", "bench", "--quick"], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "host time per execute, four overrides" in result.stdout and "no-op example engine" in result.stdout
    assert "S=  512" in result.stdout and "GFLOP/s" in result.stdout
    assert "\r" not in result.stdout + result.stderr and result.stderr == ""


def test_bench_without_a_compiler_measures_with_the_cpu_engine(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert main(["bench", "--quick"]) == 0
    assert "(CPU engine (no-op example not built" in capsys.readouterr().out


def test_progress_bar_is_drawn_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for stream, drawn in ((Terminal(), True), (io.StringIO(), False)):
        monkeypatch.setattr(sys, "stderr", stream)
        with cli._progress_bar(2, "measuring") as bar:
            bar.update(2)
        assert ("measuring:" in stream.getvalue() and "0/2" in stream.getvalue()) == drawn


def test_bench_json_is_one_machine_readable_object(tmp_path: Path) -> None:
    """`hipdnn bench --json`: one JSON object on stdout (no text around it), the same numbers as the text."""
    result = subprocess.run(
        [sys.executable, "-m", "hipdnn", "bench", "--quick", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["hipdnn_version"] == hipdnn.__version__ and report["quick"] is True
    overhead = report["host_overhead"]
    assert overhead["us_per_execute"] > 0 and overhead["overrides"] == 4 and overhead["measured_with"]
    sdpa = report["cpu_sdpa"]
    assert sdpa["plan_shape"] == {"B": 1, "H": 8, "S": 512, "D": 64} and sdpa["data_type"] == "FLOAT"
    assert [r["seq_len"] for r in sdpa["runs"]] == [1, 128, 512]
    assert all(r["ms"] > 0 and r["gflops"] > 0 for r in sdpa["runs"])
    # for a checkout's scripts, --json is refused rather than ignored
    refused = subprocess.run(
        [sys.executable, "-m", "hipdnn", "bench", "serving", "--json"], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2 and "--json" in refused.stderr
