"""The proxy's policies on its request path: :class:`Controller` decides, per request, whether
the body must be read and parsed before forwarding (``needs_body``: a policy is on or the
session has a live compaction) and what the settings file's policies and a live compaction
do to it (``apply``), keeping each agent session's sticky decisions.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from engine.errors import ContextDeskError
from engine.proxy.policy.edits import Edit, PolicyOutcome, SessionPolicyState, prompt_tokens
from engine.proxy.policy.policies import plan_edits
from engine.proxy.policy.policy_file import PolicyFile
from engine.proxy.wire import wire_for

#: Agent sessions whose sticky decisions are remembered (least recently used forgotten first).
MAX_SESSION_STATES = 2_000
#: Offloaded results kept in memory for read_result (older ones are read from the database).
MAX_CACHED_RESULTS = 256


class Controller:
    """Applies the settings file's policies to requests on the proxy's request path.

    Keeps each agent session's sticky decisions (by the agent's own id, else by its first
    message); never raises for a body it cannot read (that request is forwarded unchanged).
    """

    def __init__(
        self, policy_file: PolicyFile, live: Any = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.policy_file = policy_file
        self.live = live  # engine.proxy.policy.live.LiveCompactions, or None
        self.clock = clock  # seconds: how long a session idled (has its provider cache expired?)
        self._states: dict[str, SessionPolicyState] = {}
        self._lock = threading.Lock()
        self._contents: dict[str, str] = {}  # ref -> offloaded text, for read_result (newest kept)

    def stored_text(self, ref: str) -> str | None:
        """An offloaded result's text: from memory, else from the database (written by the recorder)."""
        with self._lock:
            if ref in self._contents:
                return self._contents[ref]
        store = self.live._open() if self.live is not None else None
        if store is None:
            return None
        try:
            blob = store.get_blob(ref)
        except (ContextDeskError, OSError):  # the model is told the ref is unknown
            return None
        return blob.content.decode("utf-8", "replace") if blob.content is not None else None

    def needs_body(self, api: str, headers: Mapping[str, str]) -> bool:
        """Whether a request must be read whole and parsed before it is forwarded: a policy is on,
        or the agent's session has a live compaction. Otherwise it streams upstream untouched."""
        wire = wire_for(api)
        if wire is None or not wire.edited:
            return False
        if self.policy_file.current().active:
            return True
        session = self.live.session_of(headers) if self.live is not None else None
        state = self.live.current(session) if session else None
        return state is not None and state.snapshot is not None

    def apply(self, api: str, raw: bytes, headers: Mapping[str, str]) -> PolicyOutcome:
        """What to do with one request; cheap (no parsing) when no policy or live compaction applies."""
        from engine.settings import resolve_model_settings
        from engine.tokens import get_tokenizer

        wire = wire_for(api)
        if wire is None or not wire.edited:
            return PolicyOutcome()
        loaded = self.policy_file.loaded  # settings and policies read together
        config = loaded.config
        live_session = self.live.session_of(headers) if self.live is not None else None
        live_state = self.live.current(live_session) if live_session else None
        has_live = live_state is not None and live_state.snapshot is not None
        if not config.active and not has_live:
            return PolicyOutcome()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return PolicyOutcome()
        if not isinstance(body, dict) or not isinstance(body.get(wire.history_key), list):
            return PolicyOutcome()
        provider = wire.provider
        model = body.get("model") if isinstance(body.get("model"), str) else None
        policies = config.for_model(model, provider)
        try:
            resolved = resolve_model_settings(model or "unknown", provider, loaded.settings)
        except ContextDeskError:
            resolved = None
        tokenizer = get_tokenizer(resolved.tokenizer if resolved else "anthropic")
        live_edit: Edit | None = None
        if has_live:
            rewrite = self.live.rewrite(wire, body, live_session)
            if rewrite is not None:
                before = prompt_tokens(wire, body, tokenizer)
                body = {**body, wire.history_key: rewrite.messages}
                after = prompt_tokens(wire, body, tokenizer)
                live_edit = Edit(
                    "live_compaction",
                    f"history through transcript seq {rewrite.through_seq} sent as snapshot {rewrite.snapshot_id}",
                    before,
                    after,
                    ({"snapshot_id": rewrite.snapshot_id, "replaced_messages": rewrite.replaced,
                      "sent_messages": len(rewrite.messages)},),
                )  # fmt: skip
        outcome = PolicyOutcome()
        if policies.active:
            key = wire.session_id(headers, body) or _first_message_key(body)
            with self._lock:
                state = self._states.pop(key, None) or SessionPolicyState()
                self._states[key] = state  # most recently used last
                while len(self._states) > MAX_SESSION_STATES:
                    self._states.pop(next(iter(self._states)))
                outcome = plan_edits(
                    api, body, policies, tokenizer=tokenizer, resolved=resolved, state=state, now=self.clock()
                )
                for ref, text, _ in outcome.blobs:
                    self._contents[ref] = text
                while len(self._contents) > MAX_CACHED_RESULTS:
                    self._contents.pop(next(iter(self._contents)))
        if live_edit is None:
            return outcome
        return PolicyOutcome(
            body=outcome.body if outcome.body is not None else body,
            refusal=outcome.refusal,
            edits=(live_edit, *outcome.edits),
            blobs=outcome.blobs,
            skipped=outcome.skipped,
            serve_read_result=outcome.serve_read_result,
        )


def _first_message_key(body: Mapping[str, Any]) -> str:
    first = (body.get("messages") or body.get("input") or [None])[0]
    return "first:" + hashlib.sha256(json.dumps(first, sort_keys=True, default=str).encode()).hexdigest()[:24]
