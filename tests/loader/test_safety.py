"""Trust rules: plugin files and directories writable by others, or owned by another non-root user,
are refused with the fix in the message; environment paths are ignored in a setuid/setgid process."""

from __future__ import annotations

import logging
import os
import shutil
import stat
from pathlib import Path

import pytest

import hipdnn
from hipdnn.plugins import PluginLoadingMode, discover_candidates, unsafe_reason

ABSOLUTE = PluginLoadingMode.ABSOLUTE
posix_only = pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX ownership rules")
pytestmark = posix_only


@pytest.fixture
def plugin_dir(tmp_path: Path, fake_plugin_paths: dict[str, Path]) -> Path:
    d = tmp_path / "plugins"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    shutil.copy(fake_plugin_paths["fake_plain_v100"], d / "libplain.so")
    os.chmod(d / "libplain.so", 0o755)
    return d


def test_a_private_plugin_is_trusted(plugin_dir: Path) -> None:
    assert unsafe_reason(plugin_dir) is None and unsafe_reason(plugin_dir / "libplain.so") is None
    with hipdnn.Handle(plugin_paths=[plugin_dir], plugin_loading_mode=ABSOLUTE) as h:
        assert [p.name for p in h.loaded_plugins()] == ["fake_plain_v100"]


@pytest.mark.parametrize(
    ("mode", "who"), [(0o775, "its group"), (0o757, "other users"), (0o777, "its group and other users")]
)
def test_group_or_world_writable_file_is_refused(plugin_dir: Path, mode: int, who: str) -> None:
    lib = plugin_dir / "libplain.so"
    os.chmod(lib, mode)
    for paths in ([lib], [plugin_dir]):  # named directly, or found by scanning its directory
        with hipdnn.Handle(plugin_paths=paths, plugin_loading_mode=ABSOLUTE) as h:
            assert h.loaded_plugins() == []
            (s,) = h.skipped_plugins()
        assert s.path == lib
        want = f"untrusted plugin file: file {lib} is writable by {who} (mode {mode:04o})"
        assert s.reason.startswith(want)
        assert s.reason.endswith(f"Fix: chmod go-w {lib}")


def test_group_writable_directory_is_refused_with_all_it_holds(plugin_dir: Path) -> None:
    os.chmod(plugin_dir, 0o775)
    found = discover_candidates([plugin_dir], ABSOLUTE)
    assert found.candidates == []
    (r,) = found.rejected
    assert r.path == plugin_dir
    assert f"directory {plugin_dir} is writable by its group" in r.reason
    assert r.reason.endswith(f"chmod go-w {plugin_dir}")


def test_sticky_world_writable_directory_is_still_no_plugin_directory(plugin_dir: Path) -> None:
    os.chmod(plugin_dir, 0o1777)  # anyone may add files, even if none can replace ours
    (r,) = discover_candidates([plugin_dir], ABSOLUTE).rejected
    assert "writable by its group and other users" in r.reason


def test_writable_ancestor_is_refused_sticky_ancestor_tolerated(tmp_path: Path, plugin_dir: Path) -> None:
    lib = plugin_dir / "libplain.so"
    parent = plugin_dir.parent
    os.chmod(parent, 0o777)  # anyone could rename plugins/ away and put their own in its place
    try:
        reason = unsafe_reason(lib)
        assert reason is not None and f"directory {parent} is writable" in reason
        os.chmod(parent, 0o1777)  # like /tmp: others cannot rename what they do not own
        assert unsafe_reason(lib) is None
    finally:
        os.chmod(parent, 0o700)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() != 0, reason="needs root to chown")
def test_file_owned_by_another_user_is_refused_root_owned_is_fine(plugin_dir: Path) -> None:
    lib = plugin_dir / "libplain.so"
    assert os.stat(lib).st_uid == 0 and unsafe_reason(lib) is None
    os.chown(lib, 4321, 4321)
    reason = unsafe_reason(lib)
    assert reason is not None
    assert f"file {lib} is owned by uid 4321, neither root nor the current user (uid 0)" in reason
    assert f"chown 0 {lib}" in reason
    os.chown(plugin_dir, 4321, 4321)
    os.chown(lib, 0, 0)
    with hipdnn.Handle(plugin_paths=[plugin_dir], plugin_loading_mode=ABSOLUTE) as h:
        (s,) = h.skipped_plugins()
    assert s.path == plugin_dir and "owned by uid 4321" in s.reason


def test_setuid_process_ignores_plugin_dir_from_environment(
    plugin_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("HIPDNN_PLUGIN_DIR", str(plugin_dir))
    names = [c.path.name for c in discover_candidates().candidates]
    assert "libplain.so" in names
    real_uid = os.getuid()
    monkeypatch.setattr(os, "geteuid", lambda: real_uid + 1000)  # effective uid differs: setuid
    with caplog.at_level(logging.WARNING, logger="hipdnn.plugins"):
        found = discover_candidates()
    assert "libplain.so" not in [c.path.name for c in found.candidates]
    messages = [r.getMessage() for r in caplog.records]
    assert "HIPDNN_PLUGIN_DIR is ignored in a setuid/setgid process" in messages
    # paths given to the handle by the program itself are still honoured
    given = discover_candidates([plugin_dir], ABSOLUTE)
    assert [c.path for c in given.candidates] == [plugin_dir / "libplain.so"]


def test_setgid_process_ignores_plugin_dir_from_environment(plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIPDNN_PLUGIN_DIR", str(plugin_dir))
    real_gid = os.getgid()
    monkeypatch.setattr(os, "getegid", lambda: real_gid + 1000)
    assert "libplain.so" not in [c.path.name for c in discover_candidates().candidates]


def test_refusal_is_retried_once_fixed(plugin_dir: Path) -> None:
    lib = plugin_dir / "libplain.so"
    os.chmod(lib, 0o775)
    with hipdnn.Handle(plugin_paths=[lib], plugin_loading_mode=ABSOLUTE) as h:
        assert h.loaded_plugins() == []
    os.chmod(lib, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    with hipdnn.Handle(plugin_paths=[lib], plugin_loading_mode=ABSOLUTE) as h:
        assert [p.name for p in h.loaded_plugins()] == ["fake_plain_v100"]
