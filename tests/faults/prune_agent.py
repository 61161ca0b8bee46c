"""The two processes of the collector's race (test_prune_beside_writers.py).

    python prune_agent.py writer|collector URL WORKDIR SECONDS [encrypted]

Both run with a grace window of ``GRACE`` seconds and a refresh interval of ``REFRESH`` (the
release's are an hour and ten minutes: the test keeps their proportions, in seconds).

- ``writer``: until the collector writes ``WORKDIR/done``, runs a ``live`` run as soon as
  ``WORKDIR/round`` names a new round ``k``, whose argument, step input and output and result
  are ``value(k)``: values stored apart (as trees, manifests and whole rows), equal to those of
  the collector's ``old`` runs of that round. Prints ``{"runs": n}``.
- ``collector``: round after round, for SECONDS and at least ``ROUNDS`` rounds: runs three
  ``old`` runs of ``value(k)``, waits until their rows are older than the grace window, prunes
  them, names the round in ``WORKDIR/round`` (the writer starts writing the same values) and at
  once collects garbage three times, while the writer reuses the rows the pruned runs left.
  Prints the totals.
- ``encrypted``: both open the store with ``keyring()`` (every row sealed, its refs in clear).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import stalwart
from stalwart._store import garbage
from stalwart.testing import store_of

__all__ = ["GRACE", "declare", "keyring", "value"]

GRACE = 1.0
REFRESH = 0.2
MARK_TO_SWEEP = 0.3
ROUNDS = 3  # the collector goes on past SECONDS until it has done this many
LONGEST = 60.0  # past SECONDS, a writer whose collector never says it is done stops


def value(k: int) -> dict[str, Any]:
    """Round ``k``'s value: a conversation of 40 messages, about 9 KiB."""
    said = "words " * 35
    messages = [{"role": "user", "content": f"message {i} of round {k}: {said}"} for i in range(40)]
    return {"round": k, "messages": messages}


def keyring() -> stalwart.Keyring:
    """The keyring of the encrypted variant (a fixed key: both processes and the test)."""
    return stalwart.Keyring({"k1": bytes(range(32))})


def declare(url: str, encrypted: bool = False) -> tuple[stalwart.Stalwart, Any, Any]:
    """The app, its ``old`` and its ``live`` workflow (the same body)."""
    app = stalwart.Stalwart(url, encryption=keyring() if encrypted else None)

    @app.step
    def echo(v: dict[str, Any]) -> dict[str, Any]:
        return v

    @app.workflow(name="old")
    def old(v: dict[str, Any]) -> dict[str, Any]:
        echo({"only old runs write this": v["round"], "pad": "z" * 5000})  # sure garbage
        return echo(v)

    @app.workflow(name="live")
    def live(v: dict[str, Any]) -> dict[str, Any]:
        return echo(v)

    return app, old, live


def _round(workdir: Path) -> int:
    path = workdir / "round"
    return int(path.read_text()) if path.exists() else 0


def writer(url: str, workdir: Path, until: float, encrypted: bool) -> dict[str, int]:
    app, _old, live = declare(url, encrypted)
    runs, last = 0, -1
    with app:
        # until the collector is done (its rounds take longer on a loaded machine)
        while not (workdir / "done").exists() and time.time() < until + LONGEST:
            k = _round(workdir)
            if k == last:
                time.sleep(0.005)
                continue
            # once a round: a later run of the same value would store again what a collector
            # wrongly deleted, and hide the loss
            app.run(live, value(k), workflow_id=f"live-{os.getpid()}-{runs}")
            runs, last = runs + 1, k
    return {"runs": runs}


def _slow_mark(store: Any) -> None:
    """Hold the collector between its mark and its sweep long enough for the writer to commit
    runs that reference what the mark found unreferenced: the race, every round."""
    mark = store._mark

    def marked_then_wait(cutoff: float) -> Any:
        found = mark(cutoff)
        time.sleep(MARK_TO_SWEEP)
        return found

    store._mark = marked_then_wait


def collector(url: str, workdir: Path, until: float, encrypted: bool) -> dict[str, int]:
    app, old, _live = declare(url, encrypted)
    store = store_of(app)
    _slow_mark(store)
    rounds = pruned = collected = 0
    with app:
        while time.time() < until or rounds < ROUNDS:
            rounds += 1
            for j in range(3):
                app.run(old, value(rounds), workflow_id=f"old-{rounds}-{j}")
            time.sleep(GRACE + 0.3)
            pruned += app.prune(0, name="old")
            (workdir / "round.new").write_text(str(rounds))
            (workdir / "round.new").replace(workdir / "round")
            for _ in range(3):
                collected += store.collect_payloads(now=time.time(), grace=GRACE)
    (workdir / "done").write_text(str(rounds))
    return {"rounds": rounds, "pruned": pruned, "collected": collected}


def main() -> None:
    role, url, workdir, seconds = sys.argv[1:5]
    encrypted = sys.argv[5:6] == ["encrypted"]
    garbage.REFRESH_SECONDS = REFRESH
    until = time.time() + float(seconds)
    act = writer if role == "writer" else collector
    print(json.dumps(act(url, Path(workdir), until, encrypted)), flush=True)


if __name__ == "__main__":
    main()
