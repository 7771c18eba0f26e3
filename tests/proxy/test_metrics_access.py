"""A daemon with a tenants file: every /v1 request needs a key, /metrics only for a key allowed
to read it, and a key written by mistake into the file never echoed (reload log, admin answer,
`llmd check-config`)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from llmd.admission.tenants import hash_key
from tests.support.cli import run_llmd
from tests.support.llmd_process import LlmdProcess, short_tmpdir
from tests.support.model import ensure_tiny_model
from tests.support.sim_process import sim_config

APP, PROM = "key-app", "key-prometheus"
PLAINTEXT = "sk-live-do-not-echo-0123456789"


def tenants_text(extra: str = "") -> str:
    return (
        f'[tenants.app]\nkeys = ["{hash_key(APP)}"]\n'
        f'[tenants.prometheus]\nkeys = ["{hash_key(PROM)}"]\nmetrics = true\n' + extra
    )


@pytest.fixture(scope="module")
def llmd() -> Iterator[LlmdProcess]:
    """llmd on the simulator with tenants `app` and `prometheus` (metrics = true)."""
    workdir = short_tmpdir("llmd-m-")
    (workdir / "tenants.toml").write_text(tenants_text())
    config = sim_config(
        ensure_tiny_model(), admission={"tenants_file": str(workdir / "tenants.toml")}
    )
    with LlmdProcess.running(config, workdir) as process:
        yield process


def test_metrics_need_a_key_allowed_to_read_them(llmd: LlmdProcess) -> None:
    """With keys configured /metrics (tenant names, counts, KV state) is 401 without a key,
    403 for a tenant without `metrics = true`, and the exposition for one with it."""
    with httpx.Client(base_url=llmd.base_url, timeout=10) as client:
        missing = client.get("/metrics")
        assert missing.status_code == 401
        assert missing.json()["error"]["code"] == "invalid_api_key"
        other = client.get("/metrics", headers={"authorization": f"Bearer {APP}"})
        assert other.status_code == 403
        assert other.json()["error"]["code"] == "permission_denied"
        assert "llmd_" not in other.text
        allowed = client.get("/metrics", headers={"authorization": f"Bearer {PROM}"})
        assert allowed.status_code == 200 and "llmd_requests_total" in allowed.text


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/models"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/completions"),
        ("GET", "/v1/no-such-route"),
        ("GET", "/v1/chat/completions"),
    ],
)
def test_every_v1_request_needs_a_key(llmd: LlmdProcess, method: str, path: str) -> None:
    """With keys configured, every /v1 request (the model list, whose cards name the model's
    files, and an unknown route or method too) is 401 invalid_api_key without a key or with an
    unknown one; the probes /health and /ready need none."""
    with httpx.Client(base_url=llmd.base_url, timeout=30) as client:
        for auth in ({}, {"authorization": "Bearer not-a-key"}, {"authorization": APP}):
            answer = client.request(method, path, json={"model": "tiny"}, headers=auth)
            assert answer.status_code == 401, (auth, answer.text)
            assert answer.json()["error"]["code"] == "invalid_api_key"
            assert "root" not in answer.text
        assert client.get("/health").status_code == 200
        assert client.get("/ready").status_code == 200


def test_the_model_list_answers_a_valid_key(llmd: LlmdProcess) -> None:
    """GET /v1/models with a tenant's key is the model list."""
    with httpx.Client(base_url=llmd.base_url, timeout=30) as client:
        answer = client.get("/v1/models", headers={"authorization": f"Bearer {APP}"})
    assert answer.status_code == 200, answer.text
    assert [card["id"] for card in answer.json()["data"]] == ["tiny"]


def test_a_plaintext_key_in_the_tenants_file_is_never_echoed(llmd: LlmdProcess) -> None:
    """A key pasted where its digest belongs: the reload is refused naming the file, line and
    key, and neither the admin answer, the log nor `llmd check-config` shows the key."""
    tenants = llmd.runtime_dir.parent / "tenants.toml"
    tenants.write_text(tenants_text(f'[tenants.new]\nkeys = ["{PLAINTEXT}"]\n'))
    try:
        transport = httpx.HTTPTransport(uds=str(llmd.runtime_dir / "admin.sock"))
        with httpx.Client(transport=transport, timeout=10) as admin:
            answer = admin.post("http://llmd/reload")
        assert answer.status_code == 400
        message = answer.json()["error"]["message"]
        assert f"{tenants}:7: tenants.new.keys[0] is not a SHA-256 hex digest" in message
        check = run_llmd("check-config", str(tenants.parent / "llmd.toml"))
        assert check.returncode == 78 and "tenants.new.keys[0]" in check.stderr
        for text in (answer.text, check.stdout + check.stderr, llmd.log_path.read_text()):
            assert PLAINTEXT not in text and "0123456789" not in text
        assert "reload_rejected" in llmd.log_path.read_text()
    finally:
        tenants.write_text(tenants_text())
