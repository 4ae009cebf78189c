"""hipdnn.Handle: where engine plugins are found and which ones a handle loads."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hipdnn.backend import (
    ENV_PLUGIN_DIR,
    BackendHandle,
    Discovery,
    LoadedPlugin,
    PluginLoadingMode,
    SkippedPlugin,
    builtin_engine_dirs,
    describe,
    discover_candidates,
    env_plugin_dirs,
)
from hipdnn.backend.errors import ErrorCode, HipdnnError
from hipdnn.frontend.args import int_arg, path_list_arg, refuse, show

ENV_LOG_LEVEL = "HIPDNN_LOG_LEVEL"

__all__ = [
    "DEVICES",
    "ENV_LOG_LEVEL",
    "ENV_PLUGIN_DIR",
    "DeviceChoice",
    "Handle",
    "PluginLoadingMode",
    "builtin_engine_dirs",
    "env_plugin_dirs",
    "log_level_from_env",
]


def log_level_from_env() -> int:
    """HIPDNN_LOG_LEVEL (a logging level name or number); unset: the ``hipdnn`` logger's level."""
    value = os.environ.get(ENV_LOG_LEVEL, "").strip().upper()
    if not value:
        return logging.getLogger("hipdnn").getEffectiveLevel()
    if value.isdigit():
        return int(value)
    level = logging.getLevelName(value)
    if isinstance(level, int):
        return level
    logging.getLogger("hipdnn").warning("%s=%r is not a logging level; using WARNING", ENV_LOG_LEVEL, value)
    return logging.WARNING


#: ``Handle(device=...)`` -> the memory its engines must take. "cuda" and "hip" both mean a GPU, as
#: torch's "cuda" does on ROCm: the engine, not the word, decides the platform.
DEVICES: dict[str | None, str] = {None: "auto", "cpu": "host", "cuda": "device", "hip": "device"}


@dataclass(frozen=True)
class DeviceChoice:
    """Which device a handle runs graphs on ("cpu" or "gpu") and why, in words."""

    device: str
    reason: str

    def __str__(self) -> str:
        return f"{self.device} ({self.reason})"


def _device_arg(value: object) -> str | None:
    if value is None or (isinstance(value, str) and value in DEVICES):
        return value
    raise refuse("Handle: device", f"{show(value)} is not one of 'cuda', 'hip', 'cpu' or None")


def _engines_text(memory: dict[int, str], plugin_of: dict[int, str], location: str) -> str:
    by_plugin: dict[str, list[int]] = {}
    for engine_id, loc in memory.items():
        if loc == location:
            by_plugin.setdefault(plugin_of.get(engine_id, "?"), []).append(engine_id)
    return ", ".join(f"{name} {sorted(ids)}" for name, ids in by_plugin.items())


def _loading_mode(value: object, what: str) -> PluginLoadingMode:
    if isinstance(value, PluginLoadingMode):
        return value
    try:
        return PluginLoadingMode(value)  # its value as a string ("additive", "absolute")
    except (ValueError, TypeError):
        names = ", ".join(m.name for m in PluginLoadingMode)
        raise refuse(what, f"{value!r} is not a PluginLoadingMode (one of {names})") from None


#: the most threads ``Handle(cpu_threads=...)`` takes (the CPU engine's CPU_THREADS knob's bound)
MAX_CPU_THREADS = 1024

#: ``Handle(cpu_threading=...)`` -> the CPU engine's CPU_THREADING knob value
CPU_THREADING: dict[str, int] = {"pool": 0, "openmp": 1}


class Handle:
    """Loads engine plugins when created. Search order (see ``hipdnn.plugins.discovery``): built-in
    engines, ``HIPDNN_PLUGIN_DIR`` (os.pathsep-separated directories), packages registered under the
    ``hipdnn.engine_plugins`` entry-point group, then ``plugin_paths`` (ADDITIVE) — or ``plugin_paths``
    alone (ABSOLUTE). A directory is scanned non-recursively in name order; a file is taken as is.
    Plugin instances, engine-id claims and the skipped list belong to this handle alone; only the
    opened library files are shared with other handles."""

    def __init__(
        self,
        plugin_paths: Sequence[str | os.PathLike[str]] | None = None,
        plugin_loading_mode: PluginLoadingMode = PluginLoadingMode.ADDITIVE,
        stream: int | None = None,
        device: str | None = None,
        cpu_threads: int | None = None,
        cpu_threading: str | None = None,
    ) -> None:
        """``cpu_threads``: how many threads a call of a plan built on this handle uses on the CPU
        engine (its ``CPU_THREADS`` knob; the plan's workspace is sized for them); None (default):
        ``OMP_NUM_THREADS``, else every core the process may run on, counted when the plan is built.
        ``device`` picks the engines: "cuda" or "hip" only engines that take device (GPU) memory,
        "cpu" only engines that take host memory; None (default) tries GPU engines first, which
        apply only where they find a GPU, then host engines. Engines that do not declare where
        their memory lives are kept by every choice, after every engine that declares it. A graph's
        ``preferred_engine_id`` is that engine or an error at build, also when the device leaves
        its memory out (rfcs/0004-plugin-loading.md, section 9).

        ``cpu_threading``: where the CPU engine runs an attention forward's parallel work (its
        ``CPU_THREADING`` knob): "pool" (the default), the engine's own worker threads, which never
        hold a call for a thread the OS has not scheduled; "openmp", the OpenMP runtime's team,
        which in an application using the same runtime (PyTorch on Linux) are its own threads,
        still awake from its last op. ``hipdnn.torch`` picks "openmp" where that holds. Every
        other op runs on the OpenMP team either way."""
        plugin_paths = path_list_arg(plugin_paths, "Handle: plugin_paths")
        self._device = _device_arg(device)
        plugin_loading_mode = _loading_mode(plugin_loading_mode, "Handle: plugin_loading_mode")
        # HIPDNN_LOG_LEVEL sets what plugins emit; the Python logger's level stays the application's.
        level = log_level_from_env()
        self.discovery: Discovery = discover_candidates(plugin_paths, plugin_loading_mode)
        self.plugin_search_paths: list[Path] = [s.path for s in self.discovery.search_paths]
        knobs: dict[str, int] = {}
        if cpu_threads is not None:
            knobs["CPU_THREADS"] = int_arg(cpu_threads, "Handle: cpu_threads", 1, MAX_CPU_THREADS)
        if cpu_threading is not None:
            # (an exact str: a subclass's own __eq__ / __hash__ never run)
            if type(cpu_threading) is not str or cpu_threading not in CPU_THREADING:
                raise refuse(
                    "Handle: cpu_threading", f"= {show(cpu_threading)} is not one of {', '.join(CPU_THREADING)}"
                )
            knobs["CPU_THREADING"] = CPU_THREADING[cpu_threading]
        self._backend = BackendHandle(
            self.discovery.candidates,
            level,
            self.discovery.rejected,
            memory_preference=DEVICES[self._device],
            device_name=self._device,
            engine_knobs=knobs,
        )
        if self._device in ("cuda", "hip"):
            # Refused here rather than at build: no engine to run on a GPU, or none that can run on
            # this machine (the GPU engine installed where there is no GPU).
            message = ""
            if "device" not in self._backend.engine_memory().values():
                message = self._no_gpu_engine_message()
            elif not self._runnable_device_engines():
                message = self._gpu_cannot_run_message()
            if message:
                self._backend.close()
                raise HipdnnError(ErrorCode.INVALID_VALUE, message)
        if stream is not None:
            self.set_stream(stream)

    @staticmethod
    def discover(
        plugin_paths: Sequence[str | os.PathLike[str]] | None = None,
        plugin_loading_mode: PluginLoadingMode = PluginLoadingMode.ADDITIVE,
    ) -> Discovery:
        """What ``Handle(plugin_paths, plugin_loading_mode)`` would try to load, in order, with where
        each file came from, and what it would refuse up front. Opens nothing."""
        return discover_candidates(
            path_list_arg(plugin_paths, "Handle.discover: plugin_paths"),
            _loading_mode(plugin_loading_mode, "Handle.discover: plugin_loading_mode"),
        )

    @property
    def backend(self) -> BackendHandle:
        """The backend handle: plugin instances, the plan cache (``.plan_cache.stats()``)."""
        return self._backend

    @property
    def device(self) -> str | None:
        """The device asked for at creation ("cuda", "hip", "cpu" or None); see :meth:`device_choice`."""
        return self._device

    def _plugin_of(self) -> dict[int, str]:
        return {e: p.name for p in self._backend.plugins for e in p.engine_ids}

    def _no_gpu_engine_message(self) -> str:
        memory = self._backend.engine_memory()
        host = _engines_text(memory, self._plugin_of(), "host")
        loaded = f"loaded engines taking host memory: {host}" if host else "no engine that declares its memory"
        skipped = "; ".join(f"{s.path.name}: {s.reason}" for s in self._backend.skipped)
        return (
            f"Handle(device={self._device!r}): no loaded engine runs on a GPU ({loaded}"
            + (f"; skipped: {skipped}" if skipped else "")
            + "). Install the GPU engine (README, GPU engine), or pass device='cpu' or device=None"
        )

    def device_engines_here(self) -> dict[int, str]:
        """Each loaded engine taking device (GPU) memory -> "" when it can run on this machine, else
        why not in its own words (the GPU engine where there is no GPU: "no GPU device"). Asked once,
        of probe graphs (rfcs/0004-plugin-loading.md, section 9)."""
        return self._backend.device_engines_here()

    def _runnable_device_engines(self) -> list[int]:
        return [e for e, why in self._backend.device_engines_here().items() if not why]

    def _why_device_engines_cannot_run(self) -> str:
        by_reason: dict[str, list[int]] = {}
        for engine_id, why in self._backend.device_engines_here().items():
            if why:
                by_reason.setdefault(why, []).append(engine_id)
        return "; ".join(
            f"engine{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}: {why}" for why, ids in by_reason.items()
        )

    def _gpu_cannot_run_message(self) -> str:
        gpu = _engines_text(self._backend.engine_memory(), self._plugin_of(), "device")
        return (
            f"Handle(device={self._device!r}): no usable GPU: the GPU engine ({gpu}) is installed but cannot "
            f"run on this machine ({self._why_device_engines_cannot_run()}). Run where a GPU is visible, or "
            "pass device='cpu' or device=None (host engines serve)"
        )

    def device_choice(self, gpus: int | None = None) -> DeviceChoice:
        """Where this handle runs graphs and why. ``gpus``: how many GPUs the caller saw (e.g.
        ``len(hipdnn.device.devices())``), None when it could not tell. Asks each engine once for
        its details on a probe graph, and each device engine whether it can run here (a GPU
        engine without a GPU says it cannot); a real graph's details decide at planning."""
        memory = self._backend.engine_memory()
        plugin_of = self._plugin_of()
        gpu_engines = _engines_text(memory, plugin_of, "device")
        host_engines = _engines_text(memory, plugin_of, "host")
        if self._device == "cpu":
            return DeviceChoice("cpu", f"device='cpu': engines taking host memory only ({host_engines or 'none'})")
        if self._device in ("cuda", "hip"):
            return DeviceChoice("gpu", f"device={self._device!r}: engines taking device memory only ({gpu_engines})")
        if not gpu_engines:
            return DeviceChoice("cpu", "device=None and no loaded engine takes device memory")
        if not self._runnable_device_engines():
            return DeviceChoice(
                "cpu",
                f"device=None: {gpu_engines} take device memory but cannot run here "
                f"({self._why_device_engines_cannot_run()}); host engines serve",
            )
        if gpus == 0:
            return DeviceChoice(
                "cpu", f"device=None: {gpu_engines} take device memory, but no GPU is present; host engines serve"
            )
        seen = f"{gpus} GPU(s) present" if gpus else "they found a GPU"
        return DeviceChoice("gpu", f"device=None: {gpu_engines} take device memory and are tried first ({seen})")

    def set_stream(self, stream: int) -> None:
        """Hand every plugin this stream (a CUDA/HIP stream as an int; 0: the default stream)."""
        self._backend.set_stream(int_arg(stream, "Handle: stream", 0, (1 << 64) - 1))

    def get_stream(self) -> int:
        """The stream set with ``set_stream`` or ``Handle(stream=...)`` (0: the default)."""
        return self._backend.stream

    def loaded_plugins(self) -> list[LoadedPlugin]:
        """The plugins loaded: name, version, API version, path, engine ids, optional entries."""
        return [describe(p) for p in self._backend.plugins]

    def skipped_plugins(self) -> list[SkippedPlugin]:
        """The plugins found but not loaded, each with its path and the reason."""
        return list(self._backend.skipped)

    def close(self) -> None:
        """Destroy the handle's plans and plugin instances now rather than at garbage collection."""
        self._backend.close()

    def __enter__(self) -> Handle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        names = ", ".join(f"{p.name} {p.version}" for p in self.loaded_plugins())
        device = f", device={self._device!r}" if self._device is not None else ""
        return f"Handle(plugins=[{names}]{device})"
