"""[swap_groups.NAME] and the engines' on-demand keys: loaded with defaults, impossible plans
refused with a reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmd.config import load_config
from llmd.config.swap import group_of
from llmd.errors import ConfigError
from tests.support.cli import run_llmd

REPO = Path(__file__).resolve().parents[2]


def engines(*names: str, extra: str = "on_demand = true\n") -> str:
    return "".join(f'[engines.{n}]\nkind = "sim"\nmodel = "m"\n{extra}' for n in names)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "llmd.toml"
    path.write_text(text)
    return path


def test_a_swap_group_loads_with_defaults(tmp_path: Path) -> None:
    """A group takes min_residence_s 20 and max_wait_s 2 unless set; an engine is not on
    demand, never sleeps when idle, sleeps `auto` and is not pinned unless set."""
    text = '[swap_groups.g]\nengines = ["a", "b"]\nmax_resident = 1\n'
    config = load_config(write(tmp_path, text + engines("a", "b") + engines("c", extra="")))
    group = config.swap_groups["g"]
    assert group.engines == ("a", "b") and group.max_resident == 1
    assert group.min_residence_s == 20.0 and group.max_wait_s == 2.0
    a, c = config.engine_tables["a"], config.engine_tables["c"]
    assert a.on_demand and not c.on_demand
    assert (c.idle_sleep_s, c.sleep, c.pin) == (0.0, "auto", False)
    assert group_of(config.swap_groups, "b") == "g" and group_of(config.swap_groups, "c") is None


def test_a_group_of_gpu_engines_without_max_resident_is_fit_by_memory(tmp_path: Path) -> None:
    """Left out, max_resident is 0 for a group of vLLM engines: fit by memory (checked against
    the GPU where NVML answers, not at load)."""
    vllm = 'on_demand = true\nargs = ["--kv-cache-memory-bytes", "1073741824"]\n'
    text = engines("a", "b", extra=vllm).replace('kind = "sim"', 'kind = "vllm"')
    config = load_config(write(tmp_path, '[swap_groups.g]\nengines = ["a", "b"]\n' + text))
    assert config.swap_groups["g"].max_resident == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[swap_groups.g]\nengines = []\n" + engines("a"), r"swap_groups.g.engines is empty"),
        (
            '[swap_groups.g]\nengines = ["a", "x"]\n' + engines("a"),
            r"swap_groups.g.engines: no engine 'x' \(engines: a\)",
        ),
        (
            '[swap_groups.g]\nengines = ["a", "b"]\n' + engines("a", "b"),
            r"swap_groups.g.max_resident is required without a GPU: a, b run on the simulator",
        ),
        (
            '[swap_groups.g]\nengines = ["a"]\nmax_resident = 1\n[swap_groups.h]\n'
            'engines = ["a"]\nmax_resident = 1\n' + engines("a"),
            r"swap_groups.h.engines: 'a' is already in swap_groups.g",
        ),
        (
            '[swap_groups.g]\nengines = ["a", "b"]\nmax_resident = 1\n'
            + engines("a")
            + engines("b", extra=""),
            r"engines.b.on_demand is false: an engine of a swap group must be on demand",
        ),
        (
            '[swap_groups.g]\nengines = ["a", "b"]\nmax_resident = 1\n'
            + engines("a", "b", extra="on_demand = true\npin = true\n"),
            r"swap_groups.g: 2 pinned engines \(a, b\) but max_resident = 1",
        ),
        (
            '[swap_groups.g]\nengines = ["a", "b", "c"]\nmax_resident = 1\n'
            + engines("a", extra="on_demand = true\npin = true\n")
            + engines("b", "c"),
            r"the pinned engines \(a\) fill max_resident = 1, so b, c could never wake",
        ),
        (engines("a", extra='on_demand = true\nsleep = "deep"\n'), r"engines.a.sleep"),
    ],
)
def test_impossible_swap_plans_are_refused(tmp_path: Path, text: str, message: str) -> None:
    """Each plan that cannot work is refused at load, naming the keys and why."""
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text))


def test_check_config_explains_an_impossible_plan(tmp_path: Path) -> None:
    """`llmd check-config` exits 78 with the reason for a pinned set larger than the group."""
    text = '[swap_groups.g]\nengines = ["a", "b"]\nmax_resident = 1\n' + engines(
        "a", "b", extra="on_demand = true\npin = true\n"
    )
    done = run_llmd("check-config", str(write(tmp_path, text)))
    assert done.returncode == 78
    assert "pinned engines are never evicted, so they cannot all be awake" in done.stderr


def test_the_swap_example_passes_check_config() -> None:
    """etc/llmd-swap.toml passes `llmd check-config`, which names the group and how each
    engine sleeps."""
    done = run_llmd("check-config", str(REPO / "etc" / "llmd-swap.toml"))
    assert done.returncode == 0, done.stderr
    assert "swap group gpu0: chat, coder, small, 1 awake at a time" in done.stdout
    assert "small sleeps level2" in done.stdout


def gpu_group(tmp_path: Path, kv_gib: dict[str, int]) -> Path:
    """vLLM engines with these KV caches (GiB) over the tiny model, in swap group g with no
    max_resident (fit by memory)."""
    from tests.support.model import ensure_tiny_model

    tables = "".join(
        f'[engines.{n}]\nkind = "vllm"\nmodel = "{ensure_tiny_model()}"\non_demand = true\n'
        f'args = ["--kv-cache-memory-bytes", "{gib * 1024**3}"]\n'
        for n, gib in kv_gib.items()
    )
    return write(
        tmp_path, f"[swap_groups.g]\nengines = {list(kv_gib)!r}\n".replace("'", '"') + tables
    )


def test_check_config_says_a_group_fit_by_memory_needs_a_gpu(tmp_path: Path) -> None:
    """On vLLM's CPU build (this machine's) a group without max_resident is refused by
    `llmd check-config` (exit 78), saying max_resident is required without a GPU."""
    done = run_llmd("check-config", str(gpu_group(tmp_path, {"a": 1, "b": 1})))
    assert done.returncode == 78, done.stdout
    assert "swap_groups.g.max_resident is required without a GPU: a, b run on vLLM's CPU" in (
        done.stderr
    )


@pytest.mark.parametrize(
    ("kv_gib", "said"),
    [
        ({"a": 8, "b": 8, "c": 2}, "fit by memory: the two largest (a, b: 20.0 GiB awake"),
        (
            {"a": 14, "b": 8, "c": 2},
            "one at a time: the two largest (a, b: 26.0 GiB awake beside 2.0 GiB asleep)",
        ),
        (
            {"a": 21, "b": 8, "c": 2},
            "swap_groups.g cannot work on its GPU: a needs about 23.0 GiB awake, the",
        ),
    ],
)
def test_check_config_explains_what_fits_on_the_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kv_gib: dict[str, int], said: str
) -> None:
    """On a 24 GiB GPU (a CUDA build, each engine asleep at level 1 holding 2 GiB): the two
    largest awake together, or one at a time, or a group whose largest cannot wake beside the
    others asleep, refused with the sizes."""
    import llmd.engine.launch
    from llmd.check_config import Sized, memory_fit, swap_lines
    from llmd.sizing.device import DeviceMemory

    monkeypatch.setattr(llmd.engine.launch, "installed_engine_build", lambda _: "vllm 0.11.0")
    config = load_config(gpu_group(tmp_path, kv_gib))
    memory = DeviceMemory(24 * 1024**3, "planned for a 24 GiB GPU")
    sized = [Sized(n, e, None, memory, None) for n, e in config.engine_tables.items()]
    _, problems = memory_fit(config, "g", sized)
    assert said in (problems[0] if problems else swap_lines(config, sized)[0])
    assert bool(problems) is said.startswith("swap_groups")
