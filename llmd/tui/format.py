"""How llmd-top writes figures from the snapshot: durations, ratios, sizes, rates. Display only:
the figures come from the daemon; a figure it does not know (null) shows as an en dash."""

from __future__ import annotations

MISSING = "\u2013"  # en dash


def duration(seconds: float | None) -> str:
    """850ms, 4.8s, 3m05s, 2h03m, 3d04h: at most 6 characters below 100 days."""
    if seconds is None:
        return MISSING
    if seconds < 0.9995:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 59.95:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def percent(ratio: float | None) -> str:
    """A 0..1 ratio as a whole percentage."""
    return MISSING if ratio is None else f"{ratio * 100:.0f}%"


def gib(size: int | None) -> str:
    """Bytes in GiB, one decimal."""
    return MISSING if size is None else f"{size / 2**30:.1f}"


def count(value: int | float | None) -> str:
    """An integer figure with thousands separators."""
    return MISSING if value is None else f"{value:,.0f}"


def rate(value: float | None) -> str:
    """A per-second rate: one decimal below 100, whole above."""
    if value is None:
        return MISSING
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def tokens(value: int | float | None) -> str:
    """A token figure in at most 5 characters: 950, 12.3k, 120k, 1.5M."""
    if value is None:
        return MISSING
    for scale, unit in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            scaled = value / scale
            return f"{scaled:.1f}{unit}" if scaled < 99.95 else f"{scaled:.0f}{unit}"
    return f"{value:.0f}"


def of(value: str, limit: str) -> str:
    """A figure against its limit: `4/8`."""
    return f"{value}/{limit}"


def limit(value: int | None) -> str:
    """A tenant limit: None is unlimited."""
    return "∞" if value is None else str(value)
