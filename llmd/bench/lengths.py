"""Token-length distributions: the spec grammar, seeded sampling, mixes and JSONL length files.

A spec is one of `64` (fixed), `16-128` (uniform integers, both ends included) or
`lognormal:MEDIAN:SIGMA[:LO-HI]` (exp of a normal with mean ln MEDIAN and deviation SIGMA,
rounded and clipped to LO..HI, default 1..16·MEDIAN). Request lengths in real traffic are skewed
with a long tail, which a lognormal captures with two numbers.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections.abc import Sequence
from pathlib import Path

from llmd.errors import BenchError


@dataclasses.dataclass(frozen=True)
class Dist:
    """A distribution of token counts (positive integers); build it with `Dist.parse`."""

    kind: str  # "fixed" | "uniform" | "lognormal"
    lo: int
    hi: int
    median: float = 0.0
    sigma: float = 0.0

    @classmethod
    def parse(cls, spec: str) -> Dist:
        """The distribution named by `spec` (module docstring). Raises `BenchError`."""
        text = spec.strip()
        try:
            if text.startswith("lognormal:"):
                parts = text.split(":")[1:]
                if len(parts) not in (2, 3):
                    raise ValueError
                median, sigma = float(parts[0]), float(parts[1])
                lo, hi = _range(parts[2]) if len(parts) == 3 else (1, max(1, round(16 * median)))
                if median <= 0 or sigma < 0:
                    raise ValueError
                return cls("lognormal", lo, hi, median, sigma)
            if "-" in text:
                lo, hi = _range(text)
                return cls("uniform", lo, hi)
            value = int(text)
            if value < 1:
                raise ValueError
            return cls("fixed", value, value)
        except ValueError:
            raise BenchError(
                f"bad length spec {spec!r}: expected N, LO-HI or lognormal:MEDIAN:SIGMA[:LO-HI]"
                " with positive token counts"
            ) from None

    def sample(self, rng: random.Random) -> int:
        """One token count in `lo..hi`."""
        if self.kind == "fixed":
            return self.lo
        if self.kind == "uniform":
            return rng.randint(self.lo, self.hi)
        value = round(rng.lognormvariate(math.log(self.median), self.sigma))
        return min(self.hi, max(self.lo, value))

    def __str__(self) -> str:
        if self.kind == "fixed":
            return str(self.lo)
        if self.kind == "uniform":
            return f"{self.lo}-{self.hi}"
        return f"lognormal:{self.median:g}:{self.sigma:g}:{self.lo}-{self.hi}"


def _range(text: str) -> tuple[int, int]:
    lo_text, hi_text = text.split("-", 1)
    lo, hi = int(lo_text), int(hi_text)
    if lo < 1 or hi < lo:
        raise ValueError
    return lo, hi


@dataclasses.dataclass(frozen=True)
class Component:
    """One kind of request in a mix: `weight` (relative), prompt and output token counts."""

    name: str
    weight: float
    prompt: Dist
    output: Dist


@dataclasses.dataclass(frozen=True)
class LengthMix:
    """Where request lengths come from: weighted components, or pairs read from a JSONL file."""

    components: tuple[Component, ...] = ()
    pairs: tuple[tuple[int, int], ...] = ()

    def sample(self, rng: random.Random) -> tuple[str, int, int]:
        """(component name, prompt tokens, output tokens) for one request."""
        if self.pairs:
            prompt, output = rng.choice(self.pairs)
            return "file", prompt, output
        weights = [c.weight for c in self.components]
        component = rng.choices(self.components, weights=weights)[0]
        return component.name, component.prompt.sample(rng), component.output.sample(rng)

    def describe(self) -> list[dict[str, object]]:
        """A JSON-ready description of the mix, for the report."""
        if self.pairs:
            return [{"name": "file", "pairs": len(self.pairs)}]
        return [
            {"name": c.name, "weight": c.weight, "prompt": str(c.prompt), "output": str(c.output)}
            for c in self.components
        ]


def load_pairs(path: Path) -> tuple[tuple[int, int], ...]:
    """(prompt, output) token counts from a JSONL file: one object per line with
    `prompt_tokens` and `output_tokens` (or `prompt` and `output`). Raises `BenchError`."""
    pairs: list[tuple[int, int]] = []
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise BenchError(f"cannot read lengths file {path}: {exc.strerror}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            prompt = int(row.get("prompt_tokens", row.get("prompt")))
            output = int(row.get("output_tokens", row.get("output")))
            if prompt < 1 or output < 1:
                raise ValueError
        except (ValueError, TypeError, AttributeError):
            raise BenchError(
                f'{path}:{number}: expected {{"prompt_tokens": N, "output_tokens": N}}'
                " with positive N"
            ) from None
        pairs.append((prompt, output))
    if not pairs:
        raise BenchError(f"{path}: no lengths in the file")
    return tuple(pairs)


def fit_context(prompt: int, output: int, max_model_len: int | None) -> tuple[int, int]:
    """Shrink (prompt, output) so that prompt + output <= max_model_len: the output first, down
    to a quarter of the context, then the prompt. Unchanged when `max_model_len` is None."""
    if max_model_len is None or prompt + output <= max_model_len:
        return prompt, output
    output = max(min(output, max_model_len // 4), max_model_len - prompt, 1)
    prompt = min(prompt, max_model_len - output)
    return max(prompt, 1), output


def mix_of(components: Sequence[tuple[str, float, str, str]]) -> LengthMix:
    """A `LengthMix` from (name, weight, prompt spec, output spec) rows."""
    return LengthMix(
        components=tuple(
            Component(name, weight, Dist.parse(prompt), Dist.parse(output))
            for name, weight, prompt, output in components
        )
    )
