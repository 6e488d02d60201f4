"""Re-import of files imported before: what tells an unchanged file from a changed one (#33).

An unchanged file costs a stat and its own format's companions; its source path is resolved
once per folder of a batch. Real Claude Code and Codex files, real SQLite, the parallel batch.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from engine.importers import folder_files, imported_files
from engine.importers.api import current_state, file_state, source_path
from engine.importers.parallel import import_files_parallel
from engine.store.factory import open_store

REAL_AGENTS = Path(__file__).parent / "fixtures" / "real_agents"
SUBAGENT_RUN = REAL_AGENTS / "claude-code" / "subagent_background" / "transcripts"
SESSION = "3562ea59-0949-468e-b2d1-b9d8a3564079"


def layout(tmp_path: Path) -> tuple[Path, Path]:
    """(a Claude Code project folder holding a session with a sub-agent and a Codex rollout,
    a symlink to that folder)."""
    project = tmp_path / "real" / "-work-proj"
    shutil.copytree(SUBAGENT_RUN, project)
    rollout = next(p for p in folder_files(REAL_AGENTS / "codex") if p.name.startswith("rollout-"))
    shutil.copy(rollout, project / rollout.name)
    link = tmp_path / "link"
    link.symlink_to(project)
    return project, link


def statuses(db: Path, paths: list[Path]) -> list[str]:
    with open_store(db) as store:
        results = import_files_parallel(paths, store, imported_files(store), workers=2, min_bytes=0)
    return [f"{Path(r.path).name}: {r.status}" for r in results]


@pytest.mark.parametrize(
    "spelling",
    [
        pytest.param(lambda project, link: project / f"{SESSION}.jsonl", id="absolute"),
        pytest.param(lambda project, link: link / f"{SESSION}.jsonl", id="through-a-symlinked-folder"),
        pytest.param(
            lambda project, link: link / ".." / "link" / f"{SESSION}.jsonl", id="dot-dot-after-a-symlink"
        ),
        pytest.param(lambda project, link: project / "alias.jsonl", id="a-symlinked-file"),
        pytest.param(lambda project, link: project / "missing" / "x.jsonl", id="a-missing-folder"),
    ],
)
def test_source_path_with_a_folder_memo_is_what_resolve_gives(tmp_path: Path, spelling) -> None:
    project, link = layout(tmp_path)
    (project / "alias.jsonl").symlink_to(project / f"{SESSION}.jsonl")
    path = spelling(project, link)
    folders: dict[str, str] = {}
    assert source_path(path, folders) == source_path(path, folders) == str(path.resolve())
    relative = Path(os.path.relpath(path, tmp_path))
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert source_path(relative, {}) == str(relative.resolve())
    finally:
        os.chdir(cwd)


def test_current_state_asks_only_the_files_own_format_and_agrees_with_every_formats(tmp_path: Path) -> None:
    project, _ = layout(tmp_path)
    paths = folder_files(project)
    assert statuses(tmp_path / "a.db", paths) == [f"{p.name}: imported" for p in paths]
    with open_store(tmp_path / "a.db") as store:
        known = imported_files(store)
    folders: dict[str, str] = {}
    for path in paths:
        state, unchanged = current_state(path, known, folders)
        assert state == file_state(path)  # the same state as asking every format
        assert unchanged is not None and unchanged.status == "unchanged"
    assert file_state(project / f"{SESSION}.jsonl")["companions"]  # the sub-agent is a companion


def test_a_subagent_that_grows_alone_makes_its_session_read_again_through_a_symlink(tmp_path: Path) -> None:
    project, link = layout(tmp_path)
    paths = folder_files(link)
    names = [p.name for p in paths]
    assert statuses(tmp_path / "a.db", paths) == [f"{n}: imported" for n in names]
    assert statuses(tmp_path / "a.db", paths) == [f"{n}: unchanged" for n in names]
    (subagent,) = (project / SESSION / "subagents").glob("*.jsonl")
    with subagent.open("a", encoding="utf-8") as out:
        out.write(subagent.read_text(encoding="utf-8").splitlines(keepends=True)[-1])
    again = statuses(tmp_path / "a.db", folder_files(project))  # the same files by their real path
    assert again == [f"{n}: {'updated' if n == f'{SESSION}.jsonl' else 'unchanged'}" for n in names]
