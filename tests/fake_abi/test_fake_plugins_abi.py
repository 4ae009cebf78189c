"""ABI tests of the fake engine plugins (fake_plugins/), driven directly through cffi.

These check that every fake variant exports what it claims, behaves like a
well-formed plugin, and records every payload it receives bit for bit, so the
host integration tests can rely on the fakes as witnesses.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hipdnn.plugins._cdef import declarations_from_header
from tests.fake_abi.fake_build import (
    FAKE_VARIANTS,
    HOOKS_HEADER,
    build_fake_plugins,
    load_fake,
    make_ffi,
)

SUCCESS = 0
BAD_PARAM = 1
INTERNAL_ERROR = 3
NOT_APPLICABLE = 5

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
UINTPTR = st.integers(min_value=0, max_value=2**64 - 1)

OVERRIDE_VARIANTS = [n for n, v in FAKE_VARIANTS.items() if v.has_overrides]
PLAIN_VARIANTS = [n for n, v in FAKE_VARIANTS.items() if not v.has_overrides]

GRAPH = b"\x10\x00\x00\x00fake-graph-bytes\x00\x01\x02\x03" * 3
CONFIG = b"\x08\x00\x00\x00engine-config"


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def fake_paths(tmp_path_factory) -> dict[str, Path]:
    return build_fake_plugins(tmp_path_factory.mktemp("fake_build"))


@pytest.fixture(scope="session")
def ffi():
    return make_ffi()


@pytest.fixture(scope="session")
def libs(fake_paths, ffi):
    return {name: load_fake(path, ffi)[1] for name, path in fake_paths.items()}


@pytest.fixture(autouse=True)
def _reset(request):
    """Every test starts from default fake state."""
    if "libs" in request.fixturenames:
        for lib in request.getfixturevalue("libs").values():
            lib.fakePluginResetState()
    yield


# --------------------------------------------------------------------------- helpers


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def call_log(ffi, lib) -> list[dict]:
    raw = lib.fakePluginGetCallLog()
    assert raw != ffi.NULL
    return json.loads(ffi.string(raw).decode())


def last_error(ffi, lib) -> bytes:
    out = ffi.new("const char**")
    lib.hipdnnPluginGetLastErrorString(out)
    return ffi.string(out[0])


def const_data(ffi, payload: bytes | None):
    """A hipdnnPluginConstData_t* over payload, plus the keep-alive buffer."""
    if payload is None:
        return ffi.NULL, None
    buf = ffi.from_buffer(payload)
    data = ffi.new("hipdnnPluginConstData_t*", {"ptr": buf, "size": len(payload)})
    return data, buf


def create_handle(ffi, lib):
    out = ffi.new("hipdnnEnginePluginHandle_t*")
    assert lib.hipdnnEnginePluginCreate(out) == SUCCESS
    return out[0]


def create_context(ffi, lib, handle, config=CONFIG, graph=GRAPH):
    cfg, k1 = const_data(ffi, config)
    g, k2 = const_data(ffi, graph)
    out = ffi.new("hipdnnEnginePluginExecutionContext_t*")
    assert lib.hipdnnEnginePluginCreateExecutionContext(handle, cfg, g, out) == SUCCESS
    return out[0]


def device_buffers(ffi, buffers: list[tuple[int, int]]):
    if not buffers:
        return ffi.NULL
    arr = ffi.new("hipdnnPluginDeviceBuffer_t[]", len(buffers))
    for i, (uid, ptr) in enumerate(buffers):
        arr[i].uid = uid
        arr[i].ptr = ffi.cast("void*", ptr)
    return arr


def execute_with_overrides(ffi, lib, handle, ctx, workspace, buffers, overrides):
    """overrides: list of (uid, shape, strides) with len(shape) == len(strides)."""
    bufs = device_buffers(ffi, buffers)
    keep = []
    n = len(overrides)
    if n:
        uids = ffi.new("int64_t[]", [o[0] for o in overrides])
        lengths = ffi.new("uint32_t[]", [len(o[1]) for o in overrides])
        shape_arrays = [ffi.new("int64_t[]", list(o[1])) if o[1] else ffi.NULL for o in overrides]
        stride_arrays = [ffi.new("int64_t[]", list(o[2])) if o[2] else ffi.NULL for o in overrides]
        keep += shape_arrays + stride_arrays
        shapes = ffi.new("int64_t*[]", shape_arrays)
        strides = ffi.new("int64_t*[]", stride_arrays)
    else:
        uids = lengths = shapes = strides = ffi.NULL
    return lib.hipdnnEnginePluginExecuteOpGraphWithOverrides(
        handle,
        ctx,
        ffi.cast("void*", workspace),
        bufs,
        len(buffers),
        n,
        uids,
        lengths,
        shapes,
        strides,
    )


def expected_override_record(handle_id, ctx_id, workspace, buffers, overrides, status=SUCCESS):
    return {
        "entry": "ExecuteOpGraphWithOverrides",
        "status": status,
        "handle": handle_id,
        "context": ctx_id,
        "workspace": workspace,
        "buffers": [[u, p] for u, p in buffers],
        "num_overrides": len(overrides),
        "override_uids": [o[0] for o in overrides],
        "override_lengths": [len(o[1]) for o in overrides],
        "override_shapes": [list(o[1]) for o in overrides],
        "override_strides": [list(o[2]) for o in overrides],
    }


# --------------------------------------------------------------------------- build and headers


def test_hooks_header_yields_cffi_declarations():
    decls = declarations_from_header(HOOKS_HEADER.read_text())
    for fn in (
        "fakePluginGetCallLog",
        "fakePluginResetCallLog",
        "fakePluginSetApplicable",
        "fakePluginSetExecuteFailure",
        "fakePluginSetWorkspaceSize",
        "fakePluginGetName",
    ):
        assert fn in decls
    assert "HIPDNN_PLUGIN" not in decls and "#" not in decls


def test_build_outputs_every_variant(fake_paths):
    assert set(fake_paths) == set(FAKE_VARIANTS)
    for name, path in fake_paths.items():
        assert path.name == f"lib{name}.so"
        assert path.parent.name == "fake_plugins"
        assert path.is_file()


# --------------------------------------------------------------------------- identity


@pytest.mark.parametrize("name", sorted(FAKE_VARIANTS))
def test_variant_identity(ffi, libs, name):
    variant = FAKE_VARIANTS[name]
    lib = libs[name]
    s = ffi.new("const char**")
    assert lib.hipdnnPluginGetName(s) == SUCCESS
    assert ffi.string(s[0]).decode() == name
    assert ffi.string(lib.fakePluginGetName()).decode() == name
    assert lib.hipdnnPluginGetVersion(s) == SUCCESS
    assert ffi.string(s[0]).decode() == variant.version
    t = ffi.new("hipdnnPluginType_t*")
    assert lib.hipdnnPluginGetType(t) == SUCCESS
    assert t[0] == lib.HIPDNN_PLUGIN_TYPE_ENGINE

    if variant.api_version is None:
        with pytest.raises(AttributeError):
            lib.hipdnnPluginGetApiVersion  # noqa: B018
    else:
        assert lib.hipdnnPluginGetApiVersion(s) == SUCCESS
        assert ffi.string(s[0]).decode() == variant.api_version

    if variant.has_overrides:
        assert lib.hipdnnEnginePluginExecuteOpGraphWithOverrides is not None
    else:
        with pytest.raises(AttributeError):
            lib.hipdnnEnginePluginExecuteOpGraphWithOverrides  # noqa: B018

    # Optional logging entries are present everywhere.
    assert lib.hipdnnPluginSetLoggingCallback(ffi.NULL) == SUCCESS
    assert lib.hipdnnPluginSetLogLevel(lib.HIPDNN_SEV_WARN) == SUCCESS


@pytest.mark.parametrize("name", sorted(FAKE_VARIANTS))
def test_engine_id_count_convention(ffi, libs, name):
    lib = libs[name]
    num = ffi.new("uint32_t*", 77)
    assert lib.hipdnnEnginePluginGetAllEngineIds(ffi.NULL, 0, num) == SUCCESS
    assert num[0] == 1
    ids = ffi.new("int64_t[4]", [-1, -1, -1, -1])
    assert lib.hipdnnEnginePluginGetAllEngineIds(ids, 4, num) == SUCCESS
    assert num[0] == 1
    assert list(ids) == [FAKE_VARIANTS[name].engine_id, -1, -1, -1]


def test_distinct_engine_ids():
    ids = [v.engine_id for v in FAKE_VARIANTS.values()]
    assert len(set(ids)) == len(ids)


# --------------------------------------------------------------------------- call sequence


@pytest.mark.parametrize("name", ["fake_override_v110", "fake_plain_v100", "fake_no_api_version"])
def test_full_call_sequence_is_recorded(ffi, libs, name):
    lib = libs[name]
    has_overrides = FAKE_VARIANTS[name].has_overrides
    engine_id = FAKE_VARIANTS[name].engine_id
    lib.fakePluginSetWorkspaceSize(4096)

    h1 = create_handle(ffi, lib)
    h2 = create_handle(ffi, lib)
    assert h1 != h2
    assert lib.fakePluginGetLiveHandleCount() == 2
    assert lib.hipdnnEnginePluginSetStream(h1, ffi.cast("hipStream_t", 0xABC0)) == SUCCESS

    g, keep_g = const_data(ffi, GRAPH)
    cfg, keep_c = const_data(ffi, CONFIG)
    ids = ffi.new("int64_t[2]")
    num = ffi.new("uint32_t*")
    assert lib.hipdnnEnginePluginGetApplicableEngineIds(h1, g, ids, 2, num) == SUCCESS
    assert num[0] == 1 and ids[0] == engine_id

    details = ffi.new("hipdnnPluginConstData_t*")
    assert lib.hipdnnEnginePluginGetEngineDetails(h1, engine_id, g, details) == SUCCESS
    assert details.size == 0
    assert lib.hipdnnEnginePluginDestroyEngineDetails(h1, details) == SUCCESS

    ws = ffi.new("size_t*")
    assert lib.hipdnnEnginePluginGetWorkspaceSize(h1, cfg, g, ws) == SUCCESS
    assert ws[0] == 4096

    ctx = create_context(ffi, lib, h1)
    assert lib.hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(h1, ctx, ws) == SUCCESS
    assert ws[0] == 4096
    assert lib.fakePluginGetLiveContextCount() == 1

    buffers = [(1, 0x1000), (2, 0x2000), (-5, 0xFFFFFFFFFFFFFFF0)]
    bufs = device_buffers(ffi, buffers)
    assert lib.hipdnnEnginePluginExecuteOpGraph(h1, ctx, ffi.cast("void*", 0x9000), bufs, 3) == SUCCESS

    overrides = [(1, [2, 3], [3, 1]), (2, [4], [1])]
    if has_overrides:
        assert execute_with_overrides(ffi, lib, h1, ctx, 0x9000, buffers, overrides) == SUCCESS

    assert lib.hipdnnEnginePluginDestroyExecutionContext(h1, ctx) == SUCCESS
    assert lib.hipdnnEnginePluginDestroy(h1) == SUCCESS
    assert lib.hipdnnEnginePluginDestroy(h2) == SUCCESS
    assert lib.fakePluginGetLiveHandleCount() == 0
    assert lib.fakePluginGetLiveContextCount() == 0

    log = call_log(ffi, lib)
    hid1, hid2 = log[0]["handle"], log[1]["handle"]
    cid = log[4]["context"]
    expected = [
        {"entry": "Create", "status": 0, "handle": hid1},
        {"entry": "Create", "status": 0, "handle": hid2},
        {"entry": "SetStream", "status": 0, "handle": hid1, "stream": 0xABC0},
        {
            "entry": "GetApplicableEngineIds",
            "status": 0,
            "handle": hid1,
            "graph_size": len(GRAPH),
            "graph_hash": fnv1a64(GRAPH),
            "max_engines": 2,
            "num_engines": 1,
        },
        {
            "entry": "CreateExecutionContext",
            "status": 0,
            "handle": hid1,
            "context": cid,
            "config_size": len(CONFIG),
            "config_hash": fnv1a64(CONFIG),
            "graph_size": len(GRAPH),
            "graph_hash": fnv1a64(GRAPH),
        },
        {
            "entry": "ExecuteOpGraph",
            "status": 0,
            "handle": hid1,
            "context": cid,
            "workspace": 0x9000,
            "buffers": [[u, p] for u, p in buffers],
        },
    ]
    if has_overrides:
        expected.append(expected_override_record(hid1, cid, 0x9000, buffers, overrides))
    expected += [
        {"entry": "DestroyExecutionContext", "status": 0, "handle": hid1, "context": cid},
        {"entry": "Destroy", "status": 0, "handle": hid1, "leaked_contexts": 0},
        {"entry": "Destroy", "status": 0, "handle": hid2, "leaked_contexts": 0},
    ]
    assert hid1 != hid2
    assert log == expected
    assert lib.fakePluginGetCallCount() == len(expected)

    lib.fakePluginResetCallLog()
    assert call_log(ffi, lib) == []


def test_log_string_is_exact_json_integers(ffi, libs):
    lib = libs["fake_override_v110"]
    h = create_handle(ffi, lib)
    ctx = create_context(ffi, lib, h)
    overrides = [(-(2**63), [2**63 - 1], [-(2**63)])]
    assert execute_with_overrides(ffi, lib, h, ctx, 2**64 - 1, [(2**63 - 1, 2**64 - 1)], overrides) == 0
    text = ffi.string(lib.fakePluginGetCallLog()).decode()
    # Integers, never floats or exponents.
    assert "9223372036854775807" in text and "-9223372036854775808" in text
    assert "18446744073709551615" in text
    assert "e+" not in text and "." not in text
    assert lib.hipdnnEnginePluginDestroy(h) == SUCCESS


overrides_strategy = st.lists(
    st.integers(min_value=0, max_value=8).flatmap(
        lambda rank: st.tuples(
            INT64,
            st.lists(INT64, min_size=rank, max_size=rank),
            st.lists(INT64, min_size=rank, max_size=rank),
        )
    ),
    max_size=6,
)
buffers_strategy = st.lists(st.tuples(INT64, UINTPTR), max_size=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(OVERRIDE_VARIANTS),
    workspace=UINTPTR,
    buffers=buffers_strategy,
    overrides=overrides_strategy,
)
def test_override_payload_round_trips(ffi, libs, name, workspace, buffers, overrides):
    lib = libs[name]
    lib.fakePluginResetState()
    h = create_handle(ffi, lib)
    ctx = create_context(ffi, lib, h)
    lib.fakePluginResetCallLog()
    try:
        assert execute_with_overrides(ffi, lib, h, ctx, workspace, buffers, overrides) == SUCCESS
        bufs = device_buffers(ffi, buffers)
        assert lib.hipdnnEnginePluginExecuteOpGraph(h, ctx, ffi.cast("void*", workspace), bufs, len(buffers)) == SUCCESS
        log = call_log(ffi, lib)
        hid, cid = log[0]["handle"], log[0]["context"]
        assert log[0] == expected_override_record(hid, cid, workspace, buffers, overrides)
        assert log[1] == {
            "entry": "ExecuteOpGraph",
            "status": 0,
            "handle": hid,
            "context": cid,
            "workspace": workspace,
            "buffers": [[u, p] for u, p in buffers],
        }
        assert len(log) == 2
    finally:
        assert lib.hipdnnEnginePluginDestroyExecutionContext(h, ctx) == SUCCESS
        assert lib.hipdnnEnginePluginDestroy(h) == SUCCESS


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(graph=st.binary(min_size=1, max_size=512), config=st.binary(min_size=1, max_size=64))
def test_graph_and_config_hashes(ffi, libs, graph, config):
    lib = libs["fake_plain_v100"]
    lib.fakePluginResetState()
    h = create_handle(ffi, lib)
    try:
        g, keep = const_data(ffi, graph)
        num = ffi.new("uint32_t*")
        assert lib.hipdnnEnginePluginGetApplicableEngineIds(h, g, ffi.NULL, 0, num) == SUCCESS
        ctx = create_context(ffi, lib, h, config=config, graph=graph)
        log = call_log(ffi, lib)
        assert log[1]["graph_hash"] == fnv1a64(graph) and log[1]["graph_size"] == len(graph)
        assert log[1]["max_engines"] == 0 and log[1]["num_engines"] == 1
        assert log[2]["graph_hash"] == fnv1a64(graph)
        assert log[2]["config_hash"] == fnv1a64(config) and log[2]["config_size"] == len(config)
        assert lib.hipdnnEnginePluginDestroyExecutionContext(h, ctx) == SUCCESS
    finally:
        assert lib.hipdnnEnginePluginDestroy(h) == SUCCESS


# --------------------------------------------------------------------------- hooks


@pytest.mark.parametrize("name", ["fake_override_v110", "fake_plain_v100"])
def test_failure_injection(ffi, libs, name):
    lib = libs[name]
    has_overrides = FAKE_VARIANTS[name].has_overrides
    h = create_handle(ffi, lib)
    ctx = create_context(ffi, lib, h)
    message = "engine exploded: \u00e9\u00e8 'quotes' \"dq\"".encode()
    lib.fakePluginSetExecuteFailure(INTERNAL_ERROR, message)
    buffers = [(7, 0x70)]
    bufs = device_buffers(ffi, buffers)
    assert lib.hipdnnEnginePluginExecuteOpGraph(h, ctx, ffi.NULL, bufs, 1) == INTERNAL_ERROR
    assert last_error(ffi, lib) == message
    if has_overrides:
        lib.fakePluginSetExecuteFailure(NOT_APPLICABLE, b"second")
        assert execute_with_overrides(ffi, lib, h, ctx, 0, buffers, [(7, [1], [1])]) == NOT_APPLICABLE
        assert last_error(ffi, lib) == b"second"

    lib.fakePluginSetExecuteFailure(0, ffi.NULL)
    assert lib.hipdnnEnginePluginExecuteOpGraph(h, ctx, ffi.NULL, bufs, 1) == SUCCESS
    if has_overrides:
        assert execute_with_overrides(ffi, lib, h, ctx, 0, buffers, []) == SUCCESS

    statuses = [(r["entry"], r["status"]) for r in call_log(ffi, lib) if r["entry"].startswith("Execute")]
    expected = [("ExecuteOpGraph", INTERNAL_ERROR)]
    if has_overrides:
        expected.append(("ExecuteOpGraphWithOverrides", NOT_APPLICABLE))
    expected.append(("ExecuteOpGraph", SUCCESS))
    if has_overrides:
        expected.append(("ExecuteOpGraphWithOverrides", SUCCESS))
    assert statuses == expected
    # Failed executes still carry their full payload.
    assert call_log(ffi, lib)[2]["buffers"] == [[7, 0x70]]
    assert lib.hipdnnEnginePluginDestroy(h) == SUCCESS


def test_failure_message_is_copied(ffi, libs):
    lib = libs["fake_plain_v100"]
    buf = ffi.new("char[]", b"original")
    lib.fakePluginSetExecuteFailure(INTERNAL_ERROR, buf)
    ffi.memmove(buf, b"mutated!", 8)
    h = create_handle(ffi, lib)
    ctx = create_context(ffi, lib, h)
    assert lib.hipdnnEnginePluginExecuteOpGraph(h, ctx, ffi.NULL, ffi.NULL, 0) == INTERNAL_ERROR
    assert last_error(ffi, lib) == b"original"
    assert lib.hipdnnEnginePluginDestroy(h) == SUCCESS


def test_last_error_is_per_thread(ffi, libs):
    lib = libs["fake_plain_v100"]
    seen = {}

    def worker():
        seen["other"] = last_error(ffi, lib)

    assert lib.hipdnnPluginGetName(ffi.NULL) == BAD_PARAM
    assert last_error(ffi, lib) != b""
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen["other"] == b""


def test_applicability_toggle(ffi, libs):
    lib = libs["fake_override_v110"]
    h = create_handle(ffi, lib)
    g, keep = const_data(ffi, GRAPH)
    ids = ffi.new("int64_t[1]", [-1])
    num = ffi.new("uint32_t*", 99)
    lib.fakePluginSetApplicable(0)
    assert lib.hipdnnEnginePluginGetApplicableEngineIds(h, g, ids, 1, num) == SUCCESS
    assert num[0] == 0 and ids[0] == -1
    lib.fakePluginSetApplicable(1)
    assert lib.hipdnnEnginePluginGetApplicableEngineIds(h, g, ids, 1, num) == SUCCESS
    assert num[0] == 1 and ids[0] == 9001
    recs = [r for r in call_log(ffi, lib) if r["entry"] == "GetApplicableEngineIds"]
    assert [r["num_engines"] for r in recs] == [0, 1]
    assert lib.hipdnnEnginePluginDestroy(h) == SUCCESS


def test_workspace_size_hook_and_context_capture(ffi, libs):
    lib = libs["fake_override_v110"]
    h = create_handle(ffi, lib)
    cfg, k1 = const_data(ffi, CONFIG)
    g, k2 = const_data(ffi, GRAPH)
    ws = ffi.new("size_t*")
    assert lib.hipdnnEnginePluginGetWorkspaceSize(h, cfg, g, ws) == SUCCESS
    assert ws[0] == 0
    lib.fakePluginSetWorkspaceSize(2**40)
    assert lib.hipdnnEnginePluginGetWorkspaceSize(h, cfg, g, ws) == SUCCESS
    assert ws[0] == 2**40
    ctx = create_context(ffi, lib, h)
    lib.fakePluginSetWorkspaceSize(8)
    assert lib.hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(h, ctx, ws) == SUCCESS
    assert ws[0] == 2**40  # captured when the context was created
    # A context that needs workspace refuses a NULL workspace.
    assert lib.hipdnnEnginePluginExecuteOpGraph(h, ctx, ffi.NULL, ffi.NULL, 0) == BAD_PARAM
    assert lib.hipdnnEnginePluginExecuteOpGraph(h, ctx, ffi.cast("void*", 64), ffi.NULL, 0) == SUCCESS
    assert lib.hipdnnEnginePluginDestroy(h) == SUCCESS


def test_logging_callback(ffi, libs):
    lib = libs["fake_plain_v100"]
    messages = []

    @ffi.callback("void(hipdnnSeverity_t, const char*)")
    def sink(sev, msg):
        messages.append((int(sev), ffi.string(msg).decode()))

    assert lib.hipdnnPluginSetLoggingCallback(sink) == SUCCESS
    try:
        assert lib.hipdnnPluginSetLogLevel(lib.HIPDNN_SEV_INFO) == SUCCESS
        h = create_handle(ffi, lib)
        assert lib.hipdnnEnginePluginDestroy(h) == SUCCESS
        assert len(messages) == 2 and all("fake_plain_v100" in m for _, m in messages)
        assert lib.hipdnnPluginSetLogLevel(lib.HIPDNN_SEV_OFF) == SUCCESS
        h = create_handle(ffi, lib)
        assert lib.hipdnnEnginePluginDestroy(h) == SUCCESS
        assert len(messages) == 2
        assert lib.hipdnnPluginSetLogLevel(ffi.cast("hipdnnSeverity_t", 17)) == BAD_PARAM
    finally:
        assert lib.hipdnnPluginSetLoggingCallback(ffi.NULL) == SUCCESS
        assert lib.hipdnnPluginSetLogLevel(lib.HIPDNN_SEV_WARN) == SUCCESS


def test_same_path_shares_state(ffi, libs, fake_paths):
    """A second dlopen of the same file (as the host does) sees the same hooks state."""
    _, again = load_fake(fake_paths["fake_override_second"])
    lib = libs["fake_override_second"]
    h = create_handle(ffi, lib)
    assert again.fakePluginGetCallCount() == 1
    assert again.fakePluginGetLiveHandleCount() == 1
    assert lib.hipdnnEnginePluginDestroy(h) == SUCCESS


def test_variants_do_not_share_state(ffi, libs):
    a, b = libs["fake_override_v110"], libs["fake_override_v120"]
    h = create_handle(ffi, a)
    assert a.fakePluginGetCallCount() == 1
    assert b.fakePluginGetCallCount() == 0
    assert a.hipdnnEnginePluginDestroy(h) == SUCCESS


# --------------------------------------------------------------------------- handles and contexts


def test_several_handles_and_leaked_contexts(ffi, libs):
    lib = libs["fake_override_v110"]
    handles = [create_handle(ffi, lib) for _ in range(4)]
    contexts = [create_context(ffi, lib, h) for h in handles]
    assert lib.fakePluginGetLiveHandleCount() == 4
    assert lib.fakePluginGetLiveContextCount() == 4
    # A context is only valid with its own handle.
    assert lib.hipdnnEnginePluginExecuteOpGraph(handles[0], contexts[1], ffi.NULL, ffi.NULL, 0) == BAD_PARAM
    assert b"another handle" in last_error(ffi, lib)
    for h, c in zip(handles, contexts):
        assert lib.hipdnnEnginePluginExecuteOpGraph(h, c, ffi.NULL, ffi.NULL, 0) == SUCCESS
    for h, c in zip(handles[:2], contexts[:2]):
        assert lib.hipdnnEnginePluginDestroyExecutionContext(h, c) == SUCCESS
    for h in handles:
        assert lib.hipdnnEnginePluginDestroy(h) == SUCCESS
    assert lib.fakePluginGetLiveContextCount() == 0
    destroys = [r for r in call_log(ffi, lib) if r["entry"] == "Destroy"]
    assert [r["leaked_contexts"] for r in destroys] == [0, 0, 1, 1]
    handle_ids = [r["handle"] for r in call_log(ffi, lib) if r["entry"] == "Create"]
    assert len(set(handle_ids)) == 4


def test_concurrent_calls_are_all_recorded(ffi, libs):
    lib = libs["fake_override_v110"]
    n_threads, n_calls = 4, 300
    errors = []

    def worker(k):
        try:
            h = create_handle(ffi, lib)
            ctx = create_context(ffi, lib, h)
            bufs = device_buffers(ffi, [(k, k + 1)])
            for _ in range(n_calls):
                if lib.hipdnnEnginePluginExecuteOpGraph(h, ctx, ffi.NULL, bufs, 1) != SUCCESS:
                    errors.append(k)
            assert lib.hipdnnEnginePluginDestroyExecutionContext(h, ctx) == SUCCESS
            assert lib.hipdnnEnginePluginDestroy(h) == SUCCESS
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    log = call_log(ffi, lib)
    assert len(log) == n_threads * (n_calls + 4)
    for k in range(n_threads):
        assert sum(1 for r in log if r["entry"] == "ExecuteOpGraph" and r["buffers"] == [[k, k + 1]]) == n_calls


# --------------------------------------------------------------------------- bad parameters


@pytest.mark.parametrize("name", sorted(FAKE_VARIANTS))
def test_null_out_params_are_bad_param(ffi, libs, name):
    lib = libs[name]
    for fn in (lib.hipdnnPluginGetName, lib.hipdnnPluginGetVersion, lib.hipdnnPluginGetType):
        assert fn(ffi.NULL) == BAD_PARAM
        assert last_error(ffi, lib) != b""
    if FAKE_VARIANTS[name].api_version is not None:
        assert lib.hipdnnPluginGetApiVersion(ffi.NULL) == BAD_PARAM
    lib.hipdnnPluginGetLastErrorString(ffi.NULL)  # must not crash
    assert lib.hipdnnEnginePluginGetAllEngineIds(ffi.NULL, 0, ffi.NULL) == BAD_PARAM
    assert lib.hipdnnEnginePluginGetAllEngineIds(ffi.NULL, 3, ffi.new("uint32_t*")) == BAD_PARAM
    assert lib.hipdnnEnginePluginCreate(ffi.NULL) == BAD_PARAM
    assert lib.hipdnnEnginePluginDestroy(ffi.NULL) == BAD_PARAM
    assert lib.hipdnnEnginePluginSetStream(ffi.NULL, ffi.NULL) == BAD_PARAM


def test_bad_parameters_on_engine_entries(ffi, libs):
    lib = libs["fake_override_v110"]
    h = create_handle(ffi, lib)
    g, k1 = const_data(ffi, GRAPH)
    cfg, k2 = const_data(ffi, CONFIG)
    empty = ffi.new("hipdnnPluginConstData_t*", {"ptr": ffi.NULL, "size": 0})
    num = ffi.new("uint32_t*")
    ws = ffi.new("size_t*")
    out_ctx = ffi.new("hipdnnEnginePluginExecutionContext_t*")
    details = ffi.new("hipdnnPluginConstData_t*")
    lib.fakePluginResetCallLog()

    assert lib.hipdnnEnginePluginGetApplicableEngineIds(ffi.NULL, g, ffi.NULL, 0, num) == BAD_PARAM
    assert lib.hipdnnEnginePluginGetApplicableEngineIds(h, ffi.NULL, ffi.NULL, 0, num) == BAD_PARAM
    assert lib.hipdnnEnginePluginGetApplicableEngineIds(h, empty, ffi.NULL, 0, num) == BAD_PARAM
    assert lib.hipdnnEnginePluginGetApplicableEngineIds(h, g, ffi.NULL, 0, ffi.NULL) == BAD_PARAM
    assert lib.hipdnnEnginePluginGetApplicableEngineIds(h, g, ffi.NULL, 2, num) == BAD_PARAM
    assert lib.hipdnnEnginePluginGetEngineDetails(h, 1234, g, details) == BAD_PARAM
    assert b"1234" in last_error(ffi, lib)
    assert lib.hipdnnEnginePluginGetEngineDetails(h, 9001, g, ffi.NULL) == BAD_PARAM
    assert lib.hipdnnEnginePluginDestroyEngineDetails(h, ffi.NULL) == BAD_PARAM
    assert lib.hipdnnEnginePluginGetWorkspaceSize(h, cfg, g, ffi.NULL) == BAD_PARAM
    assert lib.hipdnnEnginePluginGetWorkspaceSize(h, ffi.NULL, g, ws) == BAD_PARAM
    assert lib.hipdnnEnginePluginCreateExecutionContext(h, cfg, g, ffi.NULL) == BAD_PARAM
    assert lib.hipdnnEnginePluginCreateExecutionContext(h, ffi.NULL, g, out_ctx) == BAD_PARAM
    assert lib.hipdnnEnginePluginCreateExecutionContext(h, cfg, ffi.NULL, out_ctx) == BAD_PARAM
    assert lib.fakePluginGetLiveContextCount() == 0

    ctx = create_context(ffi, lib, h)
    assert lib.hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(h, ctx, ffi.NULL) == BAD_PARAM
    assert lib.hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(h, ffi.NULL, ws) == BAD_PARAM
    assert lib.hipdnnEnginePluginExecuteOpGraph(h, ffi.NULL, ffi.NULL, ffi.NULL, 0) == BAD_PARAM
    assert lib.hipdnnEnginePluginExecuteOpGraph(ffi.NULL, ctx, ffi.NULL, ffi.NULL, 0) == BAD_PARAM
    assert lib.hipdnnEnginePluginExecuteOpGraph(h, ctx, ffi.NULL, ffi.NULL, 2) == BAD_PARAM
    ex = lib.hipdnnEnginePluginExecuteOpGraphWithOverrides
    one = ffi.new("int64_t[1]", [1])
    lens = ffi.new("uint32_t[1]", [1])
    ptrs = ffi.new("int64_t*[1]", [one])
    null_ptrs = ffi.new("int64_t*[1]", [ffi.NULL])
    assert ex(h, ctx, ffi.NULL, ffi.NULL, 0, 1, ffi.NULL, lens, ptrs, ptrs) == BAD_PARAM
    assert ex(h, ctx, ffi.NULL, ffi.NULL, 0, 1, one, ffi.NULL, ptrs, ptrs) == BAD_PARAM
    assert ex(h, ctx, ffi.NULL, ffi.NULL, 0, 1, one, lens, ffi.NULL, ptrs) == BAD_PARAM
    assert ex(h, ctx, ffi.NULL, ffi.NULL, 0, 1, one, lens, ptrs, ffi.NULL) == BAD_PARAM
    assert ex(h, ctx, ffi.NULL, ffi.NULL, 0, 1, one, lens, null_ptrs, ptrs) == BAD_PARAM
    assert ex(h, ctx, ffi.NULL, ffi.NULL, 0, 1, one, lens, ptrs, ptrs) == SUCCESS

    assert lib.hipdnnEnginePluginDestroyExecutionContext(h, ctx) == SUCCESS
    # Stale objects are recognised without being dereferenced as live.
    assert lib.hipdnnEnginePluginDestroyExecutionContext(h, ctx) == BAD_PARAM
    assert lib.hipdnnEnginePluginExecuteOpGraph(h, ctx, ffi.NULL, ffi.NULL, 0) == BAD_PARAM
    assert lib.hipdnnEnginePluginDestroy(h) == SUCCESS
    assert lib.hipdnnEnginePluginDestroy(h) == BAD_PARAM
    assert lib.hipdnnEnginePluginSetStream(h, ffi.NULL) == BAD_PARAM

    log = call_log(ffi, lib)
    # Every recorded failure says so; rejected calls carry no payload.
    failures = [r for r in log if r["status"] != 0]
    assert all(r["status"] == BAD_PARAM for r in failures)
    assert all("buffers" not in r and "override_uids" not in r for r in failures)
    applicable = [r for r in log if r["entry"] == "GetApplicableEngineIds"]
    assert [r["status"] for r in applicable] == [BAD_PARAM] * 5
    assert "handle" not in applicable[0]
    assert applicable[3]["graph_hash"] == fnv1a64(GRAPH)  # graph was valid; num_engines was not
    assert [r["status"] for r in log if r["entry"] == "ExecuteOpGraphWithOverrides"] == [BAD_PARAM] * 5 + [0]
