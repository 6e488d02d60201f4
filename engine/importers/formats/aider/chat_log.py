"""Aider's chat log (``.aider.chat.history.md`` in the repository root).

Aider appends every session to one Markdown file: ``# aider chat started at <time>`` opens
a session, ``#### `` lines are what the user typed, ``> `` lines are Aider's own output
(the command line, the model in use, ``Tokens: 2.4k sent, 1.1k cache write, 251 received.
Cost: ...`` after each call, applied edits, commits) and the other lines are the model's reply.
Each reply is one model call. Its ``Tokens:`` line (rounded to 0.1k: ``usage_rounded``) is the
provider's count when Aider got one: a reply not streamed (``--no-stream``), or one whose line
names cache reads or writes. A streamed reply without them was counted by Aider itself (the
provider reported nothing): kept as ``details["aider_counted"]``, not as the provider's usage.
Aider also sends the files added to the chat and its repository map, which this log does not
keep: the provider's counts include them.
"""

from __future__ import annotations

import re
from pathlib import Path

from engine.events import ProviderUsage
from engine.importers.parsing.parsed import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing.readers import build_message, provider_of
from engine.importers.utc_times import local_utc_text

HEAD = "# aider chat started at"
_HEAD_LINE = re.compile(rf"^{re.escape(HEAD)}", re.MULTILINE)
_MODEL = re.compile(r"^(?:Main model|Model):\s*(\S+)")
_WEAK_MODEL = re.compile(r"^Weak model:\s*(\S+)")
#: A commit Aider made with a message its weak model wrote (one model call, not logged otherwise).
_COMMIT = re.compile(r"^Commit ([0-9a-f]{7,40}) (.+)$")
_TOKENS = re.compile(r"^Tokens:\s*(.+?)\.\s*(?:Cost:|$)")
_AMOUNT = re.compile(r"([\d.]+)\s*([km]?)\s+(sent|received|cache write|cache hit)")


def parse_aider(text: str, *, key: str, path: Path) -> list[ParsedSession]:
    """One session per ``# aider chat started at`` header (at the start of a line). Lines before the
    first header (a log cut at its head) are a session of their own when they hold a user input."""
    sessions: list[ParsedSession] = []
    preamble, *chunks = _HEAD_LINE.split(text)
    head = _session(preamble, key=f"{key}-0")
    if any(m.message.role == "user" for m in head.messages):  # free text alone is no conversation
        head.metadata["cwd"] = str(path.resolve().parent)
        head.notes.append("lines before the log's first session header: its start time is not known")
        sessions.append(head)
    for number, chunk in enumerate(chunks, start=1):
        started, _, body = chunk.partition("\n")
        session = _session(body, key=key if number == 1 else f"{key}-{number}")
        session.metadata["started"] = started.strip()
        started_utc = local_utc_text(started)  # the log's one time of a session: when it started
        if started_utc is not None and session.messages:
            session.messages[0].message.meta.setdefault("timestamp", started_utc)
        session.metadata["cwd"] = str(path.resolve().parent)
        if session.messages:
            sessions.append(session)
    if not sessions:
        raise SourceProblem("an Aider chat log with no messages (only session headers)")
    return sessions


def _session(body: str, *, key: str) -> ParsedSession:
    session = ParsedSession(key=key, messages=[])
    model: str | None = None
    user: list[str] = []
    reply: list[str] = []
    last_reply: ParsedMessage | None = None
    notices = 0
    streamed = True  # Aider's default; its command line says --no-stream otherwise
    weak_model: str | None = None

    def flush_user() -> None:
        if user:
            text = "\n".join(user).strip()
            if text:
                session.messages.append(ParsedMessage(build_message("user", text, where="aider")))
            user.clear()

    def flush_reply() -> None:
        nonlocal last_reply
        text = "\n".join(reply).strip()
        reply.clear()
        if text:
            last_reply = ParsedMessage(
                build_message("assistant", text, where="aider"), call=CallInfo(model=model)
            )
            session.messages.append(last_reply)

    fenced = False
    for line in body.splitlines():
        if not user and line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced or line.startswith(">>"):  # code, or an edit block's closing marker
            flush_user()
            reply.append(line)
            continue
        if line.startswith("####"):
            flush_reply()
            user.append(line[4:].removeprefix(" "))
            continue
        if line.startswith(">"):
            flush_user()
            flush_reply()
            notice = line[1:].strip()
            notices += 1
            if _is_command_line(notice):
                streamed = "--no-stream" not in notice.split()
            weak = _WEAK_MODEL.match(notice)
            if weak:
                weak_model = weak.group(1)
            commit = _COMMIT.match(notice)
            if commit and session.messages:
                session.messages[-1].pending_calls.append(
                    commit_message_call(commit.group(2), weak_model or model)
                )
            found = _MODEL.match(notice)
            if found:
                model = found.group(1)
                session.model = session.model or model
            tokens = _TOKENS.match(notice)
            if (
                tokens
                and last_reply is not None
                and last_reply.call is not None
                and last_reply.call.usage is None
            ):
                _count_call(last_reply.call, tokens.group(1), streamed=streamed)
            continue
        flush_user()  # every line of a multi-line input carries the prefix
        reply.append(line)
    flush_user()
    flush_reply()
    if any(m.call is not None and "aider_counted" in m.call.details for m in session.messages):
        session.notes.append(
            "Aider counted the tokens of its streamed replies itself (the provider reported none): kept "
            "beside each call as aider_counted, not as the provider's usage"
        )
    session.provider = provider_of(session.model)
    session.unlogged_prefix_in = "system"  # Aider's prompts, repository map and the files in the chat
    if notices:
        session.notes.append("files in the chat and the repository map are sent but not logged by Aider")
    return session


def commit_message_call(message: str, model: str | None) -> CallInfo:
    """The call that wrote a commit message (Aider's weak model, sent the diff): a call with no
    usage Aider shows, its reply the message."""
    call = CallInfo(model=model)
    call.details.update(side_call="commit_message", reply=message)
    return call


def _is_command_line(notice: str) -> bool:
    words = notice.split()
    return bool(words) and Path(words[0]).name in ("aider", "aider.exe") and len(words) > 1


def _count_call(call: CallInfo, tokens: str, *, streamed: bool) -> None:
    """The provider's usage from a ``Tokens:`` line, or Aider's own count when it had none."""
    usage = _usage(tokens)
    if streamed and not (usage.cache_read_input_tokens or usage.cache_creation_input_tokens):
        call.details["aider_counted"] = {"sent": usage.prompt_tokens, "received": usage.output_tokens}
        return
    call.usage = usage
    call.details["usage_rounded"] = True


def _usage(text: str) -> ProviderUsage:
    amounts = {kind: _number(value, unit) for value, unit, kind in _AMOUNT.findall(text)}
    return ProviderUsage.from_prompt_total(
        amounts.get("sent", 0),
        amounts.get("received", 0),
        cache_read=amounts.get("cache hit", 0),
        cache_write=amounts.get("cache write", 0),
    )


def _number(value: str, unit: str) -> int:
    try:
        return round(float(value) * {"": 1, "k": 1_000, "m": 1_000_000}[unit.lower()])
    except ValueError:
        return 0
