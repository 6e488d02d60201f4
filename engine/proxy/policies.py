"""In-flight control policies for proxied requests (all off unless the settings file turns them on).

Settings shape (a public interface)::

    [policies]                                   # every model; [models."NAME".policies] and
    guard = { action = "compact" }               # [providers."ID".policies] override per policy
    clear_tool_results = { trigger = 30000, keep = 2, exclude_tools = ["Skill", "Agent", "Task"] }

``plan_edits`` is pure: from a request body, the policies and the session's sticky state it
returns the body to forward (or a refusal in the provider's own error shape) and every edit
with tokens before and after. Cleared tool results stay cleared on later requests, with the
same placeholder bytes, so the forwarded prefix stays byte-stable and provider caching keeps
hitting. ``PolicyFile`` re-reads the settings file when it changes (the last valid policies
stay in force when an edit is invalid). Implemented: guard, clear_tool_results (Anthropic
Messages and OpenAI Chat Completions). ``offload`` and ``compaction`` are accepted and
reported as not applied yet.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import ConfigError, ContextDeskError
from engine.policy_settings import (  # noqa: F401  (re-exported: the proxy's policy names)
    POLICY_NAMES,
    ClearToolResultsPolicy,
    CompactionPolicy,
    GuardPolicy,
    OffloadPolicy,
    Policies,
    PolicyConfig,
    split_policies,
)
from engine.proxy import apis
from engine.settings import ResolvedModelSettings, Settings
from engine.tokens import Tokenizer

#: APIs whose requests policies edit (offload and compaction: Anthropic Messages only, for now).
POLICY_APIS = (apis.ANTHROPIC_MESSAGES, apis.OPENAI_CHAT, apis.OPENAI_RESPONSES)
#: Tool results this small are never cleared: the placeholder would cost about as much.
MIN_CLEAR_TOKENS = 64
#: Agent sessions whose sticky decisions are remembered (least recently used forgotten first).
MAX_SESSION_STATES = 2_000
#: Offloaded results kept in memory for read_result (older ones are read from the database).
MAX_CACHED_RESULTS = 256
#: How often (seconds) the request path may stat the settings file for changes.
RELOAD_CHECK_S = 0.5


def policy_config(data: Mapping[str, Any], *, source: str | None = None) -> PolicyConfig:
    """The policies of parsed settings TOML (``policies`` tables at the top, per provider, per model)."""
    return split_policies(data, source=source)[1]


def load_policy_file(path: str | os.PathLike[str]) -> tuple[Settings, PolicyConfig]:
    """Settings and policies of one file (ConfigError naming the field when invalid)."""
    source = str(path)
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read settings: {exc}", source=source) from exc
    settings = Settings.from_dict(data, source=source)
    return settings, settings.policies


def without_policies(data: Mapping[str, Any]) -> dict[str, Any]:
    """Settings TOML without its ``policies`` tables."""
    return split_policies(data)[0]


class PolicyFile:
    """The settings file's policies, re-read when the file changes (checked at most every 0.5 s)."""

    def __init__(self, path: str | os.PathLike[str] | None, settings: Settings | None = None) -> None:
        self.path = Path(path) if path else None
        self.settings = settings
        self.config = PolicyConfig()
        self.error: str | None = None
        self._signature: tuple[int, int] | None = None
        self._checked = 0.0
        self._lock = threading.Lock()
        if self.path is not None:
            self.settings, self.config = load_policy_file(self.path)
            self._signature = self._stat()

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat() if self.path else None
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size) if st else None

    def current(self) -> PolicyConfig:
        if self.path is None:
            return self.config
        now = time.monotonic()
        if now - self._checked < RELOAD_CHECK_S:
            return self.config
        with self._lock:
            self._checked = now
            signature = self._stat()
            if signature != self._signature:
                self._signature = signature
                try:
                    self.settings, self.config = load_policy_file(self.path)
                    self.error = None
                except ConfigError as exc:  # keep the last valid policies
                    self.error = str(exc)
        return self.config


# -- planning edits (pure) ------------------------------------------------------------------------


@dataclass
class SessionPolicyState:
    """What stays decided for one agent session: tool results cleared (by tool_use id) and their refs."""

    cleared: dict[str, str] = field(default_factory=dict)  # tool_use id -> placeholder text
    offloaded: set[str] = field(default_factory=set)  # tool_use ids whose result is a preview + ref
    compacted_keys: list[Any] = field(default_factory=list)  # message keys the compacted prefix replaces
    compacted: list[Any] = field(default_factory=list)  # that prefix, rendered once (same bytes each time)


@dataclass(frozen=True)
class Edit:
    policy: str
    reason: str
    before_tokens: int
    after_tokens: int
    changes: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class PolicyOutcome:
    """The body to forward (None: unchanged), a refusal to answer instead, and what was done."""

    body: dict[str, Any] | None = None
    refusal: tuple[int, dict[str, Any]] | None = None
    edits: tuple[Edit, ...] = ()
    blobs: tuple[tuple[str, str, str | None], ...] = ()  # (ref, original content, tool name) to keep
    skipped: tuple[str, ...] = ()
    serve_read_result: bool = False  # the request offers read_result: the proxy answers its calls

    @property
    def changed(self) -> bool:
        return self.body is not None


def result_ref(content: Any) -> str:
    """A tool result's reference: stable for the same content, so placeholders are byte-stable."""
    return (
        "res_"
        + hashlib.sha256(json.dumps(content, ensure_ascii=False, sort_keys=True).encode()).hexdigest()[:16]
    )


@dataclass(frozen=True)
class _Result:
    tool_use_id: str
    name: str | None
    location: tuple[int, int | None]  # (message index, block index or None for a whole chat message)
    content: Any
    tokens: int


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False)


def messages_key_of(api: str) -> str:
    return "input" if api == apis.OPENAI_RESPONSES else "messages"


def _tool_results(api: str, messages: list[Any], tokenizer: Tokenizer) -> list[_Result]:
    names: dict[str, str] = {}
    found: list[_Result] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        if api == apis.OPENAI_RESPONSES:
            kind = message.get("type")
            if kind in ("function_call", "custom_tool_call") and message.get("call_id"):
                names[message["call_id"]] = message.get("name")
            elif kind in ("function_call_output", "custom_tool_call_output") and message.get("call_id"):
                content = message.get("output")
                found.append(_Result(message["call_id"], names.get(message["call_id"]), (i, None), content,
                                     tokenizer.count(_content_text(content))))  # fmt: skip
            continue
        if api == apis.OPENAI_CHAT:
            for call in message.get("tool_calls") or []:
                if isinstance(call, dict) and call.get("id"):
                    names[call["id"]] = (call.get("function") or {}).get("name")
            if message.get("role") == "tool" and message.get("tool_call_id"):
                content = message.get("content")
                found.append(_Result(message["tool_call_id"], names.get(message["tool_call_id"]), (i, None),
                                     content, tokenizer.count(_content_text(content))))  # fmt: skip
            continue
        blocks = message.get("content")
        if not isinstance(blocks, list):
            continue
        for j, block in enumerate(blocks):
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use" and block.get("id"):
                names[block["id"]] = block.get("name")
            elif block.get("type") == "tool_result" and block.get("tool_use_id"):
                content = block.get("content")
                found.append(_Result(block["tool_use_id"], names.get(block["tool_use_id"]), (i, j), content,
                                     tokenizer.count(_content_text(content))))  # fmt: skip
    return found


#: The tool the proxy adds when it has offloaded results, and answers itself.
READ_RESULT_NAME = "read_result"
READ_RESULT_TOOL: dict[str, Any] = {
    "name": READ_RESULT_NAME,
    "description": (
        "Read a tool result that ctxdesk stored because it was too large. Pass the ref_id from the "
        "note. Returns `limit` characters (default 20,000) from character `offset`, or with `pattern` "
        "(a case-insensitive regular expression) the matching lines with their line numbers."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "ref_id": {"type": "string", "description": "The stored result's reference."},
            "offset": {"type": "integer", "minimum": 0, "description": "Character offset to start at."},
            "limit": {"type": "integer", "minimum": 1, "description": "Characters to read."},
            "pattern": {"type": "string", "description": "Return only the lines matching this."},
        },
        "required": ["ref_id"],
    },
}
#: Characters of an offloaded result kept inline as its preview.
OFFLOAD_PREVIEW_CHARS = 1_500


def offload_note(name: str | None, text: str, ref: str) -> str:
    """An offloaded result in the context: its start, then where the rest is."""
    size = len(text.encode("utf-8"))
    return (
        f"{text[:OFFLOAD_PREVIEW_CHARS]}\n[Tool result stored by ctxdesk ({name or 'tool'}, {size:,} bytes): "
        f'this is its start. Call read_result with ref_id="{ref}" (offset and limit, or pattern) to read the rest.]'
    )


def read_stored(text: str, tool_input: Mapping[str, Any]) -> str:
    """Answer one read_result call over a stored text (errors as ``Error: ...`` for the model)."""
    import re

    pattern = tool_input.get("pattern")
    if isinstance(pattern, str) and pattern:
        try:
            regex = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            return f"Error: invalid pattern ({exc})"
        hits = [f"{n}: {line}" for n, line in enumerate(text.splitlines(), 1) if regex.search(line)]
        return "\n".join(hits[:500]) or "(no matching lines)"
    offset = tool_input.get("offset") or 0
    limit = tool_input.get("limit") or 20_000
    if not isinstance(offset, int) or not isinstance(limit, int) or offset < 0 or limit < 1:
        return "Error: offset must be >= 0 and limit >= 1"
    end = min(len(text), offset + min(limit, 100_000))
    more = f"next offset={end}" if end < len(text) else "end of result"
    return f"[characters {offset:,} to {end:,} of {len(text):,}; {more}]\n{text[offset:end]}"


def placeholder(name: str | None, content: Any, ref: str) -> str:
    size = len(_content_text(content).encode("utf-8"))
    return f"[ctxdesk cleared this tool result ({name or 'tool'}, {size:,} bytes, ref {ref}) to save context]"


def _apply_cleared(api: str, messages: list[Any], results: list[_Result], state: SessionPolicyState,
                   clear_inputs: bool) -> None:  # fmt: skip
    cleared_ids = {r.tool_use_id for r in results if r.tool_use_id in state.cleared}
    for r in results:
        if r.tool_use_id not in state.cleared:
            continue
        i, j = r.location
        if j is None:
            key = "output" if api == apis.OPENAI_RESPONSES else "content"
            messages[i] = {**messages[i], key: state.cleared[r.tool_use_id]}
        else:
            blocks = list(messages[i]["content"])
            blocks[j] = {**blocks[j], "content": state.cleared[r.tool_use_id]}
            messages[i] = {**messages[i], "content": blocks}
    if not clear_inputs:
        return
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        if api == apis.OPENAI_CHAT:
            calls = message.get("tool_calls") or []
            if any(isinstance(c, dict) and c.get("id") in cleared_ids for c in calls):
                new_calls = [
                    {**c, "function": {**(c.get("function") or {}), "arguments": "{}"}} if c.get("id") in cleared_ids else c
                    for c in calls
                ]  # fmt: skip
                messages[i] = {**message, "tool_calls": new_calls}
        elif isinstance(message.get("content"), list):
            blocks = [
                {**b, "input": {}} if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("id") in cleared_ids else b
                for b in message["content"]
            ]  # fmt: skip
            messages[i] = {**message, "content": blocks}


def _prompt_tokens(api: str, body: Mapping[str, Any], tokenizer: Tokenizer) -> int:
    from engine.budget import measure_components

    view = apis.request_view(api, body)
    return measure_components(
        tokenizer=tokenizer, system=view.system, tools=view.tools, messages=view.messages
    ).total


def _compaction(
    api: str, body: dict[str, Any], policy: CompactionPolicy, tokenizer: Tokenizer,
    resolved: ResolvedModelSettings, state: SessionPolicyState,
) -> tuple[Edit | None, dict[str, Any]]:  # fmt: skip
    """The compaction policy: reuse the compacted prefix while the agent re-sends it; compact
    the whole history again when the prompt passes ``trigger`` of the window."""
    from engine.compaction import OfflineSummarizer
    from engine.compaction.operations import compact
    from engine.proxy.live import message_key, render

    raw = list(body.get("messages") or [])
    converted = apis.convert_messages(api, raw)
    if len(converted) != len(raw):
        return None, body
    keys = [message_key(m) for m in converted]
    before = _prompt_tokens(api, body, tokenizer)
    current, reused = body, False
    n = len(state.compacted_keys)
    if n and keys[:n] == state.compacted_keys:
        current, reused = {**body, "messages": [*state.compacted, *raw[n:]]}, True
    tokens = _prompt_tokens(api, current, tokenizer) if reused else before
    threshold = int(resolved.budget_tokens * policy.trigger)
    if tokens <= threshold:
        if not reused:
            return None, body
        return Edit("compaction", "the compacted history is sent again while the agent re-sends it", before, tokens,
                    ({"strategy": policy.strategy, "reused": True, "replaced_messages": n},)), current  # fmt: skip
    result = compact(
        converted, strategy=policy.strategy, target_tokens=max(1, threshold // 2), tokenizer=tokenizer,
        summarizer=OfflineSummarizer(),
    )  # fmt: skip
    if result.after_tokens >= result.before_tokens:
        return None, current if reused else body
    state.compacted_keys = keys
    state.compacted = render(api, list(result.messages), result.summary, keep_meta=True)
    compacted = {**body, "messages": list(state.compacted)}
    after = _prompt_tokens(api, compacted, tokenizer)
    reason = f"prompt {tokens:,} tokens over {policy.trigger:.0%} of the window ({threshold:,}): compacted with {policy.strategy}"
    changes = ({"strategy": policy.strategy, "strategies_run": list(result.strategies_run), "reused": False,
                "replaced_messages": len(raw), "sent_messages": len(state.compacted),
                "summary": result.summary},)  # fmt: skip
    return Edit("compaction", reason, before, after, changes), compacted


def _clearing_pays(messages: list[Any], candidates: list[_Result], tokenizer: Tokenizer,
                   body: Mapping[str, Any], must: bool) -> bool:  # fmt: skip
    """clear_tool_results' ``cache_aware``: the batch pays for the cache rebuild (engine.prompt.cache_policy)."""
    from engine.prompt.cache_policy import CacheRates, plan_request_clearing

    if not candidates:
        return False
    model = body.get("model") if isinstance(body.get("model"), str) else None
    first = min(r.location[0] for r in candidates)
    freed = sum(r.tokens for r in candidates)
    decision = plan_request_clearing(
        messages, first, freed, count=tokenizer.count, rates=CacheRates.for_model(model), must_clear=must
    )
    return decision.clear


def too_long_error(api: str, tokens: int, maximum: int) -> tuple[int, dict[str, Any]]:
    """The provider's own 400 for a prompt over the window (agents already handle it)."""
    message = f"prompt is too long: {tokens} tokens > {maximum} maximum"
    if api == apis.ANTHROPIC_MESSAGES:
        return 400, {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    return 400, {"error": {"message": message, "type": "invalid_request_error", "param": "messages",
                           "code": "context_length_exceeded"}}  # fmt: skip


def plan_edits(
    api: str,
    body: dict[str, Any],
    policies: Policies,
    *,
    tokenizer: Tokenizer,
    resolved: ResolvedModelSettings | None,
    state: SessionPolicyState,
) -> PolicyOutcome:
    """The edits the policies make to one request (pure apart from updating ``state``)."""
    if api not in POLICY_APIS or not policies.active:
        return PolicyOutcome()
    offload = policies.offload if api == apis.ANTHROPIC_MESSAGES else None
    compaction = policies.compaction if api == apis.ANTHROPIC_MESSAGES and resolved is not None else None
    skipped = tuple(
        n for n, applied in (("offload", offload), ("compaction", compaction))
        if getattr(policies, n) is not None and applied is None
    )  # fmt: skip
    messages_key = messages_key_of(api)
    messages = list(body.get(messages_key) or [])
    before = _prompt_tokens(api, body, tokenizer)
    edits: list[Edit] = []
    blobs: list[tuple[str, str, str | None]] = []
    results = _tool_results(api, messages, tokenizer)
    clear = policies.clear_tool_results
    guard = policies.guard
    limit = resolved.effective_window if resolved is not None else None
    over_window = limit is not None and before > limit
    if clear is None and guard is not None and guard.action == "compact" and over_window:
        clear = ClearToolResultsPolicy(trigger=0, keep=1)  # the guard's compaction: clear all but the last
    offloaded_now: list[_Result] = []
    if offload is not None:
        for r in results:
            text = _content_text(r.content)
            if r.tool_use_id not in state.cleared and len(text.encode("utf-8")) > offload.threshold_bytes:
                ref = result_ref(r.content)
                state.cleared[r.tool_use_id] = offload_note(r.name, text, ref)
                state.offloaded.add(r.tool_use_id)
                blobs.append((ref, text, r.name))
                offloaded_now.append(r)
    newly: list[_Result] = []
    if clear is not None and (before > clear.trigger or over_window):
        keep_ids = {r.tool_use_id for r in results[len(results) - clear.keep :]} if clear.keep else set()
        candidates = [
            r for r in results
            if r.tool_use_id not in state.cleared and r.tool_use_id not in keep_ids
            and (r.name or "") not in clear.exclude_tools and r.tokens > MIN_CLEAR_TOKENS
        ]  # fmt: skip
        if sum(r.tokens for r in candidates) >= clear.clear_at_least and (
            not clear.cache_aware or _clearing_pays(messages, candidates, tokenizer, body, over_window)
        ):
            newly = candidates
    for r in newly:
        ref = result_ref(r.content)
        state.cleared[r.tool_use_id] = placeholder(r.name, r.content, ref)
        blobs.append((ref, _content_text(r.content), r.name))
    sticky = any(r.tool_use_id in state.cleared for r in results)
    serve = any(r.tool_use_id in state.offloaded for r in results)
    new_body: dict[str, Any] | None = None
    after = before
    if sticky:
        _apply_cleared(api, messages, results, state, bool(clear and clear.clear_tool_inputs))
        new_body = {**body, messages_key: messages}
        if serve and not any(
            isinstance(t, dict) and t.get("name") == READ_RESULT_NAME for t in body.get("tools") or []
        ):
            new_body["tools"] = [*(body.get("tools") or []), READ_RESULT_TOOL]
        after = _prompt_tokens(api, new_body, tokenizer)
        if offloaded_now or any(r.tool_use_id in state.offloaded for r in results):
            offloaded = [r for r in results if r.tool_use_id in state.offloaded]
            edits.append(Edit(
                "offload",
                f"{len(offloaded_now)} tool result(s) over {offload.threshold_bytes:,} bytes offloaded; "
                f"{len(offloaded)} in this request are previews with a read_result reference" if offload else "offloaded",
                before, after,
                tuple({"tool_use_id": r.tool_use_id, "tool_name": r.name, "tokens": r.tokens,
                       "ref": result_ref(r.content), "new": r in offloaded_now} for r in offloaded),
            ))  # fmt: skip
        changes = tuple(
            {"tool_use_id": r.tool_use_id, "tool_name": r.name, "tokens": r.tokens, "ref": result_ref(r.content),
             "new": r in newly}
            for r in results if r.tool_use_id in state.cleared and r.tool_use_id not in state.offloaded
        )  # fmt: skip
        reason = (
            f"{len(newly)} more tool result(s) cleared: prompt {before:,} tokens over the trigger"
            if newly
            else "tool results cleared earlier stay cleared (the sent prefix stays byte-stable)"
        )
        if changes:
            edits.append(Edit("clear_tool_results", reason, before, after, changes))
    if compaction is not None:
        source = new_body or body
        compact_edit, compacted_body = _compaction(api, source, compaction, tokenizer, resolved, state)
        if compact_edit is not None:
            new_body, after = compacted_body, compact_edit.after_tokens
            edits.append(compact_edit)
    if guard is not None and limit is not None and after > limit:
        return PolicyOutcome(
            body=new_body,
            refusal=too_long_error(api, after, limit),
            edits=(
                *edits,
                Edit("guard", f"prompt {after:,} tokens > effective window {limit:,}", before, after),
            ),
            blobs=tuple(blobs),
            skipped=skipped,
        )
    return PolicyOutcome(
        body=new_body, edits=tuple(edits), blobs=tuple(blobs), skipped=skipped, serve_read_result=serve
    )


class Controller:
    """Applies the settings file's policies to requests on the proxy's request path.

    Keeps each agent session's sticky decisions (by the agent's own id, else by its first
    message); never raises for a body it cannot read (that request is forwarded unchanged).
    """

    def __init__(self, policy_file: PolicyFile, live: Any = None) -> None:
        self.policy_file = policy_file
        self.live = live  # engine.proxy.live.LiveCompactions, or None
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

    def apply(self, api: str, raw: bytes, headers: Mapping[str, str]) -> PolicyOutcome:
        """What to do with one request; cheap (no parsing) when no policy or live compaction applies."""
        from engine.errors import ContextDeskError
        from engine.settings import resolve_model_settings
        from engine.tokens import get_tokenizer

        if api not in POLICY_APIS:
            return PolicyOutcome()
        config = self.policy_file.current()
        live_session = self.live.session_of(headers) if self.live is not None else None
        live_state = self.live.current(live_session) if live_session else None
        has_live = live_state is not None and live_state.snapshot is not None
        if not config.active and not has_live:
            return PolicyOutcome()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return PolicyOutcome()
        if not isinstance(body, dict) or not isinstance(body.get(messages_key_of(api)), list):
            return PolicyOutcome()
        provider = apis.PROVIDERS[api]
        model = body.get("model") if isinstance(body.get("model"), str) else None
        policies = config.for_model(model, provider)
        try:
            resolved = resolve_model_settings(model or "unknown", provider, self.policy_file.settings)
        except ContextDeskError:
            resolved = None
        tokenizer = get_tokenizer(resolved.tokenizer if resolved else "anthropic")
        live_edit: Edit | None = None
        if has_live:
            rewrite = self.live.rewrite(api, body, live_session)
            if rewrite is not None:
                before = _prompt_tokens(api, body, tokenizer)
                body = {**body, "messages": rewrite.messages}
                after = _prompt_tokens(api, body, tokenizer)
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
            key = apis.agent_session_id(api, headers, body) or _first_message_key(body)
            with self._lock:
                state = self._states.pop(key, None) or SessionPolicyState()
                self._states[key] = state  # most recently used last
                while len(self._states) > MAX_SESSION_STATES:
                    self._states.pop(next(iter(self._states)))
                outcome = plan_edits(api, body, policies, tokenizer=tokenizer, resolved=resolved, state=state)
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
