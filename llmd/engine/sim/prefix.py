"""Automatic prefix caching, as vLLM v1 does it: full blocks of prompt tokens are known by a hash
chained over their parent's, and a new request skips the prefill of its leading blocks that are
still cached (vllm/v1/core/kv_cache_utils.py `hash_block_tokens`, kv_cache_manager.py
`get_computed_blocks`, 0.32).
"""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Sequence


class PrefixCache:
    """The hashes of up to `capacity` cached full blocks of `block_size` tokens, least recently
    used first out. It counts blocks, not which KV pages hold them: the block pool still charges
    a hit's blocks to its request, so the simulator's KV usage stays conservative."""

    def __init__(self, block_size: int, capacity: int) -> None:
        self.block_size = block_size
        self.capacity = capacity
        self._blocks: collections.OrderedDict[bytes, None] = collections.OrderedDict()

    def _hashes(self, token_ids: Sequence[int]) -> list[bytes]:
        hashes, parent = [], b""
        for start in range(0, len(token_ids) - self.block_size + 1, self.block_size):
            block = token_ids[start : start + self.block_size]
            parent = hashlib.blake2b(parent + repr(tuple(block)).encode(), digest_size=16).digest()
            hashes.append(parent)
        return hashes

    def cached_tokens(self, prompt_ids: Sequence[int]) -> int:
        """Tokens of `prompt_ids` served from the cache: its leading cached full blocks, at most
        len - 1 tokens (vLLM always computes the last prompt token to sample from it)."""
        usable = self._hashes(prompt_ids[: max(0, len(prompt_ids) - 1)])
        hits = 0
        for digest in usable:
            if digest not in self._blocks:
                break
            self._blocks.move_to_end(digest)
            hits += 1
        return hits * self.block_size

    def insert(self, prompt_ids: Sequence[int]) -> None:
        """Remember every full block of a prompt whose prefill is done."""
        for digest in self._hashes(prompt_ids):
            self._blocks[digest] = None
            self._blocks.move_to_end(digest)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
