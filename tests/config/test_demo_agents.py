"""The demo serves coding agents (README, "Coding agents"): etc/demo.toml's window, tool flags and
KV cache, the tiny model's positions and chat template, and the README's settings beside them."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from llmd.engine.args import has_switch, int_flag
from llmd.engine.sim.tokenizer import SimTokenizer
from llmd.sizing.model import dtype_bytes, load_shape
from tests.support.agents import claude_settings, codex_config
from tests.support.configs import demo_max_model_len
from tests.support.llmd_process import REPO

DEMO_ARGS: list[str] = tomllib.loads((REPO / "etc" / "demo.toml").read_text())["engine"]["args"]
# Claude Code 2.1.332's first request with the README's settings: 23,883 tokens of the tiny
# model's tokenizer, tools included (tests/e2e/test_agents.py measures it through llmd).
AGENT_PROMPT_TOKENS = 24_000


def test_the_demo_window_holds_an_agents_prompt_and_the_models_positions_hold_it(
    tiny_model_dir: Path,
) -> None:
    """65,536 served of the tiny model's 131,072 positions; the KV cache (512 bytes a token in
    bf16) holds the whole window more than once."""
    window = demo_max_model_len()
    shape = load_shape(tiny_model_dir)
    assert window >= 65_536 > 2 * AGENT_PROMPT_TOKENS
    assert shape.max_positions is not None and shape.max_positions >= 131_072 >= window
    per_token = shape.kv_bytes_per_token(dtype_bytes(shape.dtype))
    assert per_token == 512
    kv_bytes = int_flag(DEMO_ARGS, "--kv-cache-memory-bytes")
    assert kv_bytes is not None and kv_bytes // per_token >= 2 * window


def test_the_demo_turns_on_auto_tool_choice_with_the_hermes_parser() -> None:
    """Agents send tools with tool_choice auto: the flags vLLM needs to take them."""
    assert has_switch(DEMO_ARGS, "--enable-auto-tool-choice")
    assert DEMO_ARGS[DEMO_ARGS.index("--tool-call-parser") + 1] == "hermes"


def test_the_tiny_template_writes_tool_calls_the_hermes_parser_reads(tiny_model_dir: Path) -> None:
    """Tools render into the prompt (one JSON line each); an assistant's tool call renders as
    `<tool_call>JSON</tool_call>`, which vLLM's hermes parser finds with its regex
    (vllm/tool_parsers/hermes_tool_parser.py) and reads as name and arguments."""
    tokenizer = SimTokenizer(tiny_model_dir)
    tool = {"type": "function", "function": {"name": "Read", "parameters": {"type": "object"}}}
    call = {"type": "function", "function": {"name": "Read", "arguments": {"path": "a"}}}
    turns = [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [call]}]
    rendered = tokenizer.render_chat(turns, tools=[tool], add_generation_prompt=False)
    assert json.dumps(tool) in rendered
    hermes = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)
    found = [json.loads(a or b) for a, b in hermes.findall(rendered.split("<|assistant|>")[1])]
    assert found == [{"name": "Read", "arguments": {"path": "a"}}]
    plain = tokenizer.render_chat(turns[:1], tools=None)
    assert plain == "<s><|user|>\na</s>\n<|assistant|>\n"


def test_the_readme_settings_name_the_demos_model_and_window() -> None:
    """Claude Code's and Codex's settings in the README point at the demo's served name and
    window, at llmd's default address."""
    claude = claude_settings()
    assert claude["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8000"
    models = [v for k, v in claude.items() if k.startswith("ANTHROPIC_") and k.endswith("MODEL")]
    assert len(models) == 4 and set(models) == {"tiny"}
    assert int(claude["CLAUDE_CODE_MAX_CONTEXT_TOKENS"]) == demo_max_model_len()
    assert claude["CLAUDE_CODE_ATTRIBUTION_HEADER"] == "0"
    codex = codex_config()
    assert (codex["model"], codex["model_context_window"]) == ("tiny", demo_max_model_len())
    provider = codex["model_providers"][codex["model_provider"]]
    assert provider["base_url"] == "http://127.0.0.1:8000/v1"


def test_ci_installs_the_cli_versions_the_readme_names() -> None:
    """.ci/run runs scripts/setup-agents.sh, which pins the Claude Code and Codex CLI versions
    the README's figures were measured with."""
    assert "scripts/setup-agents.sh" in (REPO / ".ci" / "run").read_text().splitlines()
    script = (REPO / "scripts" / "setup-agents.sh").read_text()
    claude = re.search(r"@anthropic-ai/claude-code@([\d.]+)", script)
    codex = re.search(r"@openai/codex@([\d.]+)", script)
    assert claude and codex
    readme = (REPO / "README.md").read_text()
    intro = readme[readme.index("## Coding agents") : readme.index("### Claude Code")]
    words = " ".join(intro.split())
    assert f"Claude Code {claude.group(1)}'s first request" in words
    assert f"Codex CLI {codex.group(1).removesuffix('.0')}'s" in words
