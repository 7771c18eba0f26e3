"""`llmd tune --variants FILE`: the flags' options, the run beside a serving llmd, the table
and the JSON (llmd/tune/variants.py runs it)."""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from pathlib import Path
from typing import Any

from llmd import exitcodes
from llmd.bench.scenarios import scenario
from llmd.config import Config
from llmd.errors import BenchError, ReleaseError, TargetUnavailable, TuneError
from llmd.releases.golden import load_golden
from llmd.tune.serving import beside_llmd
from llmd.tune.variants import VariantOptions, VariantReport, load_variants, run_variants

DEFAULT_CONCURRENCY = 8


def run_variants_command(args: argparse.Namespace, config: Config, name: str) -> int:
    """Run the variants run of the flags on engine `name`: 0 done, 1 an engine did not boot or
    serve, 64 a usage error (a flag of the sweep given with --variants, a bad file)."""
    for flag, given in (("--max-num-seqs", args.max_num_seqs), ("--release", args.release)):
        if given:
            print(f"llmd tune: {flag} and --variants do not go together", file=sys.stderr)
            return exitcodes.USAGE
    try:
        options = VariantOptions(
            config=config,
            engine=name,
            variants=load_variants(args.variants),
            scenario=scenario(args.scenario),
            slo_ttft_p95_ms=args.slo_ttft_p95_ms,
            golden=load_golden(config.release.golden_prompts),
            golden_max_tokens=config.release.golden_max_tokens,
            concurrency=args.concurrency or DEFAULT_CONCURRENCY,
            duration_s=args.duration,
            max_requests=args.max_requests,
            timeout_s=args.timeout,
            seed=args.seed,
        )
    except (TuneError, ReleaseError, BenchError) as exc:
        print(f"llmd tune: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    try:
        report = beside_llmd(config, name, args, lambda: _run(options, args.quiet))
    except (TargetUnavailable, TuneError) as exc:
        print(f"llmd tune: {exc}", file=sys.stderr)
        return exitcodes.FAILURE
    except BenchError as exc:
        print(f"llmd tune: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    _show(report, args.output)
    return 0


def _run(options: VariantOptions, quiet: bool) -> VariantReport:
    from rich.console import Console

    from llmd.tune.variants_report import VariantLiveDisplay

    if quiet:
        return asyncio.run(run_variants(options))
    with VariantLiveDisplay(Console(stderr=True)) as display:
        return asyncio.run(run_variants(options, display))


def _show(report: Any, output: Path) -> None:
    from rich.console import Console

    from llmd.tune import variants_report

    console = Console()
    if not console.is_terminal:
        console = Console(width=180)
    console.print(variants_report.render(report))
    variants_report.write_json(report, output, command=shlex.join(["llmd", *sys.argv[1:]]))
    print(f"figures: {output}")
