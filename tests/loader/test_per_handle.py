"""Per-handle plugin sets: what one handle loads, refuses, claims and closes never shows in another;
only the opened library files are shared."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import hipdnn
from hipdnn.plugins import loader as loader_module
from tests.integration.support import arrays_for, execute_calls, sdpa_graph

ABSOLUTE = hipdnn.PluginLoadingMode.ABSOLUTE
GOOD = "fake_override_v110"


def handle(*paths: Path) -> hipdnn.Handle:
    return hipdnn.Handle(plugin_paths=list(paths), plugin_loading_mode=ABSOLUTE)


def test_handles_with_different_paths_see_different_plugins(fake_plugin_paths, fakes) -> None:  # type: ignore[no-untyped-def]
    good, plain = fake_plugin_paths[GOOD], fake_plugin_paths["fake_plain_v100"]
    with handle(good) as h1, handle(plain, good) as h2:
        assert [p.name for p in h1.loaded_plugins()] == [GOOD]
        assert [p.name for p in h2.loaded_plugins()] == ["fake_plain_v100", GOOD]
        (p1,), p2 = h1.backend.plugins, h2.backend.plugins[1]
        assert p1.library is p2.library  # one opened file, shared
        assert p1.address != p2.address  # two plugin instances
        assert h1.backend.plugin_for(9002) is None and h2.backend.plugin_for(9002) is not None
    creates = fakes[GOOD].calls("Create")
    assert len(creates) == 2 and creates[0]["handle"] != creates[1]["handle"]


def test_engine_collisions_are_decided_per_handle(
    fake_plugin_paths: dict[str, Path], zoo_paths: dict[str, Path]
) -> None:
    good, collider = fake_plugin_paths[GOOD], zoo_paths["zoo_collides_9001"]
    with handle(good, collider) as first_good, handle(collider, good) as first_collider:
        assert first_good.backend.plugin_for(9001).name == GOOD
        assert first_collider.backend.plugin_for(9001).name == "zoo_collides_9001"
        assert {p.name: p.engine_ids for p in first_good.loaded_plugins()} == {
            GOOD: (9001,),
            "zoo_collides_9001": (9911,),
        }
        assert [p.name for p in first_collider.loaded_plugins()] == ["zoo_collides_9001"]
        assert [s.path for s in first_collider.skipped_plugins()] == [good]
        assert first_good.skipped_plugins() == []


def test_skipped_lists_are_per_handle(fake_plugin_paths: dict[str, Path], zoo_dir: Path, garbage_dir: Path) -> None:
    with (
        hipdnn.Handle(
            plugin_paths=[fake_plugin_paths[GOOD], zoo_dir, garbage_dir], plugin_loading_mode=ABSOLUTE
        ) as dirty,
        hipdnn.Handle(plugin_paths=[fake_plugin_paths[GOOD]], plugin_loading_mode=ABSOLUTE) as clean,
    ):
        assert len(dirty.skipped_plugins()) > 10
        assert clean.skipped_plugins() == []
        dirty.skipped_plugins().clear()  # a copy: the handle's own list is not exposed
        assert len(dirty.skipped_plugins()) > 10


def test_closing_one_handle_leaves_the_other_working(fake_plugin_paths: dict[str, Path], fakes) -> None:  # type: ignore[no-untyped-def]
    h1 = hipdnn.Handle(plugin_paths=[fake_plugin_paths[GOOD]], plugin_loading_mode=ABSOLUTE)
    h2 = hipdnn.Handle(plugin_paths=[fake_plugin_paths[GOOD]], plugin_loading_mode=ABSOLUTE)
    try:
        g1, t1 = sdpa_graph(override=False)
        g1.build(h1)
        g2, t2 = sdpa_graph(override=False)
        g2.build(h2)
        h1.close()
        (destroyed,) = fakes[GOOD].calls("Destroy")
        creates = fakes[GOOD].calls("Create")
        assert destroyed["handle"] == creates[0]["handle"]
        g2.execute(h2, arrays_for(t2), None)
        ((_, rec),) = execute_calls(fakes, [GOOD])
        assert rec["handle"] == creates[1]["handle"]
        assert fakes[GOOD].lib.fakePluginGetLiveHandleCount() >= 1
    finally:
        h1.close()
        h2.close()
    assert len(fakes[GOOD].calls("Destroy")) == 2


def test_a_plugin_sharing_one_instance_between_handles_is_refused_while_it_is_live(
    zoo_paths: dict[str, Path],
) -> None:
    shared = zoo_paths["zoo_shared_handle_a"]
    h1 = hipdnn.Handle(plugin_paths=[shared], plugin_loading_mode=ABSOLUTE)
    try:
        assert [p.name for p in h1.loaded_plugins()] == ["zoo_shared_handle_a"]
        with hipdnn.Handle(plugin_paths=[shared], plugin_loading_mode=ABSOLUTE) as h2:
            (s,) = h2.skipped_plugins()
            assert "already holds for a live instance" in s.reason
    finally:
        h1.close()
    with hipdnn.Handle(plugin_paths=[shared], plugin_loading_mode=ABSOLUTE) as h3:  # released on close
        assert [p.name for p in h3.loaded_plugins()] == ["zoo_shared_handle_a"]


def test_a_refused_file_is_tried_again_once_replaced(fake_plugin_paths: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "libreplaced.so"
    target.write_bytes(b"not yet a plugin")
    os.chmod(target, 0o644)
    with hipdnn.Handle(plugin_paths=[target], plugin_loading_mode=ABSOLUTE) as h:
        assert h.loaded_plugins() == [] and "not an ELF file" in h.skipped_plugins()[0].reason
    staged = tmp_path / "staged.so"
    shutil.copy(fake_plugin_paths["fake_plain_v100"], staged)
    os.replace(staged, target)  # replace by rename, never rewrite a library in place
    with hipdnn.Handle(plugin_paths=[target], plugin_loading_mode=ABSOLUTE) as h:
        assert [p.name for p in h.loaded_plugins()] == ["fake_plain_v100"]
    assert os.path.realpath(target) in loader_module._libraries
