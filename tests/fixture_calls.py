"""Call-by-call truth for the real-CLI fixtures (tests/fixtures/real_agents/<agent>/<scenario>):
what each request the scripted model server recorded carried, and what an import says each call
sent, as the same comparable atoms, whatever the wire format.

One normaliser per wire (Anthropic Messages, OpenAI Chat Completions, OpenAI Responses, Gemini)
turns a request body into atoms; :func:`imported_atoms` turns the messages an imported call sent
into atoms the same way. An atom is ``("text", role, text)``, ``("reasoning", text)``,
``("call", id, name, input)``, ``("result", id, text)``, ``("image",)``, or for the Responses
API's items without ids ``("server call", name, action)`` / ``("output", name, text)``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import ImportFormatError
from engine.importers import REGISTRY, detect_format, folder_files
from engine.messages import ImageBlock, Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from tests.model_server.fixtures import LOG_NAME, SHAPES_DIR, load_request_log

REAL_AGENTS = Path(__file__).resolve().parent / "fixtures" / "real_agents"

Atom = tuple[Any, ...]
Request = dict[str, Any]

#: Within one Chat Completions assistant message the request keeps reasoning, text and tool calls
#: in separate fields: their order inside the message is no fact of the wire.
_CHAT_ORDER = {"reasoning": 0, "text": 1, "call": 2}


def scenario_folders(root: Path = REAL_AGENTS) -> list[Path]:
    """Every ``<agent>/<scenario>`` folder on disk (shared shapes excluded), and each
    ``<agent>/releases/<release>-<scenario>`` run by an older release that kept its request log (the
    Codex ones keep only the usage answered: tests/test_import_codex_releases checks them)."""
    found = []
    for agent in (a for a in root.iterdir() if a.is_dir()):
        for scenario in (s for s in agent.iterdir() if s.is_dir() and s.name != SHAPES_DIR):
            if scenario.name != RELEASES_DIR:
                found.append(scenario)
                continue
            found += [r for r in scenario.iterdir() if r.is_dir() and (r / "requests.jsonl").is_file()]
    return sorted(found)


#: An agent's folder of scenarios run by its older releases.
RELEASES_DIR = "releases"


def transcript_files(scenario: Path) -> list[Path]:
    """The files a user would import from ``scenario``: what a folder import finds plus what each
    agent's own locations find under it (OpenCode and Kilo keep a SQLite database), without the
    files that only accompany another one (a sub-agent's file is read with its parent's)."""
    found = list(folder_files(scenario))
    folders = [scenario, *(p for p in sorted(scenario.rglob("*")) if p.is_dir())]
    for fmt in REGISTRY:
        if fmt.locations is not None:
            found += [
                p
                for folder in folders
                for p in fmt.locations.files_under(folder)
                if _format_of(p) == fmt.name
            ]
    ours = {LOG_NAME, "answers.json", "runs.json"}
    unique = dict.fromkeys(p for p in found if p.name not in ours)
    return [p for p in unique if not any(f.accompanies is not None and f.accompanies(p) for f in REGISTRY)]


def _format_of(path: Path) -> str | None:
    try:
        return detect_format(path)
    except ImportFormatError:
        return None


# -- the wire formats ---------------------------------------------------------------------------------


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content] if content else []
    if isinstance(content, list):
        return [
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") in ("text", "input_text", "output_text")
        ]
    return []


def anthropic_atoms(body: dict[str, Any]) -> list[Atom]:
    """A Messages API request's ``messages``, every block in order (``system`` is apart)."""
    atoms: list[Atom] = []
    for message in body["messages"]:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for block in blocks:
            kind = block["type"]
            if kind == "text":
                atoms.append(("text", message["role"], block["text"]))
            elif kind == "thinking":
                atoms.append(("reasoning", block["thinking"]))
            elif kind == "redacted_thinking":
                atoms.append(("reasoning", ""))
            elif kind in ("tool_use", "server_tool_use"):
                atoms.append(("call", block["id"], block["name"], block["input"]))
            elif kind == "tool_result":
                atoms.append(("result", block["tool_use_id"], "\n".join(_texts(block.get("content")))))
                atoms += [
                    ("image",)
                    for part in block.get("content") or []
                    if isinstance(part, dict) and part.get("type") == "image"
                ]
            elif kind == "image":
                atoms.append(("image",))
            else:
                atoms.append((kind,))
    return atoms


def chat_atoms(body: dict[str, Any]) -> list[Atom]:
    """A Chat Completions request's ``messages`` after its leading system messages."""
    messages = body["messages"]
    start = 0
    while start < len(messages) and messages[start]["role"] in ("system", "developer"):
        start += 1
    atoms: list[Atom] = []
    for message in messages[start:]:
        role = message["role"]
        if role == "assistant":
            own: list[Atom] = []
            thought = message.get("reasoning_content") or message.get("reasoning")
            if thought:
                own.append(("reasoning", thought))
            own += [("text", "assistant", t) for t in _texts(message.get("content"))]
            for call in message.get("tool_calls") or []:
                function = call["function"]
                own.append(("call", call["id"], function["name"], json.loads(function["arguments"] or "{}")))
            atoms += own
        elif role == "tool":
            atoms.append(("result", message["tool_call_id"], "\n".join(_texts(message.get("content")))))
        else:
            atoms += [("text", role, t) for t in _texts(message.get("content"))]
    return atoms


def responses_atoms(body: dict[str, Any]) -> list[Atom]:
    """A Responses API request's ``input`` after its leading developer message."""
    items = body["input"]
    start = 1 if items and items[0].get("role") in ("developer", "system") else 0
    atoms: list[Atom] = []
    for item in items[start:]:
        kind = item.get("type")
        if kind == "message":
            atoms += [("text", item["role"], part["text"]) for part in item["content"]]
        elif kind == "agent_message":
            atoms += [
                ("text", "agent_message", p.get("text", p.get("encrypted_content"))) for p in item["content"]
            ]
        elif kind == "reasoning":
            atoms.append(("reasoning", "\n".join(s["text"] for s in item["summary"])))
        elif kind == "function_call":
            atoms.append(("call", item["call_id"], item["name"], json.loads(item["arguments"])))
        elif kind == "custom_tool_call":
            atoms.append(("call", item["call_id"], item["name"], {"input": item["input"]}))
        elif kind == "web_search_call":
            atoms.append(("server call", "web_search", item["action"]))
        elif kind in ("function_call_output", "custom_tool_call_output") and "call_id" not in item:
            atoms.append(("output", item["name"], item["output"]))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            atoms.append(("result", item["call_id"], item["output"]))
        else:
            atoms.append((kind,))
    return atoms


def gemini_atoms(body: dict[str, Any]) -> list[Atom]:
    """A Gemini request's ``contents``, every part as sent (Gemini has no call ids)."""
    atoms: list[Atom] = []
    for content in body["contents"]:
        role = "assistant" if content["role"] == "model" else "user"
        for part in content["parts"]:
            if "functionCall" in part:
                atoms.append(("call", None, part["functionCall"]["name"], part["functionCall"]["args"]))
            elif "functionResponse" in part:
                response = part["functionResponse"]["response"]
                atoms.append(("result", None, response.get("output", response.get("error"))))
            elif part.get("thought"):
                atoms.append(("reasoning", part["text"]))
            elif "text" in part:
                atoms.append(("text", role, part["text"]))
            else:
                atoms.append((next(iter(part)),))
    return atoms


@dataclass(frozen=True)
class Wire:
    """One API: which recorded paths are its model calls and how to read their bodies."""

    name: str
    is_call: Callable[[str], bool]
    atoms: Callable[[dict[str, Any]], list[Atom]]
    #: Reasoning is compared only where the wire sends earlier reasoning back.
    sends_reasoning: bool = True
    call_ids: bool = True


WIRES = (
    Wire("anthropic", lambda path: path.split("?")[0].endswith("/v1/messages"), anthropic_atoms),
    Wire("openai-chat", lambda path: path.split("?")[0].endswith("/chat/completions"), chat_atoms),
    Wire("openai-responses", lambda path: path.split("?")[0].endswith("/v1/responses"), responses_atoms),
    # Gemini CLI drops earlier thoughts from the history it sends.
    Wire(
        "gemini",
        lambda path: ":streamGenerateContent" in path or ":generateContent" in path,
        gemini_atoms,
        sends_reasoning=False,
        call_ids=False,
    ),
)


def wire_of(requests: list[Request]) -> Wire:
    """The one wire a scenario's model calls speak (a scenario mixing two is refused)."""
    wires = {w.name: w for r in requests for w in WIRES if w.is_call(r["path"])}
    if len(wires) != 1:
        raise AssertionError(f"a scenario's calls speak exactly one API, found {sorted(wires) or 'none'}")
    return next(iter(wires.values()))


def recorded_requests(scenario: Path) -> list[Request]:
    """The scenario's request log (exact bodies); a folder without one is an error."""
    if not (scenario / LOG_NAME).is_file():
        raise AssertionError(f"{scenario} has no {LOG_NAME}: no truth to compare the import with")
    return load_request_log(scenario)


def without_retries(requests: list[Request]) -> list[Request]:
    """A request that failed on the server's side and was sent again with the same body, as one
    call (for agents that log only the outcome of the last attempt)."""
    calls: list[Request] = []
    for record in requests:
        last = calls[-1] if calls else None
        if last is not None and last["status"] >= 500 and record["body"] == last["body"]:
            calls[-1] = record
        else:
            calls.append(record)
    return calls


# -- the imported side --------------------------------------------------------------------------------


def imported_atoms(messages: list[Message], wire: Wire) -> list[Atom]:
    """The atoms of the messages an imported call sent, in the order ``wire`` gives a request's."""
    atoms: list[Atom] = []
    for message in messages:
        role = message.meta.get("openai_role") or message.role
        server_run = set(message.meta.get("server_tool_use_ids") or ())
        own: list[Atom] = []
        for block in message.blocks:
            if role == "tool_output" and isinstance(block, TextBlock):
                own.append(("output", message.meta["output_name"], block.text))
            elif isinstance(block, TextBlock):
                if block.text or wire.name != "openai-chat":
                    own.append(("text", role, block.text))
            elif isinstance(block, ThinkingBlock):
                if wire.sends_reasoning:
                    own.append(("reasoning", block.thinking))
            elif isinstance(block, ToolUseBlock) and block.id in server_run:
                own.append(("server call", block.name, block.input.get("action")))
            elif isinstance(block, ToolUseBlock):
                own.append(("call", block.id if wire.call_ids else None, block.name, block.input))
            elif isinstance(block, ToolResultBlock):
                own.append(("result", block.tool_use_id if wire.call_ids else None, block.text))
                own += (
                    [("image",) for part in block.content if isinstance(part, ImageBlock)]
                    if isinstance(block.content, list)
                    else []
                )
            elif isinstance(block, ImageBlock):
                own.append(("image",))
            else:
                own.append((block.type,))
        if wire.name == "openai-chat" and message.role == "assistant":
            own.sort(key=lambda atom: _CHAT_ORDER.get(atom[0], 3))
        atoms += own
    return atoms


def request_atoms(request: Request, wire: Wire) -> list[Atom]:
    atoms = wire.atoms(request["body"])
    return atoms if wire.sends_reasoning else [a for a in atoms if a[0] != "reasoning"]


def first_difference(left: list[Atom], right: list[Atom]) -> str:
    """Where two atom lists part, shortly (for an assertion message)."""
    for index, (a, b) in enumerate(zip(left, right, strict=False)):
        if a != b:
            return f"atom {index}: imported {_short(a)} != sent {_short(b)}"
    longer = left if len(left) > len(right) else right
    extra = _short(longer[min(len(left), len(right))]) if len(left) != len(right) else "none"
    return f"imported {len(left)} atoms, sent {len(right)}; first extra: {extra}"


def _short(atom: Atom) -> str:
    text = repr(atom)
    return text if len(text) < 300 else text[:300] + "…"
