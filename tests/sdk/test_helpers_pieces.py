"""PluginHelpers.h's pieces of HIPDNN_PLUGIN_DEFINE_ERROR_AND_LOG_ENTRIES() and hipdnnPluginLogText.

A plugin may take the error state alone, add the last-error entry or the logging entries, or write
its own GetLastErrorString (fake_plugins/misbehaving_plugin.c does all of these); what it leaves out
must not be exported, and hipdnnPluginLogText must pass text whole where hipdnnPluginLog cuts it.
"""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import pytest

from tests.sdk.support import SDK_INCLUDE, STRICT, compile_c, compiler

OPTIONAL = ("hipdnnPluginGetLastErrorString", "hipdnnPluginSetLoggingCallback", "hipdnnPluginSetLogLevel")


def _shared_library(tmp_path: Path, name: str, body: str) -> ctypes.CDLL:
    src = tmp_path / f"{name}.c"
    src.write_text("#include <hipdnn_plugin_sdk/PluginHelpers.h>\n" + body)
    out = tmp_path / f"lib{name}.so"
    compile_c(
        [
            compiler("gcc"),
            "-std=c99",
            *STRICT,
            "-fPIC",
            "-shared",
            "-fvisibility=hidden",
            f"-I{SDK_INCLUDE}",
            str(src),
            "-o",
            str(out),
        ]
    )
    return ctypes.CDLL(str(out))


@pytest.mark.parametrize(
    ("pieces", "exported"),
    [
        (["HIPDNN_PLUGIN_DEFINE_ERROR_STATE"], ()),
        (["HIPDNN_PLUGIN_DEFINE_ERROR_STATE", "HIPDNN_PLUGIN_DEFINE_LAST_ERROR_ENTRY"], OPTIONAL[:1]),
        (["HIPDNN_PLUGIN_DEFINE_ERROR_STATE", "HIPDNN_PLUGIN_DEFINE_LOG_ENTRIES"], OPTIONAL[1:]),
        (["HIPDNN_PLUGIN_DEFINE_ERROR_AND_LOG_ENTRIES"], OPTIONAL),
    ],
)
def test_each_piece_exports_only_its_entries(tmp_path: Path, pieces: list[str], exported: tuple[str, ...]) -> None:
    lib = _shared_library(tmp_path, "pieces", "".join(f"{p}();\n" for p in pieces))
    assert {s for s in OPTIONAL if hasattr(lib, s)} == set(exported)


LOG_TEXT_PROGRAM = r"""
#include <string.h>
#include <hipdnn_plugin_sdk/PluginHelpers.h>

HIPDNN_PLUGIN_DEFINE_ERROR_STATE();
HIPDNN_PLUGIN_DEFINE_LOG_ENTRIES();

/* A plugin's own last-error entry over the SDK's state. */
void hipdnnPluginGetLastErrorString(const char** error_str)
{
    *error_str = hipdnnPluginLastError()[0] == '\0' ? "own entry: nothing failed" : hipdnnPluginLastError();
}

static size_t g_seen = 0;
static int g_calls = 0;
static void sink(hipdnnSeverity_t severity, const char* message)
{
    (void)severity;
    g_seen = strlen(message);
    ++g_calls;
}

int main(void)
{
    static char big[5000];
    const char* e = 0;
    memset(big, 'x', sizeof big - 1);
    hipdnnPluginGetLastErrorString(&e);
    if(strcmp(e, "own entry: nothing failed") != 0) return 1;
    if(hipdnnPluginSetLogLevel((hipdnnSeverity_t)99) != HIPDNN_PLUGIN_STATUS_BAD_PARAM) return 2;
    hipdnnPluginGetLastErrorString(&e);
    if(strstr(e, "99") == NULL) return 3;
    hipdnnPluginLogText(HIPDNN_SEV_ERROR, big);
    if(g_calls != 0) return 4; /* no sink yet */
    if(hipdnnPluginSetLoggingCallback(sink) != HIPDNN_PLUGIN_STATUS_SUCCESS) return 5;
    hipdnnPluginLogText(HIPDNN_SEV_ERROR, big);
    if(g_calls != 1 || g_seen != sizeof big - 1) return 6; /* whole */
    hipdnnPluginLog(HIPDNN_SEV_ERROR, "%s", big);
    if(g_calls != 2 || g_seen != HIPDNN_PLUGIN_LOG_CAPACITY - 1) return 7; /* cut */
    hipdnnPluginLogText(HIPDNN_SEV_INFO, big);
    if(g_calls != 2) return 8; /* below the default WARN threshold */
    if(hipdnnPluginSetLogLevel(HIPDNN_SEV_OFF) != HIPDNN_PLUGIN_STATUS_SUCCESS) return 11;
    hipdnnPluginLogText(HIPDNN_SEV_FATAL, big);
    if(g_calls != 2) return 9;
    if(hipdnnPluginSetLogLevel(HIPDNN_SEV_INFO) != HIPDNN_PLUGIN_STATUS_SUCCESS) return 12;
    hipdnnPluginLogText(HIPDNN_SEV_INFO, NULL);
    if(g_calls != 3 || g_seen != 0) return 10; /* NULL is sent as "" */
    return 0;
}
"""


@pytest.mark.parametrize(("cc", "std", "suffix"), [("gcc", "c99", ".c"), ("g++", "c++17", ".cpp")])
def test_log_text_is_whole_and_obeys_the_threshold(tmp_path: Path, cc: str, std: str, suffix: str) -> None:
    src = tmp_path / f"log_text{suffix}"
    src.write_text(LOG_TEXT_PROGRAM)
    exe = tmp_path / "log_text"
    compile_c([compiler(cc), f"-std={std}", *STRICT, f"-I{SDK_INCLUDE}", str(src), "-o", str(exe)])
    assert subprocess.run([str(exe)]).returncode == 0
