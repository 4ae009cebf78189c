"""Handle(device=...): engines are ranked (and for "cpu"/"cuda" filtered) by the memory they take.

Run without a GPU: fake plugins declare host or device memory through the behavior notes of their
EngineDetails (fakePluginSetEngineDetails), the way the CPU and HIP engines do."""

from __future__ import annotations

from typing import Any

import flatbuffers
import numpy as np
import pytest

import hipdnn
from hipdnn.backend.placement import BEHAVIOR_NOTE_DEVICE_MEMORY, BEHAVIOR_NOTE_HOST_MEMORY
from hipdnn.wire import EngineDetails as ED

F32 = hipdnn.DataType.FLOAT
HOST, DEVICE = "fake_override_v110", "fake_override_second"  # engines 9001 and 9007, loaded in that order


def details(engine_id: int, note: int) -> bytes:
    b = flatbuffers.Builder(64)
    ED.StartBehaviorNotesVector(b, 1)
    b.PrependInt32(note)
    notes = b.EndVector()
    ED.Start(b)
    ED.AddEngineId(b, engine_id)
    ED.AddBehaviorNotes(b, notes)
    b.Finish(ED.End(b))
    return bytes(b.Output())


def declare(fake: Any, engine_id: int, note: int) -> None:
    data = details(engine_id, note)
    fake.lib.fakePluginSetEngineDetails(fake.ffi.from_buffer(data), len(data))


@pytest.fixture
def placed(fakes: dict[str, Any], fake_plugin_paths: dict[str, Any]) -> Any:
    """A factory of handles over a host fake (9001) and a device fake (9007), in that load order."""
    declare(fakes[HOST], 9001, BEHAVIOR_NOTE_HOST_MEMORY)
    declare(fakes[DEVICE], 9007, BEHAVIOR_NOTE_DEVICE_MEMORY)
    handles: list[hipdnn.Handle] = []

    def make(device: str | None, *names: str) -> hipdnn.Handle:
        h = hipdnn.Handle(
            plugin_paths=[fake_plugin_paths[n] for n in (names or (HOST, DEVICE))],
            plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE,
            device=device,
        )
        handles.append(h)
        return h

    yield make
    for h in handles:
        h.close()


def relu(preferred: int | None = None) -> tuple[hipdnn.Graph, hipdnn.TensorAttributes, hipdnn.TensorAttributes]:
    g = hipdnn.Graph(name="relu", io_data_type=F32, preferred_engine_id=preferred)
    x = g.tensor(name="x", dim=[4], stride=[1], data_type=F32)
    y = g.pointwise(hipdnn.PointwiseMode.RELU_FWD, x)
    y.set_output(True)
    return g, x, y


@pytest.mark.parametrize(("device", "engine"), [(None, 9007), ("cuda", 9007), ("hip", 9007), ("cpu", 9001)])
def test_the_device_ranks_engines_before_load_order(placed: Any, device: str | None, engine: int) -> None:
    h = placed(device)
    g, _, _ = relu()
    g.build(h)
    assert g.get_engine_id() == engine


def test_cpu_leaves_device_engines_out_and_says_so(placed: Any) -> None:
    g, _, _ = relu()
    g.build(placed("cpu"))
    assert g.get_engine_id() == 9001
    assert "engine 9007 left out: it takes device memory and the handle's device is 'cpu'" in g.plugin_report()


def test_a_preferred_engine_the_device_leaves_out_is_an_error(placed: Any) -> None:
    g, _, _ = relu(preferred=9007)  # it cannot beat the handle's restriction, nor give way to 9001
    with pytest.raises(hipdnn.HipdnnError) as err:
        g.build(placed("cpu"))
    assert err.value.code == hipdnn.ErrorCode.GRAPH_NOT_SUPPORTED
    assert "preferred engine 9007 (plugin 'fake_override_second')" in err.value.message
    assert "it takes device memory and the handle's device is 'cpu'" in err.value.message


def test_a_device_handle_over_host_engines_only_fails_on_build(placed: Any) -> None:
    h = placed("cpu", DEVICE)
    g, _, _ = relu()
    with pytest.raises(hipdnn.HipdnnError) as err:
        g.build(h)
    assert err.value.code == hipdnn.ErrorCode.GRAPH_NOT_SUPPORTED and "left out" in err.value.message


def test_preferred_engine_still_wins_among_those_admitted(placed: Any) -> None:
    g, _, _ = relu(preferred=9001)
    g.build(placed(None))
    assert g.get_engine_id() == 9001


@pytest.mark.parametrize("device", ["cuda", "hip"])
def test_gpu_device_without_a_gpu_engine_names_the_fix(placed: Any, device: str) -> None:
    with pytest.raises(hipdnn.HipdnnError) as err:
        placed(device, HOST)
    assert err.value.code == hipdnn.ErrorCode.INVALID_VALUE
    assert "no loaded engine runs on a GPU" in err.value.message
    assert "fake_override_v110 [9001]" in err.value.message and "device='cpu'" in err.value.message


@pytest.mark.parametrize("bad", ["gpu", "CUDA", 0, ["cpu"]])
def test_unknown_devices_are_refused(bad: Any) -> None:
    with pytest.raises(hipdnn.HipdnnError) as err:
        hipdnn.Handle(plugin_paths=[], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE, device=bad)
    assert err.value.code == hipdnn.ErrorCode.INVALID_VALUE and "'cuda', 'hip', 'cpu' or None" in err.value.message


def test_device_choice_explains_itself(placed: Any) -> None:
    auto = placed(None)
    assert auto.device is None
    assert auto.device_choice().device == "gpu" and "fake_override_second [9007]" in str(auto.device_choice())
    assert auto.device_choice(gpus=0).device == "cpu"
    assert "no GPU is present" in auto.device_choice(gpus=0).reason
    assert placed("cpu").device_choice().device == "cpu"
    assert placed(None, HOST).device_choice() == hipdnn.DeviceChoice(
        "cpu", "device=None and no loaded engine takes device memory"
    )


def test_host_arrays_for_a_device_engine_name_the_device_argument(placed: Any, fakes: dict[str, Any]) -> None:
    h = placed(None)
    g, x, y = relu()
    g.build(h)
    with pytest.raises(hipdnn.HipdnnError) as err:
        g.execute(h, {x: np.zeros(4, np.float32), y: np.zeros(4, np.float32)})
    assert 'hipdnn.Handle(device="cpu")' in err.value.message
    assert fakes[DEVICE].calls("ExecuteOpGraph") == []


def test_plugins_command_says_which_device_a_handle_uses(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from hipdnn.cli import main

    assert main(["plugins"]) == 0
    assert "device: hipdnn.Handle() runs graphs on the " in capsys.readouterr().out
    assert main(["plugins", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["device"]["device"] in ("cpu", "gpu")


def test_doctor_says_which_device_a_handle_uses(capsys: pytest.CaptureFixture[str]) -> None:
    from hipdnn.cli import main

    main(["doctor"])
    assert "[INFO] device: hipdnn.Handle() runs graphs on the " in capsys.readouterr().out


# -- a GPU engine installed where no GPU is (issue #31) ---------------------------------------------
def test_a_device_engine_that_cannot_run_here_is_not_the_choice(placed: Any, fakes: dict[str, Any]) -> None:
    """The device fake declines every graph (as the GPU engine does without a GPU): with the GPU count
    unknown (no GPU runtime for hipdnn.device), the handle does not claim the GPU."""
    fakes[DEVICE].set_applicable(False)
    choice = placed(None).device_choice(None)
    assert choice.device == "cpu", choice
    assert "fake_override_second [9007] take device memory but cannot run here" in choice.reason
    assert "host engines serve" in choice.reason


@pytest.mark.parametrize("device", ["cuda", "hip"])
def test_gpu_device_without_a_usable_gpu_fails_at_creation(placed: Any, fakes: dict[str, Any], device: str) -> None:
    fakes[DEVICE].set_applicable(False)
    with pytest.raises(hipdnn.HipdnnError) as err:
        placed(device)
    message = err.value.message
    assert err.value.code == hipdnn.ErrorCode.INVALID_VALUE
    assert f"Handle(device={device!r}): no usable GPU" in message
    assert "fake_override_second [9007]" in message and "cannot run on this machine" in message
    assert "device='cpu' or device=None" in message


def test_a_usable_device_engine_is_still_chosen(placed: Any) -> None:
    assert placed("cuda").device_engines_here() == {9007: ""}
    assert placed(None).device_choice(None).device == "gpu"


def _hip_engine_without_a_gpu() -> Any:
    from tests.gpu.hip_support import find_plugin

    plugin = find_plugin()
    if plugin is None:
        pytest.skip("the HIP engine is not built here")
    h = hipdnn.Handle(plugin_paths=[plugin])
    if any(not why for why in h.device_engines_here().values()):
        h.close()
        pytest.skip("this machine has a GPU the HIP engine can use")
    return plugin, h


def test_the_real_gpu_engine_without_a_gpu(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The built HIP engine on a machine without a GPU: plugins and doctor say the CPU serves,
    and Handle(device="cuda") fails at creation, in the engine's own words."""
    import hipdnn.device as hd
    from hipdnn.cli import main

    plugin, h = _hip_engine_without_a_gpu()
    try:
        choice = h.device_choice(None)
        assert choice.device == "cpu" and "cannot run here" in choice.reason
    finally:
        h.close()
    with pytest.raises(hipdnn.HipdnnError) as err:
        hipdnn.Handle(plugin_paths=[plugin], device="cuda")
    assert "no usable GPU" in err.value.message and "hipdnn_hip_engine" in err.value.message
    # hipdnn.device cannot count GPUs (no cuda-bindings / hip-python): the engine's answer decides
    monkeypatch.setenv("HIPDNN_PLUGIN_DIR", str(plugin.parent))

    def no_runtime() -> list[Any]:
        raise hipdnn.HipdnnError(hipdnn.ErrorCode.INVALID_VALUE, "no GPU runtime package installed")

    monkeypatch.setattr(hd, "devices", no_runtime)
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "runs graphs on the cpu" in out and "runs graphs on the gpu" not in out
    main(["doctor"])
    out = capsys.readouterr().out
    assert "runs graphs on the cpu" in out and "runs graphs on the gpu" not in out
    assert "installed but cannot run here" in out
