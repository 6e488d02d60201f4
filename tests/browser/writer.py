"""An agent stand-in for the browser tests: ``python -m tests.browser.writer DB SESSION SECONDS``
appends one turn (a user message, the assistant's reply and the request event that sent them) to
SESSION every SECONDS through SessionStore, until it is stopped. Each commit changes the database
file, so the dashboard's live follow reruns the page while a person clicks."""

from __future__ import annotations

import sys
import time

from engine.events import ComponentTokens, ContextEvent
from engine.messages import assistant, user
from engine.store import SessionStore
from engine.tokens import get_tokenizer

MODEL = "gpt-4o"


def write_turns(db: str, session_id: str, every_s: float) -> None:
    tokenizer = get_tokenizer(MODEL)
    with SessionStore(db) as store:
        if session_id not in {s.id for s in store.list_sessions()}:
            store.create_session(session_id=session_id, model=MODEL, title="A session being written")
        turn = store.message_count(session_id) // 2
        while True:
            with store.transaction():
                store.append_messages(
                    session_id,
                    [user(f"turn {turn}: go on"), assistant(f"turn {turn}: done")],
                    tokenizer=tokenizer,
                )
                store.record_event(
                    session_id,
                    ContextEvent(
                        kind="request", trigger="user_input", outcome="ok", model=MODEL, turn_index=turn,
                        context_window=128_000, max_output_tokens=4_096, buffer_tokens=256,
                        limit_tokens=123_648, projected_tokens=40 * (turn + 1),
                        components=ComponentTokens(conversation=40 * (turn + 1)),
                    ),
                )  # fmt: skip
            print(turn, flush=True)
            turn += 1
            time.sleep(every_s)


if __name__ == "__main__":
    write_turns(sys.argv[1], sys.argv[2], float(sys.argv[3]))
