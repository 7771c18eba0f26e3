"""Parsing of per-request fault specs (x-sim-fault header, sim_fault body field)."""

from __future__ import annotations

import pytest

from llmd.engine.sim.faults import FaultSpecError, RequestFault


def test_parse_combined_spec() -> None:
    """Several comma-separated faults arm together."""
    fault = RequestFault.parse("die-after:3, delay:0.5,error:503,empty")
    assert fault == RequestFault(die_after=3, delay_s=0.5, error_status=503, empty=True)


def test_empty_spec_means_no_fault() -> None:
    """An empty header arms nothing."""
    assert RequestFault.parse("") == RequestFault()


@pytest.mark.parametrize("spec", ["explode", "die-after:x", "error:200", "delay:-1", "hang:1"])
def test_bad_specs_are_refused(spec: str) -> None:
    """Unknown faults and bad values raise FaultSpecError naming the part."""
    with pytest.raises(FaultSpecError):
        RequestFault.parse(spec)


def test_header_faults_add_to_the_flag_faults() -> None:
    """A request's own faults are merged over --fault-request's."""
    base = RequestFault.parse("delay:1")
    assert base.merged(RequestFault.parse("hang")) == RequestFault(delay_s=1.0, hang=True)
