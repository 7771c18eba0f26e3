"""Config text for test daemons, derived from the shipped etc/demo.toml (what the demo runs)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from tests.support.llmd_process import REPO


def demo_config(model: Path, **sections: dict[str, Any]) -> str:
    """etc/demo.toml with an absolute model path and `sections` merged over it."""
    raw = tomllib.loads((REPO / "etc" / "demo.toml").read_text())
    raw["engine"]["model"] = str(model)
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return tomli_w.dumps(raw)
