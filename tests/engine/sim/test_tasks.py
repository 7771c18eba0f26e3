"""What the simulated model does, from vLLM's flags and config.json (llmd/engine/sim/tasks.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmd.engine.sim.tasks import resolve_tasks


@pytest.mark.parametrize(
    ("runner", "convert", "task", "score"),
    [
        ("auto", "auto", None, None),
        ("generate", "auto", None, None),
        ("pooling", "auto", "embed", "bi-encoder"),
        ("auto", "embed", "embed", "bi-encoder"),
        ("auto", "classify", "classify", None),
        ("pooling", "classify", "classify", None),
    ],
)
def test_runner_and_convert(
    tiny_model: Path, runner: str, convert: str, task: str | None, score: str | None
) -> None:
    """As vLLM 0.32 resolves them for a *ForCausalLM: `--runner pooling` alone embeds, a
    pooling `--convert` alone implies the pooling runner; a two-label classifier scores not."""
    tasks = resolve_tasks(tiny_model, runner=runner, convert=convert)
    assert tasks.pooling_task == task and tasks.score_type == score
    assert tasks.generates == (task is None)


def test_config_numbers(tiny_model: Path) -> None:
    """hidden_size, the architecture and the labels come from config.json and
    --hf-overrides; the labels default to transformers' two."""
    tasks = resolve_tasks(tiny_model, convert="classify")
    assert (tasks.hidden_size, tasks.architecture) == (128, "LlamaForCausalLM")
    assert tasks.id2label == ("LABEL_0", "LABEL_1")
    one = resolve_tasks(tiny_model, convert="classify", hf_overrides={"num_labels": 1})
    assert one.id2label == ("LABEL_0",) and one.score_type == "cross-encoder"
    assert one.supported == ("classify", "token_classify")


def test_named_labels(tmp_path: Path) -> None:
    """A config's `id2label` names the classes, in id order."""
    config = {"hidden_size": 16, "id2label": {"1": "yes", "0": "no"}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    tasks = resolve_tasks(tmp_path, convert="classify")
    assert tasks.id2label == ("no", "yes") and tasks.num_labels == 2 and tasks.hidden_size == 16


def test_pooling_runner_without_a_convert_is_refused(tiny_model: Path) -> None:
    """`--runner pooling --convert none` on a generative model: vLLM's boot error."""
    with pytest.raises(ValueError, match="does not support `--runner pooling`"):
        resolve_tasks(tiny_model, runner="pooling", convert="none")


def test_head_from_token_rows(tiny_model: Path) -> None:
    """`method` with `classifier_from_token` (vLLM's LLM rerankers): one label for
    from_2_way_softmax, one per token else, and no separating token by default."""
    tokens = {"classifier_from_token": ["he", "ll"]}
    one = resolve_tasks(
        tiny_model, convert="classify", hf_overrides={"method": "from_2_way_softmax", **tokens}
    )
    two = resolve_tasks(
        tiny_model, convert="classify", hf_overrides={"method": "no_post_processing", **tokens}
    )
    assert (one.num_labels, one.score_type, one.use_sep_token) == (1, "cross-encoder", False)
    assert (two.num_labels, two.score_type, two.id2label) == (2, None, ("LABEL_0", "LABEL_1"))
