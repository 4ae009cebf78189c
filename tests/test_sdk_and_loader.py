"""The plugin SDK headers and the loader: headers compile standalone, the cffi declarations come from
them, plugins are found where documented, broken plugins are contained with a reason."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

import cffi
import pytest

import hipdnn
from hipdnn.plugins import _cdef

REPO = Path(__file__).resolve().parents[1]
SDK_INCLUDE = REPO / "plugin_sdk" / "include"
HEADERS = ["PluginApiDataTypes.h", "PluginApi.h", "EnginePluginApi.h"]
ENTRY_POINTS = [
    "hipdnnPluginGetName",
    "hipdnnPluginGetVersion",
    "hipdnnPluginGetApiVersion",
    "hipdnnPluginGetType",
    "hipdnnPluginGetLastErrorString",
    "hipdnnPluginSetLoggingCallback",
    "hipdnnPluginSetLogLevel",
    "hipdnnEnginePluginGetAllEngineIds",
    "hipdnnEnginePluginCreate",
    "hipdnnEnginePluginDestroy",
    "hipdnnEnginePluginSetStream",
    "hipdnnEnginePluginGetApplicableEngineIds",
    "hipdnnEnginePluginGetEngineDetails",
    "hipdnnEnginePluginDestroyEngineDetails",
    "hipdnnEnginePluginGetWorkspaceSize",
    "hipdnnEnginePluginCreateExecutionContext",
    "hipdnnEnginePluginDestroyExecutionContext",
    "hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext",
    "hipdnnEnginePluginExecuteOpGraph",
    "hipdnnEnginePluginExecuteOpGraphWithOverrides",
]


def compiler(name: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        pytest.skip(f"{name} not installed")
    return exe


@pytest.mark.parametrize("header", HEADERS)
@pytest.mark.parametrize(("cc", "std", "suffix"), [("gcc", "c99", ".c"), ("g++", "c++17", ".cpp")])
def test_header_compiles_alone_without_gpu_runtime(tmp_path: Path, header: str, cc: str, std: str, suffix: str) -> None:
    src = tmp_path / f"use{suffix}"
    src.write_text(
        f"#include <hipdnn_plugin_sdk/{header}>\n"
        "int main(void) { hipdnnPluginConstData_t d; d.ptr = 0; d.size = 0; return (int)d.size; }\n"
    )
    result = subprocess.run(
        [
            compiler(cc),
            f"-std={std}",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            f"-I{SDK_INCLUDE}",
            str(src),
            "-o",
            str(tmp_path / "a.out"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_cffi_declarations_are_read_from_the_headers() -> None:
    text = _cdef.sdk_cdef()
    ffi = cffi.FFI()
    ffi.cdef(text)
    for entry in ENTRY_POINTS:
        assert f"{entry}(" in text, entry
    assert ffi.sizeof("hipdnnPluginDeviceBuffer_t") == 16
    assert int(ffi.cast("hipdnnPluginStatus_t", 5)) == 5
    # Adding a declaration to a header's marked block changes what cffi sees: nothing is written twice.
    extra = "/* CFFI:BEGIN */\nint hipdnnExtraEntry(int x);\n/* CFFI:END */"
    assert "hipdnnExtraEntry" in _cdef.declarations_from_header(extra)


def test_status_and_type_values_match_the_abi() -> None:
    ffi = cffi.FFI()
    ffi.cdef(_cdef.sdk_cdef())
    lib = ffi.dlopen(None)
    assert lib.HIPDNN_PLUGIN_STATUS_SUCCESS == 0
    assert lib.HIPDNN_PLUGIN_STATUS_BAD_PARAM == 1
    assert lib.HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE == 5
    assert lib.HIPDNN_PLUGIN_STATUS_NOT_INITIALIZED == 6
    assert lib.HIPDNN_PLUGIN_TYPE_ENGINE == 1
    assert lib.HIPDNN_PLUGIN_TYPE_HEURISTIC == 2


def test_cpu_engine_is_listed_with_its_identity() -> None:
    with hipdnn.Handle() as handle:
        cpu = [p for p in handle.loaded_plugins() if p.name == "hipdnn_cpu_engine"]
        assert len(cpu) == 1
        p = cpu[0]
        assert p.version == "0.1.0" and p.api_version == "1.6.0" and p.engine_ids == (101,)
        assert Path(p.path).is_file() and Path(p.path).parent.name == "engines"
        assert p.has_override_execute
        assert p.fingerprint.sha256 and len(p.fingerprint.sha256) == 64


def test_env_dir_and_additive_and_absolute_modes(
    fake_plugin_paths: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env_dir = tmp_path / "env_plugins"
    env_dir.mkdir()
    shutil.copy(fake_plugin_paths["fake_plain_v100"], env_dir / "libfake_plain_v100.so")
    monkeypatch.setenv("HIPDNN_PLUGIN_DIR", os.pathsep.join([str(env_dir), str(tmp_path / "missing")]))
    with hipdnn.Handle(plugin_paths=[fake_plugin_paths["fake_override_v110"]]) as additive:
        # the HIP engine is built (and loads) wherever a GPU compiler was present at install time
        names = [p.name for p in additive.loaded_plugins() if p.name != "hipdnn_hip_engine"]
    assert names == ["hipdnn_cpu_engine", "fake_plain_v100", "fake_override_v110"]
    with hipdnn.Handle(
        plugin_paths=[fake_plugin_paths["fake_override_v110"]], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE
    ) as absolute:
        assert [p.name for p in absolute.loaded_plugins()] == ["fake_override_v110"]


def test_two_handles_have_separate_plugin_sets(fake_handle_factory, fakes) -> None:  # type: ignore[no-untyped-def]
    h1 = fake_handle_factory("fake_override_v110")
    h2 = fake_handle_factory("fake_plain_v100", "fake_override_v110")
    assert [p.name for p in h1.loaded_plugins()] == ["fake_override_v110"]
    assert [p.name for p in h2.loaded_plugins()] == ["fake_plain_v100", "fake_override_v110"]
    # one library, two plugin instances: Create was called once per handle
    creates = fakes["fake_override_v110"].calls("Create")
    assert len(creates) == 2 and creates[0]["handle"] != creates[1]["handle"]


def test_broken_files_are_skipped_with_reasons(tmp_path: Path, fake_plugin_paths: dict[str, Path]) -> None:
    not_a_library = tmp_path / "libnotalibrary.so"
    not_a_library.write_text("this is not ELF")
    missing_entries_src = tmp_path / "partial.c"
    missing_entries_src.write_text(
        '__attribute__((visibility("default"))) int hipdnnPluginGetName(const char** n) { *n = "partial"; return 0; }\n'
    )
    partial = tmp_path / "libpartial.so"
    subprocess.run([compiler("gcc"), "-shared", "-fPIC", str(missing_entries_src), "-o", str(partial)], check=True)
    with hipdnn.Handle(
        plugin_paths=[tmp_path, fake_plugin_paths["fake_prebaseline_v001"], fake_plugin_paths["fake_plain_v100"]],
        plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE,
    ) as handle:
        assert [p.name for p in handle.loaded_plugins()] == ["fake_plain_v100"]
        reasons = {s.path.name: s.reason for s in handle.skipped_plugins()}
    assert "not a loadable shared library" in reasons["libnotalibrary.so"]
    assert "missing required entry" in reasons["libpartial.so"]
    assert "0.0.1" in reasons["libfake_prebaseline_v001.so"] and "major" in reasons["libfake_prebaseline_v001.so"]


def test_plugin_log_callback_routes_into_python_logging(
    fake_plugin_paths: dict[str, Path], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HIPDNN_LOG_LEVEL", "INFO")
    with caplog.at_level(logging.INFO, logger="hipdnn.plugins"):
        handle = hipdnn.Handle(
            plugin_paths=[fake_plugin_paths["fake_override_v110"]],
            plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE,
        )
        handle.close()
    plugin_records = [r for r in caplog.records if r.name == "hipdnn.plugins.fake_override_v110"]
    assert plugin_records, [r.name for r in caplog.records]
    assert any("loaded 1 plugin(s), skipped 0" in r.getMessage() for r in caplog.records)


def test_source_checkout_shadowing_an_install_still_finds_the_installed_engines(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`python -m hipdnn` run from the repository root imports the source tree, which holds no built
    plugins; the engines of the installed distribution are used instead."""
    from hipdnn.plugins import discovery

    monkeypatch.setattr(hipdnn, "__path__", [str(tmp_path)])
    dirs = discovery.builtin_engine_dirs()
    assert len(dirs) == 1 and (dirs[0] / "libhipdnn_cpu_engine.so").is_file()
