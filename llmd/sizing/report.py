"""The plan as `llmd check-config` prints it: one aligned line per figure, then the warnings;
or as the JSON of `llmd check-config --json`."""

from __future__ import annotations

from typing import Any

from llmd.sizing.device import DeviceMemory
from llmd.sizing.plan import GIB, SizingPlan

MIB = 1024**2


def format_bytes(value: int) -> str:
    """`value` bytes as GiB (or MiB below one GiB), one decimal."""
    return f"{value / GIB:.1f} GiB" if value >= GIB else f"{value / MIB:.1f} MiB"


def format_plan(plan: SizingPlan, memory: DeviceMemory) -> str:
    """Human lines: the shape, KV bytes per token (with the formula), weights, memory, KV tokens
    and sequences, then each warning with its hint."""
    shape = plan.shape
    rows = [
        (
            "model",
            f"{shape.architecture}: {shape.layers} layers, {shape.kv_heads} KV heads x "
            f"{shape.head_dim} head dim, {plan.dtype}, {_or(shape.max_positions)} positions",
        ),
        (
            "KV cache",
            f"{plan.kv_bytes_per_token:,} bytes per token (2 x {shape.layers} layers x "
            f"{shape.kv_heads} KV heads x {shape.head_dim} x {plan.kv_dtype_bytes} bytes)",
        ),
        (
            "weights",
            "unknown (no *.safetensors and not a dense Llama/Mistral/Qwen2 config)"
            if plan.weights is None
            else f"{format_bytes(plan.weights.bytes)} ({plan.weights.source})",
        ),
        ("memory", memory.description),
    ]
    if plan.kv_cache_bytes is not None and plan.kv_tokens is not None:
        rows.append(
            (
                "KV budget",
                f"{format_bytes(plan.kv_cache_bytes)} = {plan.kv_tokens:,} tokens "
                f"({plan.kv_source})",
            )
        )
        rows.append(
            (
                "sequences",
                f"{_or(plan.sequences_at_max)} at --max-model-len {_or(plan.max_model_len)}, "
                f"{plan.sequences_at_typical:,} at {plan.typical_tokens:,} typical tokens; "
                f"--max-num-seqs {plan.max_num_seqs}",
            )
        )
    else:
        rows.append(("KV budget", plan.kv_source))
    lines = [f"  {name:<10} {value}" for name, value in rows]
    for warning in plan.warnings:
        lines.append(f"  warning: {warning.message}")
        lines.append(f"    hint: {warning.hint}")
    if not plan.warnings:
        lines.append("  no warnings")
    return "\n".join(lines)


def plan_json(plan: SizingPlan, memory: DeviceMemory) -> dict[str, Any]:
    """The plan as `llmd check-config --json` gives it (keys only ever added; the README lists
    them): bytes and tokens, None where unknown."""
    shape = plan.shape
    return {
        "model": {
            "architecture": shape.architecture,
            "layers": shape.layers,
            "kv_heads": shape.kv_heads,
            "head_dim": shape.head_dim,
            "dtype": plan.dtype,
            "max_positions": shape.max_positions,
        },
        "kv_bytes_per_token": plan.kv_bytes_per_token,
        "weights_bytes": plan.weights.bytes if plan.weights else None,
        "memory_bytes": memory.total_bytes,
        "memory": memory.description,
        "kv_cache_bytes": plan.kv_cache_bytes,
        "kv_tokens": plan.kv_tokens,
        "kv_source": plan.kv_source,
        "max_model_len": plan.max_model_len,
        "max_num_seqs": plan.max_num_seqs,
        "typical_tokens": plan.typical_tokens,
        "sequences_at_max_model_len": plan.sequences_at_max,
        "sequences_at_typical": plan.sequences_at_typical,
        "warnings": [{"code": w.code, "message": w.message, "hint": w.hint} for w in plan.warnings],
    }


def _or(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"
