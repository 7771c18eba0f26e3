"""The simulator's prefix cache: full blocks of a shared prompt prefix are served from the cache
and counted in vllm:prefix_cache_hits_total, as vLLM 0.32 counts them; off with
--no-enable-prefix-caching."""

from __future__ import annotations

import re

from llmd.engine.sim.prefix import PrefixCache
from tests.engine.sim.conftest import SimFactory

SHARED = " ".join(["the river garden window letter morning music city water"] * 8)


def test_leading_full_blocks_hit_and_the_last_token_is_always_computed() -> None:
    """Blocks of 4: a prompt sharing 8 tokens with a cached one hits 8; the same 8-token prompt
    hits only 4 (one token must be computed); a different first block hits nothing."""
    cache = PrefixCache(block_size=4, capacity=16)
    cache.insert(list(range(10)))  # blocks 0-3 and 4-7; the 2-token tail is not a full block
    assert cache.cached_tokens([*range(8), 99, 98, 97]) == 8
    assert cache.cached_tokens(list(range(8))) == 4
    assert cache.cached_tokens([7, *range(1, 10)]) == 0


def test_least_recently_used_blocks_go_first() -> None:
    """With room for two blocks, a third prompt's block evicts the oldest unused one."""
    cache = PrefixCache(block_size=2, capacity=2)
    cache.insert([1, 2])
    cache.insert([3, 4])
    assert cache.cached_tokens([1, 2, 0]) == 2  # touches [1, 2]
    cache.insert([5, 6])
    assert cache.cached_tokens([3, 4, 0]) == 0
    assert cache.cached_tokens([1, 2, 0]) == 2


def _counter(text: str, name: str) -> float:
    match = re.search(rf"^{name}\{{[^}}]*\}} ([0-9.e+]+)$", text, re.MULTILINE)
    assert match, name
    return float(match[1])


async def test_a_shared_prompt_prefix_is_served_from_the_cache(make_sim: SimFactory) -> None:
    """Two completions whose prompts share 16-token blocks: the second's shared blocks are hits;
    queries count every prompt token. cache_config_info says prefix caching is on."""
    sim = await make_sim("--block-size", "16")
    for question in ("apples", "pears"):
        body = {"model": "tiny", "prompt": f"{SHARED} {question}", "max_tokens": 2}
        assert (await sim.client.post("/v1/completions", json=body)).status_code == 200
    text = (await sim.client.get("/metrics")).text
    queries = _counter(text, "vllm:prefix_cache_queries_total")
    hits = _counter(text, "vllm:prefix_cache_hits_total")
    assert hits > 0 and hits % 16 == 0 and hits < queries / 2
    assert 'enable_prefix_caching="True"' in text


async def test_no_hits_with_prefix_caching_off(make_sim: SimFactory) -> None:
    """--no-enable-prefix-caching: the same two prompts, no hits and no lookups counted (vLLM
    0.32's KVCacheManager.record_prefix_cache_stats skips a request it did not look up)."""
    sim = await make_sim("--block-size", "16", "--no-enable-prefix-caching")
    for question in ("apples", "pears"):
        body = {"model": "tiny", "prompt": f"{SHARED} {question}", "max_tokens": 2}
        assert (await sim.client.post("/v1/completions", json=body)).status_code == 200
    text = (await sim.client.get("/metrics")).text
    assert _counter(text, "vllm:prefix_cache_hits_total") == 0
    assert _counter(text, "vllm:prefix_cache_queries_total") == 0
    assert 'enable_prefix_caching="False"' in text
