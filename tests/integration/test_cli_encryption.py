"""``stalwart keygen``, ``stalwart rekey`` and what ``stalwart show`` prints of an encrypted
store, through the real command, on SQLite and PostgreSQL."""

from __future__ import annotations

import base64
import re
import subprocess
from pathlib import Path

import pytest

import stalwart
from cli_process import stalwart as _stalwart

pytestmark = pytest.mark.timeout(120)


def _cli(
    url: str, *args: str, cwd: Path, keys: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {"STALWART_ENCRYPTION_KEYS": keys} if keys else {"STALWART_ENCRYPTION_KEYS": ""}
    return _stalwart("--url", url, *args, cwd=cwd, clean=True, env=env)


def test_keygen_prints_a_key_in_the_environment_variables_form(tmp_path: Path) -> None:
    done = _stalwart("keygen", "--id", "k7", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    key_id, _, text = done.stdout.strip().partition(":")
    assert key_id == "k7" and len(base64.b64decode(text, validate=True)) == 32
    other = _stalwart("keygen", cwd=tmp_path).stdout.strip()
    assert re.fullmatch(r"k[0-9a-f]{8}:[A-Za-z0-9+/]{43}=", other)
    ring = stalwart.Keyring.from_env({"STALWART_ENCRYPTION_KEYS": f"{done.stdout.strip()}"})
    assert ring is not None and ring.current == "k7"


def _run(url: str, keys: str) -> None:
    ring = stalwart.Keyring.from_env({"STALWART_ENCRYPTION_KEYS": keys})
    with stalwart.Stalwart(url, encryption=ring) as app:

        @app.step
        def secret(text: str) -> str:
            return f"secret {text}"

        @app.workflow(name="flow")
        def flow(text: str) -> str:
            return secret(text)

        app.run(flow, "the customer's words", workflow_id="w1")


def test_rekey_loops_until_done_and_show_says_what_it_cannot_open(
    shared_url: str, tmp_path: Path
) -> None:
    k1 = _stalwart("keygen", "--id", "k1", cwd=tmp_path).stdout.strip()
    k2 = _stalwart("keygen", "--id", "k2", cwd=tmp_path).stdout.strip()
    _run(shared_url, k1)
    shown = _cli(shared_url, "show", "w1", cwd=tmp_path, keys=k2)
    assert shown.returncode == 0, shown.stderr
    assert "encrypted (key k1)" in shown.stdout and "customer" not in shown.stdout
    readable = _cli(shared_url, "show", "w1", cwd=tmp_path, keys=k1)
    assert "the customer's words" in readable.stdout
    rekeyed = _cli(shared_url, "rekey", "--batch", "2", cwd=tmp_path, keys=f"{k2},{k1}")
    assert rekeyed.returncode == 0, rekeyed.stderr
    assert re.search(
        r"re-encrypted \d+ values; every payload is under the current key", rekeyed.stdout
    )
    again = _cli(shared_url, "rekey", cwd=tmp_path, keys=f"{k2},{k1}")
    assert "re-encrypted 0 values" in again.stdout
    after = _cli(shared_url, "show", "w1", cwd=tmp_path, keys=k2)
    assert "the customer's words" in after.stdout


def test_rekey_without_a_keyring_says_what_to_do(shared_url: str, tmp_path: Path) -> None:
    with stalwart.Stalwart(shared_url):
        pass
    done = _cli(shared_url, "rekey", cwd=tmp_path)
    assert done.returncode != 0
    assert "\nerror: rekey needs a keyring: set STALWART_ENCRYPTION_KEYS" in done.stderr
