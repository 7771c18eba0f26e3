"""The engine's own Prometheus metrics, read into the few numbers llmd uses.

Names from vLLM 0.32's /metrics (shared ENGINE.md; the simulator serves the same): the running
and waiting gauges, `kv_cache_usage_perc` (`gpu_cache_usage_perc` before 0.11), the
`cache_config_info` labels `num_gpu_blocks` and `block_size`, and the token counters. Parsed with
`prometheus_client.parser`, after dropping the lines llmd does not read (histogram buckets are
most of the text, and parsing is pure Python).
"""

from __future__ import annotations

import dataclasses

from prometheus_client.parser import text_string_to_metric_families

_GAUGES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:gpu_cache_usage_perc": "kv_usage",
    "vllm:prompt_tokens_total": "prompt_tokens_total",
    "vllm:generation_tokens_total": "generation_tokens_total",
    # Histograms' sums and counts (their buckets are not read): the stall watchdog's measures.
    "vllm:inter_token_latency_seconds_sum": "itl_seconds_total",
    "vllm:inter_token_latency_seconds_count": "itl_count",
    "vllm:time_to_first_token_seconds_sum": "ttft_seconds_total",
}
_CACHE_INFO = "vllm:cache_config_info"
_WANTED = (*_GAUGES, _CACHE_INFO)


@dataclasses.dataclass(frozen=True)
class EngineSample:
    """One scrape of the engine: gauges summed over label sets, counters as totals.

    `kv_usage` is 0..1, the mean over the engine's label sets; `num_gpu_blocks` (summed over
    them) * `block_size` is the KV capacity in tokens. A vLLM with --data-parallel-size labels
    each rank's series with its `engine` index: the server's load is their sum, its KV usage
    their mean. `itl_seconds_total` / `itl_count`: the mean inter-token latency since the
    engine started; `ttft_seconds_total` / `prompt_tokens_total`: seconds to first token per
    prompt token (queueing included), a measure of prefill. Fields are None when the engine
    did not report them; `taken_at` (the answer read) and `sent_at` (the request sent; None:
    not known) are `time.monotonic()` seconds.
    """

    taken_at: float
    running: int | None = None
    waiting: int | None = None
    kv_usage: float | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    itl_seconds_total: float | None = None
    itl_count: float | None = None
    ttft_seconds_total: float | None = None
    sent_at: float | None = None

    @property
    def kv_capacity_tokens(self) -> int | None:
        if self.num_gpu_blocks is None or self.block_size is None:
            return None
        return self.num_gpu_blocks * self.block_size

    @property
    def mean_itl_s(self) -> float | None:
        """The mean inter-token latency since the engine started, s (None: none measured)."""
        if not self.itl_count or self.itl_seconds_total is None:
            return None
        return self.itl_seconds_total / self.itl_count

    @property
    def prefill_s_per_token(self) -> float | None:
        """Seconds to first token per prompt token since the engine started (None: none)."""
        if not self.prompt_tokens_total or self.ttft_seconds_total is None:
            return None
        return self.ttft_seconds_total / self.prompt_tokens_total


def parse_engine_metrics(text: str, taken_at: float, sent_at: float | None = None) -> EngineSample:
    """Read an EngineSample from Prometheus exposition `text`, answered at `taken_at` to a
    request sent at `sent_at`. Raises ValueError when the text is not Prometheus exposition
    format."""
    kept = "\n".join(line for line in text.splitlines() if line.startswith(_WANTED)) + "\n"
    values: dict[str, float] = {}
    kv_engines = 0
    blocks: int | None = None
    block_size: int | None = None
    for family in text_string_to_metric_families(kept):
        for sample in family.samples:
            if sample.name in _GAUGES:
                key = _GAUGES[sample.name]
                values[key] = values.get(key, 0.0) + sample.value
                kv_engines += key == "kv_usage"
            elif sample.name == _CACHE_INFO:
                engine_blocks = _int_label(sample.labels.get("num_gpu_blocks"))
                if engine_blocks is not None:
                    blocks = (blocks or 0) + engine_blocks
                block_size = _int_label(sample.labels.get("block_size"))
    kv_usage = values.get("kv_usage")
    return EngineSample(
        taken_at=taken_at,
        running=_int(values.get("running")),
        waiting=_int(values.get("waiting")),
        kv_usage=kv_usage / kv_engines if kv_usage is not None else None,
        num_gpu_blocks=blocks,
        block_size=block_size,
        prompt_tokens_total=values.get("prompt_tokens_total"),
        generation_tokens_total=values.get("generation_tokens_total"),
        itl_seconds_total=values.get("itl_seconds_total"),
        itl_count=values.get("itl_count"),
        ttft_seconds_total=values.get("ttft_seconds_total"),
        sent_at=sent_at,
    )


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _int_label(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None  # vLLM writes "None" for unset cache settings
