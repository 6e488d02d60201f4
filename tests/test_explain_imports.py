"""How sessions ended, without detail (the dashboard's Sessions page asks it of every session in a
worker process), loads neither the importers nor what the compactions' detail reads (the findings,
numpy): that worker's start was most of its processor time (#36.12). The names stay as they were."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from engine.explain import agents
from engine.importers.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
#: Read in a fresh interpreter: which modules the endings of the bundled sample loaded.
ENDINGS = """
import json, sys
from engine.explain.session import explain_store
from engine.store.factory import open_store
with open_store(sys.argv[1], read_only=True) as store:
    report = explain_store(store, None, detail=False)
print(json.dumps({"sessions": [s.ended.cause for s in report.sessions], "modules": sorted(sys.modules)}))
"""
NOT_LOADED = (
    "engine.importers.registry",
    "engine.importers.formats",
    "engine.importers.formats.claude_code",
    "engine.explain.kept",
    "engine.findings",
    "engine.compaction",
    "numpy",
)


def test_the_endings_of_sessions_of_our_own_load_no_importer_and_no_detail(tmp_path: Path) -> None:
    db = tmp_path / "sample.db"
    shutil.copyfile(ROOT / "data" / "demo-coding-agent.db", db)
    done = subprocess.run(
        [sys.executable, "-c", ENDINGS, str(db)], cwd=ROOT, capture_output=True, text=True, check=True
    )
    result = json.loads(done.stdout)
    assert result["sessions"] and all(result["sessions"])  # every session's ending was explained
    assert [m for m in NOT_LOADED if m in result["modules"]] == []


def test_agent_labels_are_the_registrys_with_our_shorter_forms() -> None:
    labels = agents.AGENT_LABELS
    from engine.explain import AGENT_LABELS

    assert labels == AGENT_LABELS
    for f in REGISTRY:
        assert labels[f.name] == agents.agent_label(f.name)
        if f.name not in (
            "codex",
            "copilot",
            "cline",
            "claude-web",
            "openai",
            "openai-responses",
            "anthropic",
        ):
            assert labels[f.name] == f.agent
    assert agents.agent_label("codex") == "Codex" and agents.agent_label("ctxdesk") == "ctxdesk"
    assert agents.agent_label("proxy") == "The agent" and agents.agent_label("nobody") == "nobody"


def test_claude_codes_summary_reserve_is_the_importers() -> None:
    from engine.importers.formats.claude_code.session import SUMMARY_RESERVE

    assert agents.CLAUDE_CODE_SUMMARY_RESERVE == SUMMARY_RESERVE
    rule = agents.agent_threshold("claude-code", window=200_000)
    assert rule is not None
    assert rule.tokens == 200_000 - SUMMARY_RESERVE - agents.CLAUDE_CODE_AUTOCOMPACT_BUFFER


def test_a_reader_of_findings_loads_no_detector() -> None:
    """The dashboard unpickles the findings its worker found (Finding is in engine.findings.view): the
    package loads its detectors, and through them the compaction package, only when they are used."""
    code = (
        "import sys\n"
        "from engine.findings import Finding\n"
        "loaded = [m for m in ('engine.findings.tool_waste', 'engine.findings.context_waste', 'engine.compaction')"
        " if m in sys.modules]\n"
        "import engine.findings\n"
        "print(loaded, Finding.__module__, callable(engine.findings.find_repeated_reads))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["[]", "engine.findings.view", "True"]
