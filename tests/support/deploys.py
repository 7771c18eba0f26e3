"""A live llmd with release records beside it, driven by the deploy verbs, and a stream of
requests through the openai client: what the deploy tests (simulator and vLLM) share."""

from __future__ import annotations

import concurrent.futures
import itertools
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from llmd.config import load_config
from llmd.releases.deploy_events import TERMINAL
from llmd.releases.store import ReleaseStore, create_release
from tests.releases.conftest import NoNvml
from tests.support.cli import run_llmd
from tests.support.clients import closed_after_test
from tests.support.lazy_import import lazy_module
from tests.support.llmd_process import LlmdProcess
from tests.support.waiting import wait_for

if TYPE_CHECKING:
    import openai
else:  # its import costs about 0.7 s of CPU in every worker that collects this module
    openai = lazy_module("openai")


def record(
    store: ReleaseStore, name: str, config_text: str, workdir: Path, engine: str = "main"
) -> None:
    """Record `name`: engine `engine` of `config_text` (kept in WORKDIR/NAME.toml)."""
    path = workdir / f"{name}.toml"
    path.write_text(config_text)
    create_release(store, name, engine, load_config(path).engine_tables[engine], NoNvml())


class Served:
    """One llmd serving a recorded release; `config_text(model, args)` gives the config of
    another release of its engine."""

    def __init__(
        self,
        llmd: LlmdProcess,
        store: ReleaseStore,
        workdir: Path,
        config_text: Callable[[Path, tuple[str, ...]], str],
    ) -> None:
        self.llmd, self.store, self.workdir = llmd, store, workdir
        self.config_text = config_text

    def wait_tokenizer(self, timeout_s: float = 120.0) -> None:
        """Wait until llmd counts with its local tokenizer: until then it asks the engine's
        /tokenize, which cannot answer while a replace has the engine down."""
        loaded = lambda: '"tokenizer_loaded"' in self.llmd.log_path.read_text()  # noqa: E731
        assert wait_for(loaded, timeout_s), self.llmd.log_tail()

    def release(self, name: str, model: Path, *args: str) -> None:
        """Record release `name`: the served engine table with `model` and extra `args`."""
        record(self.store, name, self.config_text(model, args), self.workdir)

    def cli(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """`llmd ARGV --runtime-dir RUN` against this llmd."""
        return run_llmd(*argv, "--runtime-dir", str(self.llmd.runtime_dir))

    def release_of_main(self) -> str | None:
        """The release the status says engine `main` runs."""
        release: str | None = self.llmd.admin_status()["engines"][0]["release"]
        return release

    def as_left(self) -> Served:
        """Itself, checked to be as each test of a module that shares it leaves it: r1
        serving and no deploy under way."""
        assert self.release_of_main() == "r1", self.llmd.log_tail()
        under_way = [d for d in self.llmd.admin_status()["deploys"] if d["phase"] not in TERMINAL]
        assert not under_way, under_way
        return self


class Traffic:
    """Chat requests through the openai client (no retries), one after another on `threads`
    threads, until stopped; every outcome kept."""

    def __init__(self, base_url: str, threads: int = 3) -> None:
        self.client = closed_after_test(
            openai.OpenAI(base_url=base_url + "/v1", api_key="x", max_retries=0)
        )
        self.stop = threading.Event()
        self.outcomes: list[str] = []
        self._numbers = itertools.count()
        # Called with the monotonic time of each answer (a benchmark's timeline).
        self.on_answer: Callable[[float], None] = lambda at: None
        self.pool = concurrent.futures.ThreadPoolExecutor(threads)
        self.runs = [self.pool.submit(self._loop) for _ in range(threads)]

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                # Another conversation each time: a canary's sticky split sees them all.
                text = f"hi, this is conversation {next(self._numbers)}"
                answer = self.client.chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": text}], max_tokens=8
                )
                self.outcomes.append("ok" if answer.choices else "empty")
                self.on_answer(time.monotonic())
            except openai.APIError as exc:
                self.outcomes.append(f"error: {exc}")

    def finish(self) -> list[str]:
        self.stop.set()
        for run in self.runs:
            run.result(timeout=120)
        self.pool.shutdown()
        return self.outcomes
