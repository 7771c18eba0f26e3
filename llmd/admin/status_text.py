"""`llmd status`'s human form of a Status snapshot: a compact, aligned summary, with a row per
backend and per model when llmd has several, and per endpoint that had requests."""

from __future__ import annotations

from typing import Any


def format_status(status: dict[str, Any]) -> str:
    """The human form of a Status snapshot (as JSON-decoded): a compact, aligned summary.

    Sections a daemon did not send (an older llmd) are left out.
    """
    engine = status["engine"]
    uptime = engine["uptime_s"]
    last_exit = (
        f"{engine['last_exit_reason']} ({engine['last_exit_detail']})"
        if engine["last_exit_reason"]
        else "-"
    )
    rows = [
        (
            "engine",
            f"{engine_state(engine)}  pid {engine['pid'] or '-'}"
            f"  {engine['version'] or ''}".rstrip(),
        ),
        ("model", f"{engine['model']}  max_model_len {engine['max_model_len'] or '-'}"),
        ("uptime", _duration(uptime) if uptime is not None else "-"),
        ("restarts", str(engine["restarts"])),
        ("last exit", last_exit),
        *[
            ("diagnosis", f"{f['message']}; hint: {f['hint']}")
            for f in (engine.get("diagnosis") or ())[:1]
            if f["severity"] == "error"
        ],
        (
            "llmd",
            f"{status['llmd_version']} on {status['listen']}  in flight {status['in_flight']}"
            f"  queued {status.get('queued', 0)}  {admitting(status)}",
        ),
    ]
    if "kv_cache" in status:
        rows += _load_rows(status)
    rows += _fleet_rows(status)
    rows += endpoint_rows(status)
    rows += release_rows(status)
    if status.get("guard"):
        rows.append(("slo guard", guard_line(status["guard"])))
    if status.get("device_hold"):
        rows.append(("dev. hold", device_hold_line(status["device_hold"])))
    return "\n".join(f"{name:<10} {value}" for name, value in rows)


def engine_state(entry: dict[str, Any]) -> str:
    """A backend's state, and `drained` when an operator drained it (`serving, drained`: it
    runs, and takes no new request until `llmd resume --engine NAME`)."""
    return f"{entry['state']}, drained" if entry.get("draining") else entry["state"]


def drained_backends(status: dict[str, Any]) -> list[str]:
    """The backends an operator drained by name (`llmd drain --engine NAME`)."""
    return [entry["name"] for entry in status.get("engines") or [] if entry.get("draining")]


def admitting(status: dict[str, Any]) -> str:
    """Whether llmd admits: `draining yes` (llmd drained), `draining no`, or `draining no,
    drained: main` when backends were drained by name (with every backend drained, no
    request is served: `admitting nothing (drained: main)`)."""
    if status["draining"]:
        return "draining yes"
    drained = drained_backends(status)
    if not drained:
        return "draining no"
    if len(drained) == len(status.get("engines") or ()):
        return f"admitting nothing (drained: {', '.join(drained)})"
    return f"draining no, drained: {', '.join(drained)}"


def _fleet_rows(status: dict[str, Any]) -> list[tuple[str, str]]:
    """A row per backend and per model, when llmd has more than one backend (with one, the
    rows above say it all)."""
    backends = status.get("engines") or []
    if len(backends) < 2:
        return []
    width = max(len(entry["name"]) for entry in backends)
    rows = []
    for entry in backends:
        if entry["kind"] == "upstream":
            what = f"upstream {entry['url']}  breaker {entry['breaker'] or '-'}"
        else:
            gpus = ",".join(entry["gpus"]) or "-"
            what = f"pid {entry['pid'] or '-'}  gpus {gpus}  restarts {entry['restarts']}"
        rows.append(
            (
                "backend",
                f"{entry['name']:<{width}}  {engine_state(entry)}  model {entry['model']}"
                f"  {what}  KV {_percent(entry['kv_usage'])}  running {_num(entry['running'])}"
                f"  waiting {_num(entry['waiting'])}  in flight {entry['in_flight']}",
            )
        )
    for model in status.get("models") or []:
        available = "available" if model["available"] else "UNAVAILABLE"
        rows.append(("model", f"{model['name']}  {available}  on {', '.join(model['backends'])}"))
    return rows


def endpoint_rows(status: dict[str, Any]) -> list[tuple[str, str]]:
    """A row per endpoint that had a request since llmd started (`chat  in flight 3  queued 1
    2.5 req/s  requests 120 (answered 118, rejected 2)`): live now, finished per second over
    the last minute, ended since start with each way but answered that is not 0."""
    endpoints = status.get("endpoints") or []
    width = max((len(entry["name"]) for entry in endpoints), default=0)
    rows = []
    for entry in endpoints:
        ends = ", ".join(
            f"{key} {entry[key]}"
            for key in ("answered", "rejected", "cancelled", "aborted", "errors")
            if entry[key]
        )
        rows.append(
            (
                "endpoint",
                f"{entry['name']:<{width}}  in flight {entry['in_flight']}  queued "
                f"{entry['queued']}  {entry['requests_per_s']:.1f} req/s  requests "
                f"{entry['requests']}" + (f" ({ends})" if ends else ""),
            )
        )
    return rows


def release_rows(status: dict[str, Any]) -> list[tuple[str, str]]:
    """A row with the release of each engine that runs a recorded one (and why, when llmd
    chose it at start-up), and a row per deploy
    (the latest of each engine): `main r1 -> r2  canary  step 2/3 share 50%  adopting: why`."""
    releases = [
        f"{entry['name']} {entry['release']}"
        + (f" ({entry['release_note']})" if entry.get("release_note") else "")
        for entry in status.get("engines") or []
        if entry.get("release")
    ]
    rows = [("release", "  ".join(releases))] if releases else []
    for deploy in status.get("deploys") or []:
        where = ""
        if deploy["strategy"] == "canary" and deploy.get("step"):
            where = f"  step {deploy['step']}/{len(deploy['steps'])} share {deploy['share']}%"
        reason = f": {deploy['reason']}" if deploy.get("reason") else ""
        rows.append(
            (
                "deploy",
                f"{deploy['engine']} {deploy['old']} -> {deploy['new']}  {deploy['strategy']}"
                f"{where}  {deploy['phase']}{reason}",
            )
        )
    return rows


def _load_rows(status: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows for the engine load, GPUs, queues, latency, throughput and counts."""
    engine, kv = status["engine"], status["kv_cache"]
    capacity = f" of {kv['capacity_tokens']:,} tokens" if kv["capacity_tokens"] else ""
    rows = [
        (
            "load",
            f"KV {_percent(kv['usage'])}{capacity}  running {_num(engine['running'])}"
            f"  waiting {_num(engine['waiting'])}",
        )
    ]
    gpus = status["gpus"]
    for gpu in gpus["devices"]:
        memory = (
            f"{gpu['memory_used_bytes'] / 2**30:.1f}/{gpu['memory_total_bytes'] / 2**30:.1f} GiB"
            if gpu["memory_total_bytes"]
            else "- GiB"
        )
        rows.append(
            (
                f"gpu {gpu['index']}",
                f"{gpu['name']}  {_percent(gpu['utilization'])}  {memory}"
                f"  {_num(gpu['temperature_c'])} C  {_num(gpu['power_w'])} W",
            )
        )
    if not gpus["devices"]:
        rows.append(("gpu", f"none ({gpus['reason']})"))
    rows.append(
        (
            "queues",
            "  ".join(
                f"{q['name']} {q['depth']}"
                + (f" (oldest {q['oldest_wait_s']:.1f}s)" if q["oldest_wait_s"] else "")
                for q in status["queues"]
            ),
        )
    )
    phases = {"queued": 0, "prefill": 0, "decode": 0}
    for sequence in status["sequences"]:
        phases[sequence["phase"]] = phases.get(sequence["phase"], 0) + 1
    rows.append(("sequences", "  ".join(f"{name} {n}" for name, n in phases.items())))
    window = status["latency"]["last_1m"]
    rows.append(
        (
            "latency 1m",
            "  ".join(
                f"{label} {_ms(window[key]['p50'])}/{_ms(window[key]['p95'])}"
                f"/{_ms(window[key]['p99'])}"
                for key, label in (("queue_wait", "queue"), ("ttft", "TTFT"), ("e2e", "e2e"))
            )
            + "  (p50/p95/p99 ms)",
        )
    )
    rows += engine_latency_rows(status)
    rate = status["throughput"]
    engine_rate = rate["engine_generation_tokens_per_s"]
    rows.append(
        (
            "throughput",
            f"{rate['requests_per_s']:.1f} req/s  {rate['output_tokens_per_s']:.0f} tok/s out"
            + (f"  engine {engine_rate:.0f} tok/s" if engine_rate is not None else ""),
        )
    )
    counts = status["counts"]
    line = f"requests {counts['requests']}  answered {counts['answered']}"
    for name, key in (
        ("rejected", "rejections"),
        ("cancelled", "cancellations"),
        ("aborted", "aborted"),
        ("errors", "errors"),
    ):
        by_label = counts[key]
        labels = ", ".join(f"{k} {v}" for k, v in sorted(by_label.items()) if v)
        line += f"  {name} {sum(by_label.values())}" + (f" ({labels})" if labels else "")
    rows.append(("counts", line + f"  timeouts {counts['timeouts']}"))
    return rows


def engine_latency_rows(status: dict[str, Any]) -> list[tuple[str, str]]:
    """A row per backend that reports the engine's side of latency (its last minute): queue,
    prefill and decode mean/p95 and prefill's share of the two, inter-token mean/p95,
    preemptions per second (and since the engine started), the prefix cache's hit ratio (and
    since start). The backend's name leads when there are several."""
    backends = [entry for entry in status.get("engines") or [] if entry.get("latency")]
    rows = []
    for entry in backends:
        latency = entry["latency"]
        times = "  ".join(
            f"{label} {_ms(latency[key]['mean_s'])}/{_ms(latency[key]['p95_s'])}"
            for key, label in (
                ("queue", "queue"),
                ("prefill", "prefill"),
                ("decode", "decode"),
                ("inter_token", "ITL"),
            )
        )
        total, rate = latency["preemptions"], latency["preemptions_per_s"]
        since = f" ({total} since start)" if total is not None else ""
        hits = _percent(latency["prefix_cache_hit_ratio"])
        name = f"{entry['name']}: " if len(backends) > 1 else ""
        rows.append(
            (
                "engine 1m",
                f"{name}{times} (mean/p95 ms)  prefill share "
                f"{_percent(latency['prefill_share'])}  preemptions "
                f"{'-' if rate is None else f'{rate:.1f}'}/s{since}  prefix cache hits {hits}"
                f" (since start {_percent(latency['prefix_cache_hit_ratio_total'])})",
            )
        )
    return rows


def guard_line(guard: dict[str, Any]) -> str:
    """The SLO guard in one line: level and name, mode, why, and each budgeted class's TTFT
    p95 against its budget (e.g. `level 1 hold_batch (auto, 12s): interactive TTFT p95 ...;
    interactive 1850/1500 ms (40 requests)`)."""
    mode = guard["mode"] if guard["mode"] != "auto" else f"auto, {guard['since_s']:.0f}s"
    classes = "  ".join(
        f"{row['name']} {_ms(row['p95_s'])}/{_ms(row['budget_s'])} ms ({row['samples']} requests)"
        for row in guard["classes"]
        if row["budget_s"] is not None
    )
    reason = f": {guard['reason']}" if guard["reason"] else ""
    budgets = f"; TTFT p95/budget {classes}" if classes else "; no class has a budget"
    return f"level {guard['level']} {guard['name']} ({mode}){reason}{budgets}"


def device_hold_line(hold: dict[str, Any]) -> str:
    """The device hold in one line: the engines held, limited or stopped now and why (or
    none), the groups, the bound, the batch requests held so far and, once the device pause
    has stopped an engine, the pauses and their time (e.g. `holding batch off embed: an
    interactive request waits for its first token on chat; embed stopped (device pause);
    groups chat+embed; bound 300 ms; 12 held; 3 pauses, 0.4 s stopped`, or `batch 1 at a time
    on embed: interactive work on chat; ...`)."""
    parts = [
        f"holding batch off {name}: {why}"
        for name, why in zip(hold["held"], hold["reasons"], strict=True)
    ]
    parts += [
        f"batch {hold['batch_seats']} at a time on {name}: {why}"
        for name, why in zip(hold["limited"], hold["limit_reasons"], strict=True)
    ]
    parts += [f"{name} stopped (device pause)" for name in hold.get("paused", ())]
    held = "; ".join(parts)
    groups = ", ".join("+".join(group) for group in hold["groups"])
    line = (
        f"{held or 'nothing held'}; groups {groups}; bound {hold['bound_ms']:.0f} ms; "
        f"{hold['holds']} held"
    )
    pauses = hold.get("pauses", 0)
    if pauses:
        line += f"; {pauses} pause{'s' if pauses != 1 else ''}, {hold['paused_s']:.1f} s stopped"
    return line


def _percent(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio * 100:.0f}%"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f}"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes}m {secs}s" if hours else f"{minutes}m {secs}s"
