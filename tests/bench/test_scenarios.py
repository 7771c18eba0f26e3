"""Scenario definitions, per-request plans, and the sweep and length flags of `llmd bench`."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from llmd.bench.command import add_parser, concurrencies, options_from
from llmd.bench.runner import BenchOptions, embed_targets_of, request_headers, targets_of
from llmd.bench.scenarios import SCENARIOS, plan_documents, plan_request, scenario
from llmd.errors import BenchError


def test_plans_depend_only_on_seed_scenario_and_index() -> None:
    """The same (scenario, seed, index) plans the same request; another seed plans another."""
    e = SCENARIOS["E"]
    first = [plan_request(e, 1, i, 1024) for i in range(50)]
    assert first == [plan_request(e, 1, i, 1024) for i in range(50)]
    assert first != [plan_request(e, 2, i, 1024) for i in range(50)]


def test_plans_fit_the_context() -> None:
    """Every planned request fits max_model_len."""
    for name in "ABCDEF":
        for i in range(300):
            plan = plan_request(SCENARIOS[name], 0, i, 512)
            assert plan.prompt_tokens + plan.output_tokens <= 512


def test_scenario_shapes() -> None:
    """C has long prompts and short outputs, D the reverse, E mixes them, only F disconnects."""
    c = [plan_request(SCENARIOS["C"], 0, i, None) for i in range(200)]
    d = [plan_request(SCENARIOS["D"], 0, i, None) for i in range(200)]
    assert min(p.prompt_tokens for p in c) > max(p.output_tokens for p in c)
    assert min(p.output_tokens for p in d) > max(p.prompt_tokens for p in d)
    e = {plan_request(SCENARIOS["E"], 0, i, None).component for i in range(200)}
    assert e == {"short", "long_prompt", "long_output"}
    assert all(
        plan_request(SCENARIOS["E"], 0, i, None).disconnect_after is None for i in range(200)
    )
    assert (
        SCENARIOS["A"].single and SCENARIOS["E"].open_arrivals and not SCENARIOS["B"].open_arrivals
    )


def test_f_disconnects_a_share_mid_stream() -> None:
    """About a quarter of F's requests hang up, always after at least one chunk and before
    their last token."""
    plans = [plan_request(SCENARIOS["F"], 0, i, 1024) for i in range(2000)]
    cut = [p for p in plans if p.disconnect_after is not None]
    assert 0.2 <= len(cut) / len(plans) <= 0.3
    assert all(1 <= p.disconnect_after < p.output_tokens or p.output_tokens == 1 for p in cut)  # type: ignore[operator]


def test_scenario_overrides_and_unknown_names() -> None:
    """Fields can be replaced; an unknown scenario or share outside 0..1 is refused."""
    assert scenario("f", disconnect_share=0.5).disconnect_share == 0.5
    with pytest.raises(BenchError, match="unknown scenario"):
        scenario("Z")
    with pytest.raises(BenchError, match=r"0\.\.1"):
        scenario("F", disconnect_share=1.5)


def test_sweep_flags() -> None:
    """--sweep is sorted and deduplicated; --max-concurrency gives powers of two and N."""
    assert concurrencies("8,1,4,4", None) == (1, 4, 8)
    assert concurrencies(None, 24) == (1, 2, 4, 8, 16, 24)
    assert concurrencies(None, 16) == (1, 2, 4, 8, 16)
    assert concurrencies(None, None) == (1,)
    for sweep, top in (("1,x", None), ("0,2", None), ("1", 4), (None, 0)):
        with pytest.raises(BenchError):
            concurrencies(sweep, top)


def parse(*argv: str) -> argparse.Namespace:
    """The `llmd bench` flags parsed as the CLI parses them."""
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["bench", *argv])


def test_flags_become_options(tmp_path: Path) -> None:
    """--direct-uds becomes a unix: URL; length flags replace the scenario's lengths."""
    options = options_from(
        parse(
            "--url",
            "http://x:1",
            "--direct-uds",
            "/s.sock",
            "--scenario",
            "e",
            "--prompt-tokens",
            "100",
            "--max-concurrency",
            "4",
        )
    )
    assert options.direct_url == "unix:/s.sock" and options.concurrencies == (1, 2, 4)
    assert {c.prompt.lo for c in options.scenario.mix.components} == {100}
    lengths = tmp_path / "l.jsonl"
    lengths.write_text('{"prompt_tokens": 5, "output_tokens": 6}\n')
    options = options_from(parse("--url", "http://x:1", "--lengths", str(lengths)))
    assert options.scenario.mix.pairs == ((5, 6),)
    with pytest.raises(BenchError, match="not both"):
        options_from(parse("--url", "u", "--direct", "http://y", "--direct-uds", "/s"))


def test_h_plans_batches_of_short_documents() -> None:
    """H's embeddings requests carry `batch` documents of short lengths (median 96 tokens),
    the same for the same (seed, index), each within max_model_len."""
    indexing = SCENARIOS["H"].indexing
    assert indexing is not None and (indexing.users, indexing.batch) == (4, 8)
    plans = [plan_documents(indexing, 1, i, 128) for i in range(100)]
    assert plans == [plan_documents(indexing, 1, i, 128) for i in range(100)]
    lengths = [n for plan in plans for n in plan]
    assert all(len(plan) == 8 for plan in plans) and max(lengths) <= 128
    assert 60 < sorted(lengths)[len(lengths) // 2] < 120
    assert SCENARIOS["H"].priority == "interactive" and indexing.priority == "batch"


def test_h_flags_and_what_it_needs() -> None:
    """--embed-users and --embed-batch replace H's; other scenarios refuse them; H needs
    --embed-model, and with --direct the pooling engine straight (--embed-direct[-uds])."""
    options = options_from(
        parse(
            "--url", "http://x:1", "--scenario", "h", "--embed-model", "tiny-embed",
            "--embed-users", "2", "--embed-batch", "16", "--direct-uds", "/chat.sock",
            "--embed-direct-uds", "/embed.sock",
        )
    )  # fmt: skip
    assert options.scenario.indexing is not None
    assert (options.scenario.indexing.users, options.scenario.indexing.batch) == (2, 16)
    embeds = embed_targets_of(options, targets_of(options))
    assert {label: t.url for label, t in embeds.items()} == {
        "direct": "unix:/embed.sock",
        "llmd": "http://x:1",
    }
    with pytest.raises(BenchError, match="sends no embeddings"):
        options_from(parse("--url", "u", "--embed-users", "2"))
    with pytest.raises(BenchError, match="not both"):
        options_from(parse("--url", "u", "--embed-direct", "http://y", "--embed-direct-uds", "/s"))
    alone = BenchOptions(url="http://x:1", scenario=scenario("H"))
    with pytest.raises(BenchError, match="--embed-model"):
        embed_targets_of(alone, targets_of(alone))
    direct = dataclasses.replace(alone, embed_model="e", direct_url="unix:/chat.sock")
    with pytest.raises(BenchError, match="--embed-direct"):
        embed_targets_of(direct, targets_of(direct))
    assert embed_targets_of(dataclasses.replace(direct, scenario=scenario("B")), []) == {}


def test_h_sends_chat_as_interactive_and_embeddings_as_batch() -> None:
    """In H the chat carries x-llmd-priority interactive (or --priority's) and the embeddings
    batch, each after the API key's header; other scenarios send --priority's only."""
    auth = (("Authorization", "Bearer k"),)
    h = BenchOptions(url="u", scenario=scenario("H"), embed_model="e")
    assert request_headers(h, auth) == (
        (*auth, ("x-llmd-priority", "interactive")),
        (*auth, ("x-llmd-priority", "batch")),
    )
    normal = dataclasses.replace(h, priority="normal")
    assert request_headers(normal, ())[0] == (("x-llmd-priority", "normal"),)
    assert request_headers(BenchOptions(url="u", scenario=scenario("B")), auth) == (auth, auth)
