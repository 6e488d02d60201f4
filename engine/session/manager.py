"""The session manager: the one object an agent embeds around a model client.

Each model call of a turn: assemble the request (:mod:`engine.session.assembly`: system prompt,
tools, every budget component, the history's from running totals so accounting does not grow
with the session); compact at the hard-block or compaction threshold (snapshot written); let the
session's one guard evaluate every target; call the model (a provider context-length error takes
the emergency path and one retry); run the tools (:mod:`engine.session.tools`), offloading large
outputs and reserving their tokens through the guard; persist messages and the events of
:mod:`engine.session.event_building`. The decisions are the pure layers'; this module applies
and records them.

One concept over ~400 lines: the turn loop and the state it mutates (history, guard, status)
stay together so every write happens in one visible place.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from engine.budget import ContextBudget, HistoryTotals
from engine.clients import ModelClient, ModelRequest, ModelResponse
from engine.compaction import (
    COMPACT_CONTEXT_TOOL,
    CompactionReport,
    Summarizer,
    default_summarizer,
    parse_strategy,
)
from engine.deferral import TOOL_SEARCH_TOOL, ToolRegistry, ToolSpec
from engine.errors import (
    ContextLengthExceededError,
    ContextOverflowError,
    ProviderError,
    ValidationError,
)
from engine.events import ContextEvent, ProviderUsage
from engine.guard import (
    FINAL_REPORT_TOOL,
    ContextGuard,
    GuardDecision,
)
from engine.messages import Message, ToolUseBlock, is_user_input, user
from engine.offload import READ_RESULT_TOOL, ResultStore
from engine.prompt import AnthropicHistory, PromptSection, build_anthropic_request
from engine.session.assembly import RequestView, ToolTokens, assemble_request
from engine.session.compacting import EMERGENCY_STRATEGY, Compactor, compaction_target
from engine.session.event_building import note_event, request_event, resume_event
from engine.session.targets import SettingsSource, Target, Targets
from engine.session.tools import BUILTIN_TOOL_NAMES, ToolExecutor, ToolHandler
from engine.settings import (
    ResolvedModelSettings,
)
from engine.store import SessionStore, ToolRecord
from engine.store.factory import open_store
from engine.tokens import Tokenizer, get_tokenizer

logger = logging.getLogger(__name__)

#: Model calls one turn may make before the manager stops it (a runaway tool loop).
DEFAULT_MAX_STEPS = 40
STATUS_ACTIVE = "active"
STATUS_FINAL = "final"

#: When the guard's counters are next set from a measured request: a new turn (its user
#: message is this turn's "new" input), or a history replaced by compaction (all committed).
Rebase = Literal["turn", "history"]


@dataclass(frozen=True)
class TurnResult:
    """How one turn ended: ``stop`` is end_turn, final_report or max_steps."""

    turn_index: int
    text: str
    stop: str
    status: str
    steps: int
    final_report: str | None = None


class SessionManager:
    """Runs an agent's turns against a model client and keeps its context in check.

    One concept over ~300 lines: the turn loop and the state it mutates (history, guard, status,
    transcript seq) in one place; assembly, tool execution, event building and the models'
    settings are their own modules.

    ``tools`` are tool definitions (Anthropic or OpenAI shape, or :class:`ToolSpec`);
    ``tool_handlers`` map a tool name to a callable taking the tool input and returning text,
    bytes, or anything JSON-serialisable. ``fallbacks`` are further clients the guard evaluates
    (and the manager falls back to on a retryable provider error). ``settings`` is a
    :class:`Settings`, a :class:`SettingsWatcher`, or a TOML path (watched and reloaded live);
    None reads the default settings file once. ``compaction`` is the strategy run at the
    compaction threshold (a name, ``{"type": ...}`` dict or config; default ``chain``).
    ``store`` is a store, or a database file / ``postgresql://`` URL the manager opens and closes.
    """

    def __init__(
        self,
        client: ModelClient,
        store: SessionStore | str | os.PathLike[str],
        *,
        session_id: str | None = None,
        title: str | None = None,
        system_prompt: str = "",
        sections: Sequence[PromptSection] = (),
        skills: Sequence[str] = (),
        tools: Sequence[dict[str, Any] | ToolSpec] = (),
        tool_handlers: Mapping[str, ToolHandler] | None = None,
        fallbacks: Sequence[ModelClient] = (),
        settings: SettingsSource = None,
        compaction: Any = "chain",
        summarizer: Summarizer | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        metadata: Mapping[str, Any] | None = None,
        resume: bool = False,
    ) -> None:
        if max_steps < 1:
            raise ValidationError(
                f"max_steps must be >= 1, got {max_steps}", field="max_steps", value=max_steps
            )
        handlers = dict(tool_handlers or {})
        clash = sorted(set(handlers) & set(BUILTIN_TOOL_NAMES))
        if clash:
            raise ValidationError(
                f"tool handlers may not replace built-in tools {clash}", field="tool_handlers"
            )
        if isinstance(store, str | os.PathLike):  # a file or postgresql:// URL: a store we own and close
            store, self._own_store = open_store(store), True
        else:
            self._own_store = False
        self.store = store
        self.client = client
        self.max_steps = max_steps
        self._targets = Targets((client, *fallbacks), settings)
        self.compaction = parse_strategy(compaction)
        self.summarizer = summarizer or default_summarizer()
        self._sections = [
            *([PromptSection("base_instructions", system_prompt)] if system_prompt else []),
            *sections,
            *(PromptSection("skills", text) for text in skills),
        ]
        self.tokenizer: Tokenizer = get_tokenizer(self._targets.primary.settings.tokenizer)
        specs = [t if isinstance(t, ToolSpec) else ToolSpec.from_definition(t) for t in tools]
        builtin = [ToolSpec(definition=READ_RESULT_TOOL), ToolSpec(definition=COMPACT_CONTEXT_TOOL)]
        self._registry = ToolRegistry(
            [*specs, *builtin], tokenizer=self.tokenizer, budget_tokens=self._targets.deferral_budget()
        )
        # The session's one guard: its counters are set from the measured request when a turn
        # starts or compaction replaced the history, and grow by each reply and tool output.
        self._guard = ContextGuard(self.tokenizer)
        self._rebase: Rebase | None = "turn"
        self._history: list[Message] = []
        # Running conversation / tool-result tokens of _history: updated per appended message,
        # recounted only when the history is replaced, so a model call costs the same at any length.
        self._totals = HistoryTotals(self.tokenizer)
        # The history rendered for the provider, each message once (a turn converts only its own).
        self._rendered = AnthropicHistory()
        self._tool_tokens = ToolTokens(self.tokenizer)
        self._summary: str | None = None
        self._next_seq = 0
        # This turn's user message until the model answers: in _history (it is sent) but written
        # with the first reply, so a turn that fails before any answer leaves the transcript as it was.
        self._pending_input: tuple[Message, Sequence[ContextEvent]] | None = None
        self._note_shown = False
        self._noop_at: int | None = None
        self.turn_index = -1
        self.status = STATUS_ACTIVE
        self.last_budget: ContextBudget | None = None

        if resume:
            if session_id is None:
                raise ValidationError("resume needs a session_id", field="session_id")
            self.session_id = session_id
            self.store.get_session(session_id)
        else:
            primary = self._targets.primary
            self.session_id = store.create_session(
                session_id=session_id,
                title=title,
                model=primary.settings.model,
                provider=primary.provider,
                tokenizer=self.tokenizer.id,
                tokens_exact=self.tokenizer.exact,
                settings=self._targets.settings_json(),
                metadata=dict(metadata or {}),
            )
        self._compactor = Compactor(
            store,
            self.session_id,
            summarizer=self.summarizer,
            event_fields=self._compaction_event_fields,
            record=self._record,
        )
        self._tools = ToolExecutor(
            store,
            self.session_id,
            registry=self._registry,
            results=ResultStore(store, self.session_id, tokenizer=self.tokenizer),
            handlers=handlers,
            summarizer=self.summarizer,
            compaction_fields=self._compaction_event_fields,
        )
        if resume:
            self._load_from_store()
        self._save_tools()

    # -- construction helpers ------------------------------------------------------------------
    @classmethod
    def resume(
        cls, store: SessionStore | str | os.PathLike[str], session_id: str, client: ModelClient, **kwargs: Any
    ) -> SessionManager:
        """Continue a stored session from its latest snapshot plus later messages (not the whole
        transcript, so a compacted session does not overflow again); records a ``resume`` event."""
        return cls(client, store, session_id=session_id, resume=True, **kwargs)

    def _load_from_store(self) -> None:
        record = self.store.get_session(self.session_id)
        history, summary, through_seq = self.store.load_resume_history(self.session_id)
        rows = self.store.load_messages(self.session_id, from_seq=max(through_seq, 0))
        self._history, self._summary = history, summary
        self._totals.reset(history)
        self._next_seq = self.store.message_count(self.session_id)
        self.turn_index = rows[-1].turn_index if rows else -1
        self.status = record.status
        self._tools.offloaded_bytes = sum(b.size_bytes for b in self.store.list_blobs(self.session_id))
        view = self._view(final=False)
        resumed = resume_event(
            view,
            self._targets.primary.settings,
            through_seq=through_seq,
            history_messages=len(history),
            transcript_messages=self._next_seq,
            summary=bool(summary),
            status=record.status,
        )
        self._record([*view.events, resumed])

    def close(self) -> None:
        """Stop the settings watcher this manager started; close the store only if it opened it."""
        self._targets.close()
        if self._own_store:
            self.store.close()

    def __enter__(self) -> SessionManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- views ---------------------------------------------------------------------------------
    @property
    def history(self) -> list[Message]:
        """The history sent with the next request (compacted; the transcript is in the store)."""
        return list(self._history)

    @property
    def summary(self) -> str | None:
        """The summary injected into the system prompt at request time, if any."""
        return self._summary

    @property
    def settings(self) -> ResolvedModelSettings:
        """The primary model's resolved settings in force."""
        return self._targets.primary.settings

    def measure(self) -> ContextBudget:
        """The budget of the next request as things stand."""
        return self._view(final=False).budget

    # -- settings ------------------------------------------------------------------------------
    def _refresh_settings(self) -> None:
        """Apply a live settings reload (a rejected edit is recorded; the previous settings stay)."""
        changed, events = self._targets.refresh()
        self._record(events)
        if changed:
            self._registry.budget_tokens = self._targets.deferral_budget()
            self.store.update_session(self.session_id, settings=self._targets.settings_json())

    def _save_tools(self) -> None:
        specs = [
            *self._registry.tools,
            ToolSpec(definition=TOOL_SEARCH_TOOL),
            ToolSpec(definition=FINAL_REPORT_TOOL),
        ]
        self.store.upsert_tools(
            self.session_id,
            [
                ToolRecord(
                    name=s.name,
                    category=s.category,
                    server=s.server,
                    tokens=self.tokenizer.count_tool(s.definition),
                    definition=s.definition,
                )
                for s in specs
            ],
        )

    # -- persistence ---------------------------------------------------------------------------
    def _stamp(self, event: ContextEvent, **fields: Any) -> ContextEvent:
        update = {k: v for k, v in fields.items() if getattr(event, k) is None}
        if event.turn_index is None and self.turn_index >= 0:
            update["turn_index"] = self.turn_index
        return event.model_copy(update=update) if update else event

    def _record(self, events: Sequence[ContextEvent], **fields: Any) -> list[int]:
        if not events:
            return []
        with self.store.transaction():
            return [self.store.record_event(self.session_id, self._stamp(e, **fields)) for e in events]

    def _append(
        self,
        messages: Sequence[Message],
        *,
        usage: ProviderUsage | None = None,
        events: Sequence[ContextEvent] = (),
    ) -> None:
        """Append messages (after this turn's user message, if not written yet) and record events in
        one transaction."""
        pending, pending_events = self._pending_input or (None, ())
        stored = [pending, *messages] if pending is not None else list(messages)
        usages = [None] * (len(stored) - len(messages)) + [usage] * len(messages)
        with self.store.transaction():
            rows = self.store.append_messages(
                self.session_id, stored, tokenizer=self.tokenizer, usages=usages
            )
            for event in pending_events:
                self.store.record_event(self.session_id, self._stamp(event, message_seq=rows[0].seq))
            for event in events:
                self.store.record_event(self.session_id, self._stamp(event, message_seq=rows[-1].seq))
        self._pending_input = None
        self._history.extend(messages)
        self._totals.extend(messages)
        self._next_seq = rows[-1].seq + 1

    def _reload_history(self) -> None:
        self._history, self._summary, _ = self.store.load_resume_history(self.session_id)
        if self._pending_input is not None:  # compaction rebuilt what is stored: the input follows it
            self._history.append(self._pending_input[0])
        self._totals.reset(self._history)
        self._rebase = self._rebase or "history"

    def _drop_pending_input(self) -> None:
        """The turn failed before the model answered: its user message is forgotten, unwritten."""
        self._pending_input = None
        self._history.pop()
        self._totals.reset(self._history)
        self._next_seq -= 1
        self.turn_index -= 1
        self._rebase = "turn"

    # -- the turn --------------------------------------------------------------------------------
    def run_turn(self, user_input: str | Message, *, max_steps: int | None = None) -> TurnResult:
        """Send one user message and run model calls and tools until the model stops."""
        if self.status == STATUS_FINAL:
            raise ValidationError(
                f"session {self.session_id!r} has ended with a final report",
                field="status",
                value=self.status,
            )
        message = user(user_input) if isinstance(user_input, str) else user_input
        if not is_user_input(message):
            raise ValidationError("a turn starts with a user message that carries input", field="user_input")
        self._refresh_settings()
        self.turn_index += 1
        self._rebase = "turn"
        self._note_shown = False
        deferral_events = self._registry.start_turn(self.turn_index)
        self._pending_input = (message, deferral_events)
        self._history.append(message)
        self._totals.extend([message])
        self._next_seq += 1  # the seq it will be written at
        try:
            return self._turn(max_steps or self.max_steps)
        finally:
            if self._pending_input is not None:
                self._drop_pending_input()

    def _turn(self, limit: int) -> TurnResult:
        text = ""
        for step in range(limit):
            response = self._step(step)
            reply = response.message
            text = reply.text or text
            uses = [b for b in reply.blocks if isinstance(b, ToolUseBlock)]
            if not uses:
                return TurnResult(self.turn_index, text, "end_turn", self.status, step + 1)
            report = self._run_tools(uses)
            if report is not None:
                self.status = STATUS_FINAL
                self.store.update_session(self.session_id, status=STATUS_FINAL)
                return TurnResult(self.turn_index, report, "final_report", self.status, step + 1, report)
        logger.warning("turn %d stopped after %d model calls", self.turn_index, limit)
        return TurnResult(self.turn_index, text, "max_steps", self.status, limit)

    def _view(self, *, final: bool) -> RequestView:
        """The next request for the primary target, with the context-status note when it is due."""
        view = self._assemble(final=final, note=None)
        if view.budget.note_text is not None:
            view = self._assemble(final=final, note=view.budget.note_text)
        return view

    def _assemble(self, *, final: bool, note: str | None) -> RequestView:
        return assemble_request(
            self._sections,
            summary=self._summary,
            status=[line for line in (note, None if final else self._registry.plan.note) if line],
            tools=(FINAL_REPORT_TOOL,) if final else tuple(self._registry.active_definitions),
            tool_tokens=self._tool_tokens,
            totals=self._totals,
            offloaded_bytes=self._tools.offloaded_bytes,
            settings=self._targets.primary.settings,
            note=note,
            final=final,
        )

    def _rebase_guard(self, view: RequestView, *, new_turn: bool) -> None:
        """Set the guard's counters from a measured request: at a turn's first request (the user
        message is its new input), or after compaction replaced the history."""
        components = view.components
        new = self.tokenizer.count_message(self._history[-1]) if new_turn else 0
        self._guard.commit_turn(current=components.total - components.tools - new)
        self._guard.turn_index = self.turn_index
        if new:
            self._guard.add_new(new)
        self._rebase = None

    def _evaluate(self, view: RequestView) -> GuardDecision:
        if not self._guard.final_forced:
            self._guard.set_schema(view.components.tools)
        return self._guard.evaluate_request(
            [t.guard_target for t in self._targets.all],
            components=view.components,
            message_seq=self._next_seq - 1 if self._next_seq else None,
        )

    def _step(self, step: int) -> ModelResponse:
        self._refresh_settings()
        # A final turn keeps its restriction through an emergency compaction; a new turn lifts it.
        rebase = self._rebase == "turn" or (self._rebase is not None and not self._guard.final_forced)
        view = self._view(final=not rebase and self._guard.final_forced)
        if rebase:
            self._rebase_guard(view, new_turn=self._rebase == "turn")
        decision = self._evaluate(view)
        if (
            not view.final
            and decision.level in ("compact", "hard_block")
            and self._noop_at != len(self._history)
        ):
            self._compact_at_threshold(decision.level, view)
            view = self._view(final=False)
            self._rebase_guard(view, new_turn=False)  # lifts a final turn the evaluation before forced
            decision = self._evaluate(view)
        if decision.final_forced and not view.final:
            view = self._view(final=True)
        events = [*view.events, *decision.events]
        if view.note and not self._note_shown:
            self._note_shown = True
            events.append(note_event(view))
        self._record(events)
        return self._call(view, self._targets.usable(decision.usable_targets), step)

    # -- compaction ----------------------------------------------------------------------------
    def _compact_at_threshold(self, level: str, view: RequestView) -> None:
        trigger = "hard_block" if level == "hard_block" else "compact_threshold"
        target = compaction_target(view)
        report = self._force_compact(self.compaction, trigger=trigger, target_tokens=target)
        if level == "hard_block" and not report.noop and not report.fits:
            # Blocking is worse than losing detail: the default chain ends in truncate.
            self._force_compact("chain", trigger=trigger, target_tokens=target)

    def _force_compact(
        self, strategy: Any, *, trigger: str, target_tokens: int | None, instructions: str | None = None
    ) -> CompactionReport:
        report = self._compactor.run(
            strategy, trigger=trigger, target_tokens=target_tokens, instructions=instructions
        )
        self._reload_history()
        self._noop_at = len(self._history) if report.noop else None
        return report

    def _compaction_event_fields(self) -> dict[str, Any]:
        """The turn and window a compaction happens in, for force_compact to write with its event."""
        target = self._targets.primary
        s = target.settings
        return {
            "turn_index": self.turn_index if self.turn_index >= 0 else None,
            "provider": target.provider,
            "model": s.model,
            "context_window": s.context_window,
            "max_output_tokens": s.max_output_tokens,
            "buffer_tokens": s.buffer_tokens,
        }

    def compact(
        self, strategy: Any = None, *, instructions: str | None = None, target_tokens: int | None = None
    ) -> CompactionReport:
        """Compact now (trigger ``manual``); the snapshot is what the next request sends.

        Without ``target_tokens`` the target is force_compact's default (half the history)."""
        return self._force_compact(
            strategy or self.compaction,
            trigger="manual",
            target_tokens=target_tokens,
            instructions=instructions,
        )

    # -- model calls ---------------------------------------------------------------------------
    def _request(self, view: RequestView, target: Target) -> ModelRequest:
        s = target.settings
        payload, breakpoints = build_anthropic_request(
            view.prompt,
            self._history,
            list(view.tools),
            model=target.client.model,
            max_tokens=s.max_output_tokens,
            history=self._rendered,
        )
        return ModelRequest(
            model=target.client.model,
            system=view.prompt.text,
            messages=tuple(self._history),
            tools=view.tools,
            max_output_tokens=s.max_output_tokens,
            payload=payload,
            estimated_prompt_tokens=view.components.total,
            turn_index=self.turn_index,
            cache_breakpoints=breakpoints,
        )

    def _request_event(
        self,
        view: RequestView,
        target: Target,
        request: ModelRequest,
        *,
        trigger: str,
        outcome: str,
        step: int,
        response: ModelResponse | None = None,
        reason: str | None = None,
    ) -> ContextEvent:
        return request_event(
            view,
            target.settings,
            request,
            provider=target.provider,
            trigger=trigger,
            outcome=outcome,
            step=step,
            messages_sent=self._next_seq,
            deferred_tools=len(self._registry.deferred),
            summary_injected=bool(self._summary),
            tokenizer_id=self.tokenizer.id,
            response=response,
            reason=reason,
        )

    def _call(self, view: RequestView, targets: Sequence[Target], step: int) -> ModelResponse:
        trigger = "user_input" if step == 0 else "tool_results"
        last_error: ProviderError | None = None
        for index, target in enumerate(targets):
            try:
                return self._call_target(view, target, step, trigger)
            except ContextLengthExceededError:
                raise
            except ProviderError as exc:
                last_error = exc
                if not exc.retryable or index == len(targets) - 1:
                    raise
                logger.warning(
                    "%s failed (%s); trying %s", target.client.model, exc, targets[index + 1].client.model
                )
        raise last_error or ValidationError("no target to send the request to", field="targets")

    def _record_failed(
        self, view: RequestView, target: Target, request: ModelRequest, error: ProviderError, **fields: Any
    ) -> None:
        outcome = (
            "context_length_exceeded" if isinstance(error, ContextLengthExceededError) else "provider_error"
        )
        event = self._request_event(view, target, request, outcome=outcome, reason=str(error), **fields)
        # Before any answer the turn's user message is not written: the event follows what is.
        last = self._next_seq - (2 if self._pending_input is not None else 1)
        self._record([event], message_seq=last if last >= 0 else None)

    def _call_target(self, view: RequestView, target: Target, step: int, trigger: str) -> ModelResponse:
        request = self._request(view, target)
        try:
            response = target.client.complete(request)
        except ProviderError as exc:
            self._record_failed(view, target, request, exc, trigger=trigger, step=step)
            if isinstance(exc, ContextLengthExceededError):
                return self._emergency_retry(view, target, step, exc)
            raise
        self._commit_reply(view, target, request, response, trigger=trigger, step=step)
        return response

    def _emergency_retry(
        self, view: RequestView, target: Target, step: int, error: ContextLengthExceededError
    ) -> ModelResponse:
        """The provider found the prompt too long: emergency compaction, then one retry."""
        logger.warning(
            "provider rejected the prompt as too long; emergency compaction and one retry: %s", error
        )
        self._force_compact(
            EMERGENCY_STRATEGY, trigger="provider_error", target_tokens=compaction_target(view)
        )
        retry_view = self._view(final=view.final)
        self._record(list(retry_view.events))
        request = self._request(retry_view, target)
        try:
            response = target.client.complete(request)
        except ContextLengthExceededError as again:
            self._record_failed(retry_view, target, request, again, trigger="retry", step=step)
            raise ContextOverflowError(
                f"{target.client.model} still rejects the prompt after emergency compaction: {again}",
                limit=retry_view.budget.effective_window,
                projected=retry_view.components.total,
            ) from again
        self._commit_reply(retry_view, target, request, response, trigger="retry", step=step)
        return response

    def _commit_reply(
        self,
        view: RequestView,
        target: Target,
        request: ModelRequest,
        response: ModelResponse,
        *,
        trigger: str,
        step: int,
    ) -> None:
        if response.message.role != "assistant":
            raise ValidationError(f"{target.client.model} returned a {response.message.role} message")
        event = self._request_event(
            view, target, request, trigger=trigger, outcome="ok", step=step, response=response
        )
        self._append([response.message], usage=response.usage, events=[event])
        # The reply is part of the next request: tool outputs are reserved on top of it.
        self._guard.add_pending(
            self.tokenizer.count_message(response.message), message_seq=self._next_seq - 1
        )
        self.last_budget = ContextBudget.from_settings(target.settings, view.components)

    # -- tools ---------------------------------------------------------------------------------
    def _run_tools(self, uses: Sequence[ToolUseBlock]) -> str | None:
        """Run the tools of one reply and append their results; returns a final report if given."""
        results = self._tools.run_reply(
            uses,
            self._guard,
            self._targets.primary.settings,
            turn_index=self.turn_index,
            message_seq=self._next_seq,
        )
        self._append([results.message], events=results.events)
        if self._tools.history_replaced:  # compact_context ran
            self._tools.history_replaced = False
            self._reload_history()
        return results.final_report
