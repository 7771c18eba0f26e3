"""Tenants file loading, key checks and class clamping."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmd.admission.classes import Priority, requested_class
from llmd.admission.tenants import configured_tenants, hash_key, load_tenants
from llmd.errors import ConfigError, InvalidApiKey, InvalidRequest

KEY = "sk-alice"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tenants.toml"
    path.write_text(text)
    return path


def test_key_maps_to_its_tenant_and_bad_keys_are_401(tmp_path: Path) -> None:
    """A known key finds its tenant; a missing, unknown or non-Bearer key is InvalidApiKey."""
    path = write(
        tmp_path,
        f'[tenants.alice]\nkeys = ["{hash_key(KEY)}"]\nmax_concurrency = 2\n'
        'highest_class = "normal"\ndefault_class = "batch"\nweight = 2.5\n',
    )
    directory = load_tenants(path)
    tenant = directory.authenticate([(b"authorization", f"Bearer {KEY}".encode())])
    assert (tenant.name, tenant.max_concurrency, tenant.weight) == ("alice", 2, 2.5)
    assert (tenant.highest_class, tenant.default_class) == (Priority.NORMAL, Priority.BATCH)
    for headers in ([], [(b"authorization", b"Bearer nope")], [(b"authorization", KEY.encode())]):
        with pytest.raises(InvalidApiKey) as caught:
            directory.authenticate(headers)
        assert KEY not in caught.value.message


def test_no_file_is_one_anonymous_tenant() -> None:
    """Without a tenants file every request is the anonymous tenant, keys or not."""
    directory = load_tenants(None)
    assert directory.authenticate([(b"authorization", b"Bearer x")]).name == "anonymous"
    assert not directory.keys_required


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[tenants.a]\nkeys = ["abc"]\n', "not a SHA-256 hex digest"),
        ('[tenants.a]\nhighest_class = "urgent"\n', ":2: tenants.a.highest_class: expected"),
        ("[tenants.a]\nweight = 0\n", ":2: tenants.a.weight: expected a number > 0"),
        ("[tenants.a]\nweight = nan\n", ":2: tenants.a.weight: expected a number >= 0"),
        ("[tenants.a]\nmax_queue = 3\n", "unknown key .*tenants.a.max_queue"),
        ("[other]\n", "expected only \\[tenants.NAME\\] tables"),
    ],
)
def test_bad_tenants_file_names_the_key(tmp_path: Path, text: str, message: str) -> None:
    """Each mistake in the tenants file fails at load, naming the file and the key."""
    with pytest.raises(ConfigError, match=message):
        load_tenants(write(tmp_path, text))


@pytest.mark.parametrize(
    "line",
    [
        'highest_class = "sk-SECRET-1"',
        'default_class = "sk-SECRET-1"',
        'max_queue = "sk-SECRET-1"',
        'kees = ["sk-SECRET-1"]',
        "weight = -1.5e-9",
    ],
)
def test_tenants_file_values_are_never_echoed(tmp_path: Path, line: str) -> None:
    """A wrong value, or a value under a mistyped key, is refused naming the key and its line,
    never the value (README: no value of the tenants file is shown)."""
    with pytest.raises(ConfigError, match=r":2: (unknown key )?tenants\.a\.") as caught:
        load_tenants(write(tmp_path, f"[tenants.a]\n{line}\n"))
    assert "SECRET" not in str(caught.value) and "1.5e-09" not in str(caught.value)


def test_a_tenants_file_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    """A byte that is not UTF-8 (a Latin-1 comment) fails like bad TOML: ConfigError naming
    the file and its line, not UnicodeDecodeError."""
    path = tmp_path / "tenants.toml"
    path.write_bytes(b"[tenants.a]\nweight = 1\n# caf\xe9\n")
    with pytest.raises(ConfigError, match=r"tenants.toml:3: cannot read tenants file: not UTF-8"):
        load_tenants(path)


def test_duplicate_key_is_refused(tmp_path: Path) -> None:
    """One key cannot belong to two tenants."""
    digest = hash_key(KEY)
    text = f'[tenants.a]\nkeys = ["{digest}"]\n[tenants.b]\nkeys = ["{digest}"]\n'
    with pytest.raises(ConfigError, match="also given to a"):
        load_tenants(write(tmp_path, text))


def test_class_header_is_clamped_to_the_tenants_highest() -> None:
    """x-llmd-priority picks the class, never above the tenant's highest; junk is a 400."""
    assert requested_class(None, Priority.NORMAL, Priority.INTERACTIVE) is Priority.NORMAL
    assert requested_class(b"batch", Priority.NORMAL, Priority.INTERACTIVE) is Priority.BATCH
    assert requested_class(b"interactive", Priority.BATCH, Priority.NORMAL) is Priority.NORMAL
    with pytest.raises(InvalidRequest):
        requested_class(b"urgent", Priority.NORMAL, Priority.INTERACTIVE)


def test_config_resolves_and_checks_the_tenants_file(tmp_path: Path) -> None:
    """admission.tenants_file is relative to the config; the file is read by admission
    (`configured_tenants`), and `llmd check-config` fails on a bad one, naming the key."""
    import subprocess
    import sys

    from llmd.config import load_config

    write(tmp_path, "[tenants.a]\nweight = -1\n")
    config = tmp_path / "llmd.toml"
    config.write_text('[engine]\nmodel = "m"\n[admission]\ntenants_file = "tenants.toml"\n')
    loaded = load_config(config)
    assert loaded.admission.tenants_file == str(tmp_path / "tenants.toml")
    with pytest.raises(ConfigError, match="weight"):
        configured_tenants(loaded.admission)
    checked = subprocess.run(
        [sys.executable, "-m", "llmd.cli", "check-config", str(config)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 78 and "weight" in checked.stderr
    write(tmp_path, "[tenants.a]\nweight = 1\n")
    loaded = load_config(config)
    assert configured_tenants(loaded.admission).path == tmp_path / "tenants.toml"
    assert loaded.admission.batch.queue_timeout_s == 600.0


def test_nested_class_table_keeps_its_own_defaults(tmp_path: Path) -> None:
    """Setting one key of [admission.batch] keeps batch's other defaults (not normal's)."""
    from llmd.config import load_config

    config = tmp_path / "llmd.toml"
    config.write_text('[engine]\nmodel = "m"\n[admission.batch]\nqueue_size = 3\n')
    batch = load_config(config).admission.batch
    assert (batch.queue_size, batch.queue_timeout_s, batch.aging_s) == (3, 600.0, 15.0)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('[tenants.a]\nmax_queued = 1\nkeys = ["sk-live-0123456789"]\n', 3),
        (f'[tenants.a]\nkeys = [\n  "{"0" * 64}",\n  "sk-live-0123456789",\n]\n', 4),
        ('[tenants.a]\nkeys = "sk-live-0123456789"\n', 2),
        ('[tenants.a]\ntoken = "sk-live-0123456789"\n', 2),
        ('[tenants.a]\n\n[other]\nkey = "sk-live-0123456789"\n', 3),
    ],
)
def test_a_key_written_by_mistake_is_never_echoed(tmp_path: Path, text: str, line: int) -> None:
    """A plaintext key where a digest belongs (or any value of the wrong shape): the error
    names the file, the line and the key, never the value."""
    with pytest.raises(ConfigError) as caught:
        load_tenants(write(tmp_path, text))
    message = str(caught.value)
    assert "sk-live" not in message and "0123456789" not in message
    assert message.startswith(f"{tmp_path / 'tenants.toml'}:{line}: ")


def test_a_tenant_may_be_allowed_to_read_metrics(tmp_path: Path) -> None:
    """`metrics = true` lets a tenant's keys read /metrics; the default is false."""
    path = write(
        tmp_path,
        f'[tenants.prom]\nkeys = ["{hash_key("p")}"]\nmetrics = true\n'
        f'[tenants.app]\nkeys = ["{hash_key("a")}"]\n',
    )
    directory = load_tenants(path)
    assert directory.authenticate([(b"authorization", b"Bearer p")]).metrics
    assert not directory.authenticate([(b"authorization", b"Bearer a")]).metrics
    with pytest.raises(ConfigError, match="metrics: expected true or false"):
        load_tenants(write(tmp_path, "[tenants.x]\nmetrics = 1\n"))


def test_a_key_in_x_api_key_maps_to_its_tenant(tmp_path: Path) -> None:
    """The anthropic SDK sends its `api_key` as `x-api-key`: it finds the same tenant as a
    bearer token; the bearer key counts when both are sent; an unknown one is a 401."""
    path = write(tmp_path, f'[tenants.agent]\nkeys = ["{hash_key("agent-key")}"]\n')
    directory = load_tenants(path)
    assert directory.authenticate([(b"x-api-key", b"agent-key")]).name == "agent"
    both = [(b"authorization", b"Bearer agent-key"), (b"x-api-key", b"wrong")]
    assert directory.authenticate(both).name == "agent"
    with pytest.raises(InvalidApiKey):
        directory.authenticate([(b"x-api-key", b"wrong")])


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ('"esc\\u001b[31mred"', r"'esc\x1b[31mred'"),
        ('"with space"', "'with space'"),
        ("a" * 150, "'" + "a" * 150 + "'"),
    ],
)
def test_a_tenant_name_llmd_tenant_add_would_refuse_is_refused_in_the_file(
    tmp_path: Path, name: str, shown: str
) -> None:
    """The file loader keeps `llmd tenant add`'s rule for a name (one rule, TENANT_NAME): a
    name with a control character, a space or past 64 characters is a ConfigError naming the
    file and the name, escaped."""
    path = write(tmp_path, f"[tenants.{name}]\n")
    with pytest.raises(ConfigError) as caught:
        load_tenants(path)
    message = str(caught.value)
    assert str(path) in message and shown in message and "\x1b" not in message
