"""The child program of the stream crash test: a step that streams a chat completion through
the real ``openai`` SDK (``stream=True``) and emits each text delta to the run's stream.

    python stream_agent.py URL BASE_URL WORKFLOW_ID

It runs (or, after a crash, recovers) ``WORKFLOW_ID`` and prints its result as JSON.
"""

from __future__ import annotations

import json
import sys

import openai

import stalwart


def main(url: str, base_url: str, workflow_id: str) -> None:
    with stalwart.Stalwart(url, lease_seconds=30.0) as app:

        @app.step(name="complete")
        def complete(prompt: str) -> str:
            client = openai.OpenAI(base_url=base_url, api_key="test", max_retries=0)
            text = []
            reply = client.chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": prompt}], stream=True
            )
            for event in reply:
                delta = event.choices[0].delta.content if event.choices else None
                if delta:
                    stalwart.emit(delta)
                    text.append(delta)
            return "".join(text)

        @app.workflow(name="streamer")
        def streamer(prompt: str) -> str:
            stalwart.emit("> ")  # workflow code: written once, however often it replays
            return complete(prompt)

        print(json.dumps({"result": app.run(streamer, "tell me", workflow_id=workflow_id)}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
