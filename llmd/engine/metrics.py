"""The engine's own Prometheus metrics, read into the few numbers llmd uses.

Names from vLLM 0.32's /metrics (shared ENGINE.md; the simulator serves the same): the running
and waiting gauges, `kv_cache_usage_perc` (`gpu_cache_usage_perc` before 0.11), the
`cache_config_info` labels `num_gpu_blocks` and `block_size`, the token counters, and the
engine's side of latency: its queue, prefill and decode time and inter-token latency
histograms, preemptions and prefix-cache hits and queries (the same names in 0.31 and 0.32;
vllm/v1/metrics/loggers.py). Parsed with `prometheus_client.parser`, after dropping the lines
llmd does not read (the other histograms' buckets are most of the text, and parsing is pure
Python).
"""

from __future__ import annotations

import dataclasses

from prometheus_client.parser import text_string_to_metric_families

from llmd.engine.histograms import EngineHistogram, histogram_of

_GAUGES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:gpu_cache_usage_perc": "kv_usage",
    "vllm:prompt_tokens_total": "prompt_tokens_total",
    "vllm:generation_tokens_total": "generation_tokens_total",
    # A histogram's sum (its buckets are not read): the stall watchdog's measure of prefill.
    "vllm:time_to_first_token_seconds_sum": "ttft_seconds_total",
}
# Counters, by their sample name: `_total` in the text format; without it as an exporter that
# declares them untyped writes them.
_COUNTERS = {
    f"vllm:{name}{suffix}": name
    for name in ("num_preemptions", "prefix_cache_hits", "prefix_cache_queries")
    for suffix in ("", "_total")
}
# Histograms (seconds) -> EngineSample field. `time_per_output_token_seconds` is the inter-token
# latency's name before vLLM 0.11 (renamed by vllm#24110, removed in 0.13).
_HISTOGRAMS = {
    "vllm:request_queue_time_seconds": "queue_time",
    "vllm:request_prefill_time_seconds": "prefill_time",
    "vllm:request_decode_time_seconds": "decode_time",
    "vllm:inter_token_latency_seconds": "inter_token_latency",
    "vllm:time_per_output_token_seconds": "inter_token_latency",
}
_CACHE_INFO = "vllm:cache_config_info"
_WANTED = (*_GAUGES, *_COUNTERS, *_HISTOGRAMS, _CACHE_INFO)


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
    # The engine's side of latency (seconds, cumulative since it started; summed over ranks).
    queue_time: EngineHistogram | None = None  # waiting in the engine's queue
    prefill_time: EngineHistogram | None = None  # scheduled to first token
    decode_time: EngineHistogram | None = None  # first token to last
    inter_token_latency: EngineHistogram | None = None  # between output steps of a request
    preemptions_total: float | None = None  # sequences preempted (KV cache full)
    prefix_cache_hits_total: float | None = None  # prompt tokens found in the prefix cache
    prefix_cache_queries_total: float | None = None  # prompt tokens looked up there
    # The stall watchdog's (llmd/supervisor/stall.py): inter_token_latency's sum and count.
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
    buckets: dict[str, dict[float, float]] = {}
    for family in text_string_to_metric_families(kept):
        for sample in family.samples:
            if sample.name in _GAUGES:
                key = _GAUGES[sample.name]
                values[key] = values.get(key, 0.0) + sample.value
                kv_engines += key == "kv_usage"
            elif sample.name in _COUNTERS:
                key = _COUNTERS[sample.name]
                values[key] = values.get(key, 0.0) + sample.value
            elif sample.name == _CACHE_INFO:
                engine_blocks = _int_label(sample.labels.get("num_gpu_blocks"))
                if engine_blocks is not None:
                    blocks = (blocks or 0) + engine_blocks
                block_size = _int_label(sample.labels.get("block_size"))
            else:
                _add_histogram(sample.name, sample.labels, sample.value, values, buckets)
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
        preemptions_total=values.get("num_preemptions"),
        prefix_cache_hits_total=values.get("prefix_cache_hits"),
        prefix_cache_queries_total=values.get("prefix_cache_queries"),
        queue_time=_histogram("queue_time", values, buckets),
        prefill_time=_histogram("prefill_time", values, buckets),
        decode_time=_histogram("decode_time", values, buckets),
        inter_token_latency=_histogram("inter_token_latency", values, buckets),
        itl_seconds_total=values.get("inter_token_latency_sum"),
        itl_count=values.get("inter_token_latency_count"),
        ttft_seconds_total=values.get("ttft_seconds_total"),
        sent_at=sent_at,
    )


def _histogram(
    field: str, values: dict[str, float], buckets: dict[str, dict[float, float]]
) -> EngineHistogram | None:
    return histogram_of(
        buckets.get(field, {}), values.get(f"{field}_sum"), values.get(f"{field}_count")
    )


def _add_histogram(
    name: str,
    labels: dict[str, str],
    value: float,
    values: dict[str, float],
    buckets: dict[str, dict[float, float]],
) -> None:
    """Add one sample of a histogram (a bucket, its sum or its count) to the totals over the
    engine's label sets (a data-parallel vLLM's ranks). The text's TYPE lines are dropped
    before parsing, so each sample is read by its own name."""
    base, _, part = name.rpartition("_")
    field = _HISTOGRAMS.get(base)
    if field is None:
        return  # a counter's `_created`, or a histogram's
    if part == "bucket":
        le = float(labels["le"])
        into = buckets.setdefault(field, {})
        into[le] = into.get(le, 0.0) + value
    elif part in ("sum", "count"):
        key = f"{field}_{part}"
        values[key] = values.get(key, 0.0) + value


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _int_label(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None  # vLLM writes "None" for unset cache settings
