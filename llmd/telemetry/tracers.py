"""The tracing a config asks for (`tracing_for`): apart from llmd/telemetry/tracing.py so that
the OpenTelemetry exporter (llmd/telemetry/otel.py), built on that module's types, is imported
here and only when an endpoint is set."""

from __future__ import annotations

from llmd.errors import ConfigError
from llmd.telemetry.tracing import Tracing


def tracing_for(otlp_endpoint: str) -> Tracing:
    """The tracing `telemetry.otlp_endpoint` asks for: none for "" (OpenTelemetry is not
    imported), else spans exported to that OTLP/HTTP URL. Raises ConfigError when the
    OpenTelemetry SDK is not installed."""
    if not otlp_endpoint:
        return Tracing()
    try:
        from llmd.telemetry.otel import OtlpTracing
    except ImportError as exc:
        raise ConfigError(
            f"telemetry.otlp_endpoint = {otlp_endpoint!r} needs the OpenTelemetry SDK "
            f"({exc.name or exc} is not installed): pip install 'llmd[otel]'"
        ) from None
    return OtlpTracing.exporting_to(otlp_endpoint)
