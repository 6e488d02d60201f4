"""The self-calibrating estimator held out by conversation, beside the static estimator, on the real
sessions in ../shared/sessions (the provider's own counts).

Every two consecutive calls with the provider's count are a growth pair (engine.calibration_pairs);
each conversation (a file, and its root session where a file holds several) is predicted by a fit on
the others (engine.calibration.calibrate). The real-CLI fixtures are left out: their usage comes from
the scripted model server, which counts with our own estimator, not the provider's tokenizer.
"""

from __future__ import annotations

from pathlib import Path

from bench.common import SHARED_SESSIONS
from bench.report import Table
from engine.calibration import HeldOut, calibrate
from engine.calibration_pairs import source_growth_pairs
from engine.importers.detect import detect, read_document
from engine.importers.parsing.parsed import SourceProblem


def run(quick: bool = False, *, sessions_dir: Path = SHARED_SESSIONS) -> Table:
    table = Table(
        title="Calibrated token estimator, held out by conversation (real sessions in ../shared/sessions)",
        columns=[
            "estimator:family",
            "held-out conversation",
            "growth pairs",
            "static MAPE %",
            "calibrated MAPE %",
            "calibrated ÷ static",
            "used",
        ],
        baseline="the static estimator's mean absolute error on each call's growth (the provider's count of what "
        "the call added), on the same pairs in the same run.",
    )
    if not sessions_dir.is_dir():
        table.notes.append(
            f"Skipped: no session files at {sessions_dir} (../shared is absent on a fresh clone)."
        )
        return table
    pairs = source_growth_pairs([sessions_dir])
    formats = file_formats(sessions_dir)
    for (estimator, family), found in sorted((k, v) for k, v in pairs.items() if v):
        fit = calibrate(found, estimator, family)
        held = fit.held_out
        if held is None:
            table.add(
                f"{estimator}:{family}",
                "(one conversation: nothing to hold out)",
                len(found),
                None,
                None,
                None,
                "no",
            )
            continue
        for group, (n, calibrated, static) in sorted(held.by_group.items()):
            table.add(
                f"{estimator}:{family}",
                short(group),
                n,
                static,
                calibrated,
                calibrated / static if static else None,
                "",
            )
        for name, (n, static, calibrated) in sorted(pooled_by_format(held, formats).items()):
            table.add(f"{estimator}:{family}", f"{name} files, pooled", n, static, calibrated,
                      calibrated / static if static else None, "")  # fmt: skip
        table.add(f"{estimator}:{family}", "all, pooled", held.pairs, held.static_pct, held.calibrated_pct,
                  held.calibrated_pct / held.static_pct if held.static_pct else None, "yes" if fit.usable else "no")  # fmt: skip
    table.notes += [
        "used = the calibration is better than the static estimator held out; otherwise the static one counts "
        "(engine.calibration.estimator_for). The static Claude estimator (cl100k x 0.93 + 0.05/char) was itself "
        "fitted on these two Claude Code files, so the Claude rows compare a held-out fit with an in-sample one.",
        "The fit's prior counts as engine.calibration.SHRINK_PAIRS pairs of each content kind agreeing with the "
        "static estimator, in the fit's own absolute error: a kind seen in a few pairs (non-ASCII: 3 Claude pairs, "
        "the lsd tree among them) keeps the static weight. Before, an unweighted prior beside rows reweighted by "
        "1/residual pulled ~20x less than that: Claude Code pooled was 5.01%, Llama 10.1%.",
        "The ~90 tokens Claude Code 1.0.x added on about a fifth of the calls without logging them are its TodoWrite "
        "reminder (\"The TodoWrite tool hasn't been used recently ...\"): the importer rebuilds it where 1.0.98/1.0.108's "
        "own rule puts it (engine/importers/formats/claude_code/reminders.py; read from their cli.js, fitted on no "
        "file), which took fe5e1c67's static growth error from 7.97% to 4.58% (5c0375b4 has no such call).",
        "A tool call's non-string arguments are counted as Claude's prompt writes them: JSON with non-ASCII "
        "escaped (engine.tokens.tool_arguments_text). The MultiEdit of CLAUDE.md in 5c0375b4, whose edits array "
        "held 303 box-drawing characters, was +1,201 tokens short unescaped (+355 now), while a Write whose "
        "content string held such a tree matched unescaped (fe5e1c67). It was not a re-sent CLAUDE.md: 1.0.108's "
        "cli.js memoises the CLAUDE.md context until /clear or /compact, MultiEdit records the file's new mtime "
        "(so no 'was modified' note), and nested memory skips files already read.",
        "What remains is mostly what the published files changed or left out: their cwd was anonymised to "
        "/path/to/Demo, so the provider counted a longer path (~8-14 tokens per mention; a 219-path find output: "
        "+3,107; not rebuilt: the real path is in no file), an lsd tree of box-drawing characters (+828, though "
        "the Read of a CLAUDE.md drawn with the same characters was 97 over) and unlogged background-shell "
        "notices around BashOutput/KillBash (cli.js 1.0.98 zF5: 'Background Bash ID (command: ...) (status: "
        "killed)' at the next attachment pass after a KillBash, 'Has new output available' while a shell's "
        "stdout is unread; not rebuilt: any parallel sub-agent's loop may take the notice first, and the exit "
        "code and unread output depend on timing the file does not keep).",
    ]
    return table


def file_formats(sessions_dir: Path) -> dict[str, str]:
    """File name -> the format it is imported as (files that are none are left out)."""
    found = {}
    for path in sorted(p for p in sessions_dir.glob("*") if p.is_file()):
        try:
            found[path.name] = detect(read_document(path)).name
        except SourceProblem:
            continue
    return found


def pooled_by_format(held: HeldOut, formats: dict[str, str]) -> dict[str, tuple[int, float, float]]:
    """(pairs, static %, calibrated %) over the held-out groups of each format, where a family's
    groups come from more than one format (the Claude Code files apart from a Claude OpenHands run)."""
    by_format: dict[str, list[tuple[int, float, float]]] = {}
    for group, row in held.by_group.items():
        by_format.setdefault(formats.get(group.partition(":")[0], "other"), []).append(row)
    if len(by_format) < 2:
        return {}
    return {
        name: (
            sum(n for n, _, _ in rows),
            round(sum(n * static for n, _, static in rows) / sum(n for n, _, _ in rows), 2),
            round(sum(n * calibrated for n, calibrated, _ in rows) / sum(n for n, _, _ in rows), 2),
        )
        for name, rows in by_format.items()
    }


def short(group: str) -> str:
    name, _, root = group.partition(":")
    name = name if len(name) <= 40 else name[:24] + "…" + name[-12:]
    return f"{name} {root.rsplit(':', 1)[-1][:24]}".strip()
