"""The C ABI's shape is frozen: struct sizes and field offsets, enum values, version macros and entry-point
signatures, as a C compiler sees them and as the host's cffi declarations see them. An accidental ABI
change fails here."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import cffi
import pytest

from hipdnn.plugins import _cdef
from tests.sdk.support import SDK_INCLUDE, STRICT, compile_c, compiler

POINTER = struct.calcsize("P")

# name -> (size, {field: offset}) on an LP64 / LLP64 target with 8-byte pointers
STRUCTS: dict[str, tuple[int, dict[str, int]]] = {
    "hipdnnPluginConstData_t": (16, {"ptr": 0, "size": 8}),
    "hipdnnPluginDeviceBuffer_t": (16, {"uid": 0, "ptr": 8}),
}

ENUMS: dict[str, dict[str, int]] = {
    "hipdnnPluginStatus_t": {
        "HIPDNN_PLUGIN_STATUS_SUCCESS": 0,
        "HIPDNN_PLUGIN_STATUS_BAD_PARAM": 1,
        "HIPDNN_PLUGIN_STATUS_INVALID_VALUE": 2,
        "HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR": 3,
        "HIPDNN_PLUGIN_STATUS_ALLOC_FAILED": 4,
        "HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE": 5,
        "HIPDNN_PLUGIN_STATUS_NOT_INITIALIZED": 6,
    },
    "hipdnnPluginType_t": {
        "HIPDNN_PLUGIN_TYPE_UNSPECIFIED": 0,
        "HIPDNN_PLUGIN_TYPE_ENGINE": 1,
        "HIPDNN_PLUGIN_TYPE_HEURISTIC": 2,
    },
    "hipdnnSeverity_t": {
        "HIPDNN_SEV_INFO": 0,
        "HIPDNN_SEV_WARN": 1,
        "HIPDNN_SEV_ERROR": 2,
        "HIPDNN_SEV_FATAL": 3,
        "HIPDNN_SEV_OFF": 4,
    },
}

POINTER_TYPES = [
    "hipdnnEnginePluginHandle_t",
    "hipdnnEnginePluginExecutionContext_t",
    "hipStream_t",
    "hipdnnCallback_t",
]

# Every entry point with its exact C type; assigning the function to a pointer of this type must compile
# without a warning under -Werror.
_S, _H, _X = "hipdnnPluginStatus_t (*)", "hipdnnEnginePluginHandle_t", "hipdnnEnginePluginExecutionContext_t"
_D, _B = "const hipdnnPluginConstData_t*", "const hipdnnPluginDeviceBuffer_t*"
SIGNATURES: dict[str, str] = {
    "hipdnnPluginGetName": f"{_S}(const char**)",
    "hipdnnPluginGetVersion": f"{_S}(const char**)",
    "hipdnnPluginGetApiVersion": f"{_S}(const char**)",
    "hipdnnPluginGetType": f"{_S}(hipdnnPluginType_t*)",
    "hipdnnPluginGetLastErrorString": "void (*)(const char**)",
    "hipdnnPluginSetLoggingCallback": f"{_S}(hipdnnCallback_t)",
    "hipdnnPluginSetLogLevel": f"{_S}(hipdnnSeverity_t)",
    "hipdnnEnginePluginGetAllEngineIds": f"{_S}(int64_t*, uint32_t, uint32_t*)",
    "hipdnnEnginePluginCreate": f"{_S}({_H}*)",
    "hipdnnEnginePluginDestroy": f"{_S}({_H})",
    "hipdnnEnginePluginSetStream": f"{_S}({_H}, hipStream_t)",
    "hipdnnEnginePluginGetApplicableEngineIds": f"{_S}({_H}, {_D}, int64_t*, uint32_t, uint32_t*)",
    "hipdnnEnginePluginGetEngineDetails": f"{_S}({_H}, int64_t, {_D}, hipdnnPluginConstData_t*)",
    "hipdnnEnginePluginDestroyEngineDetails": f"{_S}({_H}, hipdnnPluginConstData_t*)",
    "hipdnnEnginePluginGetWorkspaceSize": f"{_S}({_H}, {_D}, {_D}, size_t*)",
    "hipdnnEnginePluginCreateExecutionContext": f"{_S}({_H}, {_D}, {_D}, {_X}*)",
    "hipdnnEnginePluginDestroyExecutionContext": f"{_S}({_H}, {_X})",
    "hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext": f"{_S}({_H}, {_X}, size_t*)",
    "hipdnnEnginePluginExecuteOpGraph": f"{_S}({_H}, {_X}, void*, {_B}, uint32_t)",
    "hipdnnEnginePluginExecuteOpGraphWithOverrides": (
        f"{_S}({_H}, {_X}, void*, {_B}, uint32_t, uint32_t, const int64_t*, "
        "const uint32_t*, const int64_t* const*, const int64_t* const*)"
    ),
}


def _layout_program() -> str:
    """A C program printing, as JSON, the layout facts the tests freeze."""
    members: list[list[str]] = []
    for name, (_, fields) in STRUCTS.items():
        stmts = [
            f'printf("\\"{name}\\": {{\\"sizeof\\": %zu, \\"alignof\\": %zu", sizeof({name}), '
            f"offsetof(struct {{ char c; {name} x; }}, x));"
        ]
        stmts += [f'printf(", \\"{f}\\": %zu", offsetof({name}, {f}));' for f in fields]
        members.append([*stmts, 'printf("}");'])
    for enum, values in ENUMS.items():
        stmts = [f'printf("\\"{enum}\\": {{\\"sizeof\\": %zu", sizeof({enum}));']
        stmts += [f'printf(", \\"{v}\\": %d", (int){v});' for v in values]
        members.append([*stmts, 'printf("}");'])
    members += [[f'printf("\\"{p}\\": %zu", sizeof({p}));'] for p in POINTER_TYPES]
    members.append(
        [
            'printf("\\"version\\": [\\"%s\\", %d, %d, %d]", HIPDNN_PLUGIN_API_VERSION, '
            "HIPDNN_PLUGIN_API_VERSION_MAJOR, HIPDNN_PLUGIN_API_VERSION_MINOR, "
            "HIPDNN_PLUGIN_API_VERSION_PATCH);"
        ]
    )
    body = '\n    printf(", ");\n'.join("    " + "\n    ".join(m) for m in members)
    return (
        "#include <stddef.h>\n#include <stdio.h>\n#include <hipdnn_plugin_sdk/EnginePluginApi.h>\n"
        'int main(void)\n{\n    printf("{");\n' + body + '\n    printf("}\\n");\n    return 0;\n}\n'
    )


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    if POINTER != 8:
        pytest.skip("the frozen layout is that of 64-bit targets")
    tmp = tmp_path_factory.mktemp("abi")
    src = tmp / "layout.c"
    src.write_text(_layout_program())
    exe = tmp / "layout"
    compile_c([compiler("gcc"), "-std=c99", *STRICT, f"-I{SDK_INCLUDE}", str(src), "-o", str(exe)])
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return json.loads(out)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def ffi() -> cffi.FFI:
    f = cffi.FFI()
    f.cdef(_cdef.sdk_cdef())
    return f


@pytest.mark.parametrize("name", list(STRUCTS))
def test_struct_layout_is_frozen(c_layout: dict[str, object], ffi: cffi.FFI, name: str) -> None:
    size, fields = STRUCTS[name]
    seen = c_layout[name]
    assert isinstance(seen, dict)
    assert seen["sizeof"] == size and seen["alignof"] == 8
    assert ffi.sizeof(name) == size and ffi.alignof(name) == 8
    for field, offset in fields.items():
        assert seen[field] == offset, f"{name}.{field}"
        assert ffi.offsetof(name, field) == offset, f"cffi {name}.{field}"
    # no field was added: cffi sees exactly these fields, in this order
    assert [f for f, _ in ffi.typeof(name).fields] == list(fields)


@pytest.mark.parametrize("enum", list(ENUMS))
def test_enum_values_are_frozen(c_layout: dict[str, object], ffi: cffi.FFI, enum: str) -> None:
    seen = c_layout[enum]
    assert isinstance(seen, dict)
    assert seen.pop("sizeof") == 4 and ffi.sizeof(enum) == 4
    assert seen == ENUMS[enum]
    assert dict(ffi.typeof(enum).relements) == ENUMS[enum]


def test_pointer_types_and_version(c_layout: dict[str, object], ffi: cffi.FFI) -> None:
    for p in POINTER_TYPES:
        assert c_layout[p] == POINTER and ffi.sizeof(p) == POINTER
    text, major, minor, patch = c_layout["version"]  # type: ignore[misc]
    assert text == f"{major}.{minor}.{patch}"
    # major 1 is the only ABI there is; 1.1.0 (the override entry) is the oldest this SDK describes
    assert major == 1 and minor >= 1
    # the pkg-config file states the version too: bump it with the header
    pc = (SDK_INCLUDE.parent / "pkgconfig" / "hipdnn_plugin_sdk.pc").read_text()
    assert f"\nVersion: {text}\n" in pc, "update plugin_sdk/pkgconfig/hipdnn_plugin_sdk.pc with the API version"


@pytest.mark.parametrize(("std", "cc"), [("c99", "gcc"), ("c11", "gcc"), ("c++17", "g++")])
def test_entry_point_signatures_are_frozen(tmp_path: Path, ffi: cffi.FFI, std: str, cc: str) -> None:
    checks = "\n".join(
        f"typedef {sig.replace('(*)', f'(*{name}_ptr)')};\nstatic {name}_ptr {name}_check = {name};"
        for name, sig in SIGNATURES.items()
    )
    uses = " + ".join(f"({name}_check != 0)" for name in SIGNATURES)
    src = tmp_path / ("sig.cpp" if cc == "g++" else "sig.c")
    src.write_text(
        f"#include <hipdnn_plugin_sdk/EnginePluginApi.h>\n{checks}\nint sig_uses(void);\n"
        f"int sig_uses(void) {{ return {uses}; }}\n"
    )
    compile_c(
        [
            compiler(cc),
            f"-std={std}",
            *STRICT,
            f"-I{SDK_INCLUDE}",
            "-c",
            str(src),
            "-o",
            str(tmp_path / "sig.o"),
        ]
    )
    assert set(SIGNATURES) == set(_declared_functions())


def test_cffi_sees_the_same_signatures(tmp_path: Path, ffi: cffi.FFI) -> None:
    """A stub library defining every entry point with the frozen types compiles against the headers
    (a definition that disagrees with its declaration is an error), and cffi's declarations give each
    exported symbol exactly the frozen type."""
    defs = []
    for name, sig in SIGNATURES.items():
        ret, params = sig.split(" (*)(", 1)
        params = params[:-1]
        args = ", ".join(f"{p} a{i}" for i, p in enumerate(params.split(", "))) if params else "void"
        uses = " ".join(f"(void)a{i};" for i in range(len(params.split(", ")))) if params else ""
        body = f"{uses} return{' (hipdnnPluginStatus_t)0' if ret != 'void' else ''};"
        defs.append(f"HIPDNN_PLUGIN_EXPORT {ret} {name}({args}) {{ {body} }}")
    src = tmp_path / "stub.c"
    src.write_text("#include <hipdnn_plugin_sdk/EnginePluginApi.h>\n" + "\n".join(defs) + "\n")
    lib_path = tmp_path / "libstub.so"
    compile_c(
        [
            compiler("gcc"),
            "-std=c99",
            *STRICT,
            "-Wno-unused-result",
            "-fPIC",
            "-shared",
            f"-I{SDK_INCLUDE}",
            str(src),
            "-o",
            str(lib_path),
        ]
    )
    lib = ffi.dlopen(str(lib_path))
    for name, sig in SIGNATURES.items():
        assert ffi.typeof(getattr(lib, name)) is ffi.typeof(sig), name


def _declared_functions() -> list[str]:
    import re

    return re.findall(r"\b(hipdnn\w+)\s*\(", _cdef.sdk_cdef())
