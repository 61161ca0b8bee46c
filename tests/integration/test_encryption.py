"""Encryption at rest: after a run that put a marker in every kind of payload, no table of
the store holds it (raw SQL over every column, compressed values inflated); keys rotate and
``rekey`` moves everything to the current one; a missing key and a changed ciphertext are
named, never misread."""

from __future__ import annotations

import base64
import contextlib
import os
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zstandard

import stalwart
from stalwart import testing

pytestmark = pytest.mark.timeout(120)

MARK = "ZQXMARKER"
K1, K2 = os.urandom(32), os.urandom(32)
_VOCABULARY_HINT = b'{"role":"user","content":"'


def ring(*ids: str, current: str | None = None) -> stalwart.Keyring:
    keys = {"k1": K1, "k2": K2}
    return stalwart.Keyring({i: keys[i] for i in ids}, current=current)


def later(seconds: float, action: Any) -> None:
    def run() -> None:
        time.sleep(seconds)
        action()

    threading.Thread(target=run, daemon=True).start()


def declare(app: stalwart.Stalwart, workspace: Path | None = None) -> Any:
    failed = {"n": 0}

    @app.step(retry=stalwart.Retry(max_attempts=2, initial_delay=0.01, jitter=False))
    def flaky(text: str) -> str:
        if failed["n"] == 0:
            failed["n"] += 1
            raise RuntimeError(f"{MARK} error message")
        return f"{MARK} output {text}"

    @app.step
    def conversation(turns: int) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"{MARK} turn {i} " * 20} for i in range(turns)]

    @app.step
    def take(path: str) -> stalwart.SnapshotRef:
        return stalwart.snapshot(path)

    @app.workflow
    def agent(text: str) -> dict[str, Any]:
        out = flaky(text)
        stalwart.emit(f"{MARK} stream chunk ")
        long = conversation(40)
        longer = conversation(44)
        stalwart.shared_set("notes", {"text": f"{MARK} shared value"})
        event = stalwart.wait_for_event("note")
        decision = stalwart.request_approval("publish", details={"why": f"{MARK} details"})
        snap = take(str(workspace)) if workspace is not None else None
        return {
            "out": out,
            "event": event,
            "reason": decision.reason if decision else None,
            "turns": len(long) + len(longer),
            "snap": snap is not None,
        }

    return agent


def drive(app: stalwart.Stalwart, agent: Any, workflow_id: str) -> Any:
    def operate() -> None:
        app.send_event(workflow_id, "note", {"text": f"{MARK} event payload"})
        for _ in range(200):
            if app.approvals():
                break
            time.sleep(0.05)
        app.approve(workflow_id, reason=f"{MARK} approval reason")

    later(0.2, operate)
    return app.run(agent, f"{MARK} argument", workflow_id=workflow_id)


def _columns(store: Any) -> Iterator[tuple[str, str]]:
    if type(store).__name__ == "PostgresStore":
        rows = testing.execute_sql(
            store,
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema()",
        )
        yield from ((str(t), str(c)) for t, c in rows)
        return
    tables = testing.execute_sql(store, "SELECT name FROM sqlite_master WHERE type = 'table'")
    for (table,) in tables:
        for row in testing.execute_sql(store, f"PRAGMA table_info({table})"):
            yield str(table), str(row[1])


def _forms(value: Any) -> Iterator[bytes]:
    """A stored value and what it inflates to, if it is compressed."""
    data = value if isinstance(value, bytes) else str(value).encode()
    if isinstance(value, memoryview):
        data = bytes(value)
    yield data
    with contextlib.suppress(zstandard.ZstdError):
        yield zstandard.ZstdDecompressor().decompress(data, max_output_size=1 << 24)
    for start in (1, 1 + 32):
        for preset in (b"", _VOCABULARY_HINT):
            with contextlib.suppress(zlib.error):
                yield zlib.decompressobj(-15, preset).decompress(data[start:])


def markers_in(store: Any) -> list[str]:
    found = []
    for table, column in _columns(store):
        for (value,) in testing.execute_sql(store, f'SELECT "{column}" FROM "{table}"'):
            if value is None:
                continue
            if any(MARK.encode() in form for form in _forms(value)):
                found.append(f"{table}.{column}")
                break
    return found


def test_no_table_holds_a_marker_after_an_encrypted_run(shared_url: str, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text(f"{MARK} snapshot file\n" * 50)
    with stalwart.Stalwart(shared_url, encryption=ring("k1")) as app:
        agent = declare(app, workspace)
        result = drive(app, agent, "w1")
        assert result["out"] == f"{MARK} output {MARK} argument"
        assert result["event"] == {"text": f"{MARK} event payload"}
        assert result["reason"] == f"{MARK} approval reason"
        assert result["turns"] == 84 and result["snap"]
        chunks = list(app.stream("w1", follow=False))
        assert [c.data for c in chunks] == [f"{MARK} stream chunk "]
        failures = [e.error for e in app.journal("w1") if e.error]
        assert failures and MARK in failures[0]  # the app with the key reads the message
        assert markers_in(testing.store_of(app)) == []


def test_a_plaintext_store_holds_the_markers(shared_url: str) -> None:
    """The scan finds what is there: without encryption the same run leaves markers."""
    with stalwart.Stalwart(shared_url) as app:
        drive(app, declare(app), "w1")
        found = markers_in(testing.store_of(app))
    assert {"runs.input", "journal.error", "approvals.reason", "events.payload"} <= set(found)


def test_conversation_pieces_are_shared_between_steps(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url, encryption=ring("k1")) as app:
        drive(app, declare(app), "w1")
        store = testing.store_of(app)
        rows = testing.execute_sql(store, "SELECT count(*) FROM payloads")[0][0]
    # two conversations of 40 and 44 messages of ~380 bytes, a piece each: unshared, the rows
    # would be 84 pieces and their nodes; shared, 44 pieces and nodes (whose ends depend on
    # the keyed digests, so their number varies with the key)
    assert rows < 84


def test_rotation_then_rekey_moves_everything_to_the_new_key(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url, encryption=ring("k1")) as app:
        drive(app, declare(app), "w1")
    with stalwart.Stalwart(shared_url, encryption=ring("k2", "k1", current="k2")) as app:
        assert app.handle("w1").result()["out"].startswith(MARK)  # old rows still read
        done = 0
        while count := app.rekey(batch=7):
            assert count <= 7
            done += count
        assert done > 0 and app.rekey() == 0  # idempotent
        store = testing.store_of(app)
        digests = testing.execute_sql(store, "SELECT digest FROM payloads ORDER BY digest")
    with stalwart.Stalwart(shared_url, encryption=ring("k2")) as app:
        assert app.handle("w1").result()["reason"] == f"{MARK} approval reason"
        assert [e.output for e in app.journal("w1")]  # every payload opens without k1
        errors = [e.error for e in app.journal("w1") if e.error]
        assert MARK in errors[0]
        store = testing.store_of(app)
        assert testing.execute_sql(store, "SELECT digest FROM payloads ORDER BY digest") == digests


def test_rekey_encrypts_a_store_written_in_plaintext(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url) as app:
        drive(app, declare(app), "w1")
    with stalwart.Stalwart(shared_url, encryption=ring("k1")) as app:
        assert app.handle("w1").result()["out"].startswith(MARK)
        while app.rekey(batch=50):
            pass
        found = markers_in(testing.store_of(app))
    # an error message or a reason written before the keyring stays as it was written
    assert set(found) <= {"journal.error", "runs.error", "approvals.reason"}, found


def test_a_missing_key_is_named_and_the_rest_still_reads(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url, encryption=ring("k1")) as app:
        drive(app, declare(app), "w1")
    with stalwart.Stalwart(shared_url, encryption=ring("k2")) as app:
        with pytest.raises(stalwart.EncryptionKeyMissing, match="'k1'") as caught:
            app.handle("w1").result()
        assert caught.value.key_id == "k1"
        assert isinstance(caught.value, stalwart.StoreError)
        entries = app.journal("w1")  # the read model shows what it cannot open
        assert any(e.output == "encrypted (key k1)" for e in entries)
        chunks = list(app.stream("w1", follow=False))
        assert [c.data for c in chunks] == ["encrypted (key k1)"]
        errors = [e.error for e in entries if e.error]
        assert errors and "encrypted (key k1)" in errors[0] and MARK not in errors[0]
        assert [r.status for r in app.list_workflows()] == ["completed"]
    with stalwart.Stalwart(shared_url) as app:  # no keyring at all: everything but payloads
        assert app.list_workflows()[0].workflow_id == "w1"
        with pytest.raises(stalwart.EncryptionKeyMissing):
            app.handle("w1").result()


def test_a_changed_ciphertext_is_a_corrupt_record(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url, encryption=ring("k1")) as app:
        drive(app, declare(app), "w1")
        store = testing.store_of(app)
        (before,) = testing.execute_sql(store, "SELECT output FROM runs WHERE workflow_id = 'w1'")[
            0
        ]
        data = bytearray(bytes(before))
        data[-1] ^= 1
        testing.execute_sql(
            store, "UPDATE runs SET output = :o WHERE workflow_id = 'w1'", {"o": bytes(data)}
        )
        with pytest.raises(stalwart.CorruptRecord):
            app.handle("w1").result()
        (after,) = testing.execute_sql(store, "SELECT output FROM runs WHERE workflow_id = 'w1'")[0]
        assert bytes(after) == bytes(data)  # nothing overwritten


def test_the_first_encrypted_write_refuses_older_code(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url) as app:
        assert testing.store_of(app).schema_version().oldest_compatible < 23
    with stalwart.Stalwart(shared_url, encryption=ring("k1")) as app:
        assert testing.store_of(app).schema_version().oldest_compatible >= 23


def test_the_digest_key_survives_dropping_the_first_key(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url, encryption=ring("k1")) as app:
        first = app._runtime.codec.keyring.digest_key  # type: ignore[union-attr]
    with stalwart.Stalwart(shared_url, encryption=ring("k2", "k1", current="k2")):
        pass  # k2 now holds the digest key wrapped too
    with stalwart.Stalwart(shared_url, encryption=ring("k2")) as app:
        assert app._runtime.codec.keyring.digest_key == first  # type: ignore[union-attr]


def test_environment_forms() -> None:
    text = f"k2:{base64.b64encode(K2).decode()},k1:{base64.b64encode(K1).decode()}"
    keyring = stalwart.Keyring.from_env({"STALWART_ENCRYPTION_KEYS": text})
    assert keyring is not None and keyring.current == "k2" and set(keyring.keys) == {"k1", "k2"}
    assert stalwart.Keyring.from_env({}) is None
    digest = base64.b64encode(b"d" * 32).decode()
    env = {"STALWART_ENCRYPTION_KEYS": text, "STALWART_DIGEST_KEY": digest}
    keyring = stalwart.Keyring.from_env(env)
    assert keyring is not None and keyring.digest_key == b"d" * 32
    with pytest.raises(ValueError, match="KEY_ID:BASE64"):
        stalwart.Keyring.from_env({"STALWART_ENCRYPTION_KEYS": "nocolon"})
    with pytest.raises(ValueError, match="32"):
        stalwart.Keyring({"k1": b"short"})
    with pytest.raises(ValueError, match="base64"):
        stalwart.Keyring({"k1": "not base64!"})
    with pytest.raises(ValueError, match="current"):
        stalwart.Keyring({"k1": K1}, current="k9")


def test_the_app_takes_its_keyring_from_the_environment(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STALWART_ENCRYPTION_KEYS", f"k1:{base64.b64encode(K1).decode()}")
    with stalwart.Stalwart(shared_url) as app:
        drive(app, declare(app), "w1")
        assert markers_in(testing.store_of(app)) == []


def test_a_worker_without_the_key_leaves_the_run_to_others(
    shared_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    def declare_echo(app: stalwart.Stalwart) -> Any:
        @app.step
        def echo(text: str) -> str:
            return text

        @app.workflow(name="echo")
        def flow(text: str) -> str:
            return echo(text)

        return flow

    with stalwart.Stalwart(shared_url, encryption=ring("k1")) as app:
        app.start(declare_echo(app), f"{MARK} argument", workflow_id="w1")
    with stalwart.Stalwart(shared_url, encryption=ring("k2"), lease_seconds=30) as app:
        declare_echo(app)
        worker = testing.worker(app, concurrency=1)
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + 20
            while "w1" not in worker.keyless and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)  # the worker's next looks pass the run by
        finally:
            worker.stop()
            thread.join(10)
        assert "w1" in worker.keyless
        (info,) = app.list_workflows()
        assert info.status in ("pending", "running") and info.workflow_id == "w1"
        claims = [r for r in caplog.records if "left for a worker with that key" in r.message]
        assert len(claims) == 1 and claims[0].levelname == "ERROR" and "'k1'" in claims[0].message
    with stalwart.Stalwart(shared_url, encryption=ring("k1")) as app:
        flow = declare_echo(app)
        assert app.run(flow, f"{MARK} argument", workflow_id="w1") == f"{MARK} argument"
