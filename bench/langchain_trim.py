"""LangChain's ``trim_messages`` on the benchmark corpus; runs under bench/.venv's python.

``python -m bench.langchain_trim --sizes 100,1000 --limit 168000`` prints one JSON object:
milliseconds per ``trim_messages`` call, per history size, with ``count_tokens_approximately``
and with an exact tiktoken (o200k_base) counter. langchain-core lives only in bench/.venv
(see bench/setup_env.py), never in the project's own environment.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from bench.common import EXACT_ID, prefix, raw_counter
from bench.report import timed
from engine.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock

#: LangChain's per-message overhead in count_tokens_approximately, matched in the exact counter.
EXTRA_TOKENS_PER_MESSAGE = 3


def to_langchain(messages: list[Message]) -> list[Any]:
    """The corpus as LangChain messages: tool uses become AIMessage.tool_calls, each tool result
    a ToolMessage (so a message answering two tool uses becomes two)."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    out: list[Any] = []
    for m in messages:
        if m.role == "assistant":
            text = m.text
            calls = [
                {"name": b.name, "args": b.input, "id": b.id, "type": "tool_call"}
                for b in m.blocks
                if isinstance(b, ToolUseBlock)
            ]
            out.append(AIMessage(content=text, tool_calls=calls))
            continue
        results = [b for b in m.blocks if isinstance(b, ToolResultBlock)]
        if results:
            out.extend(ToolMessage(content=b.text, tool_call_id=b.tool_use_id) for b in results)
        else:
            out.append(HumanMessage(content="\n".join(b.text for b in m.blocks if isinstance(b, TextBlock))))
    return out


def exact_counter(encoding_name: str = EXACT_ID) -> Any:
    """A token_counter for trim_messages: tiktoken counts of content and tool-call arguments."""
    count = raw_counter(encoding_name)

    def counter(messages: list[Any]) -> int:
        total = 0
        for m in messages:
            content = m.content if isinstance(m.content, str) else json.dumps(m.content, ensure_ascii=False)
            total += EXTRA_TOKENS_PER_MESSAGE + count(content)
            for call in getattr(m, "tool_calls", None) or ():
                total += count(call["name"]) + count(json.dumps(call["args"], ensure_ascii=False))
            tool_call_id = getattr(m, "tool_call_id", None)
            if tool_call_id:
                total += count(tool_call_id)
        return total

    return counter


def repeats(size: int, *, exact: bool, quick: bool = False) -> int:
    if quick:
        return 1
    if exact:
        return 3 if size <= 1_000 else 1
    return 5 if size <= 10_000 else 2


def measure(sizes: list[int], limit: int, *, quick: bool = False) -> dict[str, Any]:
    import langchain_core
    from langchain_core.messages import trim_messages
    from langchain_core.messages.utils import count_tokens_approximately

    largest = max(sizes)
    exact = exact_counter()
    out: dict[str, Any] = {"langchain_core": langchain_core.__version__, "limit": limit, "sizes": {}}
    for size in sizes:
        history = to_langchain(prefix(size, largest=largest))
        row: dict[str, Any] = {"langchain_messages": len(history)}
        for name, counter in (("approx", count_tokens_approximately), ("exact", exact)):
            kept: list[Any] = []

            def call(counter: Any = counter, kept: list[Any] = kept, history: list[Any] = history) -> None:
                kept[:] = trim_messages(
                    history,
                    max_tokens=limit,
                    token_counter=counter,
                    strategy="last",
                    start_on="human",
                    include_system=True,
                    allow_partial=False,
                )

            row[f"{name}_s"] = timed(call, repeat=repeats(size, exact=name == "exact", quick=quick))
            row[f"{name}_kept"] = len(kept)
        out["sizes"][str(size)] = row
        print(f"langchain trim: {size:,} messages done", file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", required=True, help="comma-separated history sizes, in messages")
    parser.add_argument("--limit", type=int, required=True, help="max_tokens passed to trim_messages")
    parser.add_argument("--quick", action="store_true", help="one call per measurement")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    json.dump(measure(sizes, args.limit, quick=args.quick), sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
