"""One Codex rollout read line by line (:class:`RolloutReader`).

Each line is ``{"timestamp", "type", "payload"}``: ``session_meta`` (id, cwd, CLI version, the
base instructions sent as the first developer message; a sub-agent's names its
``parent_thread_id``), ``turn_context`` (the model of the turn), ``response_item`` (what the
model saw or produced: messages, reasoning, function / custom tool calls and their outputs,
messages between agents, web searches), ``event_msg`` (``token_count`` with the call's
``last_token_usage`` and the ``model_context_window``; ``task_complete`` with the ``error`` of a
call that failed; sub-agent activity) and ``compacted`` (a compaction: later calls send its
replacement history). The items one response produced form one assistant message; the next
``token_count`` is that call's usage. Reasoning is encrypted, so its size comes from the usage
(``reasoning_tokens``). A resumed run appends to the same file and continues the same session.
Rollouts from before the envelope (items on their own lines after a ``{"id", "instructions"}``
header) read the same way. One concept: reading a rollout (the reader class and its entry; the
items' blocks are in ``items``, the files beside it in ``family``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from engine.call_failures import FailureCause, classify_failure, failure_details
from engine.importers.formats.codex.family import SETTING_KEYS
from engine.importers.formats.codex.items import (
    agent_message_text,
    codex_usage,
    message_content,
    output_text,
    tool_use_of,
)
from engine.importers.formats.codex.versions import counts_before_items
from engine.importers.parsing.parsed import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing.readers import as_count, build_message, message_of, provider_of
from engine.messages import TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock

Line = tuple[int, Any]
#: A stated window beyond this is not a window (ignored).
MAX_WINDOW = 10**9
ENVELOPE_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "compacted"})
ITEM_TYPES = frozenset(
    {
        "message", "reasoning", "function_call", "function_call_output", "custom_tool_call",
        "custom_tool_call_output", "local_shell_call", "web_search_call", "tool_search_call",
        "tool_search_output", "agent_message",
    }
)  # fmt: skip
#: Calls the provider runs itself: no output item follows them (the model used the result inside
#: the same response), so none is looked for.
SERVER_CALLS = frozenset({"web_search_call", "tool_search_call"})
_CALL_ITEMS = ("function_call", "custom_tool_call", "local_shell_call", *SERVER_CALLS)
_OUTPUT_ITEMS = ("function_call_output", "custom_tool_call_output", "tool_search_output")
_CWD = re.compile(r"<cwd>([^<]+)</cwd>")
#: The prompt Codex sends (as the last user message) to have its history summarized: its own
#: template (codex-rs core/templates/compact/prompt.md, as Codex 0.169 sent it). The rollout keeps
#: the summary and the replacement history, not this prompt.
CODEX_COMPACTION_PROMPT = (
    "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another LLM that "
    "will resume the task.\n\nInclude:\n- Current progress and key decisions made\n- Important context, "
    "constraints, or user preferences\n- What remains to be done (clear next steps)\n- Any critical data, "
    "examples, or references needed to continue\n\nBe concise, structured, and focused on helping the next "
    "LLM seamlessly continue the work.\n"
)
#: Codex's ``codex_error_info`` words for a call the provider refused or that never answered.
_ERROR_CAUSES: dict[str, FailureCause] = {
    "context_window_exceeded": "prompt_too_long",
    "usage_limit_exceeded": "rate_limited",
    "server_overloaded": "overloaded",
    "internal_server_error": "provider_error",
}


def parse_codex(lines: Sequence[Line], *, key: str, settings: dict[str, Any] | None = None) -> ParsedSession:
    """The session of a rollout's lines; ``settings`` the agent's own config (config.toml)."""
    reader = RolloutReader(key, settings=settings)
    for number, value in lines:
        reader.line = number
        try:
            reader.read(value)
        except SourceProblem as exc:
            raise SourceProblem(str(exc), line=number) from exc
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise SourceProblem(
                f"line {number}: cannot read Codex line ({type(exc).__name__}: {exc})", line=number
            ) from exc
    return reader.finish()


class RolloutReader:
    """Reads a rollout line by line into one ParsedSession (``read``, then ``finish``); also
    reads bare Responses items (``read_item``), as OpenAI Responses input lists hold them.

    One concept: the state of one rollout as it is read (the reply in progress, calls awaiting
    their count, the last failure, a compaction awaiting Codex's estimate); every line type
    reads and changes the same state, so it is one class."""

    def __init__(self, key: str, *, settings: dict[str, Any] | None = None) -> None:
        self.session = ParsedSession(key=key, messages=[])
        self.settings = dict(settings or {})
        self.model: str | None = None
        self.window: int | None = None
        self.open_reply: ParsedMessage | None = None  # the assistant message of the call in progress
        self.awaiting_usage: list[ParsedMessage] = []
        self.last_totals: Any = None
        self.counts_first = False  # Codex before 0.66 writes a call's usage before its reply
        self.early_count: dict[str, Any] | None = None  # such a usage, until its reply is read
        self.counted_reply: ParsedMessage | None = None  # the reply it went to, until the next input
        self.timestamp: str | None = None
        self.line = 0
        self.unnamed = 0  # calls without an id so far (each gets its own)
        self.failed_ref: str | None = None  # the last failed call, until a call answers
        self.failed_too_long = False
        self.calls_since_failure = 0  # calls Codex counted since that failure
        self.pending_compaction: dict[str, Any] | None = None  # set between `compacted` and its estimate
        self.children: dict[str, str] = {}  # sub-agent thread id -> the spawn call's id
        self.inheriting = False  # reading the parent history a forked sub-agent starts with
        # Kept as they grow, so a cut-short turn costs its own messages, not the whole rollout's
        # (a long rollout cut short often was quadratic): every call id a result answers so far,
        # and the last message before which every call is answered or provider-run.
        self.answered: set[str] = set()
        self.settled: ParsedMessage | None = None

    # -- lines ---------------------------------------------------------------------------------
    def read(self, value: Any) -> None:
        if not isinstance(value, dict):
            raise SourceProblem(f"expected a JSON object, found {type(value).__name__}")
        self.timestamp = value.get("timestamp") if isinstance(value.get("timestamp"), str) else self.timestamp
        kind = value.get("type")
        payload = value.get("payload")
        if kind not in ENVELOPE_TYPES:  # the pre-envelope layout, or a bookkeeping line
            if "instructions" in value and "id" in value:
                self._meta(value)
            elif kind in ITEM_TYPES:
                self.read_item(value)
            return
        if not isinstance(payload, dict):
            raise SourceProblem(f"{kind} line without an object payload")
        if self.inheriting and self._inherited(kind, payload):
            return
        if kind == "session_meta":
            self._meta(payload)
        elif kind == "turn_context":
            self.model = str(payload.get("model") or self.model or "") or None
            self.session.model = self.session.model or self.model
        elif kind == "response_item":
            self.read_item(payload)
        elif kind == "event_msg":
            self._event(payload)
        elif kind == "compacted":
            self._compacted(payload)

    def _inherited(self, kind: Any, payload: dict[str, Any]) -> bool:
        """A line of the history a forked sub-agent inherited from its parent (Codex copies the
        parent's rollout after its own header, up to the spawn): its items are what the child's
        calls send, made by no call of the child's. False once the child's own turn starts."""
        if kind == "event_msg" and payload.get("type") == "turn_aborted":
            self.inheriting = False  # the parent's turn in progress, closed for the child
            self._aborted()
            return True
        attribution = payload.get("turn_attribution") if kind == "event_msg" else None
        if isinstance(attribution, dict) and attribution.get("initiating_agent_path"):
            self.inheriting = False  # the child's first turn, started by its parent agent
            return False
        if kind == "response_item":
            self.read_item(payload, replay=True)
            self.session.messages[-1].message = self.session.messages[-1].message.model_copy(
                update={"meta": {**self.session.messages[-1].message.meta, "inherited": True}}
            )
        elif kind == "compacted":
            history = payload.get("replacement_history")
            for item in history if isinstance(history, list) else []:
                if isinstance(item, dict):
                    self.read_item(item, replay=True)
        return True

    def _meta(self, payload: dict[str, Any]) -> None:
        if self.session.metadata.get("codex_session_id"):
            # a resumed run repeats the header; a forked sub-agent's is followed by its parent's
            if payload.get("id") == self.session.metadata.get("forked_from_thread"):
                self.inheriting = True
            return
        base = payload.get("base_instructions")
        instructions = base.get("text") if isinstance(base, dict) else base
        instructions = instructions or payload.get("instructions")
        if isinstance(instructions, str) and instructions:
            self.session.system_prompt = instructions
        # a sub-agent's session_id is its root thread's: its own id is ``id``
        session_id = payload.get("id") or payload.get("session_id")
        if isinstance(session_id, str) and session_id:
            # Codex's own thread id: the same session whichever file (or order) it comes from
            self.session.key, self.session.shared_key = session_id, True
        parent = payload.get("parent_thread_id")
        if isinstance(parent, str) and parent:
            self.session.parent_key = parent
        git = payload.get("git") if isinstance(payload.get("git"), dict) else None
        meta = {
            "codex_session_id": session_id,
            "cwd": payload.get("cwd"),
            "cli_version": payload.get("cli_version"),
            "originator": payload.get("originator"),
            "model_provider": payload.get("model_provider"),
            "git": git,
            "started_utc": payload.get("timestamp") or self.timestamp,
            "parent_thread_id": parent,
            "forked_from_thread": payload.get("forked_from_id"),
            "agent_path": payload.get("agent_path"),
            "agent_nickname": payload.get("agent_nickname"),
        }
        self.session.metadata.update({k: v for k, v in meta.items() if v})
        self.counts_first = counts_before_items(payload.get("cli_version"))
        if isinstance(payload.get("model"), str):
            self.model = self.session.model = payload["model"]
        self._window(payload.get("context_window"))

    def _window(self, value: Any) -> None:
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_WINDOW:
            self.window = value
            self.session.context_window = value

    def _event(self, payload: dict[str, Any]) -> None:
        kind = payload.get("type")
        if kind == "task_started":
            self._window(payload.get("model_context_window"))
        elif kind == "token_count":
            self._token_count(payload.get("info"))
        elif kind == "turn_aborted":
            self._aborted()
        elif kind == "task_complete" and isinstance(payload.get("error"), dict):
            self._failed_call(payload["error"])
        elif kind == "error" and isinstance(payload.get("message"), str):
            self._failed_call(
                {"message": payload["message"], "codex_error_info": payload.get("codex_error_info")}
            )
        elif kind == "item_completed" and isinstance(payload.get("item"), dict):
            item = payload["item"]
            if item.get("type") == "SubAgentActivity" and item.get("kind") == "started":
                thread, call_id = item.get("agent_thread_id"), item.get("id")
                if isinstance(thread, str) and isinstance(call_id, str):
                    self.children[thread] = call_id

    def _token_count(self, info: Any) -> None:
        if not isinstance(info, dict):
            return
        self._window(info.get("model_context_window"))
        last = info.get("last_token_usage")
        if not isinstance(last, dict):
            return
        if not as_count(last.get("input_tokens")) and not as_count(last.get("output_tokens")):
            # Codex's own estimate, no call: of the history a compaction left, or of a full window
            # after the provider refused a call
            if self.pending_compaction is not None:
                self.pending_compaction["after_tokens"] = as_count(last.get("total_tokens"))
                self.pending_compaction = None
            return
        totals = info.get("total_token_usage")
        if totals is not None and totals == self.last_totals:
            return  # the same count reported twice
        self.last_totals = totals
        self.calls_since_failure += 1
        if self.counts_first or not self.awaiting_usage:
            # the reply it counts comes next (Codex before 0.66), or none does: a summarizing call,
            # whose only line is `compacted`
            self.early_count = last
        else:
            self._counted(self.awaiting_usage[-1], last)
        self.awaiting_usage.clear()  # older replies without a count keep none

    def _counted(self, reply: ParsedMessage, last: dict[str, Any]) -> None:
        """``reply``'s call gets the usage ``last`` (a ``token_count``'s ``last_token_usage``)."""
        call = reply.call
        assert call is not None
        call.usage, reasoning = codex_usage(last)
        if reasoning:
            call.details["reasoning_tokens"] = reasoning
        call.context_window = self.window

    def _aborted(self) -> None:
        """A turn cut short: Codex answers each of its calls left without an output with the
        output ``aborted`` when it sends the history again (the rollout does not keep it)."""
        self._close_reply()
        answered = self.answered
        open_calls = []
        for pm in reversed(self.session.messages):
            if pm.starts_context or pm is self.settled:
                break
            server_run = set(pm.message.meta.get("server_tool_use_ids") or ())
            open_calls += [u for u in pm.message.tool_use_ids if u not in answered and u not in server_run]
        if not open_calls:
            # every call so far is answered or provider-run, and no message before the last gets calls
            self.settled = self.session.messages[-1] if self.session.messages else None
            return
        results = [ToolResultBlock(tool_use_id=u, content="aborted") for u in reversed(open_calls)]
        answered.update(open_calls)
        meta = {
            "codex_aborted": True,
            "not_in_file": True,
            **({"timestamp": self.timestamp} if self.timestamp else {}),
        }
        self.settled = ParsedMessage(build_message("user", results, where="turn_aborted", meta=meta))
        self.session.messages.append(self.settled)

    def _failed_call(self, error: dict[str, Any]) -> None:
        """A call Codex logs as failed (``task_complete.error``): a request event with
        ``details["failure"]`` at the end of what it sent, no usage."""
        self._close_reply()
        if not self.session.messages:
            return
        last = self.session.messages[-1]
        if any("failure" in call.details for call in last.pending_calls):
            return  # the same failure told twice (an `error` event, then the turn's error)
        info = str(error.get("codex_error_info") or "") or None
        message = str(error.get("message") or "") or None
        cause = _ERROR_CAUSES.get(info or "") or classify_failure(None, info, message)
        ref = f"codex-failed-{self.line}"
        call = CallInfo(model=self.model, context_window=self.window)
        call.details.update(
            failure=failure_details(cause, message=message, error_type=info),
            request_ref=ref,
            # Codex retries a failed request (request_max_retries) and logs only the last error
            attempts_recorded=False,
        )
        if self.timestamp:
            call.details["call_utc"] = self.timestamp
        last.pending_calls.append(call)
        self.failed_ref, self.failed_too_long = ref, cause == "prompt_too_long"
        self.calls_since_failure = 0

    def _compacted(self, payload: dict[str, Any]) -> None:
        self._close_reply()
        summary = payload.get("message")
        self.counted_reply = None
        if self.early_count is not None and isinstance(summary, str) and summary:
            # no reply item for the summarizing call (Codex before 0.100): its usage, then this line
            counted, self.early_count = self.early_count, None
            self._reply_blocks(
                [TextBlock(text=summary)], {"type": "compacted"}, replay=False, not_in_file=True
            )
            assert self.open_reply is not None
            self._counted(self.open_reply, counted)
            self.awaiting_usage.clear()
            self._close_reply()
        history = payload.get("replacement_history")
        details: dict[str, Any] = {
            "summary": summary if isinstance(summary, str) else None,
            "source": "codex",
            "by": "agent",
            "trigger": "compact_threshold",
        }
        summarizer = self._summarizer(summary)
        if summarizer is not None and summarizer.call is not None:
            summarizer.call.details["compaction_call"] = True
            details["before_tokens"] = self.last_counted_before(summarizer, reactive=self._reactive())
        # the point itself is Codex's rule over these and the window (engine.explain.agents)
        setting = {k: v for k in SETTING_KEYS if isinstance(v := self.settings.get(k), int) and v > 0}
        if setting:
            details["agent_setting"] = setting
        if self._reactive():
            # the provider refused the last call as too long: Codex counted its window full and
            # compacted before the next turn
            details.update(trigger_kind="reactive", after_failed_request_ref=self.failed_ref)
        else:
            details["trigger_kind"] = "auto"
        before = len(self.session.messages)
        if isinstance(history, list) and history:
            for item in history:
                if isinstance(item, dict):
                    self.read_item(item, replay=True)
            self._close_reply()
        elif isinstance(summary, str) and summary:
            message = build_message("user", summary, where="compacted", meta={"compaction_summary": True})
            self.session.messages.append(ParsedMessage(message))
        if len(self.session.messages) > before:
            first = self.session.messages[before]
            first.starts_context = True
            first.compaction = details
            self.pending_compaction = details
        self.failed_ref, self.failed_too_long = None, False

    def _reactive(self) -> bool:
        """The provider refused the last call before the summary's as too long."""
        return bool(self.failed_too_long and self.failed_ref and self.calls_since_failure <= 1)

    def _summarizer(self, summary: Any) -> ParsedMessage | None:
        """The reply that wrote a compaction's summary (the last one, its text the summary's end),
        with Codex's summary prompt put before it: the call sent it last."""
        if not isinstance(summary, str):
            return None
        for index in range(len(self.session.messages) - 1, -1, -1):
            pm = self.session.messages[index]
            if pm.call is None:
                continue
            text = pm.message.text.strip()
            if not text or not summary.rstrip().endswith(text):
                return None
            meta = {"codex_compaction_prompt": True, "not_in_file": True}
            if self.timestamp:
                meta["timestamp"] = self.timestamp
            prompt = build_message("user", CODEX_COMPACTION_PROMPT, where="compacted", meta=meta)
            self.session.messages.insert(index, ParsedMessage(prompt))
            return pm
        return None

    def last_counted_before(self, summarizer: ParsedMessage, *, reactive: bool) -> int | None:
        """The tokens Codex counted before compacting: the last call before the summarizer's (its
        input and output), or the full window it set after a refused call."""
        if reactive:
            return self.window
        for pm in reversed(self.session.messages[: self.session.messages.index(summarizer)]):
            usage = pm.call.usage if pm.call is not None else None
            if usage is not None:
                return usage.prompt_tokens + usage.output_tokens
        return None

    # -- response items ------------------------------------------------------------------------
    def read_item(self, item: dict[str, Any], *, replay: bool = False) -> None:
        """One Responses item (message, reasoning, tool call or output); ``replay``: a compaction's
        replacement history, sent again by later calls but produced by no call of its own."""
        kind = item.get("type")
        where = f"{kind} item"
        if kind == "message":
            role = item.get("role")
            content = message_content(item.get("content"), where)
            if role == "assistant":
                self._reply_blocks(
                    [TextBlock(text=content)] if isinstance(content, str) else content, item, replay
                )
                return
            self._user(content, where, {"openai_role": role} if role != "user" else {}, item)
        elif kind == "agent_message":  # a message between agents (multi_agent_v2), sent as input
            meta = {"openai_role": "agent_message"}
            meta.update({k: str(item[k]) for k in ("author", "recipient") if item.get(k)})
            self._user(agent_message_text(item.get("content")), where, meta, item)
        elif kind == "reasoning":
            summary = "\n".join(
                str(p.get("text") or "") for p in item.get("summary") or [] if isinstance(p, dict)
            )
            content = item.get("content")
            if isinstance(content, list):
                summary = "\n".join(
                    [summary, *(str(p.get("text") or "") for p in content if isinstance(p, dict))]
                ).strip()
            encrypted = item.get("encrypted_content")
            block = ThinkingBlock(thinking=summary, signature=None)
            self._reply_blocks(
                [block], item, replay, encrypted=encrypted if isinstance(encrypted, str) else None
            )
        elif kind in _CALL_ITEMS:
            use = self._tool_use(item)
            self._reply_blocks([use], item, replay)
            if kind in SERVER_CALLS:
                self._server_call(use.id)
        elif kind in _OUTPUT_ITEMS:
            self._output(item, where)

    def _user(self, content: Any, where: str, meta: dict[str, Any], item: dict[str, Any]) -> None:
        self._close_reply()
        self.counted_reply = None  # the next reply is another response's
        if item.get("id"):
            meta["item_id"] = item["id"]
        if self.timestamp:
            meta["timestamp"] = self.timestamp
        self.session.messages.append(
            ParsedMessage(message_of("user", content, id=None, meta=meta, where=where))
        )

    def _output(self, item: dict[str, Any], where: str) -> None:
        self._close_reply()
        call_id = item.get("call_id")
        text = output_text(item.get("output"))
        if not call_id:
            # An output no call asked for (Codex adds `goal_objective` after create_goal): sent
            # as it is, so kept as the text it carries, named by its item name.
            name = str(item.get("name") or item.get("type"))
            meta = {"openai_role": "tool_output", "output_name": name}
            if item.get("namespace"):
                meta["namespace"] = str(item["namespace"])
            self._user([TextBlock(text=text)], where, meta, item)
            return
        result = ToolResultBlock(tool_use_id=str(call_id), content=text)
        self.answered.add(result.tool_use_id)
        last = self.session.messages[-1] if self.session.messages else None
        if (
            last is not None
            and last.message.role == "user"
            and last.message.tool_result_ids
            and not last.starts_context
        ):
            last.message = _with_blocks(last.message, [result])
        else:
            meta = {"timestamp": self.timestamp} if self.timestamp else {}
            self.session.messages.append(
                ParsedMessage(message_of("user", [result], id=None, meta=meta, where=where))
            )

    def _tool_use(self, item: dict[str, Any]) -> ToolUseBlock:
        # a server-run call may come with an empty id: a stable one from where it is
        self.unnamed += not (item.get("call_id") or item.get("id"))
        return tool_use_of(item, fallback_id=f"{item['type']}-line-{self.line}-{self.unnamed}")

    def _server_call(self, use_id: str) -> None:
        """Mark a provider-run call on its message: no output item answers it."""
        reply = self.open_reply
        assert reply is not None
        meta = dict(reply.message.meta)
        meta["server_tool_use_ids"] = [*meta.get("server_tool_use_ids", []), use_id]
        reply.message = reply.message.model_copy(update={"meta": meta})

    def _reply_blocks(
        self,
        blocks: list[Any],
        item: dict[str, Any],
        replay: bool,
        encrypted: str | None = None,
        *,
        not_in_file: bool = False,
    ) -> None:
        if self.open_reply is None and not replay and self.counts_first and self.early_count is None:
            # Codex 0.40-0.50 writes a reply's parallel calls each with its output: a call after an
            # output, with no usage between, is the same reply's (its one count came before it)
            self.open_reply = self.counted_reply
        if self.open_reply is None:
            meta: dict[str, Any] = {"not_in_file": True} if not_in_file else {}
            if self.timestamp:
                meta["timestamp"] = self.timestamp
            call = None if replay else CallInfo(model=self.model, context_window=self.window)
            if call is not None and self.timestamp:
                call.details["call_utc"] = self.timestamp
            message = message_of("assistant", blocks, id=None, meta=meta, where=f"{item.get('type')} item")
            self.open_reply = ParsedMessage(message, call=call)
            self.session.messages.append(self.open_reply)
            if call is not None and self.counts_first and self.early_count is not None:
                self._counted(self.open_reply, self.early_count)
                self.counted_reply = self.open_reply
            elif call is not None:
                self.awaiting_usage.append(self.open_reply)
            if call is not None:
                self.early_count = None  # counted, or no summarizing call's
        else:
            reply = self.open_reply
            reply.message = _with_blocks(reply.message, blocks)
        if encrypted:
            meta = dict(self.open_reply.message.meta)
            meta["encrypted_reasoning_chars"] = meta.get("encrypted_reasoning_chars", 0) + len(encrypted)
            self.open_reply.message = self.open_reply.message.model_copy(update={"meta": meta})

    def _close_reply(self) -> None:
        self.open_reply = None

    def finish(self) -> ParsedSession:
        session = self.session
        session.model = session.model or self.model
        session.provider = provider_of(session.model) or ("openai" if session.model else None)
        session.unlogged_prefix_in = "tools"
        if not session.messages:
            raise SourceProblem("a Codex rollout with no conversation items (only session metadata)")
        if any(pm.call is not None and pm.call.usage is not None for pm in session.messages):
            session.notes.append(
                "a rollout does not keep the tool definitions Codex sent (their size is measured from the "
                "provider's count)"
            )
        if any(pm.message.meta.get("codex_compaction_prompt") for pm in session.messages):
            session.notes.append(
                "Codex's compaction prompt is not in the rollout: its own template (as Codex 0.169 sent it) "
                "is put before each summary call"
            )
        if self.children:
            session.metadata["subagents_started"] = dict(self.children)
        if not session.metadata.get("cwd"):
            for pm in session.messages[:4]:
                found = _CWD.search(pm.message.text)
                if found:
                    session.metadata["cwd"] = found.group(1).strip()
                    break
        return session


def _with_blocks(message: Any, blocks: list[Any]) -> Any:
    """``message.with_content`` with ``blocks`` added, not validated again (our own valid blocks:
    :func:`message_of`): a reply grows block by block, each added line revalidated the whole reply."""
    return message_of(message.role, [*message.blocks, *blocks], id=message.id, meta=message.meta, where="")
