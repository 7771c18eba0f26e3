"""Length specs, seeded sampling, JSONL length files and fitting into the context."""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import pytest

from llmd.bench.lengths import Dist, LengthMix, fit_context, load_pairs, mix_of
from llmd.errors import BenchError


def test_fixed_spec_always_gives_its_value() -> None:
    """`64` is a fixed length."""
    dist = Dist.parse("64")
    assert {dist.sample(random.Random(i)) for i in range(20)} == {64}


def test_uniform_spec_covers_both_ends() -> None:
    """`3-5` draws integers from 3 to 5, both included."""
    dist = Dist.parse("3-5")
    rng = random.Random(1)
    assert {dist.sample(rng) for _ in range(200)} == {3, 4, 5}


def test_lognormal_spec_has_its_median_and_stays_in_range() -> None:
    """`lognormal:100:0.5:20-400` has a median near 100 and never leaves 20..400."""
    dist = Dist.parse("lognormal:100:0.5:20-400")
    rng = random.Random(7)
    draws = [dist.sample(rng) for _ in range(4000)]
    assert min(draws) >= 20 and max(draws) <= 400
    assert 90 <= statistics.median(draws) <= 110


def test_lognormal_without_range_is_clipped_to_sixteen_medians() -> None:
    """Without LO-HI a lognormal is clipped to 1..16·median."""
    assert (Dist.parse("lognormal:10:1").lo, Dist.parse("lognormal:10:1").hi) == (1, 160)


@pytest.mark.parametrize("spec", ["0", "-3", "5-2", "abc", "lognormal:10", "lognormal:-1:1", ""])
def test_bad_specs_raise_bench_error(spec: str) -> None:
    """Zero, reversed ranges and malformed specs are refused with the expected grammar."""
    with pytest.raises(BenchError, match="expected N, LO-HI"):
        Dist.parse(spec)


def test_spec_round_trips_through_str() -> None:
    """str(Dist) is a spec that parses back to the same distribution."""
    for spec in ("64", "16-128", "lognormal:64:0.5:16-256"):
        assert Dist.parse(str(Dist.parse(spec))) == Dist.parse(spec)


def test_mix_is_deterministic_for_a_seed_and_respects_weights() -> None:
    """The same seed draws the same lengths; component shares follow the weights."""
    mix = mix_of([("a", 3.0, "10", "10"), ("b", 1.0, "20", "20")])
    first = [mix.sample(random.Random(f"s:{i}")) for i in range(2000)]
    again = [mix.sample(random.Random(f"s:{i}")) for i in range(2000)]
    assert first == again
    share_a = sum(name == "a" for name, _, _ in first) / len(first)
    assert 0.7 <= share_a <= 0.8


def test_lengths_file_pairs_are_sampled_as_pairs(tmp_path: Path) -> None:
    """A JSONL file gives (prompt, output) pairs, both key spellings accepted."""
    path = tmp_path / "lengths.jsonl"
    path.write_text('{"prompt_tokens": 10, "output_tokens": 3}\n\n{"prompt": 7, "output": 9}\n')
    pairs = load_pairs(path)
    assert pairs == ((10, 3), (7, 9))
    mix = LengthMix(pairs=pairs)
    assert {mix.sample(random.Random(i))[1:] for i in range(50)} == {(10, 3), (7, 9)}


def test_lengths_file_errors_name_the_line(tmp_path: Path) -> None:
    """A bad line is reported with its file and line number; an empty file is refused."""
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt_tokens": 10, "output_tokens": 3}\n{"prompt_tokens": 0}\n')
    with pytest.raises(BenchError, match=r"bad\.jsonl:2"):
        load_pairs(path)
    path.write_text("\n")
    with pytest.raises(BenchError, match="no lengths"):
        load_pairs(path)


@pytest.mark.parametrize(
    ("prompt", "output", "context", "expected"),
    [
        (100, 100, None, (100, 100)),
        (100, 100, 1024, (100, 100)),
        (1000, 32, 1024, (992, 32)),
        (32, 2000, 1024, (32, 992)),
        (1000, 500, 1024, (768, 256)),
        (5000, 5000, 1024, (768, 256)),
    ],
)
def test_fit_context_shrinks_output_then_prompt(
    prompt: int, output: int, context: int | None, expected: tuple[int, int]
) -> None:
    """Lengths over the context shrink to fit: the output first (not below a quarter of the
    context), then the prompt."""
    fitted = fit_context(prompt, output, context)
    assert fitted == expected
    assert context is None or sum(fitted) <= context
