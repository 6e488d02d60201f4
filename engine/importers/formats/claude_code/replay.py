"""The exact requests Claude Code (2.1.3xx) records in its transcript, rebuilt as they were sent.

Before each call Claude Code writes an ``api-request`` line (its ``id`` is the ``requestRef`` of
the assistant lines answering it): ``params`` (model, betas, max_tokens, thinking,
context_management, ...), ``shapeHash`` naming an ``api-request-shape`` line that holds the
system blocks and tool definitions, ``base`` (an earlier request) and ``keep`` (how many of its
messages were sent again), ``tail`` (hashes of the messages after them) and ``cacheControl``
(``{"path": [...], "value": {...}}`` breakpoints). A hash names an ``api-request-blob`` line, or
a run of the file's own user/assistant lines that serializes to the same message: Claude Code
skips writing a blob the file already holds. Hashes are sha256 of the message's JSON with sorted
keys, compact, ``cache_control`` left out (:func:`message_hash`); ``requestDigest`` is sha256 of
the whole request so serialized (``cache_control`` kept, betas included), which checks each rebuild.

What the file does not hold: ``metadata`` (user and device ids), ``stream``, and the attribution
block Claude Code puts first in ``system`` as it sends (``x-anthropic-billing-header: cc_version=...``,
a few tokens; it varies per request on Anthropic's own API). The rebuilt body leaves them out.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.components import measure_request
from engine.events import ComponentTokens
from engine.importers.formats.claude_code.requests import ThinkingRule, sent_messages
from engine.importers.parsing.parsed import SourceProblem
from engine.importers.parsing.readers import anthropic_message
from engine.messages import Message, TextBlock
from engine.tokens import Tokenizer

Line = tuple[int, dict[str, Any]]

REPLAY_LINE_TYPES = ("api-request-shape", "api-request-blob", "api-request")
#: Params that are headers, not body fields, when Claude Code sends the request.
_HEADER_PARAMS = ("betas",)
#: The reminder listing the skills Claude Code offers (the ``skills`` component).
SKILL_LISTING = "<system-reminder>\nThe following skills are available for use with the Skill tool"
#: Body keys Claude Code leaves out of ``requestDigest``.
_UNDIGESTED = ("metadata", "stream", "thread", "diagnostics", "safeguards", "data_flow")


@dataclass(frozen=True)
class ReplayedRequest:
    """One call as Claude Code sent it (``body`` without ``metadata``/``stream``, which the file
    does not record), or why it could not be rebuilt (``problem``)."""

    request_id: str
    line: int
    body: dict[str, Any] | None
    headers: dict[str, str] = field(default_factory=dict)
    query_source: str | None = None
    digest: str | None = None
    timestamp: str | None = None
    version: str | None = None
    shape_hash: str | None = None
    #: The rebuilt body hashes to the line's ``requestDigest`` (None: the line has no digest).
    verified: bool | None = None
    #: Texts of Claude Code's compaction summaries in the file (counted as the summary component).
    summary_texts: frozenset[str] = frozenset()
    problem: str | None = None

    @property
    def betas(self) -> list[str]:
        value = self.headers.get("anthropic-beta")
        return value.split(",") if value else []


def canonical_json(value: Any, *, omit_cache_control: bool = True) -> str:
    """JSON as Claude Code hashes it: keys sorted, compact, ``cache_control`` left out."""
    if omit_cache_control:
        value = _without_cache_control(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def message_hash(message: dict[str, Any]) -> str:
    """Claude Code's hash of one message (string content counted as one text block)."""
    content = message.get("content")
    if isinstance(content, str):
        message = {**message, "content": [{"type": "text", "text": content}]}
    return _sha256(canonical_json(message))


def has_replay_lines(lines: Sequence[Line]) -> bool:
    return any(o.get("type") == "api-request" for _, o in lines)


def replay_requests(lines: Sequence[Line]) -> dict[str, ReplayedRequest]:
    """Every ``api-request`` line of a file rebuilt, by its id (empty when the file has none)."""
    if not has_replay_lines(lines):
        return {}
    shapes: dict[str, dict[str, Any]] = {}
    blobs: dict[str, dict[str, Any]] = {}
    for _, obj in lines:
        kind = obj.get("type")
        if kind == "api-request-shape" and isinstance(obj.get("shape"), dict):
            shapes[str(obj.get("shapeHash"))] = obj["shape"]
        elif kind == "api-request-blob" and isinstance(obj.get("message"), dict):
            blobs[str(obj.get("hash"))] = obj["message"]
    runs, summaries = _transcript_runs(lines)
    sent: dict[str, list[dict[str, Any]]] = {}  # request id -> messages (no cache_control)
    pieces: dict[int, Any] = {}  # the digests' JSON of the messages and shapes requests share
    out: dict[str, ReplayedRequest] = {}
    for n, obj in lines:
        if obj.get("type") != "api-request" or not isinstance(obj.get("id"), str):
            continue
        request = _rebuild(n, obj, shapes, blobs, runs, sent, summaries, pieces)
        out[request.request_id] = request
    return out


def _rebuild(
    n: int,
    obj: dict[str, Any],
    shapes: dict[str, dict[str, Any]],
    blobs: dict[str, dict[str, Any]],
    runs: dict[str, dict[str, Any]],
    sent: dict[str, list[dict[str, Any]]],
    summaries: frozenset[str],
    pieces: dict[int, Any] | None = None,
) -> ReplayedRequest:
    request_id = obj["id"]
    params = obj.get("params") if isinstance(obj.get("params"), dict) else {}
    tail = (
        [h for h in obj.get("tail") or [] if isinstance(h, str)] if isinstance(obj.get("tail"), list) else []
    )
    common = {
        "request_id": request_id,
        "line": n,
        "query_source": obj.get("querySource"),
        "digest": obj.get("requestDigest"),
        "timestamp": obj.get("timestamp"),
        "version": obj.get("version"),
        "shape_hash": obj.get("shapeHash"),
    }
    shape = shapes.get(str(obj.get("shapeHash")))
    if shape is None:
        return ReplayedRequest(body=None, problem=f"shape {obj.get('shapeHash')} not in the file", **common)
    base: list[dict[str, Any]] = []
    if obj.get("base") is not None:
        found = sent.get(str(obj["base"]))
        if found is None:
            return ReplayedRequest(body=None, problem=f"base request {obj['base']} not in the file", **common)
        base = found
    keep = obj.get("keep") if isinstance(obj.get("keep"), int) else 0
    if not 0 <= keep <= len(base):
        return ReplayedRequest(
            body=None, problem=f"keeps {keep} message(s) of a request that sent {len(base)}", **common
        )
    messages = list(base[:keep])
    for h in tail:
        message = blobs.get(h) or runs.get(h)
        if message is None:
            return ReplayedRequest(body=None, problem=f"message {h} neither a blob nor in the file", **common)
        messages.append(message)
    sent[request_id] = messages
    # shares the file's shapes and messages with the other requests: _set_cache_control copies
    # what it marks (copying every request whole cost a fifth of an import)
    body: dict[str, Any] = {"model": params.get("model"), "messages": list(messages)}
    if shape.get("system") is not None:
        body["system"] = shape["system"]
    if shape.get("tools") is not None:
        body["tools"] = shape["tools"]
    body.update({k: copy.deepcopy(v) for k, v in params.items() if k != "model" and k not in _HEADER_PARAMS})
    marks = obj.get("cacheControl")
    for mark in marks if isinstance(marks, list) else []:
        problem = _set_cache_control(body, mark)
        if problem:
            return ReplayedRequest(body=None, problem=problem, **common)
    betas = params.get("betas")
    headers = {"anthropic-beta": ",".join(map(str, betas))} if isinstance(betas, list) and betas else {}
    digest = obj.get("requestDigest")
    verified = request_digest(body, betas, pieces=pieces) == digest if isinstance(digest, str) else None
    return ReplayedRequest(
        body=body,
        headers=headers,
        verified=verified,
        summary_texts=summaries,
        **common,
    )


def request_digest(body: dict[str, Any], betas: Any = None, *, pieces: dict[int, Any] | None = None) -> str:
    """Claude Code's ``requestDigest`` of a request body (and its betas). ``pieces``: the JSON of
    values already written, by their identity (kept with them): a request sends its history and
    shape again, the same objects, and writing them again for each request made a session's import
    grow with the square of its calls. The text is the one ``canonical_json`` writes of the whole."""
    value = {k: v for k, v in body.items() if k not in _UNDIGESTED}
    if isinstance(betas, list):
        value["betas"] = betas
    messages = value.get("messages")
    if isinstance(messages, list):
        value["messages"] = [
            {**m, "content": [{"type": "text", "text": m["content"]}]}
            if isinstance(m, dict) and isinstance(m.get("content"), str)
            else m
            for m in messages
        ]
    if pieces is None:
        return _sha256(canonical_json(value, omit_cache_control=False))

    def piece(item: Any) -> str:
        if not isinstance(item, dict | list):
            return canonical_json(item, omit_cache_control=False)
        known = pieces.get(id(item))
        if known is None or known[0] is not item:
            known = pieces[id(item)] = (item, canonical_json(item, omit_cache_control=False))
        return str(known[1])

    parts = []
    for key in sorted(value):  # canonical_json's sort_keys, its separators: the same text, in pieces
        item = value[key]
        text = (
            "[" + ",".join(map(piece, item)) + "]"
            if key == "messages" and isinstance(item, list)
            else piece(item)
        )
        parts.append(f"{json.dumps(key, ensure_ascii=False)}:{text}")
    return _sha256("{" + ",".join(parts) + "}")


def exact_components(
    request: ReplayedRequest,
    tokenizer: Tokenizer,
    *,
    where: str = "api-request",
    rule: ThinkingRule | None = None,
    shape_counts: dict[str, ComponentTokens] | None = None,
    converted: dict[int, tuple[Any, Message | None]] | None = None,
) -> ComponentTokens:
    """The component breakdown of a rebuilt request, by the one measure every source uses
    (:func:`engine.components.measure_request`): its real system blocks and tool definitions, the
    compaction summary and skill listing Claude Code sends as text blocks, conversation and tool
    results as billed (earlier turns' thinking left out where ``rule`` says the API strips it).
    ``shape_counts`` memoizes the system and tools part by shape hash (the same ~100 KB every call);
    ``converted``, each sent message (by the identity of its dict, which it holds) as a message: each
    request sends its history again, the same dicts (:func:`_rebuild`), and converting and counting
    them again for every request made a session's import grow with the square of its calls."""
    body = request.body or {}
    memo = shape_counts if shape_counts is not None else {}
    key = str(request.shape_hash)
    if key not in memo:
        memo[key] = measure_request(tokenizer, system=_system_blocks(body), tools=_tools(body), messages=())
    seen = converted if converted is not None else {}
    messages = []
    for i, raw in enumerate(body.get("messages") or []):
        known = seen.get(id(raw))
        if known is None or known[0] is not raw:
            try:
                message: Message | None = anthropic_message(raw, where=f"{where} message {i}")
            except SourceProblem:
                message = None
            known = seen[id(raw)] = (raw, message)
        if known[1] is not None:
            messages.append(known[1])
    if rule is not None:
        messages = sent_messages(messages, rule, slimmed=seen)[0]
    texts = [b.text for m in messages for b in m.blocks if isinstance(b, TextBlock)]
    summary = next((t for t in texts if t.strip() in request.summary_texts), None)
    skills = [t for t in texts if t.startswith(SKILL_LISTING)]
    sent = measure_request(tokenizer, system=(), tools=(), messages=messages, summary=summary, skills=skills)
    fixed = memo[key]
    return sent.model_copy(update={"system": fixed.system, "tools": fixed.tools})


def _system_blocks(body: dict[str, Any]) -> list[str]:
    system = body.get("system")
    if isinstance(system, str):
        return [system]
    return [str(b.get("text") or "") for b in system or [] if isinstance(b, dict)]


def _tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in body.get("tools") or [] if isinstance(t, dict)]


def _set_cache_control(body: dict[str, Any], mark: Any) -> str | None:
    path = mark.get("path") if isinstance(mark, dict) else None
    if not isinstance(path, list) or not path:
        return f"cache_control mark without a path: {mark!r}"
    node: Any = body
    parents: list[tuple[Any, Any]] = []
    for step in path:
        if isinstance(node, str) and step == 0 and parents and parents[-1][1] == "content":
            # a message sent as a string becomes one text block when a breakpoint is put on it
            node = [{"type": "text", "text": node}]
        try:
            child = node[step]
        except (KeyError, IndexError, TypeError):
            return f"cache_control path {path} not in the request"
        parents.append((node, step))
        node = child
    if not isinstance(node, dict):
        return f"cache_control path {path} does not name a block"
    # copy on write: the lists and blocks on the path are shared with other requests
    node = {**node, "cache_control": mark.get("value")}
    for parent, step in reversed(parents[1:]):
        copied = list(parent) if isinstance(parent, list) else dict(parent)
        copied[step] = node
        node = copied
    body[parents[0][1]] = node
    return None


def _transcript_runs(lines: Sequence[Line]) -> tuple[dict[str, dict[str, Any]], frozenset[str]]:
    """Messages the file's user/assistant lines make, by hash, as Claude Code groups them:
    consecutive user lines, or assistant lines of one ``message.id``; every prefix of a run.
    Also the texts of compaction summaries (``isCompactSummary`` lines)."""
    out: dict[str, dict[str, Any]] = {}
    summaries: set[str] = set()
    run_key: tuple[str, Any] | None = None
    hasher: Any = None
    blocks: list[Any] = []
    for _, obj in lines:
        kind = obj.get("type")
        if kind == "system" and obj.get("subtype") == "compact_boundary":
            run_key = None
            continue
        if kind not in ("user", "assistant"):
            continue
        raw = obj.get("message")
        role = raw.get("role") if isinstance(raw, dict) else None
        content = raw.get("content") if isinstance(raw, dict) else None
        if not isinstance(role, str) or content is None:
            run_key = None
            continue
        message_id = raw.get("id") if isinstance(raw.get("id"), str) else None
        key = (role, None if role == "user" else message_id)
        if run_key is None or key != run_key or (role != "user" and message_id is None):
            run_key, blocks = key, []
            hasher = hashlib.sha256(b'{"content":[')
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        parts = parts if isinstance(parts, list) else [parts]
        if obj.get("isCompactSummary"):
            summaries.update(
                str(p.get("text")).strip() for p in parts if isinstance(p, dict) and p.get("type") == "text"
            )
        for part in parts:
            if blocks:
                hasher.update(b",")
            hasher.update(canonical_json(part).encode("utf-8", "surrogatepass"))
            blocks.append(part)
        ending = '],"role":' + json.dumps(role, ensure_ascii=False) + "}"
        digest = hasher.copy()
        digest.update(ending.encode("utf-8"))
        # one line of string content is sent as that string (the hash is the same either way)
        alone = isinstance(content, str) and len(blocks) == 1
        out.setdefault(digest.hexdigest(), {"role": role, "content": content if alone else list(blocks)})
    return out, frozenset(summaries)


def _without_cache_control(value: Any) -> Any:
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    return value


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
