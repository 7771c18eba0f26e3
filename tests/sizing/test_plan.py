"""The memory plan: KV tokens the settings leave on a given card, and the warnings, against
values computed by hand for the three real model configs."""

from __future__ import annotations

from pathlib import Path

from llmd.sizing.model import Weights, load_shape
from llmd.sizing.plan import EngineSettings, make_plan

CONFIGS = Path(__file__).parent.parent / "data" / "model_configs"
GIB = 1024**3


def _codes(plan: object) -> set[str]:
    return {w.code for w in plan.warnings}  # type: ignore[attr-defined]


def test_llama_8b_on_a_24_gib_card_cannot_hold_its_full_context() -> None:
    """24 GiB x 0.9 = 23,192,823,398 bytes; minus 16,060,522,496 of bf16 weights leaves
    7,132,300,902 bytes = 54,415 tokens of 131,072 bytes: less than one 131,072-token sequence
    (the model's positions, vLLM's default --max-model-len), so vLLM would refuse to start."""
    shape = load_shape(CONFIGS / "llama-3.1-8b-instruct")
    plan = make_plan(
        shape,
        EngineSettings(),
        weights=Weights(16_060_522_496, "parameters"),
        memory_bytes=24 * GIB,
    )
    assert plan.budget_bytes == 23_192_823_398
    assert plan.kv_cache_bytes == 7_132_300_902
    assert plan.kv_tokens == 54_415
    assert plan.max_model_len == 131_072
    assert plan.max_num_seqs == 256  # vLLM's default below 70 GiB
    assert "kv_below_one_sequence" in _codes(plan)


def test_llama_8b_with_8k_context_warns_that_256_sequences_do_not_fit() -> None:
    """--max-model-len 8192 fits (54,415 >= 8,192), but 256 x 2,048 typical tokens = 524,288
    tokens do not: the hint names --max-num-seqs 26 (54,415 // 2,048)."""
    shape = load_shape(CONFIGS / "llama-3.1-8b-instruct")
    plan = make_plan(
        shape,
        EngineSettings.from_args(["--max-model-len", "8192"]),
        weights=Weights(16_060_522_496, "parameters"),
        memory_bytes=24 * GIB,
    )
    assert _codes(plan) == {"max_num_seqs_over_kv"}
    (warning,) = plan.warnings
    assert "--max-num-seqs to 26 " in warning.hint
    assert plan.sequences_at_max == 6  # 54,415 // 8,192
    assert plan.sequences_at_typical == 26


def test_qwen_7b_on_an_80_gib_card() -> None:
    """80 GiB x 0.9 = 77,309,411,328; minus 15,231,233,024 (7,615,616,512 bf16 parameters) =
    62,078,178,304 bytes / 57,344 per token = 1,082,557 tokens: 33 sequences at the model's
    32,768 positions; vLLM's default of 1,024 sequences x 2,048 tokens does not fit."""
    shape = load_shape(CONFIGS / "qwen2.5-7b-instruct")
    plan = make_plan(
        shape,
        EngineSettings(),
        weights=Weights(15_231_233_024, "parameters"),
        memory_bytes=80 * GIB,
    )
    assert plan.kv_tokens == 1_082_557
    assert plan.sequences_at_max == 33
    assert plan.max_num_seqs == 1024
    assert _codes(plan) == {"max_num_seqs_over_kv"}


def test_mistral_with_an_fp8_kv_cache_doubles_the_tokens() -> None:
    """--kv-cache-dtype fp8 halves the 131,072 bytes per token: on 24 GiB at 0.9, minus
    14,496,047,104 bytes of weights, 8,696,776,294 bytes hold 132,702 tokens."""
    shape = load_shape(CONFIGS / "mistral-7b-instruct-v0.3")
    plan = make_plan(
        shape,
        EngineSettings.from_args(["--kv-cache-dtype", "fp8", "--max-num-seqs", "64"]),
        weights=Weights(14_496_047_104, "parameters"),
        memory_bytes=24 * GIB,
    )
    assert plan.kv_bytes_per_token == 65_536
    assert plan.kv_tokens == 132_702
    assert plan.warnings == ()


def test_high_utilization_and_a_context_past_the_positions_are_warned() -> None:
    """0.98 is at or above 0.95; --max-model-len 65,536 exceeds Qwen's 32,768 positions. Each
    warning's hint names the flag to change."""
    shape = load_shape(CONFIGS / "qwen2.5-7b-instruct")
    plan = make_plan(
        shape,
        EngineSettings.from_args(
            ["--gpu-memory-utilization=0.98", "--max-model-len", "65536", "--max-num-seqs", "8"]
        ),
        weights=Weights(15_231_233_024, "parameters"),
        memory_bytes=80 * GIB,
    )
    assert _codes(plan) == {"high_memory_utilization", "max_model_len_over_positions"}
    hints = {w.code: w.hint for w in plan.warnings}
    assert "--gpu-memory-utilization 0.90" in hints["high_memory_utilization"]
    assert "--max-model-len" in hints["max_model_len_over_positions"]


def test_weights_larger_than_the_budget_are_warned() -> None:
    """Llama-8B's 16 GB of weights against 16 GiB x 0.9 = 14.4 GiB: they do not fit."""
    shape = load_shape(CONFIGS / "llama-3.1-8b-instruct")
    plan = make_plan(
        shape,
        EngineSettings.from_args(["--max-model-len", "4096"]),
        weights=Weights(16_060_522_496, "parameters"),
        memory_bytes=16 * GIB,
    )
    assert "weights_do_not_fit" in _codes(plan)
    assert plan.kv_tokens == 0


def test_kv_cache_memory_bytes_sizes_the_cache_directly(tiny_model_dir: Path) -> None:
    """The demo's 64 MiB on the tiny model's shape (2 layers, 1 KV head, 64 dims, bf16: 512
    bytes a token) = 131,072 tokens, whatever the memory (vLLM skips its own sizing)."""
    shape = load_shape(tiny_model_dir)
    plan = make_plan(
        shape,
        EngineSettings.from_args(
            ["--kv-cache-memory-bytes", "67108864", "--max-model-len", "1024"]
        ),
        weights=None,
        memory_bytes=None,
        cpu=True,
    )
    assert (plan.kv_bytes_per_token, plan.kv_tokens, plan.max_num_seqs) == (512, 131_072, 128)


def test_without_memory_the_plan_gives_no_tokens_and_no_token_warnings() -> None:
    """No GPU reading and no --kv-cache-memory-bytes: KV bytes per token only."""
    shape = load_shape(CONFIGS / "llama-3.1-8b-instruct")
    plan = make_plan(shape, EngineSettings(), weights=None, memory_bytes=None)
    assert plan.kv_tokens is None and plan.warnings == ()
    assert "--gpu-memory-gib" in plan.kv_source
