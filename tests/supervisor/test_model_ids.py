"""model_ids: the names an engine's GET /v1/models lists (each served name, then adapters)."""

from __future__ import annotations

from llmd.supervisor.state import model_ids


def test_model_ids_reads_an_openai_listing() -> None:
    """The ids of a model list, in order; junk gives none."""
    assert model_ids({"data": [{"id": "a"}, {"id": "x", "parent": "a"}, {"no": 1}]}) == ("a", "x")
    assert model_ids({"data": "nope"}) == () and model_ids(None) == ()
