"""Observability: HIPDNN_LOG_LEVEL reaches plugins through SetLogLevel, plugin logs land under
hipdnn.plugins.<name>, loaded_plugins() describes each plugin, and plugin errors carry the plugin's
last-error string."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from pathlib import Path

import pytest

import hipdnn
from tests.integration.support import arrays_for, sdpa_graph

ABSOLUTE = hipdnn.PluginLoadingMode.ABSOLUTE
FAKE = "fake_override_v110"


def _plugin_records(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == f"hipdnn.plugins.{name}"]


@pytest.mark.parametrize(("env_level", "expect_info"), [("INFO", True), ("WARNING", False), ("20", True)])
def test_hipdnn_log_level_reaches_the_plugin(
    fake_plugin_paths: dict[str, Path],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    env_level: str,
    expect_info: bool,
) -> None:
    monkeypatch.setenv("HIPDNN_LOG_LEVEL", env_level)
    level_before = logging.getLogger("hipdnn").level
    # Python would accept INFO records either way: what arrives is what the plugin chose to emit.
    with caplog.at_level(logging.INFO, logger="hipdnn.plugins"):
        hipdnn.Handle(plugin_paths=[fake_plugin_paths[FAKE]], plugin_loading_mode=ABSOLUTE).close()
    infos = [r.getMessage() for r in _plugin_records(caplog, FAKE) if r.levelno == logging.INFO]
    if expect_info:
        assert any("created handle" in m for m in infos) and any("destroyed handle" in m for m in infos)
    else:
        assert infos == []
    # The variable sets what plugins emit, not the Python logger's level (the application's to set).
    assert logging.getLogger("hipdnn").level == level_before


def test_without_the_variable_the_hipdnn_logger_level_decides(
    fake_plugin_paths: dict[str, Path], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HIPDNN_LOG_LEVEL", raising=False)
    logging.getLogger("hipdnn").setLevel(logging.INFO)  # restored by the autouse fixture
    with caplog.at_level(logging.INFO, logger="hipdnn.plugins"):
        hipdnn.Handle(plugin_paths=[fake_plugin_paths[FAKE]], plugin_loading_mode=ABSOLUTE).close()
    assert any("created handle" in r.getMessage() for r in _plugin_records(caplog, FAKE))


def test_unknown_log_level_warns_and_uses_warning(
    fake_plugin_paths: dict[str, Path], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HIPDNN_LOG_LEVEL", "chatty")
    with caplog.at_level(logging.INFO, logger="hipdnn"):
        hipdnn.Handle(plugin_paths=[fake_plugin_paths[FAKE]], plugin_loading_mode=ABSOLUTE).close()
    assert any("HIPDNN_LOG_LEVEL='CHATTY' is not a logging level" in r.getMessage() for r in caplog.records)
    assert not [r for r in _plugin_records(caplog, FAKE) if r.levelno == logging.INFO]


def test_loaded_plugins_describe_each_plugin(fake_plugin_paths: dict[str, Path]) -> None:
    paths = [fake_plugin_paths[FAKE], fake_plugin_paths["fake_no_api_version"]]
    with hipdnn.Handle(plugin_paths=paths, plugin_loading_mode=ABSOLUTE) as h1:
        over, old = h1.loaded_plugins()
    assert (over.name, over.version, over.api_version, over.engine_ids) == (FAKE, "0.1.0", "1.1.0", (9001,))
    assert Path(over.path) == fake_plugin_paths[FAKE].resolve() and over.source == "handle"
    assert over.optional_entries == (
        "hipdnnPluginGetApiVersion",
        "hipdnnPluginSetLoggingCallback",
        "hipdnnPluginSetLogLevel",
        "hipdnnEnginePluginExecuteOpGraphWithOverrides",
    )
    assert over.has_override_execute and not old.has_override_execute
    assert old.api_version == "1.0.0" and "hipdnnPluginGetApiVersion" not in old.optional_entries
    fp = over.fingerprint
    assert (fp.name, fp.version, fp.api_version) == (FAKE, "0.1.0", "1.1.0")
    assert fp.sha256 == hashlib.sha256(fake_plugin_paths[FAKE].read_bytes()).hexdigest()
    assert old.fingerprint != fp
    with hipdnn.Handle(plugin_paths=paths[:1], plugin_loading_mode=ABSOLUTE) as h2:
        assert h2.loaded_plugins()[0].fingerprint == fp  # stable: usable as a cache key
    assert hash(fp) == hash(dataclasses.replace(fp))
    with pytest.raises(dataclasses.FrozenInstanceError):
        over.name = "x"  # type: ignore[misc]


def test_execute_failure_carries_the_plugin_last_error(fake_handle_factory, fakes) -> None:  # type: ignore[no-untyped-def]
    h = fake_handle_factory(FAKE)
    g, ts = sdpa_graph(override=False)
    g.build(h)
    fakes[FAKE].fail_execute(3, "kernel launch refused: detail from the plugin")
    with pytest.raises(hipdnn.HipdnnError) as e:
        g.execute(h, arrays_for(ts), None)
    assert "kernel launch refused: detail from the plugin" in e.value.message
    assert FAKE in e.value.message and "HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR" in e.value.message


def test_execute_failure_escapes_the_plugin_last_error(fake_handle_factory, fakes) -> None:  # type: ignore[no-untyped-def]
    """The compiled execute path shows a plugin's last error with its control characters escaped: no
    terminal escape sequence, forged log line or C1 control reaches the exception text."""
    h = fake_handle_factory(FAKE)
    g, ts = sdpa_graph(override=False)
    g.build(h)
    fakes[FAKE].fail_execute(3, "red \x1b[31m\nFORGED line\r\x7f \u009b2J end")
    with pytest.raises(hipdnn.HipdnnError) as e:
        g.execute(h, arrays_for(ts), None)
    msg = e.value.message
    assert "red \\x1b[31m\\nFORGED line\\r\\x7f \\x9b2J end" in msg
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in msg)


def test_load_time_failures_carry_the_plugin_last_error(zoo_paths: dict[str, Path]) -> None:
    paths = [zoo_paths["zoo_create_fails"], zoo_paths["zoo_name_fails"]]
    with hipdnn.Handle(plugin_paths=paths, plugin_loading_mode=ABSOLUTE) as h:
        reasons = [s.reason for s in h.skipped_plugins()]
    assert "zoo_create_fails: no device matches this engine (simulated)" in reasons[0]
    assert "zoo_name_fails: name table not initialised" in reasons[1]


def test_plugin_error_names_plugin_entry_status_and_detail() -> None:
    from hipdnn.plugins import PluginError

    err = PluginError("p", "hipdnnEnginePluginCreate", 3, "the detail")
    assert str(err) == (
        "plugin 'p': hipdnnEnginePluginCreate failed with HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR: the detail"
    )
    assert (err.plugin, err.entry, err.status, err.detail) == ("p", "hipdnnEnginePluginCreate", 3, "the detail")
