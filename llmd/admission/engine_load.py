"""Reads the engine's load from its own Prometheus metrics (vLLM's `vllm:*`, or the simulator's).

Names as in vLLM 0.32 (ENGINE.md): `vllm:num_requests_running`, `vllm:num_requests_waiting`,
`vllm:kv_cache_usage_perc` (`vllm:gpu_cache_usage_perc` before 0.11) and the labels
`num_gpu_blocks` x `block_size` of `vllm:cache_config_info`. Values are summed over label sets
(one per engine core). Parsed with prometheus_client's parser.
"""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from llmd.admission.capacity import EngineLoad

_WANTED = {
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "vllm:cache_config_info",
}


class ScrapeFailed(Exception):
    """The engine's /metrics could not be read or carried none of the expected series."""


def parse_load(text: str) -> EngineLoad:
    """The EngineLoad in a Prometheus text exposition. Raises ScrapeFailed if it has no
    `vllm:num_requests_running` (e.g. vLLM run with --disable-log-stats)."""
    sums: dict[str, float] = {}
    kv_tokens = 0
    try:
        for family in text_string_to_metric_families(_only_wanted(text)):
            if family.name not in _WANTED:
                continue
            for sample in family.samples:
                if sample.name == "vllm:cache_config_info":
                    blocks = sample.labels.get("num_gpu_blocks", "")
                    size = sample.labels.get("block_size", "")
                    if blocks.isdigit() and size.isdigit():
                        kv_tokens += int(blocks) * int(size)
                else:
                    sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    except ValueError as exc:
        raise ScrapeFailed(f"unparsable metrics: {exc}") from exc
    if "vllm:num_requests_running" not in sums:
        raise ScrapeFailed("no vllm:num_requests_running in the engine's /metrics")
    usage = sums.get("vllm:kv_cache_usage_perc", sums.get("vllm:gpu_cache_usage_perc", 0.0))
    return EngineLoad(
        running=int(sums["vllm:num_requests_running"]),
        waiting=int(sums.get("vllm:num_requests_waiting", 0.0)),
        kv_usage=usage,
        kv_tokens=kv_tokens or None,
    )


def _only_wanted(text: str) -> str:
    """The lines of the series llmd reads (comments included), so the parser skips the many
    histogram lines it does not need (vLLM's /metrics is hundreds of lines)."""
    kept = []
    for line in text.splitlines():
        name = line.split(" ", 3)[2] if line.startswith("# ") else line.split("{", 1)[0]
        if name.split(" ", 1)[0] in _WANTED:
            kept.append(line)
    return "\n".join(kept) + "\n"


async def scrape_load(session: aiohttp.ClientSession, timeout_s: float = 1.0) -> EngineLoad:
    """GET the engine's /metrics through `session` (its Unix socket) and parse it.

    Raises ScrapeFailed on any connection error, timeout, non-200 answer or missing series.
    """
    try:
        async with session.get(
            "http://engine/metrics", timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as response:
            if response.status != 200:
                raise ScrapeFailed(f"engine /metrics answered {response.status}")
            text = await response.text()
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        raise ScrapeFailed(f"{type(exc).__name__}: {exc}") from exc
    return parse_load(text)
