"""The plugin zoo of the standing attack suite (issue 16): plugin files and plugins written to hurt
the loader. FIFOs, sockets and devices where a library should be; a symlink re-pointed at a
world-writable library while handles are created; API versions that almost parse; names and messages
of a megabyte or full of terminal escapes; workspace sizes no allocator could satisfy. Each is refused
(or shown escaped) with a reason naming the file or plugin, and nothing hangs, crashes or loads a file
that was not checked. rfcs/0008-plugin-loading-trust.md has the rules.

The hostile plugins are fake_plugins/misbehaving_plugin.c built with hostile switches into
``<build>/hostile_plugins`` (fake_plugins/CMakeLists.txt, ``hipdnn_hostile_plugin``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import stat
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from pathlib import Path

import pytest

import hipdnn
from hipdnn.cli import main as cli_main
from hipdnn.plugins import (
    MAX_ENGINE_DETAILS_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_WORKSPACE_BYTES,
    discover_candidates,
    parse_api_version,
    printable,
)
from hipdnn.plugins import loader as loader_module
from hipdnn.plugins.trust import resolve
from tests.adversarial.conftest import budget
from tests.integration.support import sdpa_graph

ABSOLUTE = hipdnn.PluginLoadingMode.ABSOLUTE
SIZE_MAX = 2**64 - 1
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF plugins, POSIX files")

HOSTILE = (
    "hostile_api_newline",
    "hostile_api_leading_space",
    "hostile_api_trailing_space",
    "hostile_api_leading_zero",
    "hostile_api_two_parts",
    "hostile_api_arabic_digits",
    "hostile_name_huge",
    "hostile_name_escapes",
    "hostile_version_huge",
    "hostile_error",
    "hostile_log",
    "hostile_impostor",
    "hostile_origin",
    "hostile_details_size_max",
    "hostile_details_huge",
    "hostile_ids_overrun",
    "hostile_ids_repeated",
)
#: what misbehaving_plugin.c's MB_HOSTILE_TEXT becomes once escaped
HOSTILE_TEXT_SHOWN = "\\x1b[2J\\x1b[31mred\\r\\nCRITICAL forged line\\x7f\\x9b"


@pytest.fixture(scope="module")
def hostile(fake_plugin_paths: dict[str, Path]) -> dict[str, Path]:
    """name -> path of each hostile plugin (built with the fakes)."""
    build_dir = next(iter(fake_plugin_paths.values())).parent.parent
    paths = {n: build_dir / "hostile_plugins" / f"lib{n}.so" for n in HOSTILE}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    assert not missing, f"hostile plugins not built: {missing}"
    return paths


def _private_dir(path: Path) -> Path:
    path.mkdir()
    os.chmod(path, 0o755)
    return path


def _copy(src: Path, dst: Path, mode: int = 0o755) -> Path:
    shutil.copy(src, dst)
    os.chmod(dst, mode)
    return dst


def _printable_lines(text: str) -> bool:
    return all(line.isprintable() for line in text.splitlines())


# -- 1. FIFOs, sockets, devices, directories named like libraries --------------------------------
_NON_REGULAR_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    import hipdnn
    from hipdnn.plugins import loader

    args = json.loads(sys.argv[1])
    A = hipdnn.PluginLoadingMode.ABSOLUTE
    skipped = lambda h: [[str(s.path), s.reason, s.source] for s in h.skipped_plugins()]
    out = {}
    with hipdnn.Handle(plugin_paths=[args["fifo"]], plugin_loading_mode=A) as h:
        out["explicit"] = skipped(h)
    with hipdnn.Handle(plugin_paths=[args["dir"]], plugin_loading_mode=A) as h:
        out["scan"] = skipped(h)
        out["scan_loaded"] = [p.name for p in h.loaded_plugins()]
    os.environ["HIPDNN_PLUGIN_DIR"] = args["fifo"]
    with hipdnn.Handle() as h:
        out["env"] = [s for s in skipped(h) if s[2] == "env"]
    # The loader's own check, as if the file had become a FIFO after discovery listed it.
    plugins, refused = loader.instantiate([Path(args["fifo"])])
    out["loader"] = [[str(s.path), s.reason] for s in refused]
    print(json.dumps(out))
    """
)


def test_fifos_sockets_devices_and_directories_are_refused_without_blocking(
    tmp_path: Path, fake_plugin_paths: dict[str, Path]
) -> None:
    fifo = tmp_path / "x.so"
    os.mkfifo(fifo)
    d = _private_dir(tmp_path / "plugins")
    os.mkfifo(d / "libfifo.so")
    (d / "libdir.so").mkdir()
    (d / "libdev.so").symlink_to("/dev/null")
    _copy(fake_plugin_paths["fake_plain_v100"], d / "libgood.so")
    sock = socket.socket(socket.AF_UNIX)
    sock_path = d / "libsock.so"
    with_socket = len(str(sock_path)) < 100  # sun_path holds 108 bytes
    if with_socket:
        sock.bind(str(sock_path))
    try:
        # A subprocess, so that a regression hangs one child for a minute, not the suite.
        proc = subprocess.run(
            [sys.executable, "-c", _NON_REGULAR_SCRIPT, json.dumps({"fifo": str(fifo), "dir": str(d)})],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=Path(__file__).resolve().parents[2],
        )
    except subprocess.TimeoutExpired:
        pytest.fail("Handle() blocked opening a FIFO given as a plugin")
    finally:
        sock.close()
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    fifo_reason = f"not a regular file: {fifo} is a FIFO; a plugin must be a shared library file"
    assert out["explicit"] == [[str(fifo), fifo_reason, "handle"]]
    assert out["env"] == [[str(fifo), fifo_reason, "env"]]
    assert out["loader"] == [[str(fifo), fifo_reason]]
    scan = {Path(p).name: reason for p, reason, _ in out["scan"]}
    assert scan.pop("libfifo.so") == f"not a regular file: {d / 'libfifo.so'} is a FIFO; " + fifo_reason.split("; ")[1]
    assert scan.pop("libdir.so").startswith(f"not a regular file: {d / 'libdir.so'} is a directory")
    assert scan.pop("libdev.so").startswith(f"not a regular file: {d / 'libdev.so'} is a character device")
    if with_socket:
        assert scan.pop("libsock.so").startswith(f"not a regular file: {sock_path} is a socket")
    assert scan == {}
    assert out["scan_loaded"] == ["fake_plain_v100"]


# -- 2. what is checked is what is loaded ---------------------------------------------------------
@pytest.fixture
def trusted_and_untrusted(
    tmp_path: Path, fake_plugin_paths: dict[str, Path], hostile: dict[str, Path]
) -> tuple[Path, Path]:
    """A trusted copy of fake_plain_v100 and a world-writable impostor, in a private directory."""
    libs = _private_dir(tmp_path / "libs")
    trusted = _copy(fake_plugin_paths["fake_plain_v100"], libs / "libtrusted.so")
    untrusted = _copy(hostile["hostile_impostor"], libs / "libuntrusted.so", 0o777)
    os.chmod(untrusted, 0o777)
    return trusted, untrusted


def test_a_link_flipped_while_handles_are_created_never_loads_the_world_writable_library(
    tmp_path: Path, trusted_and_untrusted: tuple[Path, Path]
) -> None:
    trusted, untrusted = trusted_and_untrusted
    links = _private_dir(tmp_path / "links")
    link = links / "libplugin.so"
    link.symlink_to(trusted)
    stop = threading.Event()
    flips = 0

    def flip() -> None:
        nonlocal flips
        staged = links / "staged.so"
        while not stop.is_set():
            for target in (untrusted, trusted):
                staged.unlink(missing_ok=True)
                staged.symlink_to(target)
                os.replace(staged, link)  # atomic: the link always exists, pointing at one or the other
                flips += 1

    # Switch threads as often as possible, so that flips land between any two steps of the loader.
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    flipper = threading.Thread(target=flip, daemon=True)
    flipper.start()
    outcomes: Counter[str] = Counter()
    rounds = 0
    try:
        # At least 300 handles (30,000 in the long profile), and on until each state has been met often
        # (a loaded machine flips less).
        while rounds < budget(300) or (
            rounds < budget(3000) and min(outcomes["fake_plain_v100"], outcomes["refused"]) < 20
        ):
            rounds += 1
            with hipdnn.Handle(plugin_paths=[link], plugin_loading_mode=ABSOLUTE) as h:
                names = [p.name for p in h.loaded_plugins()]
                assert "hostile_impostor" not in names, [s.reason for s in h.skipped_plugins()]
                outcomes[names[0] if names else "refused"] += 1
    finally:
        stop.set()
        flipper.join()
        sys.setswitchinterval(old_interval)
    # both states were met: the trusted library loads, the impostor is refused
    assert min(outcomes["fake_plain_v100"], outcomes["refused"]) >= 20, (outcomes, flips)
    assert str(untrusted) not in Path("/proc/self/maps").read_text()


def test_the_library_is_loaded_through_the_checked_descriptor(trusted_and_untrusted: tuple[Path, Path]) -> None:
    """dlopen gets /proc/self/fd/N of the descriptor that was checked, and that descriptor stays open:
    glibc knows a loaded library by the name it was opened with, so a reused number would alias."""
    trusted, _ = trusted_and_untrusted
    with hipdnn.Handle(plugin_paths=[trusted], plugin_loading_mode=ABSOLUTE) as h:
        (p,) = h.loaded_plugins()
        assert p.path == str(trusted)
    library = loader_module._libraries[str(trusted)]
    fds = [fd for fd in loader_module._pinned_fds if os.readlink(f"/proc/self/fd/{fd}") == str(trusted)]
    assert len(fds) == 1 and not loader_module.uses_origin(fds[0])
    assert library.sha256 == loader_module.file_sha256(fds[0])


def test_a_library_using_origin_is_loaded_by_its_checked_path(hostile: dict[str, Path]) -> None:
    """glibc takes $ORIGIN from the name given to dlopen: through /proc/self/fd/N, a plugin finding its
    dependencies next to itself (as the CPU engine finds OpenBLAS) would not load. It is loaded by its
    real path instead, once that is shown to name the checked file."""
    lib = hostile["hostile_origin"]
    fd = os.open(lib, os.O_RDONLY)
    try:
        assert loader_module.uses_origin(fd)
    finally:
        os.close(fd)
    with hipdnn.Handle(plugin_paths=[lib], plugin_loading_mode=ABSOLUTE) as h:
        assert [p.name for p in h.loaded_plugins()] == ["hostile_origin"], h.skipped_plugins()
    assert str(lib) in Path("/proc/self/maps").read_text()


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775])
def test_a_link_in_a_directory_others_can_write_is_refused_sticky_or_not(
    tmp_path: Path, trusted_and_untrusted: tuple[Path, Path], mode: int
) -> None:
    trusted, _ = trusted_and_untrusted
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, mode)
    link = shared / "libplugin.so"
    link.symlink_to(trusted)
    with hipdnn.Handle(plugin_paths=[link], plugin_loading_mode=ABSOLUTE) as h:
        assert h.loaded_plugins() == []
        (s,) = h.skipped_plugins()
    assert s.path == link
    assert s.reason.startswith(f"untrusted plugin file: symlink {link} is in directory {shared}, which is writable by")
    assert f"(mode {mode:04o})" in s.reason
    # the loader refuses it on its own too (discovery is advice; the descriptor check is the one that counts)
    with pytest.raises(loader_module.PluginLoadError, match=f"symlink {link} is in directory {shared}"):
        loader_module.open_library(link)
    os.chmod(shared, 0o700)


def test_every_link_on_the_way_counts_not_only_the_last(
    tmp_path: Path, trusted_and_untrusted: tuple[Path, Path]
) -> None:
    trusted, _ = trusted_and_untrusted
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    hop = shared / "hop.so"
    hop.symlink_to(trusted)
    private = _private_dir(tmp_path / "private")
    first = private / "libfirst.so"
    first.symlink_to(hop)
    resolved = resolve(first)
    assert resolved.real == str(trusted)
    assert resolved.links == ((str(first), str(private)), (str(hop), str(shared)))
    (r,) = discover_candidates([first], ABSOLUTE).rejected
    assert f"symlink {hop} is in directory {shared}" in r.reason
    os.chmod(shared, 0o755)
    assert discover_candidates([first], ABSOLUTE).rejected == []  # links in private directories are fine
    with hipdnn.Handle(plugin_paths=[first], plugin_loading_mode=ABSOLUTE) as h:
        assert [p.name for p in h.loaded_plugins()] == ["fake_plain_v100"]


def test_a_world_writable_directory_on_the_way_through_a_link_is_refused(
    tmp_path: Path, trusted_and_untrusted: tuple[Path, Path]
) -> None:
    """The link sits in a private directory, but leads through a world-writable one (no sticky bit)."""
    trusted, _ = trusted_and_untrusted
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    inner = _private_dir(open_dir / "inner")
    lib = _copy(trusted, inner / "libx.so")
    link = _private_dir(tmp_path / "private") / "liblink.so"
    link.symlink_to(lib)
    with hipdnn.Handle(plugin_paths=[link], plugin_loading_mode=ABSOLUTE) as h:
        (s,) = h.skipped_plugins()
    assert f"directory {open_dir} is writable by its group and other users" in s.reason
    os.chmod(open_dir, 0o700)


def test_a_file_swapped_between_resolving_and_opening_is_refused(
    tmp_path: Path, trusted_and_untrusted: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The descriptor is compared with what the resolved path names once every check is done."""
    trusted, untrusted = trusted_and_untrusted
    target = _copy(trusted, trusted.parent / "libtarget.so")
    real_open = os.open

    def open_then_swap(path: str, flags: int, *args: int) -> int:
        fd = real_open(path, flags, *args)
        if path == str(target):
            staged = target.parent / "staged.so"
            _copy(untrusted, staged, 0o755)
            os.replace(staged, target)  # renamed over the checked name after it was opened
        return fd

    monkeypatch.setattr(os, "open", open_then_swap)
    with pytest.raises(loader_module.PluginLoadError, match="was replaced while it was being checked"):
        loader_module.open_library(target)


# -- 3. strict API versions -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("1.1.0\n", "'1.1.0\\n'"),
        (" 1.1.0", "' 1.1.0'"),
        ("1.1.0 ", "'1.1.0 '"),
        ("01.1.0", "'01.1.0'"),
        ("1.01.0", "'1.01.0'"),
        ("1.1", "'1.1'"),
        ("1.1.0.0", "'1.1.0.0'"),
        ("v1.1.0", "'v1.1.0'"),
        ("+1.1.0", "'+1.1.0'"),
        ("1.1.0-rc1", "'1.1.0-rc1'"),
        ("1.1.0\x00", "'1.1.0\\x00'"),
        ("\u0661.\u0661.\u0660", "'\\u0661.\\u0661.\\u0660'"),  # Arabic-Indic digits, which \d matches
        ("1\u0661.1.0", "'1\\u0661.1.0'"),  # got past the old pattern
        ("1.\uff11.0", "'1.\\uff11.0'"),  # FULLWIDTH DIGIT ONE
        ("", "''"),
    ],
)
def test_parse_api_version_is_strict(text: str, shown: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_api_version(text)
    assert str(info.value) == f"API version {shown} is not MAJOR.MINOR.PATCH"


def test_parse_api_version_accepts_plain_semver_and_bounds_its_message() -> None:
    assert [str(parse_api_version(t)) for t in ("0.0.0", "1.1.0", "10.20.300")] == ["0.0.0", "1.1.0", "10.20.300"]
    with pytest.raises(ValueError) as info:
        parse_api_version("9" * 100_000)
    assert len(str(info.value)) < 200 and "(100000 characters)" in str(info.value)


#: hostile plugin -> the whole reason it is skipped with
VERSION_REASONS = {
    "hostile_api_newline": "API version '1.1.0\\n'",
    "hostile_api_leading_space": "API version ' 1.1.0'",
    "hostile_api_trailing_space": "API version '1.1.0 '",
    "hostile_api_leading_zero": "API version '01.1.0'",
    "hostile_api_two_parts": "API version '1.1'",
    "hostile_api_arabic_digits": "API version '\\u0661.\\u0661.\\u0660'",
}


def test_plugins_reporting_almost_valid_api_versions_are_skipped(
    hostile: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="hipdnn.plugins"):
        handle = hipdnn.Handle(plugin_paths=[hostile[n] for n in VERSION_REASONS], plugin_loading_mode=ABSOLUTE)
    with handle:
        assert handle.loaded_plugins() == []
        reasons = {s.path: s.reason for s in handle.skipped_plugins()}
    assert reasons == {
        hostile[n]: f"unparsable API version: {v} is not MAJOR.MINOR.PATCH" for n, v in VERSION_REASONS.items()
    }
    logged = [r.getMessage() for r in caplog.records]
    for name, version in VERSION_REASONS.items():
        assert any(m.startswith(f"skipping plugin {hostile[name]}: ") and version in m for m in logged)


# -- 4. bounded and escaped plugin strings --------------------------------------------------------
def test_a_megabyte_name_or_version_is_refused_after_reading_a_bounded_prefix(hostile: dict[str, Path]) -> None:
    paths = [hostile["hostile_name_huge"], hostile["hostile_version_huge"]]
    with hipdnn.Handle(plugin_paths=paths, plugin_loading_mode=ABSOLUTE) as h:
        assert h.loaded_plugins() == []
        name, version = (s.reason for s in h.skipped_plugins())
    assert (
        name == f"hipdnnPluginGetName returned a string longer than 256 bytes, starting 'hostile_name_huge{'x' * 47}'"
    )
    assert version.startswith("hipdnnPluginGetVersion returned a string longer than 256 bytes, starting '0.0.1-xxx")


def test_bounded_read_stops_at_the_bound() -> None:
    buf = loader_module.ffi.new("char[]", b"abcdefgh")
    assert loader_module._bounded(buf, 4) == (b"abcd", True)
    assert loader_module._bounded(buf, 8) == (b"abcdefgh", False)


def test_a_name_with_terminal_escapes_is_refused_and_shown_escaped(
    hostile: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="hipdnn.plugins"):
        handle = hipdnn.Handle(plugin_paths=[hostile["hostile_name_escapes"]], plugin_loading_mode=ABSOLUTE)
    with handle:
        (s,) = handle.skipped_plugins()
    assert s.reason.startswith("hipdnnPluginGetName returned 'hostile_name_escapes\\x1b[31m\\n', which holds")
    assert s.reason.isprintable() and "\\x1b" in repr(s)
    assert all(r.getMessage().isprintable() for r in caplog.records)


def test_a_hostile_last_error_is_escaped_and_cut(hostile: dict[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="hipdnn.plugins"):
        handle = hipdnn.Handle(plugin_paths=[hostile["hostile_error"]], plugin_loading_mode=ABSOLUTE)
    with handle:
        (s,) = handle.skipped_plugins()
    prefix = (
        "plugin 'hostile_error': hipdnnEnginePluginCreate failed with HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR: "
        f"hostile_error: {HOSTILE_TEXT_SHOWN}xxx"
    )
    assert s.reason.startswith(prefix), s.reason[:300]
    assert s.reason.endswith(f"xxx... [truncated at {MAX_MESSAGE_BYTES} bytes]")
    assert len(s.reason) < MAX_MESSAGE_BYTES + 300  # the plugin wrote 64 KiB
    assert s.reason.isprintable()
    (skip_line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipping plugin")]
    assert skip_line.isprintable() and HOSTILE_TEXT_SHOWN in skip_line


def test_a_hostile_log_message_is_escaped_and_cut(hostile: dict[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="hipdnn.plugins"):
        hipdnn.Handle(plugin_paths=[hostile["hostile_log"]], plugin_loading_mode=ABSOLUTE).close()
    (record,) = [r for r in caplog.records if r.name == "hipdnn.plugins.hostile_log"]
    message = record.getMessage()
    assert record.levelno == logging.ERROR
    assert message.startswith(f"hostile_log: {HOSTILE_TEXT_SHOWN}xxx")
    assert message.endswith(f"... [truncated at {MAX_MESSAGE_BYTES} bytes]") and message.isprintable()


def test_printable_escapes_controls_and_keeps_text() -> None:
    assert printable("plain ascii, ünïcødé, 日本") == "plain ascii, ünïcødé, 日本"
    assert printable("a\x1b[31m\n\r\t\x00\x7f\x9b\u202e\u2028b") == "a\\x1b[31m\\n\\r\\t\\x00\\x7f\\x9b\\u202e\\u2028b"


def test_the_cli_shows_hostile_plugins_and_file_names_escaped(
    tmp_path: Path, hostile: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    d = _private_dir(tmp_path / "plugins")
    for name in ("hostile_name_escapes", "hostile_error", "hostile_api_newline"):
        _copy(hostile[name], d / hostile[name].name)
    evil_name = d / "lib\x1b[2Jevil\n.so"  # a file name is text a stranger may have chosen too
    evil_name.write_bytes(b"not a library")
    os.chmod(evil_name, 0o644)
    monkeypatch.setenv("HIPDNN_PLUGIN_DIR", str(d))
    for command in (["plugins"], ["doctor"]):
        cli_main(command)
        out = capsys.readouterr().out
        assert _printable_lines(out), [line for line in out.splitlines() if not line.isprintable()]
        assert "lib\\x1b[2Jevil\\n.so" in out
        assert "'hostile_name_escapes\\x1b[31m\\n'" in out
        assert HOSTILE_TEXT_SHOWN in out and "'1.1.0\\n'" in out
    cli_main(["plugins", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert any(s["path"] == str(evil_name) for s in data["skipped"])  # JSON carries the exact name


# -- 5. workspace sizes no allocator could satisfy -------------------------------------------------
GOOD, SECOND = "fake_override_v110", "fake_override_second"


def test_a_workspace_of_size_max_is_refused_and_the_next_engine_is_tried(
    fake_plugin_paths: dict[str, Path],
    fakes,  # type: ignore[no-untyped-def]
) -> None:
    fakes[GOOD].set_workspace_size(SIZE_MAX)
    with hipdnn.Handle(
        plugin_paths=[fake_plugin_paths[GOOD], fake_plugin_paths[SECOND]], plugin_loading_mode=ABSOLUTE
    ) as h:
        g, _ = sdpa_graph(override=True)
        g.build(h)
        assert g.get_engine_id() == 9007 and g.get_workspace_size() == 0
        report = g.plugin_report()
    assert f"engine 9001 dropped: plugin '{GOOD}': hipdnnEnginePluginGetWorkspaceSize" in report
    assert f"reported a workspace of {SIZE_MAX} bytes" in report


def test_a_workspace_above_the_bound_fails_the_build_naming_plugin_and_size(
    fake_plugin_paths: dict[str, Path],
    fakes,  # type: ignore[no-untyped-def]
) -> None:
    with hipdnn.Handle(plugin_paths=[fake_plugin_paths[GOOD]], plugin_loading_mode=ABSOLUTE) as h:
        fakes[GOOD].set_workspace_size(MAX_WORKSPACE_BYTES)  # the bound itself is accepted
        g, _ = sdpa_graph(override=True)
        g.build(h)
        assert g.get_workspace_size() == MAX_WORKSPACE_BYTES == 2**48
        for size in (MAX_WORKSPACE_BYTES + 1, SIZE_MAX):
            fakes[GOOD].set_workspace_size(size)
            g, _ = sdpa_graph(override=True, name=f"ws{size}")
            with pytest.raises(hipdnn.HipdnnError) as info:
                g.build(h)
            assert info.value.code is hipdnn.ErrorCode.GRAPH_NOT_SUPPORTED
            assert f"plugin '{GOOD}'" in info.value.message and f"a workspace of {size} bytes" in info.value.message


def test_a_context_reporting_size_max_is_destroyed_and_the_next_config_used(
    fake_plugin_paths: dict[str, Path],
    fakes,  # type: ignore[no-untyped-def]
) -> None:
    """GetWorkspaceSize says 0, the execution context then says SIZE_MAX: plan creation refuses it."""
    with hipdnn.Handle(
        plugin_paths=[fake_plugin_paths[GOOD], fake_plugin_paths[SECOND]], plugin_loading_mode=ABSOLUTE
    ) as h:
        g, _ = sdpa_graph(override=True)
        g.build_operation_graph(h).create_execution_plans().check_support()
        fakes[GOOD].set_workspace_size(SIZE_MAX)  # captured by contexts created from now on
        g.build_plans()
        assert g.get_engine_id() == 9007
        assert fakes[GOOD].lib.fakePluginGetLiveContextCount() == 0  # the refused context was destroyed
    with hipdnn.Handle(plugin_paths=[fake_plugin_paths[GOOD]], plugin_loading_mode=ABSOLUTE) as h:
        fakes[GOOD].set_workspace_size(0)
        g, _ = sdpa_graph(override=True, name="alone")
        g.build_operation_graph(h).create_execution_plans().check_support()
        fakes[GOOD].set_workspace_size(SIZE_MAX)
        with pytest.raises(hipdnn.HipdnnError) as info:
            g.build_plans()
        assert info.value.code is hipdnn.ErrorCode.GRAPH_EXECUTION_PLAN_CREATION_FAILED
        assert "hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext" in info.value.message
        assert f"plugin '{GOOD}'" in info.value.message and str(SIZE_MAX) in info.value.message
        assert fakes[GOOD].lib.fakePluginGetLiveContextCount() == 0


def test_untrusted_fixture_is_really_untrusted(trusted_and_untrusted: tuple[Path, Path]) -> None:
    """The swap test means something only if the impostor would be refused, and the trusted copy not."""
    trusted, untrusted = trusted_and_untrusted
    assert stat.S_IMODE(os.stat(untrusted).st_mode) == 0o777
    found = discover_candidates([trusted, untrusted], ABSOLUTE)
    assert found.paths == [trusted]
    assert found.rejected[0].reason.startswith(f"untrusted plugin file: file {untrusted} is writable by")


# -- 6. engine details whose size is a lie -----------------------------------------------------------
_DETAILS_SCRIPT = textwrap.dedent(
    """
    import faulthandler, json, sys
    faulthandler.enable()
    import hipdnn
    from tests.integration.support import sdpa_graph

    lib, A = sys.argv[1], hipdnn.PluginLoadingMode.ABSOLUTE
    out = {}
    with hipdnn.Handle(plugin_paths=[lib], plugin_loading_mode=A) as h:
        out["loaded"] = [p.name for p in h.loaded_plugins()]
        g, _ = sdpa_graph(override=False)
        try:
            g.build(h)
            out["build"] = "built"
        except hipdnn.HipdnnError as exc:
            out["build"] = f"{exc.code.name}: {exc.message}"
    try:  # a GPU handle asks every engine's details for a probe graph when it is created
        hipdnn.Handle(plugin_paths=[lib], plugin_loading_mode=A, device="cuda").close()
        out["gpu_handle"] = "created"
    except hipdnn.HipdnnError as exc:
        out["gpu_handle"] = f"{exc.code.name}: {exc.message}"
    print(json.dumps(out))
    """
)


@pytest.mark.parametrize(("name", "size"), [("hostile_details_size_max", SIZE_MAX), ("hostile_details_huge", 1 << 34)])
def test_engine_details_of_a_lying_size_are_refused_unread(hostile: dict[str, Path], name: str, size: int) -> None:
    """GetEngineDetails hands an 8-byte buffer and says it holds SIZE_MAX bytes, or 16 GiB. The host
    copied the buffer out by the stated size: OverflowError escaped build() (and Handle(device=...)),
    and 16 GiB read past the plugin's buffer: a segfault. Now a size above MAX_ENGINE_DETAILS_BYTES is
    refused unread, like any failing plugin call: the engine is dropped with the reason."""
    proc = subprocess.run(
        [sys.executable, "-c", _DETAILS_SCRIPT, str(hostile[name])],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["loaded"] == [name]
    reason = (
        f"plugin '{name}': hipdnnEnginePluginGetEngineDetails failed with HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR: "
        f"engine {9703 if 'max' in name else 9704}: reported engine details of {size} bytes, more than the "
        f"{MAX_ENGINE_DETAILS_BYTES} bytes (16 MiB) hipdnn reads; not read"
    )
    assert out["build"].startswith("GRAPH_NOT_SUPPORTED: ") and reason in out["build"], out["build"]
    assert out["gpu_handle"].startswith("INVALID_VALUE: Handle(device='cuda'): no loaded engine runs on a GPU"), out


_IDS_SCRIPT = textwrap.dedent(
    """
    import faulthandler, json, sys
    faulthandler.enable()
    import hipdnn
    from hipdnn.plugins import PluginError
    from tests.integration.support import sdpa_graph

    lib, A = sys.argv[1], hipdnn.PluginLoadingMode.ABSOLUTE
    out = {}
    with hipdnn.Handle(plugin_paths=[lib], plugin_loading_mode=A) as h:
        g, _ = sdpa_graph(override=False)
        g.validate()
        (plugin,) = h._backend.plugins
        try:
            out["applicable"] = plugin.applicable_engine_ids(g.serialize())
        except PluginError as exc:
            out["applicable"] = str(exc)
        try:
            g.build(h)
            out["build"] = "built"
        except hipdnn.HipdnnError as exc:
            out["build"] = f"{exc.code.name}: {exc.message}"
    print(json.dumps(out))
    """
)


def _ids_run(path: Path) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", _IDS_SCRIPT, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    out: dict[str, object] = json.loads(proc.stdout.splitlines()[-1])
    return out


def test_engine_ids_written_past_the_room_given_fail_the_call(hostile: dict[str, Path]) -> None:
    """GetApplicableEngineIds writes two ids past the max_engines it is given. The host's array has
    guard slots after the room it declares: the write lands there, and the call fails naming it
    (before, the ids went into whatever followed the array, and the host went on)."""
    out = _ids_run(hostile["hostile_ids_overrun"])
    assert "wrote engine ids past the 1 it was given room for" in str(out["applicable"]), out
    assert str(out["build"]).startswith("GRAPH_NOT_SUPPORTED: "), out
    assert "wrote engine ids past" in str(out["build"]), out


def test_an_engine_named_twice_is_one_engine(hostile: dict[str, Path]) -> None:
    """GetApplicableEngineIds reports [9706, 9706]: one engine, one config (not two)."""
    out = _ids_run(hostile["hostile_ids_repeated"])
    assert out["applicable"] == [9706], out
