"""`llmd tune --variants FILE`: engine-argument sets compared on the same load, and their
greedy golden answers against the first set's (token agreement), on the simulator (whose
tokens are a function of its --seed and the prompt)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmd.cli import main
from llmd.config import EngineConfig
from llmd.errors import TuneError
from llmd.tune.variants import Variant, load_variants, token_agreement
from tests.support.sim_process import sim_config


def test_token_agreement_counts_positions_over_the_longer_answer() -> None:
    """Same answer 1.0; one token changed of four 0.75; a prefix of half 0.5; nothing 1.0."""
    assert token_agreement([1, 2, 3, 4], [1, 2, 3, 4]) == 1.0
    assert token_agreement([1, 2, 3, 4], [1, 9, 3, 4]) == 0.75
    assert token_agreement([1, 2, 3, 4], [1, 2]) == 0.5
    assert token_agreement([], []) == 1.0


def test_a_variants_flags_replace_the_engines_own() -> None:
    """A flag of the variant replaces the same flag of engine.args (and --X its --no-X); a
    model replaces the checkpoint and keeps the served name."""
    table = EngineConfig(
        model="/m/bf16",
        served_model_name="tiny",
        args=("--max-num-seqs", "8", "--no-enable-prefix-caching", "--enforce-eager"),
    )
    variant = Variant("q", ("--max-num-seqs", "16", "--enable-prefix-caching"), "/m/awq")
    engine = variant.engine(table)
    assert engine.args == (
        "--enforce-eager", "--max-num-seqs", "16", "--enable-prefix-caching",
    )  # fmt: skip
    assert (engine.model, engine.model_name) == ("/m/awq", "tiny")


def test_a_bad_variants_file_is_refused_naming_it(tmp_path: Path) -> None:
    """One variant alone, a repeated name, an unknown key: TuneError naming the file."""
    path = tmp_path / "v.toml"
    for text, why in (
        ('[[variants]]\nname = "a"\n', "two"),
        ('[[variants]]\nname = "a"\n[[variants]]\nname = "a"\n', "repeat"),
        ('[[variants]]\nname = "a"\n[[variants]]\nname = "b"\nflags = []\n', "unknown: flags"),
    ):
        path.write_text(text)
        with pytest.raises(TuneError, match=why):
            load_variants(path)


def _tune_variants(
    model: Path, where: Path, variants: str, flags: list[str], capsys: pytest.CaptureFixture[str]
) -> tuple[dict[str, Any], str]:
    """`llmd tune --variants` with the variants file text `variants` and `flags` on the
    zero-latency simulator, run in `where`; its JSON document and its stdout."""
    config = where / "llmd.toml"
    config.write_text(sim_config(model, ("--zero-latency",)))
    (where / "variants.toml").write_text(variants)
    output = where / "variants.json"
    argv = [
        "tune", "--config", str(config), "--runtime-dir", str(where), "--variants",
        str(where / "variants.toml"), *flags, "--slo-ttft-p95-ms", "5000",
        "--output", str(output), "--quiet",
    ]  # fmt: skip
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out = capsys.readouterr().out
    assert exited.value.code in (0, None), out
    document: dict[str, Any] = json.loads(output.read_text())
    return document, out


def test_the_cli_compares_variants_on_load_and_golden_answers(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three variants of the simulator: one with other seats answers every golden prompt
    token for token as the first; one with another seed drifts; each ran the same load."""
    document, out = _tune_variants(
        tiny_model_dir,
        tmp_path,
        '[[variants]]\nname = "base"\n\n'
        '[[variants]]\nname = "seats"\nargs = ["--max-num-seqs", "4"]\n\n'
        '[[variants]]\nname = "reseeded"\nargs = ["--seed", "7"]\n',
        ["--concurrency", "2", "--max-requests", "6"],
        capsys,
    )
    base, seats, reseeded = document["variants"]
    assert document["reference"] == "base"
    assert [v["variant"]["name"] for v in document["variants"]] == ["base", "seats", "reseeded"]
    assert base["mean_token_agreement"] == seats["mean_token_agreement"] == 1.0
    assert seats["identical_answers"] == 3 and "--max-num-seqs" in seats["engine_args"]
    assert reseeded["mean_token_agreement"] < 1.0 and reseeded["identical_answers"] < 3
    assert all(v["errors"] == 0 and v["output_tokens_per_s"] > 0 for v in document["variants"])
    assert all(len(v["golden"]) == 3 for v in document["variants"])
    assert "golden token agreement" in out and "reseeded" in out


def test_variants_on_a_shared_prefix_show_the_prefix_cache_hit_rate(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Scenario G with prefix caching on and off as two variants: the table adds a prefix
    hits column, the JSON the hit rate of each: most prompt tokens with it on; none (no
    lookups, as vLLM 0.32 counts them) off. The second's name has what Rich would read as a
    closing tag."""
    document, out = _tune_variants(
        tiny_model_dir,
        tmp_path,
        '[[variants]]\nname = "cached"\nargs = ["--enable-prefix-caching"]\n\n'
        '[[variants]]\nname = "un[/]cached"\nargs = ["--no-enable-prefix-caching"]\n',
        ["--scenario", "G", "--concurrency", "2", "--max-requests", "8"],
        capsys,
    )
    cached, uncached = document["variants"]
    assert cached["prefix_cache_hit_rate"] > 0.5 and uncached["prefix_cache_hit_rate"] is None
    assert "prefix hits" in out
    assert "un[/]cached" in out  # a name is shown as it is, never read as markup


def test_variants_do_not_go_with_the_sweep(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--variants with --max-num-seqs is a usage error (64)."""
    config = tmp_path / "llmd.toml"
    config.write_text(sim_config(tiny_model_dir))
    argv = [
        "tune", "--config", str(config), "--variants", str(tmp_path / "v.toml"),
        "--max-num-seqs", "4", "--slo-ttft-p95-ms", "500", "--output", str(tmp_path / "o.json"),
    ]  # fmt: skip
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 64
    assert "--max-num-seqs and --variants" in capsys.readouterr().err
