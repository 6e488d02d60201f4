"""What a Chat Completions request carried, and what an import says a call sent, as comparable
atoms: the ground truth for the importers of agents that speak OpenAI Chat Completions
(OpenCode, Kilo CLI, Qwen Code, mini-swe-agent, Aider), recorded by tests/model_server/openai_chat.py.

Within one assistant message the atoms are ordered reasoning, text, tool calls (a request keeps
them in separate fields, so its order within a message is not a fact of the wire).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from engine.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from tests.model_server.fixtures import load_request_log

ROOT = Path(__file__).resolve().parents[1]
Atom = tuple[Any, ...]
_ORDER = {"reasoning": 0, "text": 1, "call": 2}


def chat_requests(scenario_dir: Path) -> list[dict[str, Any]]:
    """The Chat Completions requests of a fixture scenario (exact bodies), in the order received."""
    return [r for r in load_request_log(scenario_dir) if r["path"].endswith("/chat/completions")]


def _text_of(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content] if content else []
    if isinstance(content, list):
        return [str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"]
    return []


def request_atoms(messages: list[dict[str, Any]], *, reasoning: bool = True) -> list[Atom]:
    """The atoms of a request's ``messages`` after its leading system messages."""
    atoms: list[Atom] = []
    start = 0
    while start < len(messages) and messages[start]["role"] in ("system", "developer"):
        start += 1
    for message in messages[start:]:
        role = message["role"]
        if role == "assistant":
            own: list[Atom] = []
            thought = message.get("reasoning_content") or message.get("reasoning")
            if thought and reasoning:
                own.append(("reasoning", thought))
            own += [("text", "assistant", t) for t in _text_of(message.get("content"))]
            for call in message.get("tool_calls") or []:
                function = call["function"]
                own.append(("call", call["id"], function["name"], json.loads(function["arguments"] or "{}")))
            atoms += own
        elif role == "tool":
            atoms += [("result", message["tool_call_id"], "\n".join(_text_of(message.get("content"))))]
        else:
            atoms += [("text", role, t) for t in _text_of(message.get("content"))]
    return atoms


def imported_atoms(messages: list[Message], *, reasoning: bool = True) -> list[Atom]:
    """The atoms of imported messages, in the order ``request_atoms`` gives a request's."""
    atoms: list[Atom] = []
    for message in messages:
        own: list[Atom] = []
        for block in message.blocks:
            if isinstance(block, TextBlock) and block.text:
                own.append(("text", message.role, block.text))
            elif isinstance(block, ThinkingBlock) and reasoning:
                own.append(("reasoning", block.thinking))
            elif isinstance(block, ToolUseBlock):
                own.append(("call", block.id, block.name, block.input))
            elif isinstance(block, ToolResultBlock):
                own.append(("result", block.tool_use_id, block.text))
        if message.role == "assistant":
            own.sort(key=lambda atom: _ORDER[atom[0]])
        atoms += own
    return atoms


def system_prompt_of(body: dict[str, Any]) -> str:
    """The request's leading system message(s), joined as an importer would keep them."""
    texts = []
    for message in body["messages"]:
        if message["role"] not in ("system", "developer"):
            break
        texts += _text_of(message["content"])
    return "\n\n".join(texts)


def run_fixture_script(script: str, tmp_path: Path, *args: str) -> Path:
    """Run ``scripts/<script>`` (the real CLI against the scripted server) into ``tmp_path``; the
    folder it wrote its fixtures under (``<out>/<agent>/<scenario>`` below it)."""
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / script),
            *args,
            "--out",
            str(out),
            "--scratch",
            str(tmp_path / "s"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return out
