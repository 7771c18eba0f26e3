"""The ten load scenarios (A..J) and the seeded plan of each request they send.

Load is made by `concurrency` simulated users:

    A..D   a closed loop: a user sends its next request as soon as the last one ends
           (`concurrency` requests always in flight)
    E, F   a user thinks between requests for an exponential time (mean `think_s`), so arrivals
           across users are close to a Poisson stream; on top, bursts come at exponential
           intervals (mean `burst_every_s`) and wake every thinking user at once
    F      besides, a share of the requests stop reading mid-stream and close their
           connection, as a user who closes the tab
    G      every prompt starts with the same long system prompt, as chat apps send, so the
           engine's prefix cache can serve it
    H      interactive chat (a closed loop, `x-llmd-priority: interactive`) and, from half the
           step on, an embeddings burst beside it: a RAG app indexing short documents
           (`Indexing`), sent to another model (its pooling engine); the figure is the chat's
           TTFT during the burst against before it
    I      long streams in a closed loop; partway through the step a share of the users hang
           up mid-stream all at once (`Hangup`): how fast the engine stops their sequences,
           and what the users who stay see (TTFT, inter-token time) before and after
    J      short chats in a closed loop and, from half the step on, a tenant over its quota
           (`Pusher`: more requests at once than its limit, with its own API key) that waits
           the Retry-After of each 429 before it sends again: its 429s, the Retry-After it is
           given and honours, and the other tenants' TTFT before and while it pushes
"""

from __future__ import annotations

import dataclasses
import random

from llmd.bench.lengths import Dist, LengthMix, fit_context, mix_of
from llmd.errors import BenchError

SHORT = ("short", 1.0, "lognormal:64:0.5:16-256", "lognormal:64:0.5:16-256")
LONG_PROMPT = ("long_prompt", 1.0, "lognormal:768:0.25:256-4096", "lognormal:32:0.5:8-64")
LONG_OUTPUT = ("long_output", 1.0, "lognormal:32:0.5:8-64", "lognormal:512:0.3:256-2048")
# G: a chat app's request after its shared system prompt: a short question, a short answer.
QUESTION = ("question", 1.0, "lognormal:48:0.5:16-128", "lognormal:64:0.5:16-128")
SYSTEM_PROMPT_TOKENS = 512
# H: a chat turn, and the documents of a RAG index (chunks of a paragraph or so) embedded in
# batches, as indexers send them (LangChain's OpenAIEmbeddings sends up to its chunk_size).
CHAT_TURN = ("chat", 1.0, "lognormal:48:0.5:16-128", "lognormal:64:0.5:16-128")
DOCUMENT_TOKENS = "lognormal:96:0.4:32-256"


@dataclasses.dataclass(frozen=True)
class Indexing:
    """An indexing burst beside a scenario's chat (H): from `starts_at` (a share of the step's
    duration) to the step's end, `users` indexers each send, in a closed loop, one embeddings
    request of `batch` documents of `lengths` tokens each, with `x-llmd-priority: priority`
    (None: no header)."""

    users: int
    batch: int
    lengths: Dist
    starts_at: float = 0.5
    priority: str | None = "batch"


@dataclasses.dataclass(frozen=True)
class Hangup:
    """I: at `at` (a share of the step's duration) the first `share` of the users (at least
    one, and never all) hang up their stream at once and send nothing more."""

    share: float = 0.5
    at: float = 0.5

    def leavers(self, concurrency: int) -> int:
        """How many of `concurrency` users hang up."""
        return min(max(1, round(concurrency * self.share)), max(concurrency - 1, 1))


@dataclasses.dataclass(frozen=True)
class Pusher:
    """J: from `starts_at` (a share of the step's duration) to its end, `users` requests at
    once from one tenant (its own API key, `--pusher-api-key`), each sent again after the
    Retry-After of a 429, in a closed loop."""

    users: int = 8
    starts_at: float = 0.5


def _weighted(row: tuple[str, float, str, str], weight: float) -> tuple[str, float, str, str]:
    return (row[0], weight, row[2], row[3])


@dataclasses.dataclass(frozen=True)
class Scenario:
    """What a run sends: lengths, arrivals, disconnects. `single` (A) sends one request only.
    `shared_prefix_tokens`: every prompt starts with the same text of this many tokens, before
    its own part drawn from `mix` (G). `indexing`: embeddings sent beside (H), and `priority` the
    `x-llmd-priority` of the other requests (None: none sent). `hangup`: users who leave
    mid-stream at once (I); `pusher`: a tenant over its quota beside the others (J)."""

    name: str
    title: str
    mix: LengthMix
    think_s: float = 0.0
    burst_every_s: float = 0.0
    disconnect_share: float = 0.0
    single: bool = False
    shared_prefix_tokens: int = 0
    indexing: Indexing | None = None
    priority: str | None = None
    hangup: Hangup | None = None
    pusher: Pusher | None = None

    @property
    def open_arrivals(self) -> bool:
        """True when users think between requests (E, F)."""
        return self.think_s > 0


SCENARIOS: dict[str, Scenario] = {
    "A": Scenario(
        "A", "one request on a cold engine", mix_of([("single", 1.0, "64", "64")]), single=True
    ),
    "B": Scenario("B", "short prompt, short output, concurrent", mix_of([SHORT])),
    "C": Scenario("C", "long prompt, short output", mix_of([LONG_PROMPT])),
    "D": Scenario("D", "short prompt, long output", mix_of([LONG_OUTPUT])),
    "E": Scenario(
        "E",
        "long and short mixed, Poisson arrivals plus bursts",
        mix_of([_weighted(SHORT, 0.6), _weighted(LONG_PROMPT, 0.25), _weighted(LONG_OUTPUT, 0.15)]),
        think_s=0.5,
        burst_every_s=5.0,
    ),
    "F": Scenario(
        "F",
        "as E, with a share of clients disconnecting mid-stream",
        mix_of([_weighted(SHORT, 0.6), _weighted(LONG_PROMPT, 0.25), _weighted(LONG_OUTPUT, 0.15)]),
        think_s=0.5,
        burst_every_s=5.0,
        disconnect_share=0.25,
    ),
    "G": Scenario(
        "G",
        f"shared system prompt ({SYSTEM_PROMPT_TOKENS} tokens) + short question, concurrent",
        mix_of([QUESTION]),
        shared_prefix_tokens=SYSTEM_PROMPT_TOKENS,
    ),
    "H": Scenario(
        "H",
        "interactive chat, then a RAG indexing burst (embeddings of short documents) beside it",
        mix_of([CHAT_TURN]),
        indexing=Indexing(users=4, batch=8, lengths=Dist.parse(DOCUMENT_TOKENS)),
        priority="interactive",
    ),
    "I": Scenario(
        "I",
        "long streams; half the users hang up mid-stream at once, halfway through",
        mix_of([LONG_OUTPUT]),
        hangup=Hangup(),
    ),
    "J": Scenario(
        "J",
        "short chats; from halfway, a tenant over its quota that honours Retry-After",
        mix_of([CHAT_TURN]),
        pusher=Pusher(),
    ),
}


def scenario(
    name: str,
    *,
    mix: LengthMix | None = None,
    think_s: float | None = None,
    burst_every_s: float | None = None,
    disconnect_share: float | None = None,
    embed_users: int | None = None,
    embed_batch: int | None = None,
    leave_share: float | None = None,
    pushers: int | None = None,
) -> Scenario:
    """Scenario `name` (A..J) with the given fields replaced (`embed_users` and `embed_batch`:
    its indexing's, H only; `leave_share`: its hang-up's, I only; `pushers`: its pusher's
    users, J only). Raises `BenchError`."""
    base = SCENARIOS.get(name.upper())
    if base is None:
        raise BenchError(f"unknown scenario {name!r}: expected one of {', '.join(SCENARIOS)}")
    changes: dict[str, object] = {}
    if mix is not None:
        changes["mix"] = mix
    if think_s is not None:
        changes["think_s"] = think_s
    if burst_every_s is not None:
        changes["burst_every_s"] = burst_every_s
    if disconnect_share is not None:
        if not 0 <= disconnect_share <= 1:
            raise BenchError(f"--disconnect-share {disconnect_share}: expected 0..1")
        changes["disconnect_share"] = disconnect_share
    if embed_users is not None or embed_batch is not None:
        if base.indexing is None:
            raise BenchError(
                f"--embed-users and --embed-batch: scenario {base.name} sends no embeddings"
            )
        indexing = base.indexing
        changes["indexing"] = dataclasses.replace(
            indexing,
            users=indexing.users if embed_users is None else embed_users,
            batch=indexing.batch if embed_batch is None else embed_batch,
        )
    if leave_share is not None:
        if base.hangup is None or not 0 < leave_share < 1:
            raise BenchError(f"--leave-share {leave_share}: scenario I only, 0 < share < 1")
        changes["hangup"] = dataclasses.replace(base.hangup, share=leave_share)
    if pushers is not None:
        if base.pusher is None or pushers < 1:
            raise BenchError(f"--pushers {pushers}: scenario J only, 1 or more")
        changes["pusher"] = dataclasses.replace(base.pusher, users=pushers)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class RequestPlan:
    """One request: its index in the run, lengths (tokens; the prompt's include a shared
    prefix) and, in F, after how many streamed chunks the client hangs up (None: it reads to
    the end)."""

    index: int
    component: str
    prompt_tokens: int
    output_tokens: int
    disconnect_after: int | None


def plan_request(
    scenario: Scenario, seed: int, index: int, max_model_len: int | None
) -> RequestPlan:
    """The plan of request `index`: a function of (scenario, seed, index) only, so the direct run
    and the run through llmd send the same requests in the same order."""
    rng = random.Random(f"{seed}:{scenario.name}:{index}")
    component, prompt, output = scenario.mix.sample(rng)
    prompt, output = fit_context(prompt + scenario.shared_prefix_tokens, output, max_model_len)
    disconnect_after = None
    if scenario.disconnect_share and rng.random() < scenario.disconnect_share:
        disconnect_after = max(1, round(output * rng.uniform(0.2, 0.8)))
    return RequestPlan(index, component, prompt, output, disconnect_after)


def plan_documents(
    indexing: Indexing, seed: int, index: int, max_model_len: int | None
) -> tuple[int, ...]:
    """The token lengths of the documents of embeddings request `index` (each within
    `max_model_len`): a function of (indexing, seed, index) only, as `plan_request`."""
    rng = random.Random(f"{seed}:documents:{index}")
    limit = max_model_len or 2**31
    return tuple(min(limit, indexing.lengths.sample(rng)) for _ in range(indexing.batch))
