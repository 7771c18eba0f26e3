"""The `llmd bench` verb: its flags, their translation into `BenchOptions`, and the run."""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmd import exitcodes
from llmd.arguments import (
    count,
    positive,
    positive_count,
    positive_seconds,
    seconds,
    share,
)
from llmd.bench.lengths import Component, Dist, LengthMix, load_pairs
from llmd.bench.scenarios import SCENARIOS, scenario
from llmd.errors import BenchError, TargetUnavailable

if TYPE_CHECKING:  # the runner pulls in aiohttp and prometheus_client: only when a bench runs
    from llmd.bench.runner import BenchOptions

EPILOG = (
    """scenarios:
"""
    + "\n".join(f"  {s.name}  {s.title}" for s in SCENARIOS.values())
    + """

length specs: N (fixed), LO-HI (uniform), lognormal:MEDIAN:SIGMA[:LO-HI]

examples:
  llmd bench --url http://127.0.0.1:8000 --scenario B --sweep 1,4,16 --duration 20
  llmd bench --url http://127.0.0.1:8000 --direct-uds /run/llmd/engine.sock \\
      --scenario E --max-concurrency 32 --output bench.json
  llmd bench --url http://127.0.0.1:8000 --scenario H --embed-model tiny-embed --sweep 2,4
"""
)


def add_parser(verbs: Any) -> None:
    """Add `bench` to the `llmd` subparsers `verbs`."""
    bench = verbs.add_parser(
        "bench",
        help="load-test an OpenAI-compatible server (llmd or vLLM) and find its operating point",
        description="Load-test an OpenAI-compatible server with realistic scenarios, sweep "
        "concurrency, and report latency, throughput and the operating point.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = bench.add_argument_group("targets")
    where.add_argument("--url", required=True, help="http://HOST:PORT or unix:/path.sock")
    where.add_argument("--direct", metavar="URL", help="the same engine straight (side by side)")
    where.add_argument("--direct-uds", metavar="PATH", help="as --direct unix:PATH (engine.sock)")
    where.add_argument(
        "--metrics-url",
        metavar="URL",
        help="Prometheus endpoint with vllm:* gauges (default: the direct target, else --url)",
    )
    where.add_argument(
        "--metrics-interval",
        metavar="S",
        type=positive_seconds,
        default=0.5,
        help="seconds between scrapes (0.5)",
    )
    where.add_argument("--model", help="model name (default: the first of /v1/models)")
    where.add_argument(
        "--tokenizer",
        metavar="DIR",
        type=Path,
        help="model dir with tokenizer.json (exact "
        "prompt lengths; default: the model's root when it is local)",
    )
    where.add_argument(
        "--embed-model",
        metavar="NAME",
        help="H: the model its embeddings go to (served by a pooling engine)",
    )
    where.add_argument(
        "--embed-direct", metavar="URL", help="H with --direct: that pooling engine straight"
    )
    where.add_argument("--embed-direct-uds", metavar="PATH", help="as --embed-direct unix:PATH")
    where.add_argument("--api-key", metavar="KEY", help="sent as Authorization: Bearer KEY")
    where.add_argument(
        "--priority", choices=("interactive", "normal", "batch"), help="sent as x-llmd-priority"
    )

    load = bench.add_argument_group("load")
    load.add_argument(
        "--scenario",
        default="B",
        type=str.upper,
        choices=list(SCENARIOS),
        help="the load's shape (listed below; default B)",
    )
    load.add_argument(
        "--duration", metavar="S", type=positive_seconds, default=30.0, help="seconds per step (30)"
    )
    load.add_argument(
        "--max-requests",
        metavar="N",
        type=positive_count,
        default=10_000,
        help="cap per step (10000)",
    )
    load.add_argument("--sweep", metavar="C,C,...", help="concurrency steps, e.g. 1,2,4,8")
    load.add_argument(
        "--max-concurrency",
        metavar="N",
        type=positive_count,
        help="sweep 1, 2, 4, ... N (default: 1)",
    )
    load.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the prompts, their lengths and the bursts (0): the same seed, the same load",
    )
    load.add_argument(
        "--timeout",
        metavar="S",
        type=positive_seconds,
        default=300.0,
        help="per request, seconds (300)",
    )
    load.add_argument(
        "--warmup", metavar="N", type=count, default=2, help="unmeasured requests per target (2)"
    )
    load.add_argument(
        "--lengths", metavar="FILE", type=Path, help="JSONL of prompt_tokens/output_tokens pairs"
    )
    load.add_argument("--prompt-tokens", metavar="SPEC", help="replace the scenario's prompts")
    load.add_argument("--output-tokens", metavar="SPEC", help="replace the scenario's outputs")
    load.add_argument(
        "--think", metavar="S", type=seconds, help="E/F: mean think time between requests, s"
    )
    load.add_argument(
        "--burst-every", metavar="S", type=seconds, help="E/F: mean seconds between bursts"
    )
    load.add_argument(
        "--disconnect-share", metavar="P", type=share, help="F: share of requests cut (0.25)"
    )
    load.add_argument(
        "--embed-users", metavar="N", type=positive_count, help="H: indexers sending embeddings (4)"
    )
    load.add_argument(
        "--embed-batch", metavar="N", type=positive_count, help="H: documents per request (8)"
    )
    load.add_argument(
        "--leave-share", metavar="P", type=share, help="I: share of the users who hang up (0.5)"
    )
    load.add_argument(
        "--pushers", metavar="N", type=positive_count, help="J: the over-quota tenant's users (8)"
    )
    where.add_argument(
        "--pusher-api-key",
        metavar="KEY",
        help="J: the over-quota tenant's key (default: --api-key's)",
    )

    out = bench.add_argument_group("results")
    out.add_argument(
        "--slo-ttft-p95-ms",
        metavar="MS",
        type=positive,
        default=1000.0,
        help="TTFT p95 bound for the operating point (1000)",
    )
    out.add_argument("--output", metavar="FILE", type=Path, help="write all figures as JSON here")
    out.add_argument(
        "--plot", metavar="FILE", type=Path, help="PNG plots (default: --output with .png)"
    )
    out.add_argument("--quiet", action="store_true", help="no progress bar")
    bench.set_defaults(func=run)


def concurrencies(sweep: str | None, max_concurrency: int | None) -> tuple[int, ...]:
    """The sweep's steps from `--sweep 1,2,4` or `--max-concurrency N` (powers of two up to N,
    and N itself). Raises `BenchError`."""
    if sweep and max_concurrency:
        raise BenchError("give --sweep or --max-concurrency, not both")
    if max_concurrency is not None:
        if max_concurrency < 1:
            raise BenchError(f"--max-concurrency {max_concurrency}: expected >= 1")
        steps = [1]
        while steps[-1] * 2 <= max_concurrency:
            steps.append(steps[-1] * 2)
        if steps[-1] != max_concurrency:
            steps.append(max_concurrency)
        return tuple(steps)
    if not sweep:
        return (1,)
    try:
        values = tuple(int(v) for v in sweep.split(","))
    except ValueError:
        raise BenchError(f"--sweep {sweep!r}: expected comma-separated integers") from None
    if any(v < 1 for v in values):
        raise BenchError(f"--sweep {sweep!r}: concurrency must be >= 1")
    return tuple(sorted(set(values)))


def length_mix(
    lengths: Path | None, prompt: str | None, output: str | None, base: LengthMix
) -> LengthMix | None:
    """The mix replacing the scenario's, or None to keep it. Raises `BenchError`."""
    if lengths is not None:
        if prompt or output:
            raise BenchError(
                "--lengths replaces both lengths: drop --prompt-tokens/--output-tokens"
            )
        return LengthMix(pairs=load_pairs(lengths))
    if not (prompt or output):
        return None
    components = tuple(
        Component(
            c.name,
            c.weight,
            Dist.parse(prompt) if prompt else c.prompt,
            Dist.parse(output) if output else c.output,
        )
        for c in base.components
    )
    return LengthMix(components=components)


def options_from(args: argparse.Namespace) -> BenchOptions:
    """`BenchOptions` from the parsed flags. Raises `BenchError`."""
    from llmd.bench.runner import BenchOptions

    base = scenario(args.scenario)
    chosen = scenario(
        args.scenario,
        mix=length_mix(args.lengths, args.prompt_tokens, args.output_tokens, base.mix),
        think_s=args.think,
        burst_every_s=args.burst_every,
        disconnect_share=args.disconnect_share,
        embed_users=args.embed_users,
        embed_batch=args.embed_batch,
        leave_share=args.leave_share,
        pushers=args.pushers,
    )
    direct = _either(args.direct, args.direct_uds, "--direct")
    embed_direct = _either(args.embed_direct, args.embed_direct_uds, "--embed-direct")
    return BenchOptions(
        url=args.url,
        scenario=chosen,
        concurrencies=concurrencies(args.sweep, args.max_concurrency),
        duration_s=args.duration,
        max_requests=args.max_requests,
        seed=args.seed,
        timeout_s=args.timeout,
        slo_ttft_p95_ms=args.slo_ttft_p95_ms,
        direct_url=direct,
        metrics_url=args.metrics_url,
        model=args.model,
        tokenizer=args.tokenizer,
        warmup=args.warmup,
        api_key=args.api_key,
        priority=args.priority,
        metrics_interval_s=args.metrics_interval,
        embed_model=args.embed_model,
        embed_direct_url=embed_direct,
        pusher_api_key=args.pusher_api_key,
    )


def _either(url: str | None, uds: str | None, flag: str) -> str | None:
    """The target of `flag URL` or `flag-uds PATH` (as unix:PATH). Raises `BenchError` for
    both."""
    if url and uds:
        raise BenchError(f"give {flag} or {flag}-uds, not both")
    return url or (f"unix:{uds}" if uds else None)


def run(args: argparse.Namespace) -> int:
    """Run the bench the flags describe; 0 on a finished run, 64 (EX_USAGE) on a usage error, 69
    (EX_UNAVAILABLE) when the target does not answer as an engine."""
    from rich.console import Console

    from llmd.bench import report
    from llmd.bench.display import LiveDisplay
    from llmd.bench.runner import run_bench

    try:
        options = options_from(args)
        if args.quiet:
            result = asyncio.run(run_bench(options))
        else:
            with LiveDisplay(Console(stderr=True)) as display:
                result = asyncio.run(run_bench(options, display))
    except BenchError as exc:
        print(f"llmd bench: {exc}", file=sys.stderr)
        unavailable = isinstance(exc, TargetUnavailable)
        return exitcodes.UNAVAILABLE if unavailable else exitcodes.USAGE
    console = Console()
    if not console.is_terminal:
        console = Console(width=180)  # a file or a pipe: keep each step on one line
    console.print(report.render(result))
    if args.output:
        report.write_json(result, args.output, command=shlex.join(["llmd", *sys.argv[1:]]))
        print(f"figures: {args.output}")
    plot_path = args.plot or (args.output.with_suffix(".png") if args.output else None)
    if plot_path is not None and not result.options.scenario.single:
        try:
            report.plot(result, plot_path)
            print(f"plot: {plot_path}")
        except ImportError:
            print("plot skipped: matplotlib is not installed (pip install 'llmd[bench]')")
    return 0
