"""What changed between Codex releases, measured: each release from npm run offline against the scripted
model server (scripts/real_agents_codex_gemini.py's runner, model gpt-5, a 272,000-token window).

    python scripts/codex_versions.py [VERSION ...] [--fixtures]

For each release it prints the window its rollouts record, whether a call's usage is written before the
reply it counts, and whether it compacts in three probes (a usage padded by the server past a point):
no setting at 90% of the model's window; a configured model_context_window of 64,000 at 106% of it; a
model_auto_compact_token_limit of 260,000 at 255,000 (above 9/10 of the window). engine/explain/
codex_point.py and engine/importers/formats/codex/versions.py hold the boundaries found (0.49, 0.66,
0.100). ``--fixtures`` writes tests/fixtures/real_agents/codex/releases/ again.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.real_agents_codex_gemini import CODEX_SCENARIOS, run_codex  # noqa: E402

RELEASES = ROOT / "tests" / "fixtures" / "real_agents" / "codex" / "releases"
CACHE = Path("/tmp/ctxdesk-codex-releases")
VERSIONS = ("0.40.0", "0.47.0", "0.49.0", "0.59.0", "0.65.0", "0.66.0", "0.99.0", "0.100.0")
MODEL = "gpt-5"
#: One call padded by ``pad`` tokens, then a summary (asked for only if Codex compacts) and a reply.
SUMMARY = "SUMMARY: the user wants a usage line in README.md, which holds `hello`."
PROBES = {  # name: (config.toml lines, pad); Codex's own prompt adds about 8,000 tokens to the pad
    "default-90%": ("", 237_500),
    "configured-window": ("model_context_window = 64000\n", 60_000),
    "setting-above-9/10": ("model_auto_compact_token_limit = 260000\n", 247_500),
}
#: The fixtures: (release, scenario name, config lines, pad or None for the tools-resume scenario).
FIXTURES = (
    ("0.40.0", "tools-resume", "", None),
    ("0.47.0", "compact-setting", "model_auto_compact_token_limit = 20000\n", 30_000),
    ("0.59.0", "compact-default", "", 237_500),
    ("0.64.0", "tools-resume", "", None),
    ("0.66.0", "compact-setting-above", "model_auto_compact_token_limit = 250000\n", 243_000),
    ("0.100.0", "tools-resume", "", None),
)


def codex_bin(version: str) -> Path:
    """The ``codex`` of release ``version``, installed from npm into CACHE once."""
    folder = CACHE / version
    binary = folder / "node_modules" / ".bin" / "codex"
    if not binary.exists():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", f"@openai/codex@{version}"],
            cwd=folder, check=True, capture_output=True, timeout=600,
        )  # fmt: skip
    return binary


def padded_runs(pad: int) -> list[tuple[str, list[Any]]]:
    call = {"type": "function_call", "name": "exec_command", "arguments": {"cmd": "cat README.md"}}
    return [
        (
            "Look at this repository, then add a usage line to README.md.",
            [
                {"output": [call], "pad": pad},
                [{"type": "message", "text": SUMMARY}],
                [{"type": "message", "text": "README.md holds hello; I will add the line next."}],
            ],
        )
    ]


def compacts(version: str, config: str, pad: int, out: Path) -> bool:
    """Whether ``version`` compacts after a first call padded by ``pad`` (the summary reply is asked for)."""
    try:
        target = run_codex(
            "probe", padded_runs(pad), out, model=MODEL, codex=codex_bin(version), config=config
        )
    except RuntimeError as exc:  # a scripted reply not asked for: it did not compact
        if "not asked for" in str(exc):
            return False
        raise
    return any('"type":"compacted"' in p.read_text(encoding="utf-8") for p in target.rglob("rollout-*.jsonl"))


def layout(rollout: Path) -> tuple[set[int], bool]:
    """(the windows a rollout records, whether a count comes before the first reply item it counts)."""
    windows, first_count, first_reply = set(), None, None
    for n, line in enumerate(rollout.read_text(encoding="utf-8").splitlines()):
        value = json.loads(line)
        payload = value.get("payload") or {}
        if value.get("type") == "event_msg" and payload.get("type") == "token_count" and payload.get("info"):
            windows.add(payload["info"].get("model_context_window"))
            first_count = n if first_count is None else first_count
        elif value.get("type") == "response_item" and payload.get("type") in ("reasoning", "function_call"):
            first_reply = n if first_reply is None else first_reply
    before = first_count is not None and first_reply is not None and first_count < first_reply
    return windows - {None}, before


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("versions", nargs="*", default=list(VERSIONS))
    parser.add_argument("--fixtures", action="store_true", help="write the test fixtures again")
    args = parser.parse_args(argv)
    scratch = CACHE / "runs"
    if args.fixtures:
        for version, scenario, config, pad in FIXTURES:
            runs = CODEX_SCENARIOS["tools-resume"] if pad is None else padded_runs(pad)
            target = run_codex(scenario, runs, scratch, model=MODEL, codex=codex_bin(version), config=config)
            final = RELEASES / f"{version}-{scenario}"
            subprocess.run(["rm", "-rf", str(final)], check=True)
            final.parent.mkdir(parents=True, exist_ok=True)
            (target / "requests.jsonl").unlink()  # answers.json keeps the usage each call got
            target.rename(final)
            print(f"{final.relative_to(ROOT)}")
        return 0
    print("release  window recorded  count before reply  " + "  ".join(PROBES))
    for version in args.versions:
        target = run_codex(
            "layout", CODEX_SCENARIOS["tools-resume"], scratch, model=MODEL, codex=codex_bin(version)
        )
        windows, before = layout(next(target.rglob("rollout-*.jsonl")))
        probes = [compacts(version, config, pad, scratch) for config, pad in PROBES.values()]
        print(
            f"{version:8} {','.join(map(str, sorted(windows))) or '-':16} {before!s:18} "
            + "  ".join(
                f"{('compacts' if c else 'no'):{len(name)}}" for c, name in zip(probes, PROBES, strict=True)
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
