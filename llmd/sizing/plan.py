"""The memory plan of one engine: what its settings leave for the KV cache, how many tokens and
sequences that holds, and warnings where the settings cannot work as meant. Pure arithmetic."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from llmd.engine.args import engine_flag, float_flag, int_flag
from llmd.errors import SizingError
from llmd.gpu.preflight import VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
from llmd.sizing.model import ModelShape, Weights, dtype_bytes

GIB = 1024**3
# The seeds: 0.98 failed to allocate KV pages at run time; keep headroom for activations.
HIGH_UTILIZATION = 0.95
# When no typical request length is given: a chat turn with some history.
DEFAULT_TYPICAL_TOKENS = 2048


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    """The vLLM flags in `engine.args` that size memory. `max_model_len` None: the model's
    positions; `max_num_seqs` None: vLLM's default for the hardware (`default_max_num_seqs`)."""

    max_model_len: int | None = None
    max_num_seqs: int | None = None
    gpu_memory_utilization: float = VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
    kv_cache_memory_bytes: int | None = None
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"

    @classmethod
    def from_args(cls, args: Sequence[str]) -> EngineSettings:
        """The settings in engine args. Raises `SizingError` for a value that is not a number."""
        try:
            return cls(
                max_model_len=int_flag(args, "--max-model-len"),
                max_num_seqs=int_flag(args, "--max-num-seqs"),
                gpu_memory_utilization=float_flag(
                    args, "--gpu-memory-utilization", VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
                ),
                kv_cache_memory_bytes=int_flag(args, "--kv-cache-memory-bytes"),
                dtype=engine_flag(args, "--dtype") or "auto",
                kv_cache_dtype=engine_flag(args, "--kv-cache-dtype") or "auto",
            )
        except ValueError as exc:
            raise SizingError(f"engine.args: {exc}") from None


def default_max_num_seqs(gpu_memory_bytes: int | None, cpu: bool) -> int:
    """vLLM 0.32's default --max-num-seqs for its OpenAI server
    (`EngineArgs._set_default_max_num_seqs_and_batched_tokens_args`): 128 on the CPU backend,
    1024 on GPUs of 70 GiB or more, else 256."""
    if cpu:
        return 128
    return 1024 if gpu_memory_bytes is not None and gpu_memory_bytes >= 70 * GIB else 256


def model_dtype(shape: ModelShape, setting: str) -> str:
    """The dtype vLLM runs the model in: `--dtype`, or with `auto` the config's, with float32
    downcast to bfloat16 (vLLM 0.32 `_resolve_auto_dtype`: the platform's preferred dtype,
    bfloat16 on current GPUs and CPUs)."""
    if setting != "auto":
        return setting
    return "bfloat16" if shape.dtype in ("float32", "float") else shape.dtype


@dataclasses.dataclass(frozen=True)
class PlanWarning:
    """A setting that cannot work as meant: `code`, a one-line `message`, and a `hint` naming
    the setting to change."""

    code: str
    message: str
    hint: str


@dataclasses.dataclass(frozen=True)
class SizingPlan:
    """The plan: bytes and tokens; None where the memory is unknown (no GPU reading and no
    `--kv-cache-memory-bytes`). `kv_source` says how the KV budget was found."""

    shape: ModelShape
    settings: EngineSettings
    dtype: str
    kv_dtype_bytes: int
    kv_bytes_per_token: int
    weights: Weights | None
    memory_bytes: int | None
    budget_bytes: int | None
    kv_cache_bytes: int | None
    kv_source: str
    kv_tokens: int | None
    max_model_len: int | None
    max_num_seqs: int
    typical_tokens: int
    warnings: tuple[PlanWarning, ...]

    @property
    def sequences_at_typical(self) -> int | None:
        """Sequences of `typical_tokens` the KV cache holds at once."""
        return None if self.kv_tokens is None else self.kv_tokens // max(1, self.typical_tokens)

    @property
    def sequences_at_max(self) -> int | None:
        """Sequences of `max_model_len` tokens the KV cache holds at once."""
        if self.kv_tokens is None or not self.max_model_len:
            return None
        return self.kv_tokens // self.max_model_len


def make_plan(
    shape: ModelShape,
    settings: EngineSettings,
    *,
    weights: Weights | None,
    memory_bytes: int | None,
    cpu: bool = False,
    typical_tokens: int | None = None,
) -> SizingPlan:
    """The plan for `shape` under `settings` on a device of `memory_bytes` (GPU memory; on the CPU
    backend the RAM its --gpu-memory-utilization is a fraction of).

    KV budget: `--kv-cache-memory-bytes` when given (vLLM then skips its own sizing); else
    memory x --gpu-memory-utilization - weights. vLLM subtracts its profiled peak activation
    memory too, so the second figure is an upper bound (vllm/v1/worker/gpu_worker.py,
    `determine_available_memory`). KV tokens = budget // KV bytes per token.
    Raises `SizingError` for an unknown dtype.
    """
    dtype = model_dtype(shape, settings.dtype)
    kv_dtype = dtype if settings.kv_cache_dtype == "auto" else settings.kv_cache_dtype
    kv_dtype_bytes = dtype_bytes(kv_dtype)
    per_token = shape.kv_bytes_per_token(kv_dtype_bytes)
    budget = None if memory_bytes is None else int(memory_bytes * settings.gpu_memory_utilization)
    if settings.kv_cache_memory_bytes is not None:
        kv_bytes: int | None = settings.kv_cache_memory_bytes
        source = "--kv-cache-memory-bytes"
    elif budget is not None and weights is not None:
        kv_bytes = max(0, budget - weights.bytes)
        source = "memory x --gpu-memory-utilization - weights; an upper bound: no activations"
    else:
        kv_bytes, source = None, "unknown: no memory figure (--gpu-memory-gib plans for a GPU)"
    max_model_len = settings.max_model_len or shape.max_positions
    typical = min(typical_tokens or DEFAULT_TYPICAL_TOKENS, max_model_len or 1 << 62)
    plan = SizingPlan(
        shape=shape,
        settings=settings,
        dtype=dtype,
        kv_dtype_bytes=kv_dtype_bytes,
        kv_bytes_per_token=per_token,
        weights=weights,
        memory_bytes=memory_bytes,
        budget_bytes=budget,
        kv_cache_bytes=kv_bytes,
        kv_source=source,
        kv_tokens=None if kv_bytes is None else kv_bytes // per_token,
        max_model_len=max_model_len,
        max_num_seqs=settings.max_num_seqs or default_max_num_seqs(memory_bytes, cpu),
        typical_tokens=typical,
        warnings=(),
    )
    return dataclasses.replace(plan, warnings=tuple(_warnings(plan)))


def _warnings(plan: SizingPlan) -> list[PlanWarning]:
    found = []
    settings, shape = plan.settings, plan.shape
    if settings.gpu_memory_utilization >= HIGH_UTILIZATION:
        found.append(
            PlanWarning(
                "high_memory_utilization",
                f"--gpu-memory-utilization {settings.gpu_memory_utilization:g} leaves no headroom:"
                " at 0.98 vLLM failed to allocate KV pages at run time",
                "set --gpu-memory-utilization 0.90 in engine.args",
            )
        )
    asked, positions = settings.max_model_len, shape.max_positions
    if asked and positions and asked > positions:
        found.append(
            PlanWarning(
                "max_model_len_over_positions",
                f"--max-model-len {asked:,} exceeds the model's "
                f"max_position_embeddings {positions:,}: vLLM refuses it",
                f"lower --max-model-len to at most {positions:,}, from your real request"
                " lengths (`llmd tune --from-traffic` proposes one)",
            )
        )
    weights, budget = plan.weights, plan.budget_bytes
    sized_by_vllm = settings.kv_cache_memory_bytes is None
    if weights and budget is not None and sized_by_vllm and weights.bytes >= budget:
        found.append(
            PlanWarning(
                "weights_do_not_fit",
                f"the weights ({weights.bytes / GIB:.1f} GiB) do not fit in "
                f"--gpu-memory-utilization x memory ({budget / GIB:.1f} GiB)",
                "use a quantised or smaller model (engine.model), or more GPUs "
                "(--tensor-parallel-size in engine.args)",
            )
        )
    if plan.kv_tokens is None:
        return found
    if plan.max_model_len and plan.kv_tokens < plan.max_model_len:
        found.append(
            PlanWarning(
                "kv_below_one_sequence",
                f"the KV cache holds {plan.kv_tokens:,} tokens, less than one sequence at "
                f"--max-model-len {plan.max_model_len:,}: vLLM refuses to start",
                "lower --max-model-len, or give the KV cache more memory "
                "(--gpu-memory-utilization, --kv-cache-memory-bytes, --kv-cache-dtype fp8)",
            )
        )
    wanted = plan.max_num_seqs * plan.typical_tokens
    if wanted > plan.kv_tokens:
        fits = plan.kv_tokens // max(1, plan.typical_tokens)
        found.append(
            PlanWarning(
                "max_num_seqs_over_kv",
                f"--max-num-seqs {plan.max_num_seqs} x {plan.typical_tokens:,} typical tokens = "
                f"{wanted:,} tokens, but the KV cache holds {plan.kv_tokens:,}: sequences past "
                f"{fits} are preempted and recomputed",
                f"lower --max-num-seqs to {max(1, fits)} in engine.args, or shorten requests, or "
                "quantise the KV cache (--kv-cache-dtype fp8)",
            )
        )
    return found
