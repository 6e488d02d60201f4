"""The importer registry: every format module is registered once, detection, ``--from``,
``locations.AGENTS`` and the README's agents table all come from it, and each format's sniff
recognises a real file of its own (and no earlier format takes it)."""

from __future__ import annotations

import argparse
import ast
import pkgutil
from importlib import import_module
from pathlib import Path

import pytest

import engine.importers.formats as formats_package
from engine.cli import build_parser
from engine.importers import AGENTS, FORMATS, REGISTRY, ImportFormat, agent_roots, agents_table
from engine.importers.detect import detect, read_document
from engine.importers.formats import DOCUMENT_KINDS, Beside, kind_of

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"

#: One real file of each format (its own sniff must take it, and no format before it).
SAMPLES = {
    "aider": "agents/aider/.aider.chat.history.md",
    "claude-code": "real_agents/claude-code/compact_auto/transcripts/005e4ed3-208c-4f24-ac39-ceb1cfae1fa5.jsonl",
    "codex": "agents/codex/rollout-compacted.jsonl",
    "gemini": "agents/gemini/session-2026-11-24T06-14-b6435e65.json",
    "opencode": "real_agents/opencode/tools-resume/data/opencode/opencode.db",
    "kilo": "real_agents/kilo/tools-resume/data/kilo/kilo.db",
    "copilot": "real_agents/copilot/tools-resume/session-state/00ed014f-8b87-4c03-8994-5e687e91ee3a/events.jsonl",
    "mini-swe-agent": "real_agents/mini-swe-agent/tools-followup/config/mini-swe-agent/last_mini_run.traj.json",
    "qwen": "real_agents/qwen/tools-resume/projects/-tmp-ctxdesk-real-agents-qwen-tools-resume-repo/chats/945c2a2b-cc2e-4281-a6a1-aef390a10544.jsonl",
    "cline-cli": "real_agents/cline/tools-resume/sessions/1795860635090_isk97/1795860635090_isk97.messages.json",
    "continue": "real_agents/continue/tools-resume/sessions/12c64ee6-c581-41d7-ae99-eab453fb37e3.json",
    "cline": "agents/cline/1732400000000/api_conversation_history.json",
    "claude-web": "agents/claude-web/conversations.json",
    "langchain": "agents/langchain/dumpd.json",
    "openai-responses": "agents/openai_responses_input.json",
    "letta": "agents/letta/loop.af",
    "swe-agent": "sessions/swe-agent__pydicom-1458__head9.traj",
    "openhands": "agents/openhands/resolver_output_legacy.json",
    "anthropic": "agents/anthropic_messages.json",
    "openai": "sessions/openai__sweagenttestrepo-1c2844.json",
}


def _format_modules() -> list[str]:
    """Every module or package directly under engine.importers.formats."""
    return [m.name for m in pkgutil.iter_modules(formats_package.__path__)]


def test_every_format_module_declares_a_format_and_is_registered_once() -> None:
    registered = [f.name for f in REGISTRY]
    assert len(set(registered)) == len(registered), f"a name registered twice: {registered}"
    declared = []
    for name in _format_modules():
        module = import_module(f"{formats_package.__name__}.{name}")
        fmt = getattr(module, "FORMAT", None)
        assert isinstance(fmt, ImportFormat), f"engine.importers.formats.{name} declares no FORMAT"
        assert fmt in REGISTRY, f"{fmt.name} ({name}) is not in engine.importers.registry.REGISTRY"
        declared.append(fmt.name)
    assert sorted(declared) == sorted(registered)
    assert tuple(registered) == FORMATS


@pytest.mark.parametrize("fmt", REGISTRY, ids=lambda f: f.name)
def test_each_format_names_its_agent_and_where_its_files_live(fmt: ImportFormat) -> None:
    assert fmt.name and fmt.name == fmt.name.lower() and " " not in fmt.name
    assert fmt.agent.strip() and fmt.files.strip()
    assert "|" not in fmt.agent + fmt.files, "a cell of the README's table"


@pytest.mark.parametrize(("name", "sample"), sorted(SAMPLES.items()))
def test_a_real_file_of_each_format_is_detected_as_it_by_its_own_sniff(name: str, sample: str) -> None:
    doc = read_document(FIXTURES / sample)
    assert detect(doc).name == name
    takers = [f.name for f in REGISTRY if f.sniff(doc)]
    assert takers[0] == name, f"{sample}: sniffed by {takers}"


def test_a_sniff_takes_only_the_kinds_of_document_its_format_declares() -> None:
    """Detection asks a sniff only of the kinds its format ``reads`` (data, checked without entering
    the format's module): on every real sample, no sniff takes a document of another kind."""
    kinds = set()
    for sample in SAMPLES.values():
        doc = read_document(FIXTURES / sample)
        kinds.add(kind_of(doc))
        takers = [f.name for f in REGISTRY if f.sniff(doc) and kind_of(doc) not in f.reads]
        assert not takers, f"{sample} ({kind_of(doc)}): taken by {takers}, which do not read it"
    assert kinds == DOCUMENT_KINDS  # the samples hold every kind


def test_companions_beside_are_asked_only_of_session_files_so_named(tmp_path: Path) -> None:
    asked: list[Path] = []
    companions = Beside("chats/session-*", lambda path: asked.append(path) or "digest")
    assert companions(tmp_path / "chats" / "notes.json") is None
    assert companions(str(tmp_path / "session-1.json")) is None
    assert asked == []
    assert companions(str(tmp_path / "chats" / "session-1.json")) == "digest"
    assert asked == [tmp_path / "chats" / "session-1.json"]


def test_every_registered_format_has_a_sample() -> None:
    assert set(SAMPLES) == set(FORMATS)


def test_agents_with_locations_are_the_from_choices_of_import_and_dashboard() -> None:
    assert tuple(f.name for f in REGISTRY if f.locations is not None) == AGENTS
    assert {"claude-code", "codex", "gemini", "cline"} <= set(AGENTS)
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command in ("import", "dashboard"):
        (option,) = [a for a in commands.choices[command]._actions if "--from" in a.option_strings]
        assert tuple(option.choices) == (*AGENTS, "all"), command


@pytest.mark.parametrize("agent", AGENTS)
def test_every_agent_has_roots_under_home_or_its_env(agent: str, tmp_path: Path) -> None:
    roots = agent_roots(agent, env={}, home=tmp_path)
    assert roots and all(tmp_path in r.parents for r in roots)


def test_an_unknown_agent_is_refused_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown agent 'aider': one of qwen, claude-code"):
        agent_roots("aider", env={}, home=tmp_path)


def test_the_readme_agents_table_is_the_registry() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = agents_table()
    assert table in readme, (
        "README.md's agents table differs from engine.importers.agents_table(): regenerate it"
    )
    for fmt in REGISTRY:
        assert f"| {fmt.agent} | {fmt.files} |" in table


def test_no_importer_sets_an_undeclared_attribute() -> None:
    """CallInfo and ParsedSession declare every field parsers set (no ``type: ignore[attr-defined]``
    on a write, no ``getattr(..., None)`` on the read)."""
    offenders = []
    for path in sorted((ROOT / "engine" / "importers").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "attr-defined" in text:
            offenders.append(f"{path.relative_to(ROOT)}: type: ignore[attr-defined]")
        for node in ast.walk(ast.parse(text)):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id in ("call", "parsed", "session")
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: getattr({node.args[0].id}, ...)")
    assert not offenders, offenders
