"""A realistic session database for the dashboard's tests, written through SessionStore.

Three sessions, one model call per ``request`` event with its component breakdown and the
provider's usage, a compaction with its snapshot, a forced final turn, a skipped provider,
offloaded blobs, tools with deferral and tool_search events, a command run twice with identical
output (a repeated_read finding), and one message whose text is an HTML/markdown injection
attempt (it must be shown as inert text).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.events import ComponentTokens, ContextEvent, ProviderUsage
from engine.messages import Message, assistant, tool_result, tool_use, user
from engine.store import SessionStore, ToolRecord
from engine.tokens import Tokenizer, get_tokenizer

HOSTILE_TEXT = "<script>alert(1)</script><img src=x onerror=alert(2)> **not bold** [click](javascript:alert(3)) $x^2$ :red[red]"
SYSTEM_TOKENS = 900
SKILLS_TOKENS = 240

TOOLS = (
    ToolRecord(name="read_file", category="builtin", tokens=180, definition={"name": "read_file"}),
    ToolRecord(name="bash", category="builtin", tokens=260, definition={"name": "bash"}),
    ToolRecord(name="tool_search", category="builtin", tokens=120, definition={"name": "tool_search"}),
    ToolRecord(
        name="github_create_issue", category="mcp", server="github", tokens=640, definition={"name": "gci"}
    ),
    ToolRecord(
        name="github_list_prs", category="mcp", server="github", tokens=520, definition={"name": "glp"}
    ),
    ToolRecord(name="jira_search", category="mcp", server="jira", tokens=900, definition={"name": "js"}),
    ToolRecord(name="skill_pdf", category="skill", tokens=240, definition={"name": "skill_pdf"}),
)
DEFERRED = ("github_create_issue", "github_list_prs", "jira_search")


@dataclass
class _Sim:
    """Tracks what a session's context holds, to write request events that add up."""

    store: SessionStore
    sid: str
    model: str
    provider: str
    tokenizer: Tokenizer
    window: int
    max_output: int
    buffer: int
    tokens_by_seq: dict[int, tuple[int, int]] = field(default_factory=dict)
    removed: set[int] = field(default_factory=set)
    summary_tokens: int = 0
    loaded_tools: list[str] = field(default_factory=list)
    last_components: ComponentTokens | None = None
    offloaded_bytes: int = 0

    @property
    def limit(self) -> int:
        return self.window - self.max_output - self.buffer

    def add(self, *messages: Message, usage: ProviderUsage | None = None) -> list[int]:
        usages = [None] * (len(messages) - 1) + [usage] if usage else None
        rows = self.store.append_messages(self.sid, messages, tokenizer=self.tokenizer, usages=usages)
        for r in rows:
            self.tokens_by_seq[r.seq] = (r.tokens, r.tool_result_tokens)
        return [r.seq for r in rows]

    def components(self) -> ComponentTokens:
        kept = [v for s, v in self.tokens_by_seq.items() if s not in self.removed]
        tool_tokens = sum(t.tokens for t in TOOLS if t.name in self.loaded_tools)
        return ComponentTokens(
            system=SYSTEM_TOKENS, skills=SKILLS_TOKENS, tools=tool_tokens, summary=self.summary_tokens,
            conversation=sum(t - r for t, r in kept), tool_results=sum(r for _, r in kept),
            offloaded_bytes=self.offloaded_bytes,
        )  # fmt: skip

    def request(self, turn: int, *, output: int = 120, cached: bool = True) -> ComponentTokens:
        c = self.components()
        previous = self.last_components.total if self.last_components else 0
        cache_read = min(previous, c.total) if cached else 0
        usage = ProviderUsage(
            input_tokens=max(c.total - cache_read - 40, 0) // 3 + 20,
            cache_read_input_tokens=cache_read,
            cache_creation_input_tokens=max(c.total - cache_read, 0),
            output_tokens=output,
        )
        self.store.record_event(
            self.sid,
            ContextEvent(
                kind="request", provider=self.provider, model=self.model, turn_index=turn,
                context_window=self.window, max_output_tokens=self.max_output, buffer_tokens=self.buffer,
                limit_tokens=self.limit, projected_tokens=c.total, remaining_tokens=self.limit - c.total,
                components=c, usage=usage, message_seq=max(self.tokens_by_seq),
                details={"messages_sent": max(self.tokens_by_seq) + 1},  # it sent every message so far
            ),
        )  # fmt: skip
        self.last_components = c
        return c

    def sources(self) -> dict[str, str]:
        return {
            "context_window": "model:" + self.model + " (settings.toml)",
            "max_output_tokens": f"table:{self.model} (bundled)",
            "buffer_tokens": "defaults (settings.toml)",
            "tokenizer": "builtin",
            "note_threshold": "builtin",
            "compact_threshold": "builtin",
            "hard_block_threshold": "builtin",
            "tool_response_max_bytes": "builtin",
            "result_offload_threshold": "builtin",
        }


def _new_sim(store: SessionStore, sid: str, title: str, model: str, provider: str, window: int) -> _Sim:
    tokenizer = get_tokenizer(model)
    sim = _Sim(store, sid, model, provider, tokenizer, window=window, max_output=1024, buffer=256)
    store.create_session(
        session_id=sid, title=title, model=model, provider=provider, tokenizer=tokenizer.id,
        tokens_exact=tokenizer.exact, source="engine",
        settings={"model": model, "provider": provider, "context_window": window, "max_output_tokens": 1024,
                  "buffer_tokens": 256, "tokenizer": tokenizer.id, "note_threshold": 0.8, "compact_threshold": 0.95,
                  "hard_block_threshold": 0.98, "tool_response_max_bytes": None, "result_offload_threshold": 16_384,
                  "sources": sim.sources()},
    )  # fmt: skip
    store.upsert_tools(sid, TOOLS)
    return sim


def _file_dump(name: str, lines: int) -> str:
    return "\n".join(
        f"{name}:{i:04d}: def handler_{i}(request): return process(request, retries={i % 7})"
        for i in range(lines)
    )


def _session_refactor(store: SessionStore, sid: str) -> None:
    """Compaction at turn 3, then a big read_file output tips turn 5 into a forced final turn."""
    sim = _new_sim(store, sid, "Refactor the auth module", "claude-sonnet-4-20250514", "anthropic", 13_500)
    sim.loaded_tools = [t.name for t in TOOLS if t.name not in DEFERRED]
    store.record_event(
        sid,
        ContextEvent(
            kind="deferral", turn_index=0,
            details={"deferred": list(DEFERRED), "active": sim.loaded_tools, "tokens_before": 3660, "tokens_after": 1600},
        ),
    )  # fmt: skip
    seq_of_big = -1
    for turn in range(6):
        prompt = f"Turn {turn}: refactor step {turn} of the auth module, keep the tests green."
        if turn == 1:
            prompt = "Please render this literally: " + HOSTILE_TEXT
        sim.add(user(prompt))
        sim.request(turn)
        call = f"toolu_{turn:02d}"
        lines = (60, 100, 140, 180, 80, 80)[turn]
        sim.add(
            assistant(
                f"Reading module part {turn}.", tool_use(call, "read_file", path=f"auth/part{turn}.py")
            ),
            usage=ProviderUsage(input_tokens=50, output_tokens=60),
        )
        output = _file_dump(f"auth/part{turn}.py", lines)
        if turn == 2:
            blob = store.put_blob(
                sid, output.encode() * 4, tool_name="read_file", tool_use_id=call, tokens=9000
            )
            sim.offloaded_bytes += blob.size_bytes
            output = f"[output stored as {blob.ref_id}: {blob.size_bytes} bytes; use read_result]"
        seqs = sim.add(tool_result(call, output))
        if turn == 5:
            seq_of_big = seqs[0]
        if turn == 2:
            store.record_event(
                sid,
                ContextEvent(
                    kind="tool_search", outcome="hit", turn_index=turn,
                    details={"query": "create github issue", "hits": [{"name": "github_create_issue", "score": 3.2}],
                             "misses": False},
                ),
            )  # fmt: skip
            sim.loaded_tools.append("github_create_issue")
            store.record_event(
                sid,
                ContextEvent(
                    kind="deferral", turn_index=turn,
                    details={"deferred": ["github_list_prs", "jira_search"], "active": list(sim.loaded_tools),
                             "tokens_before": 3660, "tokens_after": 2240},
                ),
            )  # fmt: skip
            store.record_event(
                sid,
                ContextEvent(
                    kind="tool_search",
                    outcome="miss",
                    turn_index=turn,
                    details={"query": "confluence page", "hits": [], "misses": True},
                ),
            )
            store.record_event(
                sid,
                ContextEvent(
                    kind="offload", turn_index=turn, message_seq=seqs[0],
                    details={"ref_id": blob.ref_id, "tool_name": "read_file", "size_bytes": blob.size_bytes},
                ),
            )  # fmt: skip
        if turn == 5:
            before = sim.components()
            prev = sim.last_components or before
            limit = sim.limit
            store.record_event(
                sid,
                ContextEvent(
                    kind="guard", trigger="tool_preflight", outcome="forced_final", reason="context",
                    provider=sim.provider, model=sim.model, turn_index=turn, context_window=sim.window,
                    max_output_tokens=sim.max_output, buffer_tokens=sim.buffer, limit_tokens=limit,
                    projected_tokens=before.total + 400, remaining_tokens=limit - before.total - 400,
                    components=before, message_seq=seq_of_big,
                    details={
                        "sources": sim.sources(),
                        "counters": {"turns": turn + 1, "tool_calls": turn + 1, "compactions": 1},
                        "tipping": {"message_seq": seq_of_big, "tool_name": "read_file",
                                    "tokens": sim.tokens_by_seq[seq_of_big][1]},
                        "thresholds": {"note": 0.8, "compact": 0.95, "hard_block": 0.98},
                    },
                ),
            )  # fmt: skip
            assert prev.total < before.total
            sim.add(assistant("I have reached the context limit; here is where I stopped."))
            sim.request(turn, output=300)
            store.update_session(sid, status="final")
            break
        sim.add(assistant(f"Done with step {turn}."), usage=ProviderUsage(input_tokens=20, output_tokens=30))
        sim.request(turn)
        if turn == 3:
            before = sim.components()
            removed = [s for s in sorted(sim.tokens_by_seq) if s <= 6]
            sim.removed.update(removed)
            summary = "Summary: steps 0-1 refactored auth/part0.py and auth/part1.py; tests green."
            sim.summary_tokens = sim.tokenizer.count(summary)
            after = sim.components()
            event_id = store.record_event(
                sid,
                ContextEvent(
                    kind="compaction", trigger="compact_threshold", outcome="compacted", turn_index=turn,
                    limit_tokens=sim.limit, projected_tokens=before.total, components=after,
                    details={
                        "strategies_run": ["clear_tool_results", "summarize"], "removed_message_seqs": removed,
                        "before": before.as_dict(), "after": after.as_dict(), "before_tokens": before.total,
                        "after_tokens": after.total, "before_count": len(sim.tokens_by_seq),
                        "after_count": len(sim.tokens_by_seq) - len(removed) + 1, "summary": summary,
                    },
                ),
            )  # fmt: skip
            kept = store.load_messages(sid, from_seq=7)
            store.write_snapshot(
                sid, [m.message for m in kept], through_seq=max(sim.tokens_by_seq), summary=summary,
                tokens=after.total - SYSTEM_TOKENS - SKILLS_TOKENS - after.tools, strategy="chain", event_id=event_id,
            )  # fmt: skip
    store.save_context_state(
        sid,
        strategy="summarize",
        range_start=0,
        range_end=7,
        summary="steps 0-1",
        summary_tokens=5,
        summarizer="offline",
    )


def _session_openai(store: SessionStore, sid: str) -> None:
    """The provider was skipped once (projected over its limit); a fallback answered."""
    sim = _new_sim(store, sid, "Summarise the quarterly report", "gpt-4o", "openai", 128_000)
    sim.loaded_tools = ["read_file", "bash"]
    for turn in range(4):
        sim.add(user(f"Question {turn} about the quarterly report: what changed in section {turn}?"))
        sim.request(turn, cached=turn > 0)
        call = f"call_{turn}"
        section = 1 if turn == 3 else turn  # turn 3 re-runs turn 1's grep: a repeated read
        sim.add(assistant("", tool_use(call, "bash", cmd=f"grep -n section{section} report.txt")))
        sim.add(
            tool_result(
                call,
                "\n".join(
                    f"report.txt:{i}: section{section} revenue {i * 13}" for i in range(30 * (section + 1))
                ),
            )
        )
        sim.request(turn)
        if turn == 2:
            store.record_event(
                sid,
                ContextEvent(
                    kind="guard", trigger="turn_preflight", outcome="skipped_provider", reason="context",
                    provider="openai", model="gpt-4o-mini-small", turn_index=turn, context_window=4096,
                    max_output_tokens=1024, buffer_tokens=256, limit_tokens=2816,
                    projected_tokens=sim.components().total, remaining_tokens=2816 - sim.components().total,
                    components=sim.components(), message_seq=max(sim.tokens_by_seq),
                    details={"sources": {"context_window": "provider:openai (settings.toml)",
                                         "max_output_tokens": "defaults (settings.toml)", "buffer_tokens": "builtin"},
                             "fallback": "gpt-4o"},
                ),
            )  # fmt: skip
        sim.add(
            assistant(f"Section {turn} changed: revenue grew."),
            usage=ProviderUsage(input_tokens=900, output_tokens=40),
        )
        sim.request(turn, output=40)
    store.update_session(sid, status="ended")
    blob = store.put_blob(sid, bytes(range(256)) * 8, tool_name="bash", tool_use_id="call_bin", tokens=700)
    assert not blob.is_text


def _session_small(store: SessionStore, sid: str) -> None:
    """A short session without tools or guard events (an empty-ish page must still render)."""
    sim = _new_sim(store, sid, "Quick question", "gpt-4.1-mini", "openai", 64_000)
    for turn in range(2):
        sim.add(user(f"Small question {turn}"))
        sim.request(turn, cached=False)
        sim.add(
            assistant(f"Small answer {turn}: " + HOSTILE_TEXT),
            usage=ProviderUsage(input_tokens=30, output_tokens=25),
        )


SESSION_IDS = ("sess-refactor", "sess-report", "sess-small")


def write_dashboard_db(path: str | Path, *, id_prefix: str = "") -> dict[str, Any]:
    """Write the fixture database at ``path``; returns the session ids by role."""
    ids = {
        name: id_prefix + sid for name, sid in zip(("refactor", "report", "small"), SESSION_IDS, strict=True)
    }
    with SessionStore(path) as store:
        _session_refactor(store, ids["refactor"])
        _session_openai(store, ids["report"])
        _session_small(store, ids["small"])
    return ids


_template: dict[str, Path] = {}


def copy_dashboard_db(template_dir: Path, target: Path) -> Path:
    """A fresh copy of the fixture DB at ``target``; the template is written once per process."""
    if "db" not in _template or not _template["db"].exists():
        path = template_dir / "dashboard_template.db"
        write_dashboard_db(path)
        _template["db"] = path
    shutil.copy(_template["db"], target)
    return target
