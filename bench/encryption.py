"""What encryption at rest costs a step: the per-step overhead with a keyring and without.

Two runs on each store, the best of five each, interleaved, in wall-clock time and in this
process's CPU time (which a shared machine disturbs far less):

1. small payloads, ``--steps`` steps: each step takes a short text and returns a small dict
   (both kept in the journal row, sealed whole);
2. a conversation, ``--chat-steps`` steps: each step takes the conversation so far (a list of
   messages that grows by two ~300-byte messages a step) and returns the next message, so the
   store keeps the input apart piece by piece (each piece sealed on its own, shared with the
   step before).

The floor is the same run without a keyring. Target: ratio at most 1.15.

    python bench/encryption.py [--steps 2000] [--chat-steps 300] [--stores sqlite,postgres]
                               [--postgres-url URL]

PostgreSQL needs a reachable server (``--postgres-url``, default $STALWART_TEST_POSTGRES_URL or
postgresql://postgres@127.0.0.1:5432/test); without one its rows are skipped with a note. It is
a benchmark, not a test: it exits 0 whether or not the target is met.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

from fleet import DEFAULT_POSTGRES_URL, Stores, postgres_version

import stalwart

TARGET_RATIO = 1.15
ROUNDS = 5  # runs of each kind, interleaved: the best counts
KEYRING = stalwart.Keyring({"bench": os.urandom(32)})


def define(app: stalwart.Stalwart) -> dict[str, Any]:
    """The bench's workflows on ``app``."""

    @app.step(name="small")
    def small(i: int, text: str) -> dict[str, Any]:
        return {"i": i, "text": text, "ok": True}

    @app.step(name="reply")
    def reply(messages: list[dict[str, str]]) -> dict[str, str]:
        n = len(messages)
        return {"role": "assistant", "content": f"answer {n}: " + "tokens and more " * 18}

    @app.workflow(name="smalls")
    def smalls(steps: int) -> int:
        for i in range(steps):
            small(i, f"a short input {i}")
        return steps

    @app.workflow(name="chat")
    def chat(steps: int) -> int:
        messages: list[dict[str, str]] = [{"role": "system", "content": "You help."}]
        for i in range(steps):
            messages.append({"role": "user", "content": f"question {i}: " + "words " * 40})
            messages.append(reply(messages))
        return steps

    return {"small payloads": smalls, "a conversation": chat}


def timed(app: stalwart.Stalwart, flow: Any, steps: int, workflow_id: str) -> tuple[float, float]:
    """µs per step of one run, wall clock and this process's CPU."""
    start, cpu = time.perf_counter(), time.process_time()
    app.run(flow, steps, workflow_id=workflow_id)
    return (
        (time.perf_counter() - start) * 1e6 / steps,
        (time.process_time() - cpu) * 1e6 / steps,
    )


def bench_store(stores: Stores, label: str, steps: int, chat_steps: int) -> None:
    """Every figure on fresh stores of one kind (one plain, one encrypted)."""
    plain = stalwart.Stalwart(stores.fresh())
    sealed = stalwart.Stalwart(stores.fresh(), encryption=KEYRING)
    try:
        apps = {"plain": (plain, define(plain)), "sealed": (sealed, define(sealed))}
        for what, count in (("small payloads", steps), ("a conversation", chat_steps)):
            best: dict[str, tuple[float, float]] = {}
            for round_ in range(ROUNDS):
                order = ("plain", "sealed") if round_ % 2 == 0 else ("sealed", "plain")
                for kind in order:
                    app, flows = apps[kind]
                    wall, cpu = timed(app, flows[what], count, f"{what}-{round_}")
                    was = best.get(kind, (wall, cpu))
                    best[kind] = (min(was[0], wall), min(was[1], cpu))
            ratio = best["sealed"][0] / best["plain"][0]
            cpu_ratio = best["sealed"][1] / best["plain"][1]
            print(
                f"{label:<9}{what}, {count:,} steps: {best['sealed'][0]:.1f} µs a step "
                f"encrypted, floor (plaintext, same run) {best['plain'][0]:.1f} µs, ratio "
                f"{ratio:.2f}; CPU {best['sealed'][1]:.1f} against {best['plain'][1]:.1f} µs, "
                f"ratio {cpu_ratio:.2f} (target <= {TARGET_RATIO})",
                flush=True,
            )
    finally:
        plain.close()
        sealed.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=2_000, help="steps of each run")
    parser.add_argument("--chat-steps", type=int, default=300, help="steps of the chat")
    parser.add_argument("--stores", default="sqlite,postgres", help="comma-separated")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("STALWART_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL),
    )
    args = parser.parse_args(argv)
    if args.steps < 1 or args.chat_steps < 1:
        parser.error("--steps and --chat-steps must be >= 1")
    print(
        f"stalwart {stalwart.__version__} encryption at rest: runs of {args.steps:,} steps "
        f"(a conversation: {args.chat_steps:,}), Python {sys.version.split()[0]}"
    )
    with tempfile.TemporaryDirectory(prefix="stalwart-bench-") as folder:
        for kind in args.stores.split(","):
            if kind == "postgres" and postgres_version(args.postgres_url) is None:
                continue
            stores = Stores(kind, folder, args.postgres_url)
            try:
                bench_store(stores, kind, args.steps, args.chat_steps)
            finally:
                stores.drop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
