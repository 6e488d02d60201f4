"""The events of an imported session's model calls: one ``request`` event per call, and the
agent's own compactions (with the snapshot of what it went on with).

A request event carries what that call sent by component, measured by the one rule every source
uses (:func:`engine.components.measure_request`): the system prompt and tool definitions when the
source has them, and the messages before the call (since the last compaction boundary). Where the
provider counted the call, the components are reconciled to its count
(:func:`engine.components.reconcile_call`, ``components_basis``): ``details["estimate_total"]``
keeps our own measure beside it. The limit is the one the file, the model table or the user's
settings give (:func:`engine.settings.limit_for_model`). A call that failed (``details["failure"]``,
engine.call_failures) is recorded with its outcome and no usage.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.call_failures import failure_of
from engine.components import HistoryTotals, components_with, measure_request, reconcile_call
from engine.events import ComponentTokens, ContextEvent, ProviderUsage
from engine.importers.parsing.parsed import CallInfo, ParsedSession
from engine.importers.unlogged import own_prefixes, run_total_prefixes, unlogged_prefixes
from engine.importers.utc_times import utc_text
from engine.limit import Limit
from engine.settings import Settings, limit_for_model
from engine.store import SessionStore, StoredMessage
from engine.tokens import Tokenizer

#: A failed call's outcome, by its cause (the outcome words request events already use).
FAILURE_OUTCOMES = {"prompt_too_long": "context_length_exceeded", "interrupted": "interrupted"}


@dataclass(frozen=True)
class CallMeasure:
    """What the walk measured for one call: our estimate, the provider's usage, the context
    segment it belongs to (segments are separated by the agent's compactions), its limit, and
    whether the part of its request the source does not keep is its own, not its segment's (a
    compaction's summarizer: another framing, often without the tools; a call the parser marks
    ``own_framing``: Qwen Code's first after a compression, sent without its reminders)."""

    estimate: int
    usage: ProviderUsage | None
    segment: int
    limit_tokens: int | None = None
    own_framing: bool = False

    @property
    def unlogged_tokens(self) -> int | None:
        """What the provider counted beyond our measure (what the source did not keep), None without
        the provider's count."""
        if self.usage is None or not self.usage.prompt_tokens:
            return None
        return max(0, self.usage.prompt_tokens - self.estimate)

    @property
    def prompt_tokens(self) -> int:
        """The call's prompt: the provider's count when it gave one, else our estimate."""
        return (
            self.usage.prompt_tokens if self.usage is not None and self.usage.prompt_tokens else self.estimate
        )


def record_requests(
    store: SessionStore,
    session_id: str,
    parsed: ParsedSession,
    rows: Sequence[StoredMessage],
    tokenizer: Tokenizer,
    source: str,
    *,
    first_new: int = 0,
    settings: Settings | None = None,
) -> list[CallMeasure]:
    """Record a request event per call at messages from ``first_new`` on (earlier ones were
    recorded by an earlier import); returns every call's measure in order, all of them.

    When the source does not keep part of what every call sent (``parsed.unlogged_prefix_in``:
    Codex's tool definitions, Gemini CLI's system instruction and tools), that part is the
    provider's count minus ours at the first call with usage of each context segment (measured
    again after every compaction, never carried across one), added to that component of the
    segment's calls and named in their details (``unlogged_prefix_tokens``, ``unlogged_prefix_in``).
    A compaction's summarizer call sends a framing of its own (OpenCode's: another system prompt and
    no tools), as does a call a parser marks ``own_framing``: its part is its own difference, and it
    does not set its segment's."""
    walk = _Walk(store, session_id, parsed, rows, tokenizer, source, settings)
    prefixes: dict[int, int] = {}
    own: dict[int, int] = {}
    if parsed.unlogged_prefix_in:
        measured = walk.run(first_new=len(rows) + 1, prefixes={})
        prefixes, own = unlogged_prefixes(measured), own_prefixes(measured)
        if prefixes:
            shown = ", ".join(f"{p:,}" for p in dict.fromkeys(prefixes.values()))
            parsed.notes.append(
                f"{shown} tokens every call sent are not in the file ({parsed.unlogged_prefix_in}): "
                "measured at the first call with usage after each compaction"
            )
        elif shares := run_total_prefixes(measured, parsed.metadata.get("provider_run_totals")):
            own = shares
            parsed.notes.append(
                f"about {sum(shares.values()) // len(shares):,} tokens a call sent are not in the file "
                f"({parsed.unlogged_prefix_in}): what each run's provider total leaves over ctxdesk's "
                "count of its calls, shared among them"
            )
    return walk.run(first_new=first_new, prefixes=prefixes, own=own)


class _Walk:
    """One pass over a session's messages, measuring (and recording) each call in order."""

    def __init__(
        self,
        store: SessionStore,
        session_id: str,
        parsed: ParsedSession,
        rows: Sequence[StoredMessage],
        tokenizer: Tokenizer,
        source: str,
        settings: Settings | None,
    ) -> None:
        self.store, self.session_id, self.parsed, self.rows = store, session_id, parsed, rows
        self.tokenizer, self.source, self.settings = tokenizer, source, settings
        self.fixed: dict[
            Any, ComponentTokens
        ] = {}  # system prompt and tools: mostly the same call after call
        self.limits: dict[Any, Limit | None] = {}
        self.last_columns: dict[
            str, int | None
        ] = {}  # the limit recorded on the last call (and a compaction's)

    def run(
        self, *, first_new: int, prefixes: dict[int, int], own: dict[int, int] | None = None
    ) -> list[CallMeasure]:
        """Every call's measure, recording those at messages from ``first_new`` on; ``prefixes``: each
        segment's unlogged part, ``own``: a call's own (:func:`own_prefixes`), by the call's index."""
        own = own or {}
        out: list[CallMeasure] = []
        history = _History(self.tokenizer)
        failed_events: dict[str, int] = {}  # request ref of a failed call -> its event id
        segment = 0
        for i, (pm, row) in enumerate(zip(self.parsed.messages, self.rows, strict=True)):
            record = i >= first_new
            if pm.starts_context:
                if pm.compaction is not None and record:
                    # before it, unless the agent counted: the last call's whole prompt (a refused one's too)
                    before = out[-1].prompt_tokens if out else history.conversation + history.tool_results
                    _compaction(
                        self.store, self.session_id, pm.compaction, row, before,
                        self.source, rows=self.rows, failed_events=failed_events, limit=self.last_columns,
                    )  # fmt: skip
                history.reset()
                segment += 1
            prefix = prefixes.get(segment, 0)
            if pm.call is not None:
                part = own.get(len(out), prefix)
                out.append(self.call(pm.call, row, i, history, segment, part, record, failed_events))
            history.add(row)
            for call in pm.pending_calls:
                part = own.get(len(out), prefix)
                out.append(self.call(call, row, i + 1, history, segment, part, record, failed_events))
        return out

    def call(
        self,
        call: CallInfo,
        row: StoredMessage,
        sent_messages: int,
        history: _History,
        segment: int,
        prefix: int,
        record: bool,
        failed_events: dict[str, int],
    ) -> CallMeasure:
        parsed = self.parsed
        system = call.system_prompt if call.system_prompt is not None else parsed.system_prompt
        tools = call.tools if call.tools is not None else parsed.tools
        if call.components is not None:  # a parser that rebuilt the request measured it (Claude Code)
            measured = call.components
        else:
            fixed = _memo(
                self.fixed, (system, id(tools)),
                lambda: measure_request(self.tokenizer, system=system or "", tools=tools or [], messages=()),
            )  # fmt: skip
            measured = components_with(
                fixed, {"conversation": history.conversation, "tool_results": history.tool_results}
            )
        where = parsed.unlogged_prefix_in
        if prefix and where:
            measured = components_with(measured, {where: getattr(measured, where) + prefix})
        usage = call.usage
        estimate = measured.total
        model = call.model or parsed.model
        limit = self.limit(model, call.context_window or parsed.context_window)
        limit_tokens = call.limit_tokens if call.limit_tokens is not None else limit.tokens if limit else None
        own_framing = bool(call.details.get("compaction_call") or call.details.get("own_framing"))
        if not record:
            return CallMeasure(estimate, usage, segment, limit_tokens, own_framing)
        # a request rebuilt byte for byte saw all the provider got: a shortfall is only our count's
        # error, spread over what was sent; otherwise it may be harness text the file did not keep
        exact_bytes = call.exact_request is not None
        components, basis = reconcile_call(
            measured, usage.prompt_tokens if usage else None, exact_tokenizer=self.tokenizer.exact,
            max_scale_up=math.inf if exact_bytes else 1.0,
        )  # fmt: skip
        details: dict[str, Any] = {
            "estimate_total": estimate,
            # our own measure, before reconciling it to the provider's count
            "measured": {k: v for k, v in measured.__dict__.items() if v and k != "offloaded_bytes"},
            "provider_prompt_tokens": usage.prompt_tokens if usage else None,
            "exact": self.tokenizer.exact,
            "tokenizer": self.tokenizer.id,
            "source": self.source,
            "messages_sent": sent_messages,
            "segment": segment,
            **call.details,
        }
        if prefix and where:
            details.update(unlogged_prefix_tokens=prefix, unlogged_prefix_in=where)
        when = call_time(call, row)
        if when is not None:
            details["call_utc"] = when
        columns: dict[str, int | None] = limit.columns() if limit is not None else {}
        if limit is not None:
            details["limit_source"] = limit.source
        if call.limit_tokens is not None:  # the harness's own limit when the source tells it
            columns["limit_tokens"] = call.limit_tokens
            details["limit_source"] = "agent"
        self.last_columns = columns or self.last_columns
        failure = failure_of(call.details)
        event_id = self.store.record_event(
            self.session_id,
            ContextEvent(
                kind="request", provider=parsed.provider, model=model, turn_index=row.turn_index,
                outcome=FAILURE_OUTCOMES.get(failure["cause"], "provider_error") if failure else None,
                projected_tokens=components.total, components=components, components_basis=basis, usage=usage,
                message_seq=row.seq, details=details, messages_excluded=excluded_below(call, sent_messages),
                **columns,
            ),
        )  # fmt: skip
        if failure is not None and call.details.get("request_ref"):
            failed_events[str(call.details["request_ref"])] = event_id
        exact = call.exact_request  # a RequestRecord the parser rebuilt (Claude Code 2.1.3xx)
        if exact is not None:
            self.store.record_request(self.session_id, exact.model_copy(update={"event_id": event_id}))
        return CallMeasure(estimate, usage, segment, limit_tokens, own_framing)

    def limit(self, model: str | None, file_window: int | None) -> Limit | None:
        key = (model, file_window)
        if key not in self.limits:
            self.limits[key] = limit_for_model(
                model,
                file_window=file_window,
                file_output_reserve=self.parsed.output_reserve,
                settings=self.settings,
                provider=self.parsed.provider,
            )
        return self.limits[key]


class _History:
    """The conversation and tool-result totals of the rows walked since the last compaction; a row's
    message is read only once the totals are. A grown session's earlier rows are stored rows whose
    content is loaded on demand (engine.importers.writer): read at each row, as it was, a re-import
    of a 20 MB Codex session grown by 10% took minutes; a parser that measured every call (Claude
    Code) never reads them."""

    __slots__ = ("_rows", "_totals")

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._totals = HistoryTotals(tokenizer)
        self._rows: list[StoredMessage] = []

    def add(self, row: StoredMessage) -> None:
        self._rows.append(row)

    def reset(self) -> None:
        """The history starts again (a compaction)."""
        self._totals.reset()
        self._rows.clear()

    @property
    def conversation(self) -> int:
        return self._read().conversation

    @property
    def tool_results(self) -> int:
        return self._read().tool_results

    def _read(self) -> HistoryTotals:
        if self._rows:
            self._totals.extend(row.message for row in self._rows)
            self._rows.clear()
        return self._totals


def _compaction(
    store: SessionStore,
    session_id: str,
    details: dict[str, Any],
    row: StoredMessage,
    before: int,
    source: str,
    *,
    rows: Sequence[StoredMessage] = (),
    failed_events: dict[str, int] | None = None,
    limit: dict[str, int | None] | None = None,
) -> None:
    """A compaction the agent made (the source says where): later calls start from ``row``.

    ``limit``: the limit columns recorded on the call before it (the limit in force).
    ``details`` follow docs/HELPERS.md "Compaction events" (``by``, ``trigger_kind``,
    ``instructions``, ...); a parser's ``after_failed_request_ref`` becomes ``after_failed_call``,
    the seq of the failed call's request event (recorded before it)."""
    details = dict(details)
    details.setdefault("by", "user" if details.get("trigger") == "manual" else "agent")
    failed_ref = details.pop("after_failed_request_ref", None)
    failed_id = (failed_events or {}).get(str(failed_ref)) if failed_ref else None
    if failed_id is not None:
        details["after_failed_call"] = next(
            (e.seq for e in store.list_events(session_id, kind="request") if e.id == failed_id), None
        )
    event_id = store.record_event(
        session_id,
        ContextEvent(
            kind="compaction", trigger=str(details.get("trigger") or "compact_threshold"), outcome="compacted",
            reason=str(details.get("reason") or compaction_reason(details, details.get("before_tokens", before))),
            turn_index=row.turn_index,
            message_seq=row.seq, **(limit or {}),  # the limit in force
            details={
                "source": source, "before_tokens": details.get("before_tokens", before),
                "removed_message_seqs": list(range(row.seq)),
                **{k: v for k, v in details.items() if k not in ("trigger", "reason", "source")},
            },
        ),
    )  # fmt: skip
    # the context the agent went on with: its summary and the messages it kept (Claude Code's
    # preserved segment, as seqs), so resume/diff/restore see the harness's own compaction
    kept = [rows[s] for s in details.get("kept_message_seqs") or () if isinstance(s, int) and s < row.seq]
    if rows:
        after = [row, *kept]
        store.write_snapshot(
            session_id, [r.message for r in after], through_seq=row.seq, summary=str(details.get("summary") or ""),
            tokens=sum(r.tokens for r in after), strategy=f"harness:{details.get('harness') or 'agent'}",
            event_id=event_id,
        )  # fmt: skip


def compaction_reason(details: dict[str, Any], before: Any) -> str:
    """What an agent's compaction was, in words (its ``by``, ``trigger_kind``, tokens before and after)."""
    after = details.get("after_tokens")
    size = (
        f"{before:,} → {after:,} tokens" if isinstance(before, int) and isinstance(after, int)
        else f"at {before:,} tokens" if isinstance(before, int)
        else ""
    )  # fmt: skip
    kind = details.get("trigger_kind")
    if details.get("by") == "user" or kind == "manual":
        instructions = str(details.get("instructions") or "").strip()
        instructions = instructions if len(instructions) <= 200 else instructions[:199] + "…"
        said = f"the user compacted the context{f' with the instructions {instructions!r}' if instructions else ''}"
    elif kind == "reactive":
        said = "the agent compacted reactively after a call was refused as too long"
    elif kind == "auto":
        said = "the agent compacted itself automatically at its threshold"
    else:
        said = "the agent compacted its context"
    return f"{said}: {size}" if size else said


def excluded_below(call: CallInfo, bound: int) -> tuple[int, ...]:
    """The seqs below ``bound`` (the call's ``messages_sent``) that a parser which rebuilt the call
    says it did not send (Claude Code's summarizer leaves out the segment its compaction keeps)."""
    return tuple(sorted(i for i in call.sent.excluded if i < bound)) if call.sent is not None else ()


def call_time(call: CallInfo, row: StoredMessage) -> str | None:
    """When the call was made, as the source tells it (ISO 8601, UTC): its recorded request's
    start, else the time of the message it answered with or follows; None when the source keeps
    no times (the event's own ``created_utc`` is the import's)."""
    started = call.exact_request.started_utc if call.exact_request is not None else None
    return utc_text(started or row.message.meta.get("timestamp"))


def _memo(
    memo: dict[Any, ComponentTokens], key: Any, compute: Callable[[], ComponentTokens]
) -> ComponentTokens:
    if key not in memo:
        memo[key] = compute()
    return memo[key]
