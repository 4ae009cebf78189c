"""Discovery: the documented search order (built-in, HIPDNN_PLUGIN_DIR, entry points, plugin_paths),
entry points resolved without importing anything, and candidates listed without being opened."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

import hipdnn
from hipdnn.plugins import ENTRY_POINT_GROUP, PluginLoadingMode, PluginSource, discover_candidates
from hipdnn.plugins import loader as loader_module

EXPLODING_INIT = "raise RuntimeError('hipdnn imported a plugin package during discovery')\n"


def make_distribution(site: Path, dist: str, entry_points: dict[str, str], packages: dict[str, list[Path]]) -> None:
    """A distribution installed into ``site``: a dist-info with ``entry_points`` (name -> value) in
    hipdnn's group, and packages (dotted name -> plugin files copied into it). Every package's
    __init__.py raises, so importing one fails the test."""
    info = site / f"{dist}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    lines = [f"[{ENTRY_POINT_GROUP}]"] + [f"{k} = {v}" for k, v in entry_points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    for dotted, files in packages.items():
        d = site.joinpath(*dotted.split("."))
        d.mkdir(parents=True, exist_ok=True)
        for i in range(1, len(dotted.split(".")) + 1):
            init = site.joinpath(*dotted.split(".")[:i]) / "__init__.py"
            init.write_text(EXPLODING_INIT)
        for f in files:
            shutil.copy(f, d / f.name)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    s = tmp_path / "site"
    s.mkdir()
    monkeypatch.syspath_prepend(str(s))
    return s


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HIPDNN_PLUGIN_DIR", raising=False)


def test_entry_point_package_is_found_without_importing_it(
    site: Path, fake_plugin_paths: dict[str, Path], no_env: None
) -> None:
    make_distribution(
        site,
        "hipdnn_fakeplug",
        {"plain": "hipdnn_fakeplug_pkg"},
        {"hipdnn_fakeplug_pkg": [fake_plugin_paths["fake_plain_v100"]]},
    )
    found = discover_candidates()
    eps = [c for c in found.candidates if c.source is PluginSource.ENTRY_POINT]
    assert [c.path for c in eps] == [site / "hipdnn_fakeplug_pkg" / "libfake_plain_v100.so"]
    assert eps[0].origin == "plain = hipdnn_fakeplug_pkg (hipdnn_fakeplug 1.0)"
    assert "hipdnn_fakeplug_pkg" not in sys.modules
    with hipdnn.Handle() as handle:
        by_name = {p.name: p for p in handle.loaded_plugins()}
        assert by_name["fake_plain_v100"].source == "entry_point"
        assert Path(by_name["fake_plain_v100"].path).parent == site / "hipdnn_fakeplug_pkg"
    assert "hipdnn_fakeplug_pkg" not in sys.modules


def test_dotted_entry_point_is_resolved_without_importing_its_parents(
    site: Path, fake_plugin_paths: dict[str, Path], no_env: None
) -> None:
    make_distribution(
        site,
        "nested_dist",
        {"nested": "nested_pkg.sub.engines"},
        {"nested_pkg.sub.engines": [fake_plugin_paths["fake_override_v120"]]},
    )
    (ep,) = [c for c in discover_candidates().candidates if c.source is PluginSource.ENTRY_POINT]
    assert ep.path == site / "nested_pkg" / "sub" / "engines" / "libfake_override_v120.so"
    assert not any(m == "nested_pkg" or m.startswith("nested_pkg.") for m in sys.modules)


def test_bad_entry_points_are_reported_not_raised(site: Path, no_env: None) -> None:
    (site / "plain_module.py").write_text(EXPLODING_INIT)
    make_distribution(
        site,
        "bad_dist",
        {"a_missing": "no_such_package_anywhere", "b_module": "plain_module", "c_attr": "plain_module:thing"},
        {},
    )
    found = discover_candidates()
    reasons = {str(r.path): r.reason for r in found.rejected if r.source == "entry_point"}
    assert "module 'no_such_package_anywhere' not found on sys.path" in reasons["no_such_package_anywhere"]
    assert "'plain_module' is a module, not a package" in reasons["plain_module"]
    assert "must name a package, without ':thing'" in reasons["plain_module:thing"]
    for r in found.rejected:
        assert f"in group {ENTRY_POINT_GROUP}" in r.reason
    assert "plain_module" not in sys.modules
    with hipdnn.Handle() as handle:  # reported per handle like any refused plugin
        assert {str(s.path) for s in handle.skipped_plugins()} >= set(reasons)


def test_search_order_and_sources(
    site: Path, fake_plugin_paths: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_a, env_b = tmp_path / "env_a", tmp_path / "env_b"
    for d, name in ((env_a, "fake_plain_v100"), (env_b, "fake_no_api_version")):
        d.mkdir()
        shutil.copy(fake_plugin_paths[name], d)
    monkeypatch.setenv("HIPDNN_PLUGIN_DIR", os.pathsep.join([str(env_a), str(env_b)]))
    make_distribution(
        site,
        "two_eps",
        {"z_last": "ep_pkg_z", "a_first": "ep_pkg_a"},
        {
            "ep_pkg_a": [fake_plugin_paths["fake_override_v120"]],
            "ep_pkg_z": [fake_plugin_paths["fake_version_liar"]],
        },
    )
    given = fake_plugin_paths["fake_override_v110"]
    found = hipdnn.Handle.discover(plugin_paths=[given])
    builtin = [c for c in found.candidates if c.source is PluginSource.BUILTIN]
    assert "libhipdnn_cpu_engine.so" in [c.path.name for c in builtin]
    assert found.candidates[: len(builtin)] == builtin  # the package's own engines come first
    assert [(c.source.value, c.path.name) for c in found.candidates[len(builtin) - 1 :]] == [
        ("builtin", builtin[-1].path.name),
        ("env", "libfake_plain_v100.so"),
        ("env", "libfake_no_api_version.so"),
        ("entry_point", "libfake_override_v120.so"),  # entry points by name: a_first before z_last
        ("entry_point", "libfake_version_liar.so"),
        ("handle", "libfake_override_v110.so"),
    ]
    assert [s.source.value for s in found.search_paths if s.source is not PluginSource.BUILTIN] == [
        "env",
        "env",
        "entry_point",
        "entry_point",
        "handle",
    ]
    with hipdnn.Handle(plugin_paths=[given]) as handle:
        loaded = [(p.source, p.name) for p in handle.loaded_plugins()]
        assert ("builtin", "hipdnn_cpu_engine") in loaded
        assert [x for x in loaded if x[0] != "builtin"] == [
            ("env", "fake_plain_v100"),
            ("env", "fake_no_api_version"),
            ("entry_point", "fake_override_v120"),
            ("entry_point", "fake_version_liar"),
            ("handle", "fake_override_v110"),
        ]
        assert handle.plugin_search_paths == [s.path for s in found.search_paths]
    absolute = discover_candidates([given], PluginLoadingMode.ABSOLUTE)
    assert [(c.source.value, c.path) for c in absolute.candidates] == [("handle", given)]
    assert absolute.rejected == []


def test_discovery_opens_nothing(fake_plugin_paths: dict[str, Path], tmp_path: Path, no_env: None) -> None:
    copy = tmp_path / "libnever_opened.so"
    shutil.copy(fake_plugin_paths["fake_plain_v100"], copy)
    found = discover_candidates([tmp_path], PluginLoadingMode.ABSOLUTE)
    assert found.paths == [copy]
    assert os.path.realpath(copy) not in loader_module._libraries
    maps = Path("/proc/self/maps")
    if maps.exists():
        assert str(copy) not in maps.read_text()


def test_a_file_reached_twice_keeps_its_first_place(
    fake_plugin_paths: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib = fake_plugin_paths["fake_plain_v100"]
    link = tmp_path / "libalias.so"
    link.symlink_to(lib)
    monkeypatch.setenv("HIPDNN_PLUGIN_DIR", str(lib.parent))
    found = discover_candidates([link, lib])
    hits = [c for c in found.candidates if os.path.realpath(c.path) == os.path.realpath(lib)]
    assert len(hits) == 1 and hits[0].source is PluginSource.ENV


def test_missing_env_directory_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIPDNN_PLUGIN_DIR", str(tmp_path / "nowhere"))
    found = discover_candidates()
    (r,) = [r for r in found.rejected if r.source == "env"]
    assert r.path == tmp_path / "nowhere" and r.reason == "plugin directory does not exist"


def test_directory_scan_is_non_recursive_and_by_name(fake_plugin_paths: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    shutil.copy(fake_plugin_paths["fake_plain_v100"], tmp_path / "sub" / "libhidden.so")
    for name in ("libb.so", "liba.so.1", "libc.dylib", "notes.txt"):
        (tmp_path / name).write_bytes(b"x")
    found = discover_candidates([tmp_path], PluginLoadingMode.ABSOLUTE)
    assert [c.path.name for c in found.candidates] == ["liba.so.1", "libb.so", "libc.dylib"]


def test_setuid_process_ignores_entry_points(
    site: Path, fake_plugin_paths: dict[str, Path], monkeypatch: pytest.MonkeyPatch, no_env: None
) -> None:
    plain = fake_plugin_paths["fake_plain_v100"]
    make_distribution(site, "suid_dist", {"p": "suid_pkg"}, {"suid_pkg": [plain]})
    assert any(c.source is PluginSource.ENTRY_POINT for c in discover_candidates().candidates)
    real_uid = os.getuid()
    monkeypatch.setattr(os, "geteuid", lambda: real_uid + 1000)
    assert not any(c.source is PluginSource.ENTRY_POINT for c in discover_candidates().candidates)
