"""What the simulated model does, from vLLM's flags and the model's config.json: generate (the
default) or pool (`--runner pooling`, `--convert embed|classify`), and transcribe (`--sim-asr`).

Which routes each kind serves follows vLLM 0.32's registration (entrypoints/launchers/
api_server/routers.py, pooling/factories.py): chat and completions only with the `generate`
task; /pooling for any pooling task; /v1/embeddings and /v2/embed for `embed`; /classify for
`classify`; /score and the rerank paths for `embed`, or `classify` with exactly one label;
audio only for a model with the `transcription` task. Anything else is FastAPI's 404.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any, Literal

Runner = Literal["generate", "pooling"]
PoolingTask = Literal["embed", "classify"]
ScoreType = Literal["bi-encoder", "cross-encoder"]


@dataclasses.dataclass(frozen=True)
class ModelTasks:
    """The served model's tasks and the config numbers pooling answers with.

    `supported` is vLLM's `supported_tasks` tuple (it appears in an error message);
    `hidden_size` the length of an embedding (the pooler returns hidden states);
    `num_labels`/`id2label` the classifier head (transformers' defaults: 2 labels,
    `LABEL_i`); `asr` whether /v1/audio/* is served; `architecture` the config's first;
    `use_sep_token` whether a cross-encoder joins a pair with the tokenizer's pair template
    (else it tokenizes `query + document` as one text: an LLM reranker).
    """

    runner: Runner = "generate"
    pooling_task: PoolingTask | None = None
    hidden_size: int = 128
    num_labels: int = 2
    id2label: tuple[str, ...] = ("LABEL_0", "LABEL_1")
    asr: bool = False
    architecture: str = "LlamaForCausalLM"
    use_sep_token: bool = True

    @property
    def supported(self) -> tuple[str, ...]:
        """vLLM's supported tasks: the converted pooler's two (sequence and token level), or
        generate (and transcription for a speech model)."""
        if self.pooling_task == "embed":
            return ("embed", "token_embed")
        if self.pooling_task == "classify":
            return ("classify", "token_classify")
        return ("generate", "transcription") if self.asr else ("generate",)

    @property
    def generates(self) -> bool:
        return self.runner == "generate"

    @property
    def score_type(self) -> ScoreType | None:
        """How /score pairs are scored (pooling/utils.py `enable_scoring_api`): cosine of two
        embeddings, a one-label classifier over the pair, or not served (None)."""
        if self.pooling_task == "embed":
            return "bi-encoder"
        if self.pooling_task == "classify" and self.num_labels == 1:
            return "cross-encoder"
        return None


def resolve_tasks(
    model_dir: Path,
    *,
    runner: str = "auto",
    convert: str = "auto",
    hf_overrides: dict[str, Any] | None = None,
    asr: bool = False,
) -> ModelTasks:
    """The tasks vLLM 0.32 gives a `*ForCausalLM` model for these flags (config/model.py
    `_get_runner_type`, `_get_convert_type`): `--runner pooling` alone converts to `embed`;
    a pooling `--convert` alone implies `--runner pooling`. `hf_overrides` (vLLM's
    `--hf-overrides`) is laid over config.json (e.g. `{"num_labels": 1}`). Raises ValueError
    (vLLM's message) for `--runner pooling --convert none`."""
    config = {**_read_config(model_dir), **(hf_overrides or {})}
    architectures = config.get("architectures")
    common: dict[str, Any] = {"hidden_size": _int(config, "hidden_size", 128)}
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        common["architecture"] = architectures[0]
    pooling = runner == "pooling" or (runner == "auto" and convert in ("embed", "classify"))
    if runner == "pooling" and convert == "none":
        raise ValueError(
            "This model does not support `--runner pooling`. You can pass `--convert "
            "<embed|classify> to adapt it into a pooling model."
        )
    if not pooling:
        return ModelTasks(asr=asr, **common)
    config = _classifier(config)
    labels = _labels(config)
    return ModelTasks(
        runner="pooling",
        pooling_task="classify" if convert == "classify" else "embed",
        num_labels=len(labels),
        id2label=labels,
        use_sep_token=bool(config.get("use_sep_token", config.get("use_pad_token", True))),
        **common,
    )


def _classifier(config: dict[str, Any]) -> dict[str, Any]:
    """The config as vLLM 0.32 updates it for a head built from token rows (`method` with
    `classifier_from_token`; model_executor/models/adapters.py
    `SequenceClassificationConfig`): one label for `from_2_way_softmax`, else one per token,
    and no separating token unless the config asks for one (an LLM reranker)."""
    method, tokens = config.get("method"), config.get("classifier_from_token")
    if method is None or not isinstance(tokens, list):
        return config
    count = 1 if method == "from_2_way_softmax" else len(tokens)
    return {
        **config,
        "num_labels": count,
        "id2label": None,
        "use_sep_token": config.get("use_sep_token", False),
    }


def add_task_arguments(parser: argparse.ArgumentParser) -> None:
    """The simulator's flags for what the model does: vLLM 0.32's `--runner`, `--convert`,
    `--hf-overrides` (and its refused `--task`), the simulator's own `--sim-asr`."""
    model = parser.add_argument_group("what the model does (as vLLM's flags)")
    model.add_argument(
        "--runner",
        choices=("auto", "generate", "pooling"),
        default="auto",
        help="pooling: serve embeddings, pooling, score and rerank, not chat (vLLM's flag)",
    )
    model.add_argument(
        "--convert",
        choices=("auto", "none", "embed", "classify"),
        default="auto",
        help="embed (the default of --runner pooling) or classify: the pooling task",
    )
    model.add_argument(
        "--hf-overrides",
        type=_json_object,
        default={},
        metavar="JSON",
        help="config.json keys to override, e.g. '{\"num_labels\": 1}' (a cross-encoder)",
    )
    model.add_argument("--task", help=argparse.SUPPRESS)  # gone from vLLM: refused as it does
    model.add_argument(
        "--sim-asr",
        action="store_true",
        help="a speech model: serve /v1/audio/transcriptions and /v1/audio/translations "
        "(a fake recogniser: text of a length set by the audio's)",
    )


def check_task_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse what vLLM 0.32 refuses: `--task` (gone; its parser's hint), and a pooling
    runner with a generative convert; `--sim-asr` needs a generate model."""
    if args.task is not None:
        parser.error(
            f"unrecognized arguments: --task {args.task}\n\nHint: --task is not a vllm serve "
            "option. For embedding, reranking, or reward models, use --runner pooling. To adapt "
            "a generative model for pooling, also use --convert embed, --convert classify, or "
            "--convert reward."
        )
    pooling = args.runner == "pooling" or args.convert in ("embed", "classify")
    if args.runner == "generate" and args.convert in ("embed", "classify"):
        parser.error(f"--convert {args.convert} needs --runner pooling (or auto)")
    if args.sim_asr and pooling:
        parser.error("--sim-asr simulates a speech model, which generates: not with pooling")


def _json_object(value: str) -> dict[str, object]:
    """An `--hf-overrides` value: a JSON object."""
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {value!r}")
    return parsed


def _labels(config: dict[str, Any]) -> tuple[str, ...]:
    """The classifier's label names: `id2label` if given, else `num_labels` (default 2) named
    `LABEL_i`, as transformers' PretrainedConfig fills them."""
    id2label = config.get("id2label")
    if isinstance(id2label, dict) and id2label and "num_labels" not in config:
        return tuple(str(id2label[k]) for k in sorted(id2label, key=int))
    count = _int(config, "num_labels", 2)
    if isinstance(id2label, dict) and len(id2label) == count:
        return tuple(str(id2label[k]) for k in sorted(id2label, key=int))
    return tuple(f"LABEL_{i}" for i in range(count))


def _int(config: dict[str, Any], key: str, default: int) -> int:
    value = config.get(key, default)
    return value if isinstance(value, int) and value > 0 else default


def _read_config(model_dir: Path) -> dict[str, Any]:
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}
