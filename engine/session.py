"""The session manager: the one object an agent embeds around a model client.

Each model call of a turn: assemble the system prompt; measure every budget component (the
history's from running totals kept per appended message, so accounting does not grow with the
session); compact at the hard-block or compaction threshold (snapshot written); let the guard
evaluate every target; select tools through deferral; build the provider request with cache
breakpoints; call the model (a provider context-length error takes the emergency path and one
retry); run the tools, offloading large outputs and reserving their tokens through the guard;
persist messages and events. The decisions are the pure layers'; this module applies and
records them.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.budget import ContextBudget, HistoryTotals
from engine.clients import ModelClient, ModelRequest, ModelResponse
from engine.compaction import (
    COMPACT_CONTEXT_TOOL,
    CompactionReport,
    Summarizer,
    default_summarizer,
    force_compact,
    parse_strategy,
    run_compact_context_tool,
)
from engine.deferral import TOOL_SEARCH_TOOL, ToolRegistry, ToolSpec, deferral_budget, run_tool_search_tool
from engine.errors import (
    ConfigError,
    ContextLengthExceededError,
    ContextOverflowError,
    ProviderError,
    SummarizerUnavailableError,
    ValidationError,
)
from engine.events import ComponentTokens, ContextEvent, ProviderUsage
from engine.guard import (
    FINAL_REPORT_TOOL,
    FINAL_REPORT_TOOL_NAME,
    REASON_TOKEN_BUDGET,
    ContextGuard,
    GuardDecision,
    GuardTarget,
)
from engine.messages import Message, ToolResultBlock, ToolUseBlock, is_user_input, user
from engine.offload import (
    READ_RESULT_TOOL,
    ResultStore,
    degraded_event,
    offload_or_inline,
    run_read_result_tool,
)
from engine.prompt import (
    SUMMARY_TITLE,
    AssembledPrompt,
    PromptSection,
    build_prompt_or_concat,
    count_cache_breakpoints,
    to_anthropic_request,
)
from engine.settings import (
    ResolvedModelSettings,
    Settings,
    SettingsWatcher,
    load_settings,
    resolve_model_settings,
)
from engine.store import SessionStore, ToolRecord
from engine.tokens import Tokenizer, get_tokenizer

logger = logging.getLogger(__name__)

#: Model calls one turn may make before the manager stops it (a runaway tool loop).
DEFAULT_MAX_STEPS = 40
#: Compaction aims the prompt at this share of the limit (the history gets what the fixed
#: parts, system prompt, skills and tools, leave of it).
COMPACTION_TARGET_SHARE = 0.5
#: Strategy run when the provider rejects a prompt as too long.
EMERGENCY_STRATEGY = "emergency"
#: Strategy an automatic compaction falls back to when the summarizer fails.
SUMMARIZER_FALLBACK_STRATEGY = "truncate"
#: What the model reads in the context status section during a forced final turn.
FINAL_TURN_NOTE = (
    "[Context window nearly full: no other tool can run in this turn. Call final_report now with "
    "what was done, what was found, and what remains.]"
)
STATUS_ACTIVE = "active"
STATUS_FINAL = "final"

BUILTIN_TOOL_NAMES = (
    READ_RESULT_TOOL["name"],
    TOOL_SEARCH_TOOL["name"],
    COMPACT_CONTEXT_TOOL["name"],
    FINAL_REPORT_TOOL_NAME,
)

ToolHandler = Callable[[dict[str, Any]], Any]
SettingsSource = Settings | SettingsWatcher | str | os.PathLike[str] | None


@dataclass(frozen=True)
class TurnResult:
    """How one turn ended: ``stop`` is end_turn, final_report or max_steps."""

    turn_index: int
    text: str
    stop: str
    status: str
    steps: int
    final_report: str | None = None


@dataclass(frozen=True)
class _Target:
    client: ModelClient
    settings: ResolvedModelSettings

    @property
    def guard_target(self) -> GuardTarget:
        return GuardTarget.from_settings(self.settings)


@dataclass(frozen=True)
class _View:
    """One request as it would be sent: prompt, tools and what each component costs."""

    prompt: AssembledPrompt
    tools: tuple[dict[str, Any], ...]
    components: ComponentTokens
    budget: ContextBudget
    note: str | None
    final: bool


def settings_snapshot(resolved: ResolvedModelSettings) -> dict[str, Any]:
    """Resolved settings as stored in ``sessions.settings_json``: values, derived limits, sources."""
    data = resolved.model_dump(mode="json", exclude={"model_info"})
    data.update(
        effective_window=resolved.effective_window,
        budget_tokens=resolved.budget_tokens,
        compact_tokens=resolved.compact_tokens,
        hard_block_tokens=resolved.hard_block_tokens,
    )
    return data


class SessionManager:
    """Runs an agent's turns against a model client and keeps its context in check.

    ``tools`` are tool definitions (Anthropic or OpenAI shape, or :class:`ToolSpec`);
    ``tool_handlers`` map a tool name to a callable taking the tool input and returning text,
    bytes, or anything JSON-serialisable. ``fallbacks`` are further clients the guard evaluates
    (and the manager falls back to on a retryable provider error). ``settings`` is a
    :class:`Settings`, a :class:`SettingsWatcher`, or a TOML path (watched and reloaded live);
    None reads the default settings file once. ``compaction`` is the strategy run at the
    compaction threshold (a name, ``{"type": ...}`` dict or config; default ``chain``).
    """

    def __init__(
        self,
        client: ModelClient,
        store: SessionStore,
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
        self.store = store
        self.client = client
        self.max_steps = max_steps
        self._clients = (client, *fallbacks)
        self._own_watcher = False
        self._settings_source = self._settings_source_of(settings)
        self._settings_seen: Settings | None = None
        self._targets: tuple[_Target, ...] = ()
        self.compaction = parse_strategy(compaction)
        self.summarizer = summarizer or default_summarizer()
        self._handlers = dict(tool_handlers or {})
        clash = sorted(set(self._handlers) & set(BUILTIN_TOOL_NAMES))
        if clash:
            raise ValidationError(
                f"tool handlers may not replace built-in tools {clash}", field="tool_handlers"
            )
        self._sections = [
            *([PromptSection("base_instructions", system_prompt)] if system_prompt else []),
            *sections,
            *(PromptSection("skills", text) for text in skills),
        ]
        try:
            self._refresh_settings(initial=True)
        except BaseException:
            self.close()
            raise
        self.tokenizer: Tokenizer = get_tokenizer(self._targets[0].settings.tokenizer)
        specs = [t if isinstance(t, ToolSpec) else ToolSpec.from_definition(t) for t in tools]
        builtin = [ToolSpec(definition=READ_RESULT_TOOL), ToolSpec(definition=COMPACT_CONTEXT_TOOL)]
        self._registry = ToolRegistry(
            [*specs, *builtin], tokenizer=self.tokenizer, budget_tokens=self._deferral_budget()
        )
        self._guard: ContextGuard | None = None
        self._history: list[Message] = []
        # Running conversation / tool-result tokens of _history: updated per appended message,
        # recounted only when the history is replaced, so a model call costs the same at any length.
        self._totals = HistoryTotals(self.tokenizer)
        self._tools_tokens: tuple[tuple[dict[str, Any], ...], int] = ((), 0)
        self._summary: str | None = None
        self._next_seq = 0
        self._offloaded_bytes = 0
        self._note_shown = False
        self._noop_at: int | None = None
        self.turn_index = -1
        self.status = STATUS_ACTIVE
        self.last_budget: ContextBudget | None = None

        if resume:
            if session_id is None:
                raise ValidationError("resume needs a session_id", field="session_id")
            self.session_id = session_id
            self._load_from_store()
        else:
            primary = self._targets[0]
            self.session_id = store.create_session(
                session_id=session_id,
                title=title,
                model=primary.settings.model,
                provider=primary.settings.provider or primary.client.provider,
                tokenizer=self.tokenizer.id,
                tokens_exact=self.tokenizer.exact,
                settings=self._settings_json(),
                metadata=dict(metadata or {}),
            )
        self._results = ResultStore(store, self.session_id, tokenizer=self.tokenizer)
        self._save_tools()

    # -- construction helpers ------------------------------------------------------------------
    @classmethod
    def resume(
        cls, store: SessionStore, session_id: str, client: ModelClient, **kwargs: Any
    ) -> SessionManager:
        """Continue a stored session from its latest snapshot plus later messages (not the whole
        transcript, so a compacted session does not overflow again); records a ``resume`` event."""
        return cls(client, store, session_id=session_id, resume=True, **kwargs)

    def _settings_source_of(self, settings: SettingsSource) -> Settings | SettingsWatcher:
        if settings is None:
            return load_settings()
        if isinstance(settings, Settings | SettingsWatcher):
            return settings
        self._own_watcher = True
        return SettingsWatcher(settings)

    def _load_from_store(self) -> None:
        record = self.store.get_session(self.session_id)
        history, summary, through_seq = self.store.load_resume_history(self.session_id)
        rows = self.store.load_messages(self.session_id, from_seq=max(through_seq, 0))
        self._history, self._summary = history, summary
        self._totals.reset(history)
        self._next_seq = self.store.message_count(self.session_id)
        self.turn_index = rows[-1].turn_index if rows else -1
        self.status = record.status
        self._offloaded_bytes = sum(b.size_bytes for b in self.store.list_blobs(self.session_id))
        view = self._view(final=False)
        self._record(
            [
                ContextEvent(
                    kind="resume",
                    outcome="resumed",
                    reason="latest snapshot plus later messages" if through_seq >= 0 else "full transcript",
                    model=self._targets[0].settings.model,
                    provider=self._targets[0].settings.provider,
                    limit_tokens=view.budget.effective_window,
                    projected_tokens=view.components.total,
                    remaining_tokens=view.budget.remaining,
                    components=view.components,
                    message_seq=self._next_seq - 1 if self._next_seq else None,
                    details={
                        "snapshot_through_seq": through_seq if through_seq >= 0 else None,
                        "history_messages": len(history),
                        "transcript_messages": self._next_seq,
                        "summary": bool(summary),
                        "status": record.status,
                    },
                )
            ]
        )

    def close(self) -> None:
        """Stop the settings watcher this manager started (the store is the caller's)."""
        if self._own_watcher and isinstance(self._settings_source, SettingsWatcher):
            self._settings_source.stop()

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
        return self._targets[0].settings

    def measure(self) -> ContextBudget:
        """The budget of the next request as things stand."""
        return self._view(final=False).budget

    # -- settings ------------------------------------------------------------------------------
    def _current_settings(self) -> Settings:
        source = self._settings_source
        return source.current if isinstance(source, SettingsWatcher) else source

    def _refresh_settings(self, *, initial: bool = False) -> None:
        """Re-resolve every target when the settings object changed (live reload)."""
        current = self._current_settings()
        if current is self._settings_seen:
            return
        try:
            targets = tuple(
                _Target(c, resolve_model_settings(c.model, provider=c.provider, settings=current))
                for c in self._clients
            )
        except (ConfigError, ValidationError) as exc:
            if initial:
                raise
            logger.warning("new settings rejected for this session, previous ones stay in force: %s", exc)
            self._record([degraded_event("settings", exc, fallback="previous_settings")])
            self._settings_seen = current
            return
        self._settings_seen, self._targets = current, targets
        if not initial:
            self._registry.budget_tokens = self._deferral_budget()
            self.store.update_session(self.session_id, settings=self._settings_json())

    def _settings_json(self) -> dict[str, Any]:
        primary, *fallbacks = self._targets
        data = settings_snapshot(primary.settings)
        if fallbacks:
            data["fallbacks"] = [settings_snapshot(t.settings) for t in fallbacks]
        return data

    def _deferral_budget(self) -> int:
        s = self._targets[0].settings
        return deferral_budget(s.budget_tokens, s.tool_deferral_threshold)

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
        """Append messages and record events in one transaction."""
        usages = [usage] * len(messages) if usage is not None else None
        with self.store.transaction():
            rows = self.store.append_messages(
                self.session_id, messages, tokenizer=self.tokenizer, usages=usages
            )
            for event in events:
                self.store.record_event(self.session_id, self._stamp(event, message_seq=rows[-1].seq))
        self._history.extend(messages)
        self._totals.extend(messages)
        self._next_seq = rows[-1].seq + 1

    def _reload_history(self) -> None:
        self._history, self._summary, _ = self.store.load_resume_history(self.session_id)
        self._totals.reset(self._history)

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
        self._guard = None
        self._note_shown = False
        deferral_events = self._registry.start_turn(self.turn_index)
        self._append([message], events=deferral_events)
        limit = max_steps or self.max_steps
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

    def _turn_parts(self) -> tuple[int, int, int, int | None]:
        """(new, pending before the last message, last message, its seq) of the turn in progress."""
        start = next(
            (i for i in range(len(self._history) - 1, -1, -1) if is_user_input(self._history[i])), None
        )
        if start is None:
            return 0, 0, 0, None
        new = self.tokenizer.count_message(self._history[start])
        rest = [self.tokenizer.count_message(m) for m in self._history[start + 1 :]]
        if not rest:
            return new, 0, 0, None
        return new, sum(rest[:-1]), rest[-1], self._next_seq - 1

    def _view(self, *, final: bool, note: str | None = None) -> _View:
        """Assemble the next request for the primary target (the note is added when due)."""
        view = self._assemble(final=final, note=note)
        if note is None and view.budget.note_text is not None:
            view = self._assemble(final=final, note=view.budget.note_text)
        return view

    def _assemble(self, *, final: bool, note: str | None) -> _View:
        sections = list(self._sections)
        if self._summary:
            title = None if self._summary.startswith(SUMMARY_TITLE) else SUMMARY_TITLE
            sections.append(PromptSection("summary", self._summary, title=title))
        status = [line for line in (note, None if final else self._registry.plan.note) if line]
        if final:
            status.append(FINAL_TURN_NOTE)
        if status:
            sections.append(PromptSection("context_status", "\n".join(status)))
        prompt, events = build_prompt_or_concat(sections, tokenizer=self.tokenizer)
        self._record(events)
        tools = (FINAL_REPORT_TOOL,) if final else tuple(self._registry.active_definitions)
        parts = prompt.components
        components = ComponentTokens(
            system=parts["system"],
            skills=parts["skills"],
            tools=self._count_tools(tools),
            summary=parts["summary"],
            conversation=self._totals.conversation,
            tool_results=self._totals.tool_results,
            offloaded_bytes=self._offloaded_bytes,
        )
        budget = ContextBudget.from_settings(self._targets[0].settings, components)
        return _View(prompt, tools, components, budget, note, final)

    def _count_tools(self, tools: tuple[dict[str, Any], ...]) -> int:
        """Tokens of the tool definitions sent, recounted only when the set changed."""
        seen, tokens = self._tools_tokens
        if tools != seen:
            tokens = self.tokenizer.count_tools(tools)
            self._tools_tokens = (tools, tokens)
        return tokens

    def _fresh_guard(self, view: _View) -> ContextGuard:
        """A guard whose counters are this request's measured components, split by turn."""
        new, pending, last, last_seq = self._turn_parts()
        schema = view.components.tools
        current = max(0, view.components.total - schema - new - pending - last)
        guard = ContextGuard(self.tokenizer, current=current, schema=schema, turn_index=self.turn_index)
        if new:
            guard.add_new(new)
        if pending:
            guard.add_pending(pending)
        if last:
            guard.add_pending(last, message_seq=last_seq)
        return guard

    def _evaluate(self, view: _View) -> GuardDecision:
        if self._guard is None or not self._guard.final_forced:
            self._guard = self._fresh_guard(view)
        return self._guard.evaluate_request(
            [t.guard_target for t in self._targets],
            components=view.components,
            message_seq=self._next_seq - 1 if self._next_seq else None,
        )

    def _step(self, step: int) -> ModelResponse:
        self._refresh_settings()
        final = self._guard is not None and self._guard.final_forced
        view = self._view(final=final)
        decision = self._evaluate(view)
        if not final and decision.level in ("compact", "hard_block") and self._noop_at != len(self._history):
            self._compact_at_threshold(decision.level, view)
            self._guard = None  # the evaluation before compaction may have forced the final turn
            view = self._view(final=False)
            decision = self._evaluate(view)
        if decision.final_forced and not view.final:
            view = self._view(final=True)
        events = list(decision.events)
        if view.note and not self._note_shown:
            self._note_shown = True
            events.append(
                ContextEvent(
                    kind="note",
                    trigger="note_threshold",
                    outcome="added",
                    reason=view.note,
                    limit_tokens=view.budget.effective_window,
                    projected_tokens=view.components.total,
                    remaining_tokens=view.budget.remaining,
                    details={"pct": view.budget.used_pct, "section": "context_status"},
                )
            )
        self._record(events)
        by_model = {(t.settings.model, t.settings.provider): t for t in self._targets}
        usable = [by_model[(g.model, g.provider)] for g in decision.usable_targets]
        return self._call(view, usable, step)

    # -- compaction ----------------------------------------------------------------------------
    def _compaction_target(self, view: _View) -> int:
        fixed = view.components.system + view.components.skills + view.components.tools
        return max(1, int(view.budget.effective_window * COMPACTION_TARGET_SHARE) - fixed)

    def _compact_at_threshold(self, level: str, view: _View) -> None:
        trigger = "hard_block" if level == "hard_block" else "compact_threshold"
        target = self._compaction_target(view)
        report = self._force_compact(self.compaction, trigger=trigger, target_tokens=target)
        if level == "hard_block" and not report.noop and not report.fits:
            # Blocking is worse than losing detail: the default chain ends in truncate.
            self._force_compact("chain", trigger=trigger, target_tokens=target)

    def _force_compact(
        self, strategy: Any, *, trigger: str, target_tokens: int | None, instructions: str | None = None
    ) -> CompactionReport:
        def run(strategy: Any) -> CompactionReport:
            return force_compact(
                self.store,
                self.session_id,
                strategy=strategy,
                instructions=instructions,
                summarizer=self.summarizer,
                target_tokens=target_tokens,
                trigger=trigger,
                event_fields=self._compaction_event_fields(),
            )

        try:
            report = run(strategy)
        except SummarizerUnavailableError as exc:
            if trigger in ("manual", "tool"):
                raise
            # An automatic compaction must still make room: truncate needs no summarizer.
            logger.warning("summarizer failed during %s compaction, truncating instead: %s", trigger, exc)
            self._record(
                [degraded_event("compaction", exc, fallback=SUMMARIZER_FALLBACK_STRATEGY, trigger=trigger)]
            )
            report = run(SUMMARIZER_FALLBACK_STRATEGY)
        self._reload_history()
        self._noop_at = len(self._history) if report.noop else None
        return report

    def _compaction_event_fields(self) -> dict[str, Any]:
        """The turn and window a compaction happens in, for force_compact to write with its event."""
        target = self._targets[0]
        s = target.settings
        return {
            "turn_index": self.turn_index if self.turn_index >= 0 else None,
            "provider": s.provider or target.client.provider,
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
    def _request(self, view: _View, target: _Target) -> ModelRequest:
        s = target.settings
        payload = to_anthropic_request(
            view.prompt,
            self._history,
            list(view.tools),
            model=target.client.model,
            max_tokens=s.max_output_tokens,
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
        )

    def _request_event(
        self,
        view: _View,
        target: _Target,
        request: ModelRequest,
        *,
        trigger: str,
        outcome: str,
        step: int,
        response: ModelResponse | None = None,
        reason: str | None = None,
    ) -> ContextEvent:
        s = target.settings
        budget = ContextBudget.from_settings(s, view.components)
        usage = response.usage if response else None
        details: dict[str, Any] = {
            "step": step,
            "tools_sent": [str(t.get("name")) for t in view.tools],
            "deferred_tools": 0 if view.final else len(self._registry.deferred),
            "cache_breakpoints": count_cache_breakpoints(request.payload),
            "summary_injected": bool(self._summary),
            "note": view.note,
            "final_forced": view.final,
            "level": budget.level,
            "tokenizer": self.tokenizer.id,
        }
        if response is not None:
            details["stop_reason"] = response.stop_reason
            if response.model:
                details["provider_model"] = response.model
        if usage is not None and usage.prompt_tokens and view.components.total:
            details["provider_over_estimate"] = round(usage.prompt_tokens / view.components.total, 4)
        return ContextEvent(
            kind="request",
            trigger=trigger,
            outcome=outcome,
            reason=reason,
            provider=s.provider or target.client.provider,
            model=target.client.model,
            context_window=s.context_window,
            max_output_tokens=s.max_output_tokens,
            buffer_tokens=s.buffer_tokens,
            limit_tokens=budget.effective_window,
            projected_tokens=view.components.total,
            remaining_tokens=budget.remaining,
            components=view.components,
            usage=usage,
            details=details,
        )

    def _call(self, view: _View, targets: Sequence[_Target], step: int) -> ModelResponse:
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

    def _call_target(self, view: _View, target: _Target, step: int, trigger: str) -> ModelResponse:
        request = self._request(view, target)
        try:
            response = target.client.complete(request)
        except ContextLengthExceededError as exc:
            self._record(
                [self._request_event(view, target, request, trigger=trigger, outcome="context_length_exceeded",
                                     step=step, reason=str(exc))],
                message_seq=self._next_seq - 1,
            )  # fmt: skip
            return self._emergency_retry(view, target, step, exc)
        except ProviderError as exc:
            self._record(
                [self._request_event(view, target, request, trigger=trigger, outcome="provider_error",
                                     step=step, reason=str(exc))],
                message_seq=self._next_seq - 1,
            )  # fmt: skip
            raise
        self._commit_reply(view, target, request, response, trigger=trigger, step=step)
        return response

    def _emergency_retry(
        self, view: _View, target: _Target, step: int, error: ContextLengthExceededError
    ) -> ModelResponse:
        """The provider found the prompt too long: emergency compaction, then one retry."""
        logger.warning(
            "provider rejected the prompt as too long; emergency compaction and one retry: %s", error
        )
        self._force_compact(
            EMERGENCY_STRATEGY, trigger="provider_error", target_tokens=self._compaction_target(view)
        )
        retry_view = self._view(final=view.final)
        request = self._request(retry_view, target)
        try:
            response = target.client.complete(request)
        except ContextLengthExceededError as again:
            self._record(
                [self._request_event(retry_view, target, request, trigger="retry", outcome="context_length_exceeded",
                                     step=step, reason=str(again))],
                message_seq=self._next_seq - 1,
            )  # fmt: skip
            raise ContextOverflowError(
                f"{target.client.model} still rejects the prompt after emergency compaction: {again}",
                limit=retry_view.budget.effective_window,
                projected=retry_view.components.total,
            ) from again
        self._commit_reply(retry_view, target, request, response, trigger="retry", step=step)
        return response

    def _commit_reply(
        self,
        view: _View,
        target: _Target,
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
        if self._guard is not None:
            # The reply is part of the next request: tool outputs are reserved on top of it.
            self._guard.add_pending(
                self.tokenizer.count_message(response.message), message_seq=self._next_seq - 1
            )
        self.last_budget = ContextBudget.from_settings(target.settings, view.components)

    # -- tools ---------------------------------------------------------------------------------
    def _run_tools(self, uses: Sequence[ToolUseBlock]) -> str | None:
        """Run the tools of one reply and append their results; returns a final report if given."""
        guard = self._guard
        if guard is None:  # set by the request whose reply holds these tool uses
            raise ValidationError("tool uses without a model request in this turn", field="tool_uses")
        blocks: list[ToolResultBlock] = []
        events: list[ContextEvent] = []
        report: str | None = None
        settings = self._targets[0].settings
        for use in uses:
            self._registry.record_use(use.name, self.turn_index)
            if use.name == FINAL_REPORT_TOOL_NAME:
                report = str(use.input.get("report") or "").strip() or "(empty final report)"
                blocks.append(
                    ToolResultBlock(
                        tool_use_id=use.id, content="Final report delivered; the session has ended."
                    )
                )
                continue
            if not guard.may_run_tools:
                text, is_error = (
                    f"Error: {use.name} was not run: the context window is full (tools_refused). "
                    "Call final_report with your final report.",
                    True,
                )
            else:
                text, is_error, tool_events = self._execute(use, settings)
                events.extend(tool_events)
            tokens = self.tokenizer.count_block(
                ToolResultBlock(tool_use_id=use.id, content=text, is_error=is_error)
            )
            decision = guard.reserve_tool_output(tokens, tool_name=use.name, message_seq=self._next_seq)
            events.extend(decision.events)
            if not decision.accepted and decision.reason == REASON_TOKEN_BUDGET:
                text, is_error = (
                    f"Error: token_budget_exceeded: the output of {use.name} ({tokens:,} tokens) does not fit "
                    "in the remaining context and was not added. Call final_report with your final report.",
                    True,
                )
            blocks.append(ToolResultBlock(tool_use_id=use.id, content=text, is_error=is_error))
        self._append([Message(role="user", content=blocks)], events=events)
        return report

    def _execute(
        self, use: ToolUseBlock, settings: ResolvedModelSettings
    ) -> tuple[str, bool, list[ContextEvent]]:
        """(text for the context, is_error, events) of one tool call."""
        name, tool_input = use.name, dict(use.input)
        if name == READ_RESULT_TOOL["name"]:
            text = run_read_result_tool(self._results, tool_input)
            return text, text.startswith("Error:"), []
        if name == TOOL_SEARCH_TOOL["name"]:
            text, events = run_tool_search_tool(self._registry, tool_input)
            return text, text.startswith("Error:"), events
        if name == COMPACT_CONTEXT_TOOL["name"]:
            return self._run_compact_tool(tool_input)
        handler = self._handlers.get(name)
        if handler is None:
            known = [s.name for s in self._registry.active]
            return f"Error: unknown tool {name!r}; available: {', '.join(known)}", True, []
        try:
            output = handler(tool_input)
        except Exception as exc:  # the agent's tool code is foreign: its failure goes to the model
            logger.warning("tool %s failed: %s: %s", name, type(exc).__name__, exc)
            return f"Error: {name} failed: {type(exc).__name__}: {exc}", True, []
        content = (
            output if isinstance(output, str | bytes) else json.dumps(output, ensure_ascii=False, default=str)
        )
        text, events = offload_or_inline(
            self._results,
            content,
            tool_name=name,
            tool_use_id=use.id,
            threshold_bytes=settings.result_offload_threshold,
            tool_response_max_bytes=settings.tool_response_max_bytes,
        )
        for event in events:
            if event.kind == "offload":
                self._offloaded_bytes += int(event.details.get("size_bytes") or 0)
        return text, False, events

    def _run_compact_tool(self, tool_input: dict[str, Any]) -> tuple[str, bool, list[ContextEvent]]:
        try:
            text = run_compact_context_tool(
                self.store,
                self.session_id,
                tool_input,
                summarizer=self.summarizer,
                event_fields=self._compaction_event_fields(),
            )
        except (ValidationError, SummarizerUnavailableError) as exc:
            return f"Error: compact_context failed: {exc}", True, []
        self._reload_history()
        return text, False, []
