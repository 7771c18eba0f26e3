"""The KV block pool and the step timing model."""

from __future__ import annotations

import pytest

from llmd.engine.sim.kv import BlockPool, blocks_for
from llmd.engine.sim.timing import TimingModel


def test_blocks_for_rounds_up() -> None:
    """Tokens occupy whole blocks."""
    assert [blocks_for(n, 16) for n in (0, 1, 16, 17, 32)] == [0, 1, 1, 2, 2]


def test_pool_takes_only_what_is_free_and_reports_usage() -> None:
    """A take larger than the free blocks fails and changes nothing; usage is used/total."""
    pool = BlockPool(4, 16)
    assert pool.try_take(3) and not pool.try_take(2)
    assert pool.used == 3 and pool.usage == 0.75
    pool.give_back(3)
    assert pool.free == 4


def test_pool_refuses_to_return_more_than_taken() -> None:
    """Returning blocks never taken is a bug, caught at once."""
    with pytest.raises(ValueError):
        BlockPool(4, 16).give_back(1)


def test_step_time_grows_with_the_batch_but_throughput_grows_faster() -> None:
    """A bigger decode batch makes each step slower and the tokens per second higher."""
    timing = TimingModel()
    one, many = timing.step_s(0, 1), timing.step_s(0, 64)
    assert many > one
    assert 64 / many > 5 * (1 / one)


def test_each_prefilling_sequence_adds_its_own_cost() -> None:
    """The same prompt tokens split over more sequences make a slower step."""
    timing = TimingModel(prefill_seq_s=0.001)
    assert timing.step_s(64, 0, prefill_seqs=8) == pytest.approx(
        timing.step_s(64, 0, prefill_seqs=1) + 0.007
    )


def test_prefill_costs_per_token_and_empty_steps_cost_nothing() -> None:
    """Prefill time is proportional to prompt tokens; an empty step takes no time."""
    timing = TimingModel()
    assert timing.step_s(1000, 0) > timing.step_s(10, 0)
    assert timing.step_s(0, 0) == 0.0
    assert TimingModel.zero().step_s(1000, 64) == 0.0 and TimingModel.zero().is_zero
