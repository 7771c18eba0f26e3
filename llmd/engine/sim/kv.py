"""The KV cache as a pool of fixed-size blocks: sequences take blocks as they grow, free them all
when they finish, are aborted or are preempted (vLLM's paged attention, without prefix caching).
"""

from __future__ import annotations


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks needed to hold `tokens` tokens (ceiling division)."""
    return -(-tokens // block_size)


class BlockPool:
    """`num_blocks` blocks of `block_size` tokens; counts what is taken, never which ones."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("a block pool needs at least one block of at least one token")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.used = 0

    @property
    def free(self) -> int:
        return self.num_blocks - self.used

    @property
    def usage(self) -> float:
        """Fraction of blocks in use, 0..1 (vLLM's `kv_cache_usage_perc`, despite the name)."""
        return self.used / self.num_blocks

    def try_take(self, count: int) -> bool:
        """Take `count` blocks if that many are free; whether it did."""
        if count > self.free:
            return False
        self.used += count
        return True

    def give_back(self, count: int) -> None:
        """Return `count` blocks. Raises ValueError when more are returned than were taken."""
        if count > self.used:
            raise ValueError(f"returning {count} blocks but only {self.used} are in use")
        self.used -= count
