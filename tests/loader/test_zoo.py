"""The zoo: a handle built over every misbehaving plugin, garbage files and a missing directory next to
good plugins still serves graphs from the good ones, and reports and logs each bad one precisely."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np
import pytest

import hipdnn
from hipdnn import reference
from tests.fake_abi.fake_build import ZOO_VARIANTS
from tests.integration.support import arrays_for, execute_calls, sdpa_graph

from .conftest import DERIVED, GARBAGE

GOOD = "fake_override_v110"

#: zoo plugin -> a regular expression its skip reason must match
EXPECTED_REASON = {
    "zoo_missing_symbol": r"^missing required entry hipdnnEnginePluginExecuteOpGraph$",
    "zoo_api_unparsable": r"^unparsable API version: API version '1\.x' is not MAJOR\.MINOR\.PATCH$",
    "zoo_api_empty": r"^unparsable API version: API version '' is not MAJOR\.MINOR\.PATCH$",
    "zoo_api_null": r"^unparsable API version: hipdnnPluginGetApiVersion returned a null string$",
    "zoo_api_major2": r"^API version 2\.0\.0 has major 2, this host speaks major 1$",
    "zoo_zero_engines": r"^plugin reports zero engines$",
    "zoo_count_changes": r"^engine count changed between calls \(\d+ then \d+\)$",
    "zoo_duplicate_ids": r"^duplicate engine ids \[9501\] in \[9501, 9501\]$",
    "zoo_create_fails": (
        r"^plugin 'zoo_create_fails': hipdnnEnginePluginCreate failed with "
        r"HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR: "
        r"zoo_create_fails: no device matches this engine \(simulated\)$"
    ),
    "zoo_create_null": r"^hipdnnEnginePluginCreate returned a null handle",
    "zoo_shared_handle_b": (
        r"^hipdnnEnginePluginCreate returned handle 0x5eed0000, which plugin 'zoo_shared_handle_a' "
        r"\(.*libzoo_shared_handle_a\.so\) already holds for a live instance$"
    ),
    "zoo_name_fails": (
        r"hipdnnPluginGetName failed with HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR: "
        r"zoo_name_fails: name table not initialised$"
    ),
    "zoo_wrong_type": r"^plugin type 2 is not HIPDNN_PLUGIN_TYPE_ENGINE$",
}
#: zoo plugins that load (partly): the first of the shared-handle pair, and the colliding plugin
LOADS = {"zoo_shared_handle_a": (9601,), "zoo_collides_9001": (9911,)}


def test_expectations_cover_the_whole_zoo() -> None:
    assert set(EXPECTED_REASON) | set(LOADS) == set(ZOO_VARIANTS)


def _zoo_handle(
    fake_plugin_paths: dict[str, Path],
    zoo_dir: Path,
    garbage_dir: Path,
    missing: Path,
    mode: hipdnn.PluginLoadingMode = hipdnn.PluginLoadingMode.ABSOLUTE,
) -> hipdnn.Handle:
    return hipdnn.Handle(
        plugin_paths=[fake_plugin_paths[GOOD], zoo_dir, garbage_dir, missing], plugin_loading_mode=mode
    )


@pytest.fixture
def zoo_handle(fake_plugin_paths, zoo_dir, garbage_dir, tmp_path, fakes, caplog):  # type: ignore[no-untyped-def]
    with caplog.at_level(logging.INFO, logger="hipdnn"):
        handle = _zoo_handle(fake_plugin_paths, zoo_dir, garbage_dir, tmp_path / "does_not_exist")
    yield handle
    handle.close()


def test_zoo_loads_only_the_good_and_the_partly_good(zoo_handle: hipdnn.Handle) -> None:
    loaded = {p.name: p.engine_ids for p in zoo_handle.loaded_plugins()}
    assert loaded == {GOOD: (9001,), **LOADS}


def test_every_bad_plugin_is_reported_with_its_file_and_reason(
    zoo_handle: hipdnn.Handle, zoo_paths: dict[str, Path], garbage_dir: Path, tmp_path: Path
) -> None:
    skipped = {s.path: s for s in zoo_handle.skipped_plugins()}
    for name, pattern in EXPECTED_REASON.items():
        s = skipped.pop(zoo_paths[name])
        assert re.search(pattern, s.reason), (name, s.reason)
        assert s.source == "handle"
    for name in [*GARBAGE, *DERIVED]:
        s = skipped.pop(garbage_dir / name)
        assert s.reason.startswith("not a loadable shared library: "), (name, s.reason)
    reasons = {s.path.name: s.reason for s in zoo_handle.skipped_plugins()}
    assert reasons["libtext.so"].endswith("not an ELF file")
    assert "ELF type 1 is not a shared object" in reasons["librelocatable.so"]
    assert "past the end of the file" in reasons["libtruncated_no_sections.so"]
    assert "truncated?" in reasons["libtruncated.so"] and "truncated?" in reasons["libtruncated_tail.so"]
    missing = skipped.pop(tmp_path / "does_not_exist")
    assert missing.reason == "plugin path does not exist"
    assert skipped == {}


def test_each_skip_is_logged_with_file_and_reason_and_one_summary_line(
    zoo_handle: hipdnn.Handle, caplog: pytest.LogCaptureFixture
) -> None:
    messages = [r.getMessage() for r in caplog.get_records("setup") if r.name == "hipdnn.plugins"]
    for s in zoo_handle.skipped_plugins():
        assert f"skipping plugin {s.path}: {s.reason}" in messages
    summaries = [m for m in messages if m.startswith("loaded ")]
    n_loaded, n_skipped = len(zoo_handle.loaded_plugins()), len(zoo_handle.skipped_plugins())
    assert summaries == [f"loaded {n_loaded} plugin(s), skipped {n_skipped}"]
    assert (n_loaded, n_skipped) == (3, len(EXPECTED_REASON) + len(GARBAGE) + len(DERIVED) + 1)


def test_collision_drops_only_the_later_engine_and_names_both_plugins(
    zoo_handle: hipdnn.Handle, caplog: pytest.LogCaptureFixture, fake_plugin_paths: dict[str, Path]
) -> None:
    (collider,) = [p for p in zoo_handle.loaded_plugins() if p.name == "zoo_collides_9001"]
    assert collider.engine_ids == (9911,) and collider.dropped_engine_ids == (9001,)
    (good,) = [p for p in zoo_handle.loaded_plugins() if p.name == GOOD]
    assert good.engine_ids == (9001,) and good.dropped_engine_ids == ()
    records = caplog.get_records("setup")
    errors = [r.getMessage() for r in records if r.levelno == logging.ERROR and "collides" in r.getMessage()]
    assert len(errors) == 1
    assert "'zoo_collides_9001'" in errors[0] and f"'{GOOD}'" in errors[0]
    assert "engine id 9001" in errors[0] and str(fake_plugin_paths[GOOD]) in errors[0]
    assert zoo_handle.backend.plugin_for(9001).name == GOOD
    assert zoo_handle.backend.plugin_for(9911).name == "zoo_collides_9001"


def test_zoo_handle_serves_a_graph_from_the_good_plugin(zoo_handle: hipdnn.Handle, fakes) -> None:  # type: ignore[no-untyped-def]
    g, ts = sdpa_graph(override=True)
    g.build(zoo_handle)
    assert g.get_engine_id() == 9001
    g.execute(zoo_handle, arrays_for(ts), None)
    assert [(n, r["entry"]) for n, r in execute_calls(fakes, [GOOD])] == [(GOOD, "ExecuteOpGraph")]


def test_zoo_next_to_the_cpu_engine_computes_the_right_numbers(
    fake_plugin_paths: dict[str, Path], zoo_dir: Path, garbage_dir: Path, tmp_path: Path
) -> None:
    with hipdnn.Handle(
        plugin_paths=[zoo_dir, garbage_dir, tmp_path / "missing"],
        plugin_loading_mode=hipdnn.PluginLoadingMode.ADDITIVE,
    ) as handle:
        assert "hipdnn_cpu_engine" in [p.name for p in handle.loaded_plugins()]
        f32 = hipdnn.DataType.FLOAT
        g = hipdnn.Graph(name="mm", io_data_type=f32, intermediate_data_type=f32, compute_data_type=f32)
        a = g.tensor(name="a", dim=[1, 5, 7], stride=[35, 7, 1], data_type=f32)
        b = g.tensor(name="b", dim=[1, 7, 3], stride=[21, 3, 1], data_type=f32)
        c = g.matmul(a, b)
        c.set_output(True)
        g.build(handle)
        rng = np.random.default_rng(5)
        a_arr = rng.standard_normal([1, 5, 7]).astype(np.float32)
        b_arr = rng.standard_normal([1, 7, 3]).astype(np.float32)
        c_arr = np.full([1, 5, 3], np.nan, dtype=np.float32)
        g.execute(handle, {a: a_arr, b: b_arr, c: c_arr}, np.empty(max(g.get_workspace_size(), 1), np.uint8))
        assert reference.relative_error(c_arr, reference.matmul(a_arr, b_arr)) < 1e-5
        # the zoo was still refused in this handle
        assert len([s for s in handle.skipped_plugins() if s.path.parent == zoo_dir]) == len(EXPECTED_REASON)


def test_the_earlier_plugin_keeps_the_id_whichever_it_is(
    fake_plugin_paths: dict[str, Path],
    zoo_paths: dict[str, Path],
    fakes,  # type: ignore[no-untyped-def]
) -> None:
    """Colliding first: the zoo plugin keeps 9001 and the good plugin, all of whose engines collide, is
    skipped with a reason naming the plugin that kept them."""
    with hipdnn.Handle(
        plugin_paths=[zoo_paths["zoo_collides_9001"], fake_plugin_paths[GOOD]],
        plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE,
    ) as handle:
        loaded = [(p.name, p.engine_ids) for p in handle.loaded_plugins()]
        assert loaded == [("zoo_collides_9001", (9001, 9911))]
        (s,) = handle.skipped_plugins()
        assert s.path == fake_plugin_paths[GOOD]
        assert "every engine id [9001] is already served by plugin 'zoo_collides_9001'" in s.reason
    # the good plugin's instance was created and destroyed again, not leaked
    creates, destroys = fakes[GOOD].calls("Create"), fakes[GOOD].calls("Destroy")
    assert len(creates) == len(destroys) == 1


def test_garbage_is_refused_again_in_every_handle(garbage_dir: Path) -> None:
    for _ in range(2):
        mode = hipdnn.PluginLoadingMode.ABSOLUTE
        with hipdnn.Handle(plugin_paths=[garbage_dir], plugin_loading_mode=mode) as h:
            assert h.loaded_plugins() == []
            assert len(h.skipped_plugins()) == len(GARBAGE) + len(DERIVED)
