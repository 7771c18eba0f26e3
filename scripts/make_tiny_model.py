"""Generate a tiny, deterministic Llama model directory that vLLM can serve.

The model exists to exercise serving, not to produce sensible text: it has random
weights drawn from a fixed seed and a byte-level BPE tokenizer (vocabulary 2048)
trained on a corpus that this script generates itself, so nothing is downloaded.

Usage:
    python scripts/make_tiny_model.py OUT_DIR [--force] [--seed N]

`--seed N` makes a variant: another training corpus for the tokenizer (so another vocabulary
and other token counts) and other random weights. Without it the seed is SEED.

If OUT_DIR already holds a complete model built with the current recipe, nothing is
done. Otherwise the model is built in a temporary directory next to OUT_DIR and
renamed into place, so OUT_DIR is never seen half-written. A non-empty OUT_DIR that
this script did not create is left alone unless --force is given.

Two runs with the same library versions produce byte-identical files; the manifest
(``tiny_model_manifest.json``) records the SHA-256 of every file.
"""

# ruff: noqa: RUF001  (the training text is deliberately full of look-alike unicode)
from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

# Bump whenever anything below changes what ends up in OUT_DIR.
RECIPE_VERSION = 2
MANIFEST_NAME = "tiny_model_manifest.json"
SEED = 20240601

VOCAB_SIZE = 2048
# A window that holds a coding agent's prompt (Claude Code's first request is about 24,400 tokens
# of this tokenizer, Codex CLI's about 20,000): vLLM serves up to max_position_embeddings, and
# with rope's defaults the positions cost no weights (etc/demo.toml serves 65,536 of them).
MAX_POSITIONS = 131_072
HIDDEN_SIZE = 128
NUM_LAYERS = 2
NUM_HEADS = 2
NUM_KV_HEADS = 1
HEAD_DIM = 64  # the CPU attention backend rejects small head sizes such as 16
INTERMEDIATE_SIZE = 256
INIT_STD = 0.02

UNK, BOS, EOS, PAD = "<unk>", "<s>", "</s>", "<pad>"
SPECIAL_TOKENS = [UNK, BOS, EOS, PAD]  # ids 0, 1, 2, 3 as in Llama 2
CHAT_ROLES = ["system", "user", "assistant", "tool"]
# Plain turns render as `<|role|>\ncontent</s>\n`. With `tools`, a system turn listing them (one
# JSON object a line, Hermes style) comes first; an assistant turn's tool calls follow its text as
# `<tool_call>{"name": ..., "arguments": ...}</tool_call>`, as vLLM's `hermes` tool parser reads
# them back from generated text; a turn without content (a tool call alone) renders no text.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if tools %}"
    "<|system|>\nTools:\n<tools>\n"
    "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}"
    "</tools>\n"
    'Call one with <tool_call>{"name": NAME, "arguments": {...}}</tool_call>.'
    "{{ eos_token }}\n"
    "{% endif %}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n"
    "{% if message['content'] is not none %}{{ message['content'] }}{% endif %}"
    "{% for call in message['tool_calls'] or [] %}"
    "<tool_call>{\"name\": {{ call['function']['name'] | tojson }}, "
    "\"arguments\": {{ call['function']['arguments'] | tojson }}}</tool_call>"
    "{% endfor %}"
    "{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

ENGLISH = """\
The quick brown fox jumps over the lazy dog.
A journey of a thousand miles begins with a single step.
It was the best of times, it was the worst of times, it was the age of wisdom.
Call me Ishmael. Some years ago, never mind how long precisely, having little or no money,
I thought I would sail about a little and see the watery part of the world.
The server accepts requests over HTTP and streams tokens back to the client as they are generated.
When the queue is full, new requests wait; when a client disconnects, its request is cancelled.
Please summarize the following document in three sentences, and list the key points as bullets.
What is the capital of France? The capital of France is Paris, a city on the river Seine.
How many tokens per second can a single CPU core generate with a small language model?
Write a short poem about the sea, the wind, and the long road home under a pale winter sky.
Thank you! You're welcome. Could you explain that again, more slowly this time, with an example?
Error: connection refused. Retrying in 5 seconds... Success after 3 attempts (elapsed 12.7s).
"""

MULTILINGUAL = """\
Le renard brun rapide saute par-dessus le chien paresseux. Où est la bibliothèque ? Très bien.
Der schnelle braune Fuchs springt über den faulen Hund. Grüße aus München! Schöne Straße, größer.
El rápido zorro marrón salta sobre el perro perezoso. ¿Dónde está la estación? ¡Mañana!
O rápido raposo castanho salta sobre o cão preguiçoso. Ação, coração, não, informação.
Быстрая коричневая лиса прыгает через ленивую собаку. Привет, как дела? Спасибо, хорошо.
Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο. Καλημέρα! Ευχαριστώ πολύ.
الثعلب البني السريع يقفز فوق الكلب الكسول. مرحبا بالعالم. شكرا جزيلا.
तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है। नमस्ते दुनिया। धन्यवाद।
敏捷的棕色狐狸跳过了懒狗。你好，世界！今天天气很好，我们去公园散步吧。人工智能正在改变世界。
日本語のテキストです。こんにちは、世界！東京は日本の首都です。ありがとうございます。カタカナとひらがな。
빠른 갈색 여우가 게으른 개를 뛰어넘습니다. 안녕하세요, 세계! 감사합니다. 한국어 문장입니다.
Emoji: 😀 😃 😄 😁 😂 🤣 😊 🙂 😉 😍 🥰 😘 👍 👎 👋 🙏 🎉 🚀 🔥 ✨ ❤️ 💡 ✅ ❌ ⚠️ 🌍 🐍 🦀
Families and flags: 👨‍👩‍👧‍👦 👩🏽‍💻 🧑🏿‍🚀 🏳️‍🌈 🇫🇷 🇯🇵 🇺🇸 🇧🇷
Punctuation: — “quotes”, ‘single’, «guillemets», … • → ← ≤ ≥ ≠ ∞ ± × ÷ € £ ¥ © ®
Math: ∀x ∈ ℝ, ∃y: x² + y² = z²; ∑ᵢ aᵢ = 1; ∫₀¹ f(x) dx ≈ 0.5; α β γ δ ε λ μ π σ ω Ω.
"""

CODE = '''\
def fibonacci(n: int) -> list[int]:
    """Return the first n Fibonacci numbers."""
    result = [0, 1]
    while len(result) < n:
        result.append(result[-1] + result[-2])
    return result[:n]


class Server:
    def __init__(self, host: str = "127.0.0.1", port: int = 8000) -> None:
        self.host = host
        self.port = port

    async def handle(self, request: dict) -> dict:
        if request.get("stream"):
            return {"error": {"message": "not supported", "code": 400}}
        return {"id": "cmpl-123", "object": "text_completion", "choices": []}

for (int i = 0; i < 10; ++i) { printf("%d\\n", i); }
fn main() { let v: Vec<u32> = (0..10).map(|x| x * 2).collect(); println!("{:?}", v); }
const add = (a, b) => a + b; console.log(JSON.stringify({ok: true, items: [1, 2, 3]}));
SELECT id, name, created_at FROM users WHERE active = 1 ORDER BY created_at DESC LIMIT 10;
$ curl -s --unix-socket /tmp/vllm.sock http://localhost/v1/models | jq '.data[0].id'
$ pip install -e ".[dev]" && pytest -q tests/ -k "not slow" 2>&1 | tee test.log
<html><head><title>Hello</title></head><body><p class="note">Hi &amp; bye</p></body></html>
{"model": "tiny", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 32}
'''

WORDS = """\
time person year way day thing man world life hand part child eye woman place work week case
point government company number group problem fact model server request token stream queue
engine memory process signal socket client proxy metric health status error retry timeout
be have do say get make go know take see come think look want give use find tell ask seem
feel try leave call run start stop send read write wait serve load kill restart watch
good new first last long great little own other old right big high different small large
next early young important few public bad same able fast slow busy idle ready healthy
the a an of to in for on with at by from up about into over after and but or so because if
when while although I you he she it we they this that these those my your our their
"""


def generate_corpus(rng: random.Random) -> Iterator[str]:
    """Yield training lines: embedded text, random sentences, numbers and chat-formatted samples."""
    embedded = (ENGLISH + MULTILINGUAL + CODE).splitlines()
    for _ in range(20):
        yield from embedded
    words = WORDS.split()
    symbols = list(MULTILINGUAL.replace("\n", ""))
    for i in range(4000):
        length = rng.randint(4, 18)
        sentence = " ".join(rng.choice(words) for _ in range(length))
        sentence = sentence[0].upper() + sentence[1:] + rng.choice([".", "?", "!", ",", ";", ":"])
        if i % 5 == 0:
            sentence += " " + "".join(rng.choice(symbols) for _ in range(rng.randint(3, 12)))
        if i % 7 == 0:
            sentence += f" {rng.randint(0, 10**6)} {rng.random():.4f} 0x{rng.getrandbits(32):08x}"
        yield sentence
        if i % 3 == 0:
            role = rng.choice(CHAT_ROLES)
            yield f"<|{role}|>\n{sentence}"
            yield rng.choice(embedded)


def build_tokenizer(out_dir: Path, rng: random.Random) -> None:
    """Train the byte-level BPE tokenizer and save it as a Hugging Face fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(generate_corpus(rng), trainer=trainer)
    if tokenizer.get_vocab_size() != VOCAB_SIZE:
        raise RuntimeError(
            f"trained vocabulary has {tokenizer.get_vocab_size()} tokens, not {VOCAB_SIZE}"
        )
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
            ),
        ]
    )
    tokenizer.save(str(out_dir / "tokenizer.json"))

    special_map = {"bos_token": BOS, "eos_token": EOS, "unk_token": UNK, "pad_token": PAD}
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special_map,
        "model_max_length": MAX_POSITIONS,
        "padding_side": "left",
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    write_json(out_dir / "tokenizer_config.json", tokenizer_config)
    write_json(out_dir / "special_tokens_map.json", special_map)


def build_model(out_dir: Path, seed: int = SEED) -> None:
    """Write config.json, generation_config.json and seeded random bf16 weights."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    def token_id(token: str) -> int:
        return SPECIAL_TOKENS.index(token)

    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN_SIZE,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITIONS,
        initializer_range=INIT_STD,
        bos_token_id=token_id(BOS),
        eos_token_id=token_id(EOS),
        pad_token_id=token_id(PAD),
        tie_word_embeddings=False,
        dtype="bfloat16",
    )
    config.architectures = ["LlamaForCausalLM"]
    config.to_json_file(str(out_dir / "config.json"))
    write_json(
        out_dir / "generation_config.json",
        {
            "bos_token_id": config.bos_token_id,
            "eos_token_id": config.eos_token_id,
            "pad_token_id": config.pad_token_id,
        },
    )

    # The model is built on the meta device only to learn tensor names and shapes; the values
    # come from our own seeded draws in sorted-name order, independent of transformers' init code.
    with torch.device("meta"):
        skeleton = LlamaForCausalLM(config)  # type: ignore[no-untyped-call]
    shapes = {name: tuple(t.shape) for name, t in skeleton.state_dict().items()}
    torch.manual_seed(seed)
    tensors: dict[str, torch.Tensor] = {}
    for name in sorted(shapes):
        if name.endswith("norm.weight"):
            value = torch.ones(shapes[name])
        else:
            value = torch.randn(shapes[name]) * INIT_STD
        tensors[name] = value.to(torch.bfloat16).contiguous()
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})


def check_tokenizer(model_dir: Path) -> None:
    """Load the tokenizer the way vLLM does and make sure the chat template renders."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello, 世界 👋"},
    ]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    expected = f"{BOS}<|system|>\nBe brief.{EOS}\n<|user|>\nHello, 世界 👋{EOS}\n<|assistant|>\n"
    if rendered != expected:
        raise RuntimeError(f"chat template rendered {rendered!r}, expected {expected!r}")
    ids = tokenizer(rendered, add_special_tokens=False)["input_ids"]
    if tokenizer.decode(ids) != rendered or tokenizer.unk_token_id in ids:
        raise RuntimeError("tokenizer does not round-trip the chat sample")
    tool = {"type": "function", "function": {"name": "Read", "parameters": {"type": "object"}}}
    call = {"type": "function", "function": {"name": "Read", "arguments": {"path": "a"}}}
    turns = [
        {"role": "user", "content": "Read a"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "text of a", "tool_call_id": "call_1"},
    ]
    rendered = tokenizer.apply_chat_template(turns, tools=[tool], tokenize=False)
    expected = (
        f"{BOS}<|system|>\nTools:\n<tools>\n{json.dumps(tool)}\n</tools>\n"
        f'Call one with <tool_call>{{"name": NAME, "arguments": {{...}}}}</tool_call>.{EOS}\n'
        f"<|user|>\nRead a{EOS}\n<|assistant|>\n"
        f'<tool_call>{{"name": "Read", "arguments": {{"path": "a"}}}}</tool_call>{EOS}\n'
        f"<|tool|>\ntext of a{EOS}\n"
    )
    if rendered != expected:
        raise RuntimeError(f"chat template rendered {rendered!r} with tools, expected {expected!r}")


def write_json(path: Path, data: Mapping[str, object]) -> None:
    """Write JSON with a stable layout so that rebuilds are byte-identical."""
    path.write_text(
        json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8"
    )


def sha256_of(path: Path) -> str:
    """Return the hex SHA-256 of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(model_dir: Path, seed: int = SEED) -> None:
    """Record the recipe version, a variant's seed and the hash of every file; written last, it
    marks completeness. The default seed is not written, so the default model is unchanged."""
    files = {p.name: sha256_of(p) for p in sorted(model_dir.iterdir()) if p.name != MANIFEST_NAME}
    manifest: dict[str, object] = {"recipe_version": RECIPE_VERSION, "files": files}
    if seed != SEED:
        manifest["seed"] = seed
    write_json(model_dir / MANIFEST_NAME, manifest)


def read_manifest(model_dir: Path) -> dict[str, object] | None:
    """Return the manifest of a model directory, or None if there is none or it is unreadable."""
    try:
        manifest = json.loads((model_dir / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def is_complete(model_dir: Path, seed: int = SEED) -> bool:
    """True if model_dir holds every file of the current recipe and seed, unmodified."""
    manifest = read_manifest(model_dir)
    if manifest is None or manifest.get("recipe_version") != RECIPE_VERSION:
        return False
    if manifest.get("seed", SEED) != seed:
        return False
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        return False
    return all(
        (model_dir / name).is_file() and sha256_of(model_dir / name) == digest
        for name, digest in files.items()
    )


def apply_umask(model_dir: Path) -> None:
    """Give the directory and its files the modes the umask allows (mkdtemp makes them private)."""
    umask = os.umask(0)
    os.umask(umask)
    model_dir.chmod(0o777 & ~umask)
    for path in model_dir.iterdir():
        path.chmod(0o666 & ~umask)


def build(out_dir: Path, seed: int = SEED) -> Path:
    """Build the whole model in a fresh temporary directory beside out_dir and return it."""
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        build_tokenizer(tmp_dir, random.Random(seed))
        build_model(tmp_dir, seed)
        check_tokenizer(tmp_dir)
        write_manifest(tmp_dir, seed)
        apply_umask(tmp_dir)
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
    return tmp_dir


def install(tmp_dir: Path, out_dir: Path, *, force: bool, seed: int = SEED) -> bool:
    """Move the finished build to out_dir; return False if an existing complete model was kept.

    A complete out_dir at this point means a concurrent run finished first with an identical
    result; it is kept unless force asks for a replacement.
    """
    try:
        os.rename(tmp_dir, out_dir)  # succeeds when out_dir is missing or an empty directory
        return True
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    if not force and is_complete(out_dir, seed):
        shutil.rmtree(tmp_dir)
        return False
    stale = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
    os.rename(out_dir, stale / out_dir.name)
    os.rename(tmp_dir, out_dir)
    shutil.rmtree(stale)
    return True


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the process exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory to create")
    parser.add_argument(
        "--force", action="store_true", help="rebuild and replace whatever is in OUT_DIR"
    )
    parser.add_argument(
        "--seed", type=int, default=SEED, help=f"a variant's seed (default {SEED}: the tiny model)"
    )
    args = parser.parse_args(argv)
    out_dir: Path = args.out_dir.resolve()

    if not args.force:
        if is_complete(out_dir, args.seed):
            print(
                f"{out_dir}: tiny model (recipe {RECIPE_VERSION}) already complete, nothing to do"
            )
            return 0
        if out_dir.is_file() or (
            out_dir.is_dir() and any(out_dir.iterdir()) and read_manifest(out_dir) is None
        ):
            print(
                f"{out_dir}: exists and is not a tiny model made by this script; use --force",
                file=sys.stderr,
            )
            return 2
    if out_dir.is_file():
        out_dir.unlink()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    if install(build(out_dir, args.seed), out_dir, force=args.force, seed=args.seed):
        print(f"{out_dir}: tiny model (recipe {RECIPE_VERSION}) written")
    else:
        print(f"{out_dir}: tiny model (recipe {RECIPE_VERSION}) completed by a concurrent run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
