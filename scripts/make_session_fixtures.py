"""Derive the small session fixtures in tests/fixtures/sessions/ from the real files in ../shared.

Run from the project root:  python scripts/make_session_fixtures.py [--shared ../shared]

Each fixture is the start of a real session (or a reshaping of one into another format),
kept under 60 KB so the test suite runs without ../shared. The output is deterministic;
tests/fixtures/sessions/README.md records where each file comes from.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "sessions"
MAX_BYTES = 60_000
TRIM_CHARS = 1_500
TRIM_MARK = " …[trimmed for the fixture]"

CLAUDE_FE5E = "claude-code__d-kimuson_claude-code-viewer__fe5e1c67.jsonl"
CLAUDE_5C03 = "claude-code__d-kimuson_claude-code-viewer__5c0375b4.jsonl"
OPENHANDS_GUI = "openhands__tests_runtime_trajs_basic_gui_mode.json"
OPENHANDS_EVAL = "openhands__multi_swe_bench_examples_output.jsonl"
SWE_PYDICOM = "swe-agent__pydicom__pydicom-1458.traj"
SWE_TESTREPO = "swe-agent__6e44b9__sweagenttestrepo-1c2844.traj"


def head_lines(source: Path, target: Path, count: int) -> None:
    """The first ``count`` lines, verbatim."""
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)[:count]
    target.write_text("".join(lines), encoding="utf-8")


def openhands_gui(source: Path, target: Path) -> None:
    """All events; observations lose their copy of the action's model_response."""
    events = json.loads(source.read_text(encoding="utf-8"))
    for event in events:
        metadata = event.get("tool_call_metadata")
        if "observation" in event and isinstance(metadata, dict):
            metadata.pop("model_response", None)
    _write_json(target, events)


def openhands_eval(source: Path, target: Path, events: int) -> None:
    """The first instance, its first ``events`` history events and their token usages.

    The system prompt and tool definitions stay whole; other long strings are trimmed, and
    observations lose their copy of the action's model_response.
    """
    record = json.loads(source.read_text(encoding="utf-8").splitlines()[0])
    history = record["history"][:events]
    for index, event in enumerate(history):
        metadata = event.get("tool_call_metadata")
        if "observation" in event and isinstance(metadata, dict):
            metadata.pop("model_response", None)
        if index > 0:
            history[index] = _trim_strings(event)
    kept = {
        e["tool_call_metadata"]["model_response"]["id"]
        for e in history
        if isinstance(e.get("tool_call_metadata"), dict) and "model_response" in e["tool_call_metadata"]
    }
    metrics = record["metrics"]
    metrics["token_usages"] = [u for u in metrics["token_usages"] if u.get("response_id") in kept]
    metrics["response_latencies"] = [u for u in metrics["response_latencies"] if u.get("response_id") in kept]
    trimmed = {
        "instance_id": record["instance_id"],
        "history": history,
        "metrics": metrics,
        "metadata": record["metadata"],
        "error": record.get("error"),
    }
    target.write_text(json.dumps(trimmed, ensure_ascii=False) + "\n", encoding="utf-8")


def swe_agent_head(source: Path, target: Path, history_messages: int) -> None:
    """The first ``history_messages`` of history and the matching trajectory steps; long
    messages trimmed. ``info.model_stats`` still describes the full run."""
    traj = json.loads(source.read_text(encoding="utf-8"))
    history = [_trim_strings(m, limit=3_000) for m in traj["history"][:history_messages]]
    steps = sum(1 for m in history if m["role"] == "assistant")
    traj["history"] = history
    traj["trajectory"] = [_trim_strings(s) for s in traj["trajectory"][:steps]]
    traj["info"]["submission"] = _trim(traj["info"].get("submission") or "")
    _write_json(target, traj)


def openai_messages(source: Path, target: Path) -> None:
    """A SWE-agent function-calling history reshaped as a plain OpenAI chat message list."""
    traj = json.loads(source.read_text(encoding="utf-8"))
    messages: list[dict[str, Any]] = []
    for m in traj["history"]:
        item: dict[str, Any] = {"role": m["role"], "content": m["content"]}
        if m.get("tool_calls"):
            item["tool_calls"] = m["tool_calls"]
        if m["role"] == "tool":
            item["tool_call_id"] = m["tool_call_ids"][0]
        messages.append(item)
    _write_json(target, {"model": traj["replay_config"]["agent"]["model"]["name"], "messages": messages})


def anthropic_exchanges(source: Path, target: Path, calls: int) -> None:
    """The first ``calls`` API calls of a Claude Code main thread as Messages API exchanges.

    Blocks of one message.id form one response; consecutive tool-result lines form one user
    message. The hidden Claude Code system prompt and tools are not in the log, so the
    requests carry none.
    """
    lines = [json.loads(x) for x in source.read_text(encoding="utf-8").splitlines()]
    thread = [o for o in lines if o.get("type") in ("user", "assistant") and not o.get("isSidechain")]
    messages: list[dict[str, Any]] = []
    responses: list[tuple[int, dict[str, Any]]] = []
    for obj in thread:
        raw = obj["message"]
        if obj["type"] == "assistant":
            if responses and responses[-1][1]["id"] == raw["id"]:
                responses[-1][1]["content"] += raw["content"]
                responses[-1][1]["usage"] = _usage(raw["usage"])
                messages[-1]["content"] += raw["content"]
                continue
            if len(responses) == calls:
                break
            response = {
                "id": raw["id"], "type": "message", "role": "assistant", "model": raw["model"],
                "content": list(raw["content"]), "stop_reason": "tool_use", "usage": _usage(raw["usage"]),
            }  # fmt: skip
            responses.append((len(messages), response))
            messages.append({"role": "assistant", "content": list(raw["content"])})
            continue
        content = raw["content"]
        previous = messages[-1] if messages else None
        if (
            _is_results(content)
            and previous
            and previous["role"] == "user"
            and _is_results(previous["content"])
        ):
            previous["content"] += content
            continue
        messages.append({"role": "user", "content": list(content) if isinstance(content, list) else content})
    exchanges = [
        {
            "request": {"model": response["model"], "max_tokens": 32000, "messages": messages[:position]},
            "response": response,
        }
        for position, response in responses
    ]
    _write_json(target, exchanges)


def _is_results(content: Any) -> bool:
    return isinstance(content, list) and all(b.get("type") == "tool_result" for b in content)


def _usage(raw: dict[str, Any]) -> dict[str, int]:
    keys = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")
    return {k: raw[k] for k in keys if k in raw}


def _trim(text: str, limit: int = TRIM_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + TRIM_MARK


def _trim_strings(value: Any, limit: int = TRIM_CHARS) -> Any:
    if isinstance(value, str):
        return _trim(value, limit)
    if isinstance(value, list):
        return [_trim_strings(v, limit) for v in value]
    if isinstance(value, dict):
        return {k: _trim_strings(v, limit) for k, v in value.items()}
    return value


def _write_json(target: Path, value: Any) -> None:
    target.write_text(json.dumps(value, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared", help="the shared data folder")
    args = parser.parse_args()
    sessions = args.shared / "sessions"
    OUT.mkdir(parents=True, exist_ok=True)
    head_lines(sessions / CLAUDE_FE5E, OUT / "claude-code__fe5e1c67__head37.jsonl", 37)
    head_lines(sessions / CLAUDE_5C03, OUT / "claude-code__5c0375b4__head23.jsonl", 23)
    openhands_gui(sessions / OPENHANDS_GUI, OUT / "openhands__basic_gui_mode.json")
    openhands_eval(sessions / OPENHANDS_EVAL, OUT / "openhands__ponyc-4595__head12.jsonl", 12)
    swe_agent_head(sessions / SWE_PYDICOM, OUT / "swe-agent__pydicom-1458__head9.traj", 9)
    shutil.copyfile(sessions / SWE_TESTREPO, OUT / "swe-agent__sweagenttestrepo-1c2844.traj")
    openai_messages(sessions / SWE_TESTREPO, OUT / "openai__sweagenttestrepo-1c2844.json")
    anthropic_exchanges(sessions / CLAUDE_5C03, OUT / "anthropic__5c0375b4__exchanges.json", 3)
    too_big = [p.name for p in sorted(OUT.iterdir()) if p.stat().st_size > MAX_BYTES]
    for path in sorted(OUT.iterdir()):
        print(f"{path.stat().st_size:>7,}  {path.name}")
    if too_big:
        print(f"over {MAX_BYTES:,} bytes: {', '.join(too_big)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
