"""Config loading: strict keys and types, defaults, overrides, clear messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmd.binding import key_line
from llmd.config import Config, EngineConfig, UpstreamConfig, config_path, load_config
from llmd.errors import ConfigError
from llmd.routing.breaker import BreakerPolicy

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "llmd.toml"
    path.write_text(text)
    return path


def test_minimal_config_takes_defaults(tmp_path: Path) -> None:
    """Only engine.model is required; everything else has its documented default."""
    config = load_config(write(tmp_path, '[engine]\nmodel = "org/model"\n'))
    assert config.server.listen == "127.0.0.1:8000"
    assert config.engine.kind == "vllm"
    assert config.engine.model_name == "org/model"
    assert config.supervisor.max_failed_boots == 5


def test_example_config_documents_every_key() -> None:
    """etc/llmd.toml loads and sets every key of every section (it is the reference)."""
    config = load_config(REPO / "etc" / "llmd.toml")
    import dataclasses
    import tomllib

    raw = tomllib.loads((REPO / "etc" / "llmd.toml").read_text())
    for section in dataclasses.fields(Config):
        if section.name in ("source", "engines", "upstreams", "swap_groups"):  # other files'
            continue
        keys = {f.name for f in dataclasses.fields(getattr(config, section.name))}
        assert set(raw[section.name]) == keys, section.name
    assert set(raw["routing"]["breaker"]) == {f.name for f in dataclasses.fields(BreakerPolicy)}


def test_multi_engine_example_is_accepted_by_check_config() -> None:
    """etc/llmd-multi.toml passes `llmd check-config` and its upstream sets every key."""
    import dataclasses
    import tomllib

    from tests.support.cli import run_llmd

    path = REPO / "etc" / "llmd-multi.toml"
    done = run_llmd("check-config", str(path))
    assert done.returncode == 0, done.stderr
    assert "engine big (vllm, model qwen2.5-14b)" in done.stdout
    assert "upstream lab (http://10.0.0.5:8000)" in done.stdout
    raw = tomllib.loads(path.read_text())
    assert set(raw["upstreams"]["lab"]) == {f.name for f in dataclasses.fields(UpstreamConfig)}


@pytest.mark.parametrize("name", ["llmd.toml", "demo.toml", "llmd-rag.toml"])
def test_shipped_configs_are_valid(name: str) -> None:
    """Every config the repo ships passes validation."""
    load_config(REPO / "etc" / name)


def test_unknown_key_names_the_key_and_the_known_ones(tmp_path: Path) -> None:
    """A typo fails at load with the full key path, the close known key and what keys exist."""
    path = write(tmp_path, '[engine]\nmodel = "m"\nstart_timout_s = 5\n')
    with pytest.raises(
        ConfigError,
        match=r"llmd.toml:3: unknown key engine\.start_timout_s \(did you mean "
        r"engine\.start_timeout_s\?\); known keys in \[engine\]: args, ",
    ):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[engine]\nmodel = "m"\nenvs = {VLLM_API_KEY = "sk-SECRET-1"}\n', "engine.envs"),
        ('[engine]\nmodel = "m"\narg = ["--api-key", "sk-SECRET-1"]\n', "engine.arg"),
        ('[engines.a]\nmodel = "m"\nAPI_KEY = "sk-SECRET-1"\n', "engines.a.API_KEY"),
        ('[engine]\nmodel = "m"\n[server]\ntoken = "sk-SECRET-1"\n', "server.token"),
        ('token = "sk-SECRET-1"\n[engine]\nmodel = "m"\n', "token"),
        (
            '[engine]\nmodel = "m"\n[upstreams.u]\nurl = "http://h:1"\nkey = "sk-SECRET-1"',
            "upstreams.u.key",
        ),
    ],
)
def test_an_unknown_key_is_named_never_its_value(tmp_path: Path, text: str, key: str) -> None:
    """A mistyped key (which may hold a secret: envs for env) is named, never its value."""
    with pytest.raises(ConfigError, match=rf"unknown key {key}\b") as caught:
        load_config(write(tmp_path, text))
    assert "SECRET" not in str(caught.value)


def test_an_upstream_url_with_a_password_is_not_echoed(tmp_path: Path) -> None:
    """A bad upstream URL is echoed with its user:password@ part masked."""
    text = '[upstreams.u]\nurl = "htp://bob:sk-SECRET-1@h:1"\n'
    with pytest.raises(ConfigError, match=r"upstreams.u.url = 'htp://\*\*\*@h:1'") as caught:
        load_config(write(tmp_path, text))
    assert "SECRET" not in str(caught.value)


def test_a_config_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    """A byte that is not UTF-8 (a Latin-1 comment) is a ConfigError naming the file and the
    line, not a UnicodeDecodeError."""
    path = tmp_path / "llmd.toml"
    path.write_bytes(b'[engine]\nmodel = "m"\n# caf\xe9\n')
    with pytest.raises(ConfigError, match=r"llmd.toml:3: cannot read config: not UTF-8 .*0xe9"):
        load_config(path)


def _float_keys(cls: type, prefix: str) -> list[str]:
    """Every float key of config table `cls` and the tables under it, dotted from `prefix`."""
    import dataclasses
    import typing

    keys = []
    for name, hint in typing.get_type_hints(cls).items():
        if dataclasses.is_dataclass(hint):
            keys += _float_keys(hint, f"{prefix}{name}.")  # type: ignore[arg-type]
        elif hint is float:
            keys.append(prefix + name)
    return keys


FLOAT_KEYS = _float_keys(Config, "")


def _setting(key: str, value: str) -> str:
    """A config with engine.model and dotted `key` = `value` under its table."""
    table, _, name = key.rpartition(".")
    if table == "engine":
        return f'[engine]\nmodel = "m"\n{name} = {value}\n'
    return f'[engine]\nmodel = "m"\n[{table}]\n{name} = {value}\n'


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "+nan"])
@pytest.mark.parametrize("key", FLOAT_KEYS)
def test_no_float_key_takes_nan_or_infinity(tmp_path: Path, key: str, value: str) -> None:
    """Every float key of every table refuses NaN and infinity, naming the key and its line."""
    text = _setting(key, value)
    line = len(text.splitlines())
    with pytest.raises(ConfigError, match=rf"llmd.toml:{line}: {key} = .*: expected a number"):
        load_config(write(tmp_path, text))


@pytest.mark.parametrize("key", [k for k in FLOAT_KEYS if k.endswith(("_s", "_ms"))])
def test_durations_are_bounded(tmp_path: Path, key: str) -> None:
    """A duration past 30 days (1e308 s overflows a timer) is refused saying the bound."""
    with pytest.raises(ConfigError, match=rf"{key} = 1e\+308: expected at most \d+ \(30 days\)"):
        load_config(write(tmp_path, _setting(key, "1e308")))
    load_config(write(tmp_path, _setting(key, "1200")))  # 20 minutes is fine


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[engine]\nmodel = "m"\nstart_timeout_s = "ten"\n',
            r"engine.start_timeout_s = 'ten': expected a number",
        ),
        (
            '[engine]\nmodel = "m"\nkind = "tgi"\n',
            r"engine.kind = 'tgi': expected one of 'vllm', 'sim'",
        ),
        (
            '[engine]\nmodel = "m"\nargs = "--x"\n',
            r"llmd.toml:3: engine.args: expected a list of strings",
        ),
        (
            '[engine]\nmodel = "m"\n[supervisor]\nmax_failed_boots = 2.5\n',
            r"supervisor.max_failed_boots = 2.5: expected a whole number",
        ),
        (
            '[engine]\nmodel = "m"\n[supervisor]\nbackoff_max_s = -1\n',
            r"supervisor.backoff_max_s = -1: expected a number >= 0",
        ),
        (
            '[engine]\nmodel = "m"\n[server]\nlisten = "8000"\n',
            r"server.listen = '8000': expected HOST:PORT",
        ),
        (
            '[engine]\nmodel = "m"\n[server]\nlisten = "127.0.0.1:\u00b2"\n',
            r"server.listen = '127.0.0.1:\u00b2': expected HOST:PORT",
        ),
        (
            '[engine]\nmodel = "m"\n[server]\nlisten = "127.0.0.1:\u0668\u0663\u0660\u0661"\n',
            r"expected HOST:PORT",
        ),
        (
            '[engine]\nmodel = "m"\nargs = ["--max-num-seqs", "\u00b2"]\n',
            r"^engine.args: --max-num-seqs: expected a whole number$",
        ),
        (
            '[engines.a]\nmodel = "m"\nargs = ["--kv_cache_memory_bytes=lots"]\n',
            r"^engines.a.args: --kv-cache-memory-bytes: expected a whole number",
        ),
        (
            '[engine]\nmodel = "m"\nargs = ["--enforce-eager", "--model=/other"]\n',
            r"^engine.args: --model is set by llmd: use engine.model$",
        ),
        (
            '[engines.a]\nmodel = "m"\nargs = ["--uds", "/tmp/x.sock"]\n',
            r"^engines.a.args: --uds is set by llmd: the engine listens on a Unix socket",
        ),
        (
            '[engine]\nmodel = "m"\nenv = { A = 1 }\n',
            r"llmd.toml:3: engine.env: expected a table of strings \(its value is not shown",
        ),
        ("engine = 3\n", r"engine: expected a table, got 3"),
        ("[server]\n", r"engine.model is required"),
        ("[engine\n", r"not valid TOML"),
    ],
)
def test_bad_values_name_key_value_and_expectation(tmp_path: Path, text: str, message: str) -> None:
    """Each wrong type or value names the key, the value given (unless it may be a secret:
    then the line) and what was expected."""
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text))


def test_booleans_are_not_numbers(tmp_path: Path) -> None:
    """TOML true is not accepted where a number is expected."""
    with pytest.raises(ConfigError, match="expected a number"):
        load_config(write(tmp_path, '[engine]\nmodel = "m"\nstop_timeout_s = true\n'))


def test_cli_overrides_and_relative_model(tmp_path: Path) -> None:
    """--listen/--runtime-dir override the file; a relative model dir resolves from the file."""
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    path = write(tmp_path, '[engine]\nmodel = "models/tiny"\n')
    config = load_config(path, listen="127.0.0.1:9001", runtime_dir="/tmp/x")
    assert config.server.port == 9001
    assert config.server.runtime_dir == "/tmp/x"
    assert config.engine.model == str(tmp_path / "models" / "tiny")


def test_relative_server_directories_resolve_from_the_config_file(tmp_path: Path) -> None:
    """server.runtime_dir and server.state_dir given relative are the config file's neighbours
    (etc/demo.toml's "../var/run" is the repository's var/run whatever the working directory),
    so `llmd doctor --config` and `llmd tune --config` find the daemon that config started."""
    path = write(
        tmp_path, '[server]\nruntime_dir = "../run"\nstate_dir = "st"\n[engine]\nmodel = "m"\n'
    )
    config = load_config(path)
    assert config.server.runtime_dir == str(tmp_path.parent / "run")
    assert config.server.state_dir == str(tmp_path / "st")
    assert load_config(path, runtime_dir="var/run").server.runtime_dir == "var/run"


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    """A missing file is reported as such, not as a traceback."""
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "nope.toml")


def test_config_path_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    """--config beats $LLMD_CONFIG, which beats /etc/llmd/llmd.toml."""
    monkeypatch.delenv("LLMD_CONFIG", raising=False)
    assert config_path(None) == Path("/etc/llmd/llmd.toml")
    monkeypatch.setenv("LLMD_CONFIG", "/srv/a.toml")
    assert config_path(None) == Path("/srv/a.toml")
    assert config_path("/srv/b.toml") == Path("/srv/b.toml")


MULTI = """
[engines.big]
model = "org/big"
served_model_name = "big"
gpus = ["0", "1"]

[engines.small-a]
model = "org/small"
served_model_name = "small"
gpus = ["2"]

[upstreams.lab]
url = "unix:/run/lab.sock"
models = ["lab-70b"]
api_key_env = "LAB_KEY"

[routing]
epsilon = 0.5

[routing.breaker]
cooldown_s = 2
"""


def test_engines_upstreams_and_routing_tables(tmp_path: Path) -> None:
    """[engines.NAME], [upstreams.NAME] and [routing] load in config order, with defaults."""
    config = load_config(write(tmp_path, MULTI))
    assert list(config.engine_tables) == ["big", "small-a"]
    assert config.engine_tables["big"].gpus == ("0", "1")
    assert config.upstreams["lab"].models == ("lab-70b",)
    assert config.upstreams["lab"].max_in_flight == 128
    assert config.routing.epsilon == 0.5 and config.routing.breaker.cooldown_s == 2.0
    assert config.routing.breaker.consecutive_failures == 5
    assert config.served_models() == ["big", "small", "lab-70b"]


def test_engine_alone_is_one_engine_named_main(tmp_path: Path) -> None:
    """The old single [engine] table keeps working: one engine named `main`."""
    config = load_config(write(tmp_path, '[engine]\nmodel = "m"\n'))
    assert list(config.engine_tables) == ["main"] and config.engine.model == "m"


def test_upstreams_alone_are_a_config(tmp_path: Path) -> None:
    """An llmd of upstreams only needs no engine table."""
    config = load_config(write(tmp_path, '[upstreams.lab]\nurl = "https://lab:8000"\n'))
    assert config.engine_tables == {} and config.served_models() == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[engine]\nmodel = "m"\n[engines.b]\nmodel = "m"\n',
            r"both \[engine\] and \[engines.\*\] are set \(engines.b\)",
        ),
        ('[engines.b]\nkind = "sim"\n', r"engines.b.model is required"),
        ('[engines."a b"]\nmodel = "m"\n', r"backend name 'a b'"),
        (
            '[engines.x]\nmodel = "m"\n[upstreams.x]\nurl = "http://h:1"\n',
            r"engines.x and upstreams.x: a backend name is used twice",
        ),
        ('[upstreams.lab]\nurl = "10.0.0.5:8000"\n', r"upstreams.lab.url = '10.0.0.5:8000'"),
        ('[upstreams.lab]\nurl = "http://h:1"\nmax_in_flight = 0\n', "max_in_flight = 0"),
        ('[engines.a]\nmodel = "m"\ngpus = ["1", "1"]\n', r"engines.a.gpus .* listed twice"),
        ('[engine]\nmodel = "m"\nnice = -5\n', r"engine.nice = -5: expected a whole number >= 0"),
        ('[engines.a]\nmodel = "m"\nnice = 20\n', r"engines.a.nice = 20: expected 0 to 19"),
        (
            '[engines.a]\nmodel = "m"\ngpus = ["0"]\nenv = { CUDA_VISIBLE_DEVICES = "1" }\n',
            r"engines.a.gpus and engines.a.env.CUDA_VISIBLE_DEVICES are both set",
        ),
        (
            '[engines.a]\nmodel = "m"\n[engines.b]\nmodel = "n"\n'
            'args = ["--kv-cache-memory-bytes", "1000"]\n',
            r"engines a, b share GPU 0: each needs --kv-cache-memory-bytes .*engines.a.args",
        ),
        ("[routing.breaker]\nfailure_ratio = 1.5\n[engine]\nmodel = 'm'\n", "failure_ratio"),
        ("[engines]\nbig = 3\n", r"engines.big: expected a table"),
    ],
)
def test_bad_backend_tables_name_the_keys(tmp_path: Path, text: str, message: str) -> None:
    """Each wrong engine, upstream or routing table is refused, naming the keys."""
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text))


def test_engines_on_separate_gpus_or_with_kv_bytes_may_share(tmp_path: Path) -> None:
    """Two engines may share a GPU when both size their KV cache in bytes; simulators and
    engines on other GPUs never conflict."""
    kv = 'args = ["--kv-cache-memory-bytes", "1000"]\n'
    text = (
        '[engines.a]\nmodel = "m"\n' + kv + '[engines.b]\nmodel = "n"\n' + kv
        + '[engines.c]\nmodel = "m"\ngpus = ["1"]\n[engines.d]\nkind = "sim"\nmodel = "m"\n'
    )  # fmt: skip
    assert len(load_config(write(tmp_path, text)).engine_tables) == 4


@pytest.mark.parametrize(
    "text",
    [
        '[engine]\nmodel = "m"\nenv = { VLLM_API_KEY = 12345678 }\n',
        '[engine]\nmodel = "m"\n\nargs = "--api-key 12345678"\n',
        '[engine]\nmodel = "m"\nargs = ["--api-key", 12345678]\n',
        '[engine]\nmodel = "m"\ncommand = ["vllm", "--api-key", 12345678]\n',
    ],
)
def test_engine_args_and_env_are_never_echoed(tmp_path: Path, text: str) -> None:
    """engine.args, engine.env and engine.command may hold secrets (--api-key, VLLM_API_KEY):
    an error names the key and its line, never the value."""
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    message = str(caught.value)
    assert "12345678" not in message and "not shown" in message
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "12345678" in row)
    assert f"llmd.toml:{line}: engine." in message


def test_key_line_finds_keys_under_their_tables() -> None:
    """The line of a dotted key: `name = ...` under its [table] (quoted names too), a table
    by its header; None when the scan cannot tell."""
    text = '[a]\nx = 1\n[b."c d"]\n  x=2\n"y" = 3\n[e]\n'
    assert key_line(text, "a.x") == 2
    assert key_line(text, "b.c d.x") == 4
    assert key_line(text, "b.c d.y") == 5
    assert key_line(text, "e") == 6
    assert key_line(text, "a.zz") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[admission.guard]\nwindow_s = 5\n", r"admission.guard.window_s = 5: expected whole"),
        ("[admission.guard]\nrecover_ratio = 1.2\n", r"recover_ratio = 1.2: expected a fraction"),
        ("[admission.guard]\nmin_samples = 0\n", r"min_samples = 0: expected a whole number"),
        ("[admission.guard]\nmax_tokens_cap = 0\n", r"max_tokens_cap = 0: expected a whole"),
        (
            "[admission.guard]\ndwell = 3\n",
            r"unknown key admission.guard.dwell \(did you mean .*dwell_s",
        ),
        (
            "[admission.normal]\nttft_p95_budget_ms = -1\n",
            r"admission.normal.ttft_p95_budget_ms = -1: expected a number >= 0",
        ),
        ("[admission]\ndevice_hold_ratio = 1.5\n", r"device_hold_ratio = 1.5: expected a fr"),
        (
            "[admission]\ndevice_pause = true\ndevice_hold_ratio = 0.5\n"
            "[admission.interactive]\nttft_p95_budget_ms = 10000\n",
            r"device_pause with a hold bound of 5000 ms: a pause may last at most 4000 ms",
        ),
    ],
)
def test_slo_guard_settings_are_checked(tmp_path: Path, text: str, message: str) -> None:
    """The SLO guard's budgets and settings out of range fail the load (`llmd check-config`)
    naming the key, the value and what was expected."""
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, '[engine]\nmodel = "m"\n' + text))


def test_slo_budgets_default_to_interactive_and_normal_only(tmp_path: Path) -> None:
    """Interactive 1500 ms and normal 6000 ms TTFT p95 budgets by default, batch none; a class
    table setting its budget keeps its other defaults; the guard's settings as documented."""
    config = load_config(write(tmp_path, '[engine]\nmodel = "m"\n'))
    admission = config.admission
    budgets = [c.ttft_p95_budget_ms for c in (admission.interactive, admission.normal)]
    assert budgets == [1500.0, 6000.0] and admission.batch.ttft_p95_budget_ms == 0
    text = '[engine]\nmodel = "m"\n[admission.batch]\nttft_p95_budget_ms = 60000\n'
    batch = load_config(write(tmp_path, text)).admission.batch
    assert (batch.ttft_p95_budget_ms, batch.queue_size, batch.aging_s) == (60000, 4096, 15.0)
    guard = admission.guard
    settings = (guard.window_s, guard.min_samples, guard.dwell_s, guard.recover_ratio)
    assert settings == (60, 20, 10.0, 0.8) and guard.max_tokens_cap == 256


def test_the_demo_script_serves_etc_demo_toml_with_its_own_arguments() -> None:
    """scripts/demo.sh hands its arguments to `llmd serve` (`--listen 127.0.0.1:PORT` for
    another port, as the README says) and leaves the runtime directory to etc/demo.toml, whose
    var/run is where the README's commands after the demo look."""
    script = (REPO / "scripts" / "demo.sh").read_text().splitlines()
    assert [line for line in script if line.startswith("exec ")] == [
        'exec .venv/bin/llmd serve --config etc/demo.toml "$@"'
    ]
    runtime_dir = Path(load_config(REPO / "etc" / "demo.toml").server.runtime_dir)
    # Resolved on both sides: in a git worktree whose var links to another checkout's, the
    # loader's resolved directory is that checkout's var/run.
    assert runtime_dir == (REPO / "var" / "run").resolve()


def test_what_an_engine_computes_on_for_the_device_hold() -> None:
    """`device` names it; else a vLLM engine's GPUs (GPU 0 by default, where vLLM's CPU build
    runs too, so a host's CPU engines share one); a simulator without `device` shares none."""
    assert EngineConfig(model="m", device="cpu").shared_device == ("device:cpu",)
    assert EngineConfig(kind="sim", model="m", device="x").shared_device == ("device:x",)
    assert EngineConfig(model="m").shared_device == ("gpu:0",)
    assert EngineConfig(model="m", gpus=("1", "2")).shared_device == ("gpu:1", "gpu:2")
    visible = EngineConfig(model="m", env={"CUDA_VISIBLE_DEVICES": "3"})
    assert visible.shared_device == ("gpu:3",)
    assert EngineConfig(kind="sim", model="m").shared_device == ()
