"""The session manager: the one object an agent embeds around a model client.

Each model call of a turn: assemble the request (:mod:`engine.session.assembly`: system prompt,
tools, every budget component, the history's from running totals so accounting does not grow
with the session); compact at the hard-block or compaction threshold (snapshot written); let the
session's one guard (:mod:`engine.session.guarding`) evaluate every target; call the model
(:mod:`engine.session.calls`: fallbacks, and on a provider context-length error the emergency
path and one retry); run the tools (:mod:`engine.session.tools`), offloading large outputs and
reserving their tokens through the guard. The decisions are the pure layers'; the history and
every write to the transcript are :mod:`engine.session.history`'s; this module runs the loop.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.budget import ContextBudget
from engine.calibration import Calibration
from engine.clients import ModelClient, ModelResponse
from engine.compaction import CompactionReport, Summarizer, default_summarizer, parse_strategy
from engine.deferral import ToolSpec
from engine.errors import ValidationError
from engine.messages import Message, ToolUseBlock, is_user_input, user
from engine.offload import ResultStore
from engine.prompt import PromptSection
from engine.redact import install_log_redaction
from engine.session.assembly import RequestView, ToolTokens, assemble_view, prompt_sections
from engine.session.calls import ModelCaller
from engine.session.compacting import (
    EMERGENCY_STRATEGY,
    Compactor,
    compaction_event_fields,
    compaction_target,
)
from engine.session.event_building import note_event, resume_event
from engine.session.guarding import SessionGuard
from engine.session.history import open_history
from engine.session.targets import SettingsSource, Targets, session_estimator
from engine.session.tools import ToolExecutor, ToolHandler, check_handlers, tool_records, tool_registry
from engine.settings import ResolvedModelSettings
from engine.store import SessionStore
from engine.store.factory import open_store
from engine.tokens import Tokenizer

logger = logging.getLogger(__name__)

#: Model calls one turn may make before the manager stops it (a runaway tool loop).
DEFAULT_MAX_STEPS = 40
STATUS_ACTIVE = "active"
STATUS_FINAL = "final"


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

    ``tools`` are tool definitions (Anthropic or OpenAI shape, or :class:`ToolSpec`);
    ``tool_handlers`` map a tool name to a callable taking the tool input and returning text,
    bytes, or anything JSON-serialisable. ``fallbacks`` are further clients the guard evaluates
    (and the manager falls back to on a retryable provider error). ``settings`` is a
    :class:`Settings`, a :class:`SettingsWatcher`, or a TOML path (watched and reloaded live);
    None reads the default settings file once. ``compaction`` is the strategy run at the
    compaction threshold (a name, ``{"type": ...}`` dict or config; default ``chain``).
    ``store`` is a store, or a database file / ``postgresql://`` URL the manager opens and closes.
    ``calibration`` is the token estimator's calibration (``engine.calibration``); None reads the
    user's file (pass ``Calibration()`` for the static estimator whatever the user calibrated).
    Constructing one installs :func:`engine.redact.install_log_redaction` (provider errors it logs
    may echo an API key).
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
        calibration: Calibration | None = None,
    ) -> None:
        if max_steps < 1:
            raise ValidationError(
                f"max_steps must be >= 1, got {max_steps}", field="max_steps", value=max_steps
            )
        install_log_redaction()  # the provider errors it logs may echo a key
        handlers = check_handlers(tool_handlers)
        self._own_store = isinstance(store, str | os.PathLike)  # a file or URL: a store we open and close
        self.store = store = open_store(store) if isinstance(store, str | os.PathLike) else store
        self.client, self.max_steps = client, max_steps
        self._targets = Targets((client, *fallbacks), settings)
        self.compaction = parse_strategy(compaction)
        self.summarizer = summarizer or default_summarizer()
        self._sections = prompt_sections(system_prompt, sections, skills)
        self.tokenizer: Tokenizer
        self.tokenizer, calibration_problem = session_estimator(self._targets.primary.settings, calibration)
        self._registry = tool_registry(tools, self.tokenizer, self._targets.deferral_budget())
        self._tool_tokens = ToolTokens(self.tokenizer)
        self._guard = SessionGuard(self.tokenizer)
        self._note_shown = False
        self._noop_at: int | None = None
        self.status = STATUS_ACTIVE
        self._history = open_history(
            store,
            self.tokenizer,
            self._targets.primary,
            self._targets.settings_json(),
            session_id=session_id,
            resume=resume,
            title=title,
            metadata=metadata,
        )
        self.session_id = session_id = self._history.session_id
        if calibration_problem is not None:
            self._history.record([calibration_problem])
        self._compactor = Compactor(
            store,
            session_id,
            summarizer=self.summarizer,
            event_fields=self._compaction_fields,
            record=self._history.record,
            compacted=self._compacted,
        )
        self._tools = ToolExecutor(
            store,
            session_id,
            registry=self._registry,
            results=ResultStore(store, session_id, tokenizer=self.tokenizer),
            handlers=handlers,
            summarizer=self.summarizer,
            compaction_fields=self._compaction_fields,
        )
        self._caller = ModelCaller(
            self._history, self._guard, self._registry, compact_for_retry=self._compact_for_retry
        )
        if resume:
            self._load_from_store()
        self.store.upsert_tools(session_id, tool_records(self._registry, self.tokenizer))

    @classmethod
    def resume(
        cls, store: SessionStore | str | os.PathLike[str], session_id: str, client: ModelClient, **kwargs: Any
    ) -> SessionManager:
        """Continue a stored session from its latest snapshot plus later messages (not the whole
        transcript, so a compacted session does not overflow again); records a ``resume`` event."""
        return cls(client, store, session_id=session_id, resume=True, **kwargs)

    def _load_from_store(self) -> None:
        self.status = self.store.get_session(self.session_id).status
        through_seq = self._history.load()
        self._tools.offloaded_bytes = sum(b.size_bytes for b in self.store.list_blobs(self.session_id))
        view = self._view(final=False)
        resumed = resume_event(
            view,
            self._targets.primary.settings,
            through_seq=through_seq,
            history_messages=len(self._history.messages),
            transcript_messages=self._history.next_seq,
            summary=bool(self._history.summary),
            status=self.status,
        )
        self._history.record([*view.events, resumed])

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
        return list(self._history.messages)

    @property
    def summary(self) -> str | None:
        """The summary injected into the system prompt at request time, if any."""
        return self._history.summary

    @property
    def settings(self) -> ResolvedModelSettings:
        """The primary model's resolved settings in force."""
        return self._targets.primary.settings

    @property
    def turn_index(self) -> int:
        """The current turn (-1 before the first)."""
        return self._history.turn_index

    @property
    def last_budget(self) -> ContextBudget | None:
        """The budget of the last request the model answered."""
        return self._caller.last_budget

    def measure(self) -> ContextBudget:
        """The budget of the next request as things stand."""
        return self._view(final=False).budget

    def _refresh_settings(self) -> None:
        """Apply a live settings reload (a rejected edit is recorded; the previous settings stay)."""
        changed, events = self._targets.refresh()
        self._history.record(events)
        if changed:
            self._registry.budget_tokens = self._targets.deferral_budget()
            self.store.update_session(self.session_id, settings=self._targets.settings_json())

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
        self._guard.start_turn()
        self._note_shown = False
        self._history.start_turn(message, self._registry.start_turn(self.turn_index + 1))
        try:
            return self._turn(max_steps or self.max_steps)
        finally:
            if self._history.pending is not None:  # no answer: the turn never happened
                self._history.drop_pending()
                self._guard.start_turn()

    def _turn(self, limit: int) -> TurnResult:
        text = ""
        for step in range(limit):
            reply = self._step(step).message
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
        return assemble_view(
            self._sections,
            final=final,
            plan_note=self._registry.plan.note,
            active_tools=self._registry.active_definitions,
            summary=self._history.summary,
            tool_tokens=self._tool_tokens,
            totals=self._history.totals,
            offloaded_bytes=self._tools.offloaded_bytes,
            settings=self._targets.primary.settings,
        )

    def _step(self, step: int) -> ModelResponse:
        self._refresh_settings()
        guard, rebase = self._guard, self._guard.rebase_due()
        view = self._view(final=not rebase and guard.final_forced)
        if rebase:
            new_input = self._history.messages[-1] if guard.rebase == "turn" else None
            guard.rebase_from(view, self.turn_index, new_input)
        decision = guard.evaluate(view, self._targets.all, self._history.sent_seq)
        if (
            not view.final
            and decision.level in ("compact", "hard_block")
            and self._noop_at != len(self._history.messages)
        ):
            self._compactor.at_threshold(self.compaction, decision.level, view)
            view = self._view(final=False)
            guard.rebase_from(view, self.turn_index)  # lifts a final turn the evaluation before forced
            decision = guard.evaluate(view, self._targets.all, self._history.sent_seq)
        if decision.final_forced and not view.final:
            view = self._view(final=True)
        events = [*view.events, *decision.events]
        if view.note and not self._note_shown:
            self._note_shown = True
            events.append(note_event(view))
        self._history.record(events)
        return self._caller.call(view, self._targets.usable(decision.usable_targets), step)

    # -- compaction ----------------------------------------------------------------------------
    def _compact_for_retry(self, view: RequestView) -> RequestView:
        """The provider refused ``view`` as too long: the emergency compaction, and the view after it."""
        target = compaction_target(view)
        self._compactor.run(EMERGENCY_STRATEGY, trigger="provider_error", target_tokens=target)
        return self._view(final=view.final)

    def _compacted(self, report: CompactionReport) -> None:
        """A compaction ran: the history follows the store (a no-op is not retried until it grows)."""
        self._history_replaced()
        self._noop_at = len(self._history.messages) if report.noop else None

    def _history_replaced(self) -> None:
        self._history.reload()
        self._guard.history_replaced()

    def _compaction_fields(self) -> dict[str, Any]:
        return compaction_event_fields(self._targets.primary, self.turn_index)

    def compact(
        self, strategy: Any = None, *, instructions: str | None = None, target_tokens: int | None = None
    ) -> CompactionReport:
        """Compact now (trigger ``manual``); the snapshot is what the next request sends.

        Without ``target_tokens`` the target is force_compact's default (half the history)."""
        return self._compactor.run(
            strategy or self.compaction,
            trigger="manual",
            target_tokens=target_tokens,
            instructions=instructions,
        )

    # -- tools ---------------------------------------------------------------------------------
    def _run_tools(self, uses: Sequence[ToolUseBlock]) -> str | None:
        """Run the tools of one reply and append their results; returns a final report if given."""
        results = self._tools.run_reply(
            uses,
            self._guard.guard,
            self._targets.primary.settings,
            turn_index=self.turn_index,
            message_seq=self._history.next_seq,
        )
        self._history.append([results.message], events=results.events)
        if self._tools.history_replaced:  # compact_context ran
            self._tools.history_replaced = False
            self._history_replaced()
        return results.final_report
