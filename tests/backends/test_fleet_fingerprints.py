"""Which pools llmd may ask for a stream's usage: those whose every backend is an engine whose
fingerprint its warm-up gave (llmd/endpoints/stream_usage.py)."""

from __future__ import annotations

from pathlib import Path

from llmd.backends.fleet import Fleet
from llmd.config.backends import EngineConfig, UpstreamConfig
from llmd.runtime import RuntimePaths

MEMBER = b'"system_fingerprint":"vllm-0.32.0-4d036293"'


def test_a_pool_is_fingerprinted_when_every_engine_of_it_was_read() -> None:
    """An engine before its warm-up, or a pool with an upstream in it, is not; an engine that
    stamps none (b"") is."""
    fleet = Fleet(RuntimePaths(Path("/nonexistent")))
    a = fleet.add_engine("a", EngineConfig(model="tiny"))
    b = fleet.add_engine("b", EngineConfig(model="tiny"))
    assert not fleet.fingerprinted("tiny") and not fleet.fingerprinted("absent")
    a.fingerprint = MEMBER
    assert not fleet.fingerprinted("tiny")
    b.fingerprint = b""
    assert fleet.fingerprinted("tiny") and fleet.fingerprint("a") == MEMBER
    fleet.add_upstream("lab", UpstreamConfig(url="http://127.0.0.1:1", models=("tiny",)))
    assert not fleet.fingerprinted("tiny") and fleet.fingerprint("lab") is None


def test_an_engine_that_streams_its_usage_anyway_is_not_asked() -> None:
    """--enable-force-include-usage: its streams carry the usage already (llmd counts it), and
    an ask would change the client's bytes; a reload without the flag asks again."""
    fleet = Fleet(RuntimePaths(Path("/nonexistent")))
    forced = EngineConfig(model="tiny", args=("--enable-force-include-usage",))
    fleet.add_engine("a", forced).fingerprint = MEMBER
    assert not fleet.fingerprinted("tiny")
    fleet.configure_engine("a", EngineConfig(model="tiny"))
    assert fleet.fingerprinted("tiny")
