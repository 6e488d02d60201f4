"""Aider chat logs (``.aider.chat.history.md`` in the repository root).

Aider appends every session to one Markdown file: ``# aider chat started at <time>`` opens
a session, ``#### `` lines are what the user typed, ``> `` lines are Aider's own output
(the model in use, ``Tokens: 2.4k sent, 1.1k cache write, 251 received. Cost: ...`` after
each call, applied edits, commits) and the other lines are the model's reply. Each reply is
one model call; its usage is the ``Tokens:`` line that follows it (Aider rounds it to 0.1k,
so it is marked ``usage_rounded``). Aider also sends the files added to the chat and its
repository map, which this log does not keep: the provider's counts include them.
"""

from __future__ import annotations

import re
from pathlib import Path

from engine.events import ProviderUsage
from engine.importers.documents import Document
from engine.importers.formats import ImportFormat
from engine.importers.model import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing import build_message, provider_of

HEAD = "# aider chat started at"
_MODEL = re.compile(r"^(?:Main model|Model):\s*(\S+)")
_TOKENS = re.compile(r"^Tokens:\s*(.+?)\.\s*(?:Cost:|$)")
_AMOUNT = re.compile(r"([\d.]+)\s*([km]?)\s+(sent|received|cache write|cache hit)")


def parse_aider(text: str, *, key: str, path: Path) -> list[ParsedSession]:
    sessions: list[ParsedSession] = []
    chunks = text.split(HEAD)
    for number, chunk in enumerate(chunks[1:], start=1):
        started, _, body = chunk.partition("\n")
        session = _session(body, key=key if number == 1 else f"{key}-{number}")
        session.metadata["started"] = started.strip()
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
                last_reply.call.usage = _usage(tokens.group(1))
                last_reply.call.details["usage_rounded"] = True
            continue
        flush_user()  # every line of a multi-line input carries the prefix
        reply.append(line)
    flush_user()
    flush_reply()
    session.provider = provider_of(session.model)
    session.unlogged_prefix_in = "system"  # Aider's prompts, repository map and the files in the chat
    if notices:
        session.notes.append("files in the chat and the repository map are sent but not logged by Aider")
    return session


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


def sniff(doc: Document) -> bool:
    return doc.text is not None  # the reader recognises the chat log by its header


def parse(doc: Document, key: str) -> list[ParsedSession]:
    return parse_aider(doc.text or "", key=key, path=doc.path)


FORMAT = ImportFormat(
    name="aider", agent="Aider", sniff=sniff, parse=parse, files="`<repo>/.aider.chat.history.md`"
)
