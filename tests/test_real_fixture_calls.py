"""Every real-CLI fixture, call by call (issue #31): each folder tests/fixtures/real_agents/<agent>/
<scenario> holds what a real agent CLI wrote while it ran offline against the scripted model server,
and the server's log of every request it received (``requests.jsonl``). Imported as a user would
(the files a folder import or ``--from <agent>`` finds, through ``engine.importers``), every
imported call must be a request the CLI sent, with the same ordered messages (texts incl. the
harness's additions, reasoning sent back, tool calls with ids, names and inputs, tool results);
every request must be a call (a failed one too); sub-agents are linked once; where a request's
history is no longer the previous one's extended, a compaction is recorded.

A new fixture folder is covered with no edit here. What a transcript deliberately does not hold
is in ONE table, :data:`EXCEPTIONS`, each entry with its reason and the agent's version.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from engine.importers import import_files
from engine.replay.recorded import load_recorded_session
from engine.report import messages_sent
from engine.sent import sent_seqs
from engine.store import SessionStore
from tests.fixture_calls import (
    REAL_AGENTS,
    WIRES,
    Atom,
    Request,
    Wire,
    first_difference,
    imported_atoms,
    recorded_requests,
    request_atoms,
    scenario_folders,
    transcript_files,
    wire_of,
    without_retries,
)

#: Defects the test found and could not be fixed in time: (agent/scenario) -> why (strict xfail:
#: the day one is fixed, its entry must go).
KNOWN_DEFECTS: dict[str, str] = {}


def _scenario_id(scenario: Path) -> str:
    under = scenario.parent.parent.name + "/" if scenario.parent.name == "releases" else ""
    return f"{under}{scenario.parent.name}/{scenario.name}"


FOLDERS = scenario_folders()
SCENARIOS = [
    pytest.param(
        s,
        id=_scenario_id(s),
        marks=[pytest.mark.xfail(strict=True, reason=KNOWN_DEFECTS[_scenario_id(s)])]
        if _scenario_id(s) in KNOWN_DEFECTS
        else [],
    )
    for s in FOLDERS
]


@dataclass(frozen=True)
class Unlogged:
    """What an agent sends that its transcript deliberately does not hold as sent. Each field is
    one way: ``side_request`` (a request that is no call of the conversation), ``unlogged_atom``
    (text sent and never written down: left out of both sides of a call rebuilt from the
    transcript, never of one the agent recorded whole), ``framing`` (messages the import keeps as
    the call's system prompt), ``last_attempt_only`` (a retried failure is logged once)."""

    name: str
    agent: str
    version: str
    reason: str
    side_request: Callable[[Request], bool] | None = None
    unlogged_atom: Callable[[Atom], bool] | None = None
    framing: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    last_attempt_only: bool = False
    #: A side request (a summarizer, a commit message) that renders the history as one text of its
    #: own the files never hold: the call is checked to be there, in its place, flagged as the
    #: compaction's call or a side call, not atom by atom.
    rendered_summary: Callable[[Request], bool] | None = None
    #: A request the provider refused that the agent's files may keep no trace of: no call for
    #: it is not a defect (one the import does have is still compared).
    untraced_refusal: Callable[[Request], bool] | None = None
    #: A request whose history the agent rewrote for a reason of its own, not a compaction.
    rewrites_history: Callable[[list[Atom]], bool] | None = None

    def applies(self, scenario: Path) -> bool:
        return scenario.parent.name == self.agent


#: Aider 0.86 frames every call: its system prompt first, its reminder last, and the repository
#: map and the files in the chat as user messages it answers itself.
_AIDER_FRAMING_STARTS = (
    "Here are summaries of some files present in my git repository.",
    "I have *added these files to the chat*",
)


def _as_aider_logs(message: dict[str, Any]) -> dict[str, Any]:
    """A message's text as Aider's LLM history keeps it: its lines, not their endings."""
    return {**message, "content": "\n".join("".join(_texts_of(message.get("content"))).splitlines())}


def _without_aider_framing(body: dict[str, Any]) -> dict[str, Any]:
    messages = body["messages"]
    kept: list[dict[str, Any]] = []
    skip_answer = False
    for index, message in enumerate(messages):
        text = "".join(_texts_of(message.get("content")))
        if skip_answer:
            skip_answer = False
        elif index in (0, len(messages) - 1) and message["role"] == "system":
            pass
        elif message["role"] == "user" and text.startswith(_AIDER_FRAMING_STARTS):
            skip_answer = True
        else:
            kept.append(_as_aider_logs(message))
    return {**body, "messages": kept}


def _texts_of(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [str(p.get("text", "")) for p in content or [] if isinstance(p, dict)]


def _claude_code_unwritten(atom: Atom) -> bool:
    return (
        atom[0] == "text"
        and atom[1] == "user"
        and str(atom[2]).lstrip().startswith(("<system-reminder>", "CRITICAL: Respond with TEXT ONLY"))
    )


EXCEPTIONS: tuple[Unlogged, ...] = (
    Unlogged(
        "gemini side calls",
        "gemini",
        "Gemini CLI 0.61",
        "the model router's choice, the compression summary and the next-speaker check are "
        ":generateContent calls whose prompt and answer the chat file never records",
        side_request=lambda request: ":generateContent" in request["path"],
    ),
    Unlogged(
        "qwen system reminders",
        "qwen",
        "Qwen Code 0.24.4",
        "the <system-reminder> texts Qwen Code puts before a first or resumed prompt are sent, "
        "not written to the chat recording",
        unlogged_atom=lambda atom: (
            atom[0] == "text" and atom[1] == "user" and str(atom[2]).startswith("<system-reminder>")
        ),
    ),
    Unlogged(
        "qwen side-call instructions",
        "qwen",
        "Qwen Code 0.24.4",
        "the instructions Qwen Code appends for its chat-compression summarizer and its memory "
        "agent are sent as the call's last user text and never written to the chat recording "
        "(the calls themselves are)",
        unlogged_atom=lambda atom: (
            atom[0] == "text"
            and atom[1] == "user"
            and str(atom[2]).startswith(
                ("You are the component that summarizes a conversation", "Managed memory has TWO directories")
            )
        ),
    ),
    Unlogged(
        "copilot compaction instructions",
        "copilot",
        "GitHub Copilot CLI 1.0",
        "the summarizer instructions of a background compaction are sent as the call's last user "
        "text; events.jsonl records the call and its summary, not the instructions",
        unlogged_atom=lambda atom: (
            atom[0] == "text"
            and atom[1] == "user"
            and str(atom[2]).startswith("Please create a detailed summary of the conversation so far.")
        ),
    ),
    Unlogged(
        "opencode summarizer rendering",
        "opencode",
        "opencode-ai 1.18.33",
        "the compaction's summarizer is sent the history rendered as one text "
        "('Here is the conversation so far: <conversation>…') that the database never stores",
        rendered_summary=lambda request: (
            "Here is the conversation so far:" in str(request["body"]["messages"][-1:])
        ),
    ),
    Unlogged(
        "kilo chunked summary",
        "kilo",
        "@kilocode/cli 7.7.7",
        "Kilo's compaction summarizes in chunks ('Summarize conversation chunk i of n', the history "
        "and those instructions) then merges them ('Here is the conversation so far: …'); it stores "
        "neither request, and deletes the calls' messages (their usage is read from its event log)",
        rendered_summary=lambda request: any(
            marker in str(request["body"]["messages"][-1:])
            for marker in ("Here is the conversation so far:", "Summarize conversation chunk")
        ),
    ),
    Unlogged(
        "kilo refused calls",
        "kilo",
        "@kilocode/cli 7.7.7",
        "Kilo CLI writes nothing of a call the provider refused (no message, no error part), unlike "
        "OpenCode it forked from (tests/test_import_opencode.py::test_kilo_keeps_no_trace_of_a_refused_call)",
        untraced_refusal=lambda request: 400 <= request["status"] < 500,
    ),
    Unlogged(
        "claude code summarizer call",
        "claude-code",
        "Claude Code 2.1.330",
        "every call but the compaction summarizer's is recorded whole (api-request lines) and "
        "compared whole; the summarizer's is rebuilt from the thread, which never holds the "
        "<system-reminder> texts Claude Code adds nor the summarizer's instructions",
        unlogged_atom=_claude_code_unwritten,
    ),
    Unlogged(
        "claude code refusal notice",
        "claude-code",
        "Claude Code 2.1.330",
        "after a refusal (stop_reason refusal) Claude Code drops the refused reply from the history "
        "and sends a notice in its place: a rewrite of the history that is no compaction",
        rewrites_history=lambda atoms: any(
            a[0] == "text" and "Do not produce that content again" in str(a[2]) for a in atoms
        ),
    ),
    Unlogged(
        "aider framing and line endings",
        "aider",
        "aider-chat 0.86.2",
        "Aider's framing (system prompt, reminder, repository map and files in the chat with the "
        "answers it writes itself) is the call's system prompt in the import, not conversation "
        "(checked against the request in tests/test_import_aider.py); its LLM history keeps each "
        "message's lines, not their endings (a last newline or trailing blank line is lost)",
        framing=_without_aider_framing,
    ),
    Unlogged(
        "aider commit message",
        "aider",
        "aider-chat 0.86.2",
        "the weak model's commit-message call is sent the chat rendered as one text plus the diff; "
        "the chat log keeps only its result ('Commit <hash> <message>')",
        rendered_summary=lambda request: "# Diffs:" in str(request["body"]["messages"][-1:]),
    ),
    Unlogged(
        "codex retries",
        "codex",
        "Codex CLI 0.169",
        "a request the server failed (5xx) is sent again with the same body; the rollout logs "
        "only the last attempt's error",
        last_attempt_only=True,
    ),
)


def exceptions_for(scenario: Path) -> list[Unlogged]:
    return [e for e in EXCEPTIONS if e.applies(scenario)]


#: What a rendered-summary request and the compaction call it is compare as.
RENDERED_SUMMARY: Atom = ("side call rendering the history",)


@dataclass
class Call:
    """One imported model call: its session, event and the atoms it says it sent."""

    session_id: str
    seq: int
    atoms: list[Atom]
    failed: bool
    #: The agent recorded the request whole (compared whole), else rebuilt from the transcript.
    recorded_whole: bool = False
    #: The compaction's summarizer call or another side call (e.g. Aider's commit message).
    compaction_call: bool = False


def imported_calls(store: SessionStore, wire: Wire) -> dict[str, list[Call]]:
    """Every request event of every session, with what it sent: the messages from the start of
    its context (a compaction, or a history the agent rewrote) to the count it says it sent."""
    calls: dict[str, list[Call]] = {}
    for session in store.list_sessions():
        transcript = store.load_transcript(session.id)
        starts = sorted(
            {e.message_seq for e in store.list_events(session.id, kind="compaction")}
            | {i for i, m in enumerate(transcript) if m.meta.get("context_start")}
        )
        exact = {
            r.event_id: r for r in store.list_requests(session.id, with_body=True) if r.event_id is not None
        }
        own = []
        for event in store.list_events(session.id, kind="request"):
            failed = bool(event.details.get("failure"))
            record = exact.get(event.id)
            if record is not None and isinstance(record.body, dict) and "messages" in record.body:
                # the request the agent itself recorded (Claude Code 2.1.3xx), kept whole
                own.append(
                    Call(session.id, event.seq, request_atoms({"body": record.body}, wire), failed, True)
                )
                continue
            segment = event.details.get("segment") or 0
            first = starts[segment - 1] if segment else 0
            # a compaction's summarizer leaves out what its compaction keeps: not a prefix
            seqs = sent_seqs(first, event.details["messages_sent"], event.messages_excluded)
            sent = [transcript[i] for i in seqs]
            # Codex and Claude Code flag it compaction_call, OpenCode and Kilo compaction_summary
            summarizer = any(
                event.details.get(k) for k in ("compaction_call", "compaction_summary", "side_call")
            )
            own.append(
                Call(session.id, event.seq, imported_atoms(sent, wire), failed, compaction_call=summarizer)
            )
        calls[session.id] = own
    return calls


@dataclass
class Comparison:
    equal: int = 0
    #: Requests the agent's files keep no trace of (an ``untraced_refusal``), so no call.
    untraced: int = 0
    differences: list[str] = field(default_factory=list)


def match_calls(
    calls: dict[str, list[Call]],
    requests: list[Request],
    sent: list[list[Atom]],
    unlogged: Callable[[Atom], bool],
    *,
    rendered_summaries: bool = False,
    optional: frozenset[int] = frozenset(),
) -> tuple[Comparison, dict[tuple[str, int], int]]:
    """Pair each imported call with the first request not yet paired, after its session's last
    one, that carried the same atoms (sessions interleave in the log; within one, order holds).
    A call rebuilt from the transcript is compared without the ``unlogged`` atoms on both sides."""
    taken: set[int] = set()
    pairs: dict[tuple[str, int], int] = {}
    result = Comparison()

    def seen(atoms: list[Atom], call: Call) -> list[Atom]:
        if atoms == [RENDERED_SUMMARY]:
            return atoms
        return atoms if call.recorded_whole else [a for a in atoms if not unlogged(a)]

    for session_id, own in calls.items():
        after = -1
        for call in own:
            mine = (
                [RENDERED_SUMMARY] if rendered_summaries and call.compaction_call else seen(call.atoms, call)
            )
            free = [i for i in range(after + 1, len(sent)) if i not in taken]
            index = next((i for i in free if seen(sent[i], call) == mine), None)
            if index is None:
                where = first_difference(mine, seen(sent[free[0]], call)) if free else "no request left"
                seq = requests[free[0]]["seq"] if free else "-"
                result.differences.append(f"call {session_id[:8]}#{call.seq} vs request {seq}: {where}")
                continue
            taken.add(index)
            pairs[(session_id, call.seq)] = index
            after = index
            status = requests[index]["status"]
            if call.failed != (status != 200):
                result.differences.append(
                    f"call {session_id[:8]}#{call.seq}: failed={call.failed}, answered {status}"
                )
            else:
                result.equal += 1
    missing = [requests[i]["seq"] for i in range(len(sent)) if i not in taken and i not in optional]
    result.untraced = sum(1 for i in optional if i not in taken)
    if missing:
        result.differences.append(f"requests imported as no call (server seq): {missing}")
    return result, pairs


@dataclass
class Scenario:
    """A fixture imported: the model calls the server received and what the import made of them."""

    requests: list[Request]
    sent: list[list[Atom]]
    calls: dict[str, list[Call]]
    comparison: Comparison
    pairs: dict[tuple[str, int], int]
    #: ``sent`` without the atoms the agents' files never hold (the exceptions' ``unlogged_atom``).
    logged: list[list[Atom]]


def compare(scenario: Path, store: SessionStore) -> Scenario:
    """Import ``scenario``'s files into ``store`` and pair every call with its request."""
    log = recorded_requests(scenario)
    wire = wire_of(log)
    exceptions = exceptions_for(scenario)
    requests = [
        r
        for r in log
        if wire.is_call(r["path"]) and not any(e.side_request and e.side_request(r) for e in exceptions)
    ]
    if any(e.last_attempt_only for e in exceptions):
        requests = without_retries(requests)
    for framing in (e.framing for e in exceptions if e.framing):
        requests = [{**r, "body": framing(r["body"])} for r in requests]
    rendered = [any(e.rendered_summary and e.rendered_summary(r) for e in exceptions) for r in requests]
    sent = [
        [RENDERED_SUMMARY] if summary else request_atoms(r, wire)
        for r, summary in zip(requests, rendered, strict=True)
    ]
    files = transcript_files(scenario)
    assert files, f"{scenario}: no file a user would import"
    import_files(files, store)
    calls = imported_calls(store, wire)
    predicates = [e.unlogged_atom for e in exceptions if e.unlogged_atom]
    comparison, pairs = match_calls(
        calls,
        requests,
        sent,
        lambda atom: any(p(atom) for p in predicates),
        rendered_summaries=any(rendered),
        optional=frozenset(
            i
            for i, r in enumerate(requests)
            if any(e.untraced_refusal and e.untraced_refusal(r) for e in exceptions)
        ),
    )
    unlogged = [[a for a in atoms if not any(p(a) for p in predicates)] for atoms in sent]
    return Scenario(requests, sent, calls, comparison, pairs, unlogged)


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    with SessionStore(tmp_path / "sessions.db") as s:
        yield s


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_imported_call_is_a_request_the_cli_sent(scenario: Path, store: SessionStore) -> None:
    """Same ordered messages, failed calls failed, as many calls as requests (none invented)."""
    result = compare(scenario, store)
    n_calls = sum(len(c) for c in result.calls.values())
    expected = len(result.requests) - result.comparison.untraced
    assert n_calls == expected and not result.comparison.differences, (
        f"{n_calls} calls imported, {len(result.requests)} sent, {result.comparison.equal} equal:\n"
        + "\n".join(result.comparison.differences)
    )


def _adds_what_was_left_out(
    store: SessionStore, session_id: str, seq: int, earlier: list[Atom], later: list[Atom]
) -> bool:
    """The later request kept every atom of the earlier one, in order, with messages added among
    them that the earlier call's event says it did not send (``messages_excluded``: Gemini CLI
    0.61's resumed history carries each tool result twice)."""
    (event,) = [e for e in store.list_events(session_id, kind="request") if e.seq == seq]
    rest = iter(later)
    return bool(event.messages_excluded) and all(atom in rest for atom in earlier)


def _compactions_between(store: SessionStore, session_id: str, first: int, second: int) -> bool:
    """Whether the import records a restart of the context between two request events."""
    events = store.list_events(session_id)
    by_seq = {e.seq: e for e in events}
    if any(e.kind == "compaction" and first < e.seq < second for e in events):
        return True
    transcript = store.load_transcript(session_id)
    low, high = by_seq[first].message_seq or 0, by_seq[second].message_seq or len(transcript)
    return any(m.meta.get("context_start") for m in transcript[low + 1 : high + 1])


@pytest.mark.parametrize("scenario", FOLDERS, ids=_scenario_id)
def test_sub_agents_are_linked_once_and_rewritten_histories_are_compactions(
    scenario: Path, store: SessionStore
) -> None:
    """A session whose calls were made while another's were (its requests interleave with the
    other's in the server's log) is that session's sub-agent, linked to it, once; a fork names an
    imported origin (its copied calls are no calls of its own: the first test counts them); where a call's
    history is not the previous call's history extended (the agent rewrote it), the import
    records a compaction or a new context between the two."""
    result = compare(scenario, store)
    sessions = {s.id: s for s in store.list_sessions()}
    spans = {
        sid: (min(i), max(i))
        for sid in result.calls
        if (i := [index for (owner, _), index in result.pairs.items() if owner == sid])
    }
    for sid, (start, end) in spans.items():
        parent = sessions[sid].parent_session_id
        assert parent is None or parent in sessions, f"{sid} names a parent not imported"
        origin = store.get_session(sid).metadata.get("forked_from")  # a fork names its origin
        assert origin is None or origin in sessions, f"{sid} is a fork of {origin}, not imported"
        hosts = [o for o, (a, b) in spans.items() if o != sid and a < start and end < b]
        if hosts:  # made inside another session's run: a sub-agent of one of them
            assert parent in hosts, f"{sid} ran inside {hosts} but is linked to {parent}"
    again = compare(scenario, store)  # the same files again: nothing new, no copy
    assert len(store.list_sessions()) == len(sessions)
    assert sum(map(len, again.calls.values())) == sum(map(len, result.calls.values()))
    for sid, own in result.calls.items():
        paired = [(c, result.pairs[(sid, c.seq)]) for c in own if (sid, c.seq) in result.pairs]
        for (before, i), (after, j) in pairwise(paired):
            if before.compaction_call or after.compaction_call or RENDERED_SUMMARY in result.sent[j]:
                continue  # a summarizer's request is a history of its own
            if before.failed:
                continue  # what a refused call carried need not be sent again
            earlier, later = result.logged[i], result.logged[j]
            if later[: len(earlier)] == earlier or _adds_what_was_left_out(
                store, sid, before.seq, earlier, later
            ):
                continue
            if not any(e.rewrites_history and e.rewrites_history(later) for e in exceptions_for(scenario)):
                assert _compactions_between(store, sid, before.seq, after.seq), (
                    f"{sid[:8]}: request {result.requests[j]['seq']} rewrote the history of "
                    f"{result.requests[i]['seq']} and no compaction is recorded between calls "
                    f"{before.seq} and {after.seq}"
                )


_ONE_TURN: dict[str, dict[str, Any]] = {
    "anthropic": {
        "messages": [
            {"role": "user", "content": "List the files."},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Listing."},
                {"type": "tool_use", "id": "c1", "name": "ls", "input": {"path": "."}},
            ]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "a.py"}]},
        ]
    },
    "openai-chat": {
        "messages": [
            {"role": "system", "content": "You are an agent."},
            {"role": "user", "content": "List the files."},
            {"role": "assistant", "content": "Listing.", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": '{"path": "."}'}},
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        ]
    },
    "openai-responses": {
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are an agent."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List the files."}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Listing."}]},
            {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": '{"path": "."}'},
            {"type": "function_call_output", "call_id": "c1", "output": "a.py"},
        ]
    },
    "gemini": {
        "contents": [
            {"role": "user", "parts": [{"text": "List the files."}]},
            {"role": "model", "parts": [{"text": "Listing."}, {"functionCall": {"name": "ls", "args": {"path": "."}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"output": "a.py"}}}]},
        ]
    },
}  # fmt: skip


@pytest.mark.parametrize("wire", WIRES, ids=lambda w: w.name)
def test_each_wire_normaliser_reads_one_turn_as_the_same_atoms(wire: Wire) -> None:
    """The same turn (a prompt, a reply with a tool call, its result) in each API's own shape:
    the same atoms (Gemini has no call ids), the system or developer prompt apart."""
    call_id = "c1" if wire.call_ids else None
    assert request_atoms({"body": _ONE_TURN[wire.name]}, wire) == [
        ("text", "user", "List the files."),
        ("text", "assistant", "Listing."),
        ("call", call_id, "ls", {"path": "."}),
        ("result", call_id, "a.py"),
    ]


#: Claude Code scenarios with a compaction: its summarizer call does not send a prefix.
COMPACTIONS = [
    p for p in SCENARIOS if str(p.id).startswith("claude-code/compact_")
]  # fmt: skip


@pytest.mark.parametrize("scenario", COMPACTIONS)
def test_every_reader_counts_the_messages_a_summarizer_call_sent(scenario: Path, store: SessionStore) -> None:
    """What the report, ``ctxdesk inspect`` and the findings count as a call's messages
    (engine.findings.view, through ``messages_excluded``) is the transcript messages the importer
    rebuilt it from (``request_messages``; the comparison above holds them to the server's log),
    for a compaction's summarizer too, which leaves out what the compaction keeps. Calls whose
    request the file recorded whole count the request's own messages, so only the others are."""
    import_files(transcript_files(scenario), store)
    summarizers = 0
    for session in store.list_sessions():
        counted = messages_sent(store, session.id)
        whole = {r.event_id for r in store.list_requests(session.id)}
        for event in store.list_events(session.id, kind="request"):
            if event.id not in whole and "request_messages" in event.details:
                assert counted[event.seq] == event.details["request_messages"], event.details
                summarizers += bool(event.details.get("compaction_call") and event.messages_excluded)
    assert summarizers == 1


def test_a_resumed_gemini_history_is_stored_as_often_as_the_model_saw_it(store: SessionStore) -> None:
    """Gemini CLI 0.61 resumes a chat sending each earlier tool result twice and each tool call,
    prompt and reply once: the transcript holds each as often as the last request carried it (it
    held the first run's three tool calls twice), and the first run's calls leave the second
    copies out (``messages_excluded``), so every call still equals its request (first test)."""
    scenario = REAL_AGENTS / "gemini" / "tools-resume"
    import_files(transcript_files(scenario), store)
    requests = [r for r in recorded_requests(scenario) if ":streamGenerateContent" in r["path"]]
    (session,) = store.list_sessions()
    transcript = store.load_transcript(session.id)
    wire = wire_of(requests)
    stored = _counted(imported_atoms(transcript, wire))
    sent = _counted(request_atoms(requests[-1], wire))
    last = store.list_events(session.id, kind="request")[-1]
    # the last request carried all but the reply it produced
    assert stored - sent == _counted(imported_atoms(transcript[last.message_seq :], wire))
    assert sent - stored == Counter()
    assert sorted(n for (kind, _), n in sent.items() if kind == "call") == [1, 1, 1, 1]
    assert sorted(n for (kind, _), n in sent.items() if kind == "result") == [1, 2, 2, 2]
    first_run = [e for e in store.list_events(session.id, kind="request") if e.messages_excluded]
    assert [len(e.messages_excluded) for e in first_run] == [1, 2]


def _counted(atoms: list[Atom]) -> Counter[tuple[str, str]]:
    """How often each tool call, tool result and text occurs, by (kind, the atom's repr)."""
    return Counter((a[0], repr(a)) for a in atoms if a[0] in ("call", "result", "text"))


def test_the_replay_reads_a_resumed_gemini_history_as_each_call_sent_it(store: SessionStore) -> None:
    """The what-if replay's recorded calls (engine.replay.recorded) leave out what a call did not
    send (``messages_excluded``): each history is the request the server received."""
    scenario = REAL_AGENTS / "gemini" / "tools-resume"
    import_files(transcript_files(scenario), store)
    requests = [r for r in recorded_requests(scenario) if ":streamGenerateContent" in r["path"]]
    wire = wire_of(requests)
    (session,) = store.list_sessions()
    recorded = load_recorded_session(store, session.id)
    histories = [
        [a for a in imported_atoms(list(c.history), wire) if a[0] != "reasoning"] for c in recorded.calls
    ]
    assert histories == [request_atoms(r, wire) for r in requests]
