"""A backend's load figures (sequences, fill) and pools by model name."""

from __future__ import annotations

from llmd.admission.capacity import EngineLoad
from llmd.routing.backend import Backend, BackendKind, group_pools


def backend(**figures: object) -> Backend:
    return Backend("a", BackendKind.ENGINE, ("m",), **figures)  # type: ignore[arg-type]


def test_sequences_take_the_larger_of_llmds_count_and_the_engines() -> None:
    """An upstream shared with other clients reports more than llmd sent; a fresh release
    shows in llmd's count before the next scrape."""
    assert backend(seats=8, in_flight=3).sequences == 3
    assert backend(seats=8, in_flight=3, engine=EngineLoad(running=5, waiting=2)).sequences == 7
    assert backend(seats=8, in_flight=9, engine=EngineLoad(running=5)).sequences == 9


def test_fill_is_the_larger_of_seat_and_kv_fill() -> None:
    """Few long requests fill the KV cache before the seats; many short ones the seats."""
    assert backend(seats=10, in_flight=5).fill == 0.5
    long = backend(seats=10, in_flight=2, engine=EngineLoad(running=2, kv_usage=0.8))
    assert long.fill == 0.8
    reserved = backend(
        seats=10, in_flight=2, reserved_tokens=900, engine=EngineLoad(running=2, kv_tokens=1000)
    )
    assert reserved.fill == 0.9
    assert backend(seats=4).one_request == 0.25


def test_available_needs_serving_and_a_reachable_breaker() -> None:
    """A backend takes requests only while serving and its breaker lets them through."""
    assert backend(seats=1).available
    assert not backend(seats=1, serving=False).available
    assert not backend(seats=1, reachable=False).available


def test_pools_group_backends_by_model_in_config_order() -> None:
    """A pool is every backend serving a name; an upstream serving two models is in both."""
    pools = group_pools(
        [("big", ["qwen-14b"]), ("small-a", ["qwen-1.5b"]), ("lab", ["llama-70b", "qwen-1.5b"]),
         ("small-b", ["qwen-1.5b"])]
    )  # fmt: skip
    assert pools == {
        "qwen-14b": ("big",),
        "qwen-1.5b": ("small-a", "lab", "small-b"),
        "llama-70b": ("lab",),
    }
    assert "gpt-4" not in pools
