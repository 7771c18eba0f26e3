"""The `llmd tune` verb: its flags, the live display, and the table, JSON and plot at the end
(the refusal to share the GPU with a serving llmd is llmd/tune/serving.py)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from llmd import exitcodes
from llmd.arguments import checked, positive, positive_count, positive_seconds
from llmd.bench.scenarios import SCENARIOS
from llmd.errors import TuneError
from llmd.releases.store import DEFAULT_STATE_DIR
from llmd.tune.settings import parse_max_num_seqs

T = TypeVar("T")

EPILOG = """For each --max-num-seqs value tune boots the engine (--engine NAME: that engine of the
config, with its own GPUs and args) alone with it (on a private socket),
runs the `llmd bench` scenario with as many users as seats (or --concurrency), and records TTFT
p50/p95, tokens/s, peak KV cache, peak GPU memory (NVML), errors and timeouts, and a verdict:
stable, near full (KV >= 90% or GPU memory >= 95%), timeouts (over 1% failed). The recommendation
is the setting with the most tokens/s whose TTFT p95 is within the SLO and that had no timeouts;
its engine args are printed and written to the JSON (put them in engine.args), and with
--release NAME recorded as a release (`llmd release show NAME`; deploying it through the smoke
gate comes with `llmd deploy`). Scenario G (a shared system prompt) runs every setting with
prefix caching on and off.

Beside an llmd serving on --runtime-dir, the daemon's copy of the engine must take no requests:
drain it first (`llmd drain --engine NAME --wait`), or pass --sharing drain to have tune drain
it and every engine on its GPUs for the run and resume them after. With --sharing keep (the
default) engines on its GPUs serve on beside it; engines on other GPUs always do. A drained
engine keeps its GPU memory: the tuned one must fit beside it, or stop llmd for the run.

With --variants FILE tune boots the engine once per engine-argument set of FILE instead (a
KV cache dtype, a quantized checkpoint, ...), asks each the golden prompts greedily, runs the
same load against each, and reports throughput, TTFT and how far each one's answers drift
from the first set's (token agreement).

examples:
  llmd tune --config /etc/llmd/llmd.toml --slo-ttft-p95-ms 500 --output tune.json
  llmd tune --config /etc/llmd/llmd.toml --variants variants.toml --concurrency 16 \\
      --slo-ttft-p95-ms 500 --output variants.json
  llmd tune --config etc/llmd-multi.toml --engine small-a --sharing drain \\
      --slo-ttft-p95-ms 500 --output small-a.json
  llmd tune --config etc/demo.toml --max-num-seqs 4,16,64 --duration 20 --scenario E \\
      --slo-ttft-p95-ms 300 --output docs/tune/demo.json
  journalctl -u llmd -o cat > traffic.log
  llmd tune --config /etc/llmd/llmd.toml --from-traffic traffic.log --slo-ttft-p95-ms 800 \\
      --output tune.json
"""


def add_parser(verbs: Any) -> None:
    """Add `tune` to the `llmd` subparsers `verbs`."""
    tune = verbs.add_parser(
        "tune",
        help="find the engine's --max-num-seqs: boot it per setting, load it, recommend args",
        description="Tune the engine the seeds' way: raise --max-num-seqs step by step, run the "
        "same load at each step, and recommend the setting with the most throughput whose TTFT "
        "p95 stays within the SLO.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tune.add_argument("--config", help="config file (default $LLMD_CONFIG, /etc/llmd/llmd.toml)")
    tune.add_argument(
        "--engine",
        metavar="NAME",
        help="the engine to tune, with its own GPUs and args (needed when the config has "
        "several; default: its only one)",
    )
    tune.add_argument(
        "--sharing",
        choices=("keep", "drain"),
        default="keep",
        help="a running llmd's engines on the tuned engine's GPUs: keep serving beside it "
        "(keep, the default: its own copy must be drained already), or be drained by tune "
        "for the run and resumed after (drain)",
    )
    tune.add_argument(
        "--runtime-dir", help="where a running llmd would answer (default: server.runtime_dir)"
    )
    tune.add_argument(
        "--slo-ttft-p95-ms", metavar="MS", type=positive, required=True, help="TTFT p95 bound"
    )
    tune.add_argument(
        "--scenario",
        default="B",
        type=str.upper,
        choices=[name for name in SCENARIOS if not SCENARIOS[name].single],
        help="the bench scenario to load each setting with (B)",
    )
    tune.add_argument(
        "--max-num-seqs",
        type=checked(lambda text, _: parse_max_num_seqs(text), "--max-num-seqs"),
        metavar="LIST",
        help="settings to try, e.g. 8,16,32 (8,16,32,64)",
    )
    tune.add_argument(
        "--concurrency",
        metavar="N",
        type=positive_count,
        help="users at every step (default: the setting)",
    )
    tune.add_argument(
        "--duration",
        metavar="S",
        type=positive_seconds,
        default=30.0,
        help="seconds of load per step (30)",
    )
    tune.add_argument(
        "--max-requests",
        metavar="N",
        type=positive_count,
        default=10_000,
        help="cap per step (10000)",
    )
    tune.add_argument(
        "--timeout",
        metavar="S",
        type=positive_seconds,
        default=120.0,
        help="per request, seconds (120)",
    )
    tune.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the prompts, their lengths and the bursts (0): the same seed, the same load",
    )
    tune.add_argument(
        "--from-traffic",
        metavar="FILE",
        help="lengths from llmd's request log (journalctl -u llmd -o cat; '-' stdin) instead of "
        "the scenario's; proposes --max-model-len from their 99th percentile (a line that is "
        "not UTF-8 is skipped, and counted on stderr)",
    )
    tune.add_argument("--output", metavar="FILE", type=Path, required=True, help="JSON figures")
    tune.add_argument(
        "--release",
        metavar="NAME",
        help="record the recommended engine args as release NAME (see `llmd release`)",
    )
    tune.add_argument(
        "--state-dir",
        default=str(DEFAULT_STATE_DIR),
        help=f"where --release writes (default {DEFAULT_STATE_DIR})",
    )
    tune.add_argument(
        "--variants",
        metavar="FILE",
        type=Path,
        help="compare the engine-argument sets of this TOML file ([[variants]] name, args, "
        "model) on the same load (--concurrency users, 8 by default): throughput, TTFT, and "
        "each one's greedy answers to the golden prompts against the first's (token "
        "agreement), instead of the --max-num-seqs sweep",
    )
    tune.add_argument("--plot", metavar="FILE", type=Path, help="PNG (default: --output .png)")
    tune.add_argument("--quiet", action="store_true", help="no progress display")
    tune.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the tune the flags describe: 0 done, 1 an engine failed to boot or serve, llmd serves
    it, or the release could not be recorded (or there was no recommendation to record), 64 a
    usage error (an engine the config does not have, or none named where it has several), 78
    a bad config."""
    from llmd.config import config_path, load_config
    from llmd.errors import BenchError, ConfigError, ReleaseError, TargetUnavailable, TuneError
    from llmd.tune.release import check_release, record_release

    try:
        config = load_config(config_path(args.config))
    except ConfigError as exc:
        print(f"llmd tune: {exc}", file=sys.stderr)
        return exitcodes.CONFIG
    try:
        name = engine_to_tune(config.engine_tables, args.engine, config.source)
    except TuneError as exc:
        print(f"llmd tune: {exc} (see `llmd tune --help`)", file=sys.stderr)
        return exitcodes.USAGE
    if args.variants is not None:
        from llmd.tune.variants_command import run_variants_command

        return run_variants_command(args, config, name)
    try:
        options = _options(args, config, name)
        if args.release:
            check_release(Path(args.state_dir), args.release)
        report = _run_beside_llmd(options, args)
    except TargetUnavailable as exc:  # the engine tune booted did not serve the load
        print(f"llmd tune: {exc}", file=sys.stderr)
        return exitcodes.FAILURE
    except BenchError as exc:
        print(f"llmd tune: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    except (TuneError, ReleaseError) as exc:
        print(f"llmd tune: {exc}", file=sys.stderr)
        return exitcodes.FAILURE
    _show(report, args)
    if not args.release:
        return 0
    if report.recommended_args is None:
        print(f"llmd tune: no release {args.release}: nothing to recommend", file=sys.stderr)
        return exitcodes.FAILURE
    try:
        release, path = record_release(
            Path(args.state_dir), args.release, name, options.table, report.recommended_args
        )
    except ReleaseError as exc:
        print(f"llmd tune: {exc}", file=sys.stderr)
        return exitcodes.FAILURE
    print(f"release {release.name} recorded in {path} with the recommended engine args")
    return 0


def engine_to_tune(engines: Mapping[str, Any], requested: str | None, source: str) -> str:
    """The name of the engine to tune: `requested` (--engine), else the config's only engine.
    Raises `TuneError` for a name the config (`source`) does not have, listing the ones it
    has, and for none named where it has several."""
    names = ", ".join(engines) or "none"
    if requested is None:
        if len(engines) == 1:
            return next(iter(engines))
        if not engines:
            raise TuneError(f"{source} has no engine to tune, only upstreams")
        raise TuneError(
            f"{source} has {len(engines)} engines ({names}): name the one to tune with "
            "--engine NAME"
        )
    if requested not in engines:
        raise TuneError(f"no engine {requested!r} in {source}: its engines are {names}")
    return requested


def _run_beside_llmd(options: Any, args: argparse.Namespace) -> Any:
    """Run the tune beside a serving llmd (`beside_llmd`). Raises `TuneError`."""
    from llmd.tune.serving import beside_llmd

    return beside_llmd(options.config, options.engine, args, lambda: _run(options, args.quiet))


def _options(args: argparse.Namespace, config: Any, name: str) -> Any:
    """TuneOptions for engine `name` from the flags. Raises `TuneError`, `BenchError`."""
    from llmd.bench.scenarios import scenario
    from llmd.errors import SizingError
    from llmd.sizing.model import load_shape
    from llmd.tune.runner import TuneOptions
    from llmd.tune.settings import parse_max_num_seqs, settings_for
    from llmd.tune.traffic import traffic_from

    chosen = scenario(args.scenario)
    traffic = None
    if args.from_traffic:
        try:
            positions = load_shape(Path(config.engine_tables[name].model)).max_positions
        except SizingError:
            positions = None
        traffic, skipped = traffic_from(args.from_traffic, positions)
        if skipped:
            print(f"llmd tune: --from-traffic {skipped}", file=sys.stderr)
        chosen = dataclasses.replace(chosen, mix=traffic.mix)
    settings = settings_for(parse_max_num_seqs(args.max_num_seqs), chosen.shared_prefix_tokens > 0)
    return TuneOptions(
        config=config,
        engine=name,
        settings=settings,
        scenario=chosen,
        slo_ttft_p95_ms=args.slo_ttft_p95_ms,
        concurrency=args.concurrency,
        duration_s=args.duration,
        max_requests=args.max_requests,
        timeout_s=args.timeout,
        seed=args.seed,
        traffic=traffic,
    )


def _run(options: Any, quiet: bool) -> Any:
    from rich.console import Console

    from llmd.gpu.nvml import nvml_reader
    from llmd.tune.display import TuneLiveDisplay
    from llmd.tune.runner import run_tune

    reader = nvml_reader()
    try:
        if quiet:
            return asyncio.run(run_tune(options, reader))
        with TuneLiveDisplay(Console(stderr=True)) as display:
            return asyncio.run(run_tune(options, reader, display))
    finally:
        reader.close()


def _show(report: Any, args: argparse.Namespace) -> None:
    from rich.console import Console

    from llmd.tune import report as tune_report

    console = Console()
    if not console.is_terminal:
        console = Console(width=180)  # a file or a pipe: keep each step on one line
    console.print(tune_report.render(report))
    tune_report.write_json(report, args.output, command=shlex.join(["llmd", *sys.argv[1:]]))
    print(f"figures: {args.output}")
    plot_path = args.plot or args.output.with_suffix(".png")
    try:
        tune_report.plot(report, plot_path)
        print(f"plot: {plot_path}")
    except ImportError:
        print("plot skipped: matplotlib is not installed (pip install 'llmd[bench]')")
