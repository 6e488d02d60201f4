"""The README is executable documentation: its set-up commands and examples are checked here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


def _setup_section() -> str:
    match = re.search(r"## Set up\n(.*?)\n## ", README, flags=re.DOTALL)
    assert match, "README needs a '## Set up' section"
    return match.group(1)


def test_the_readme_has_exactly_two_setup_commands() -> None:
    commands = re.findall(r"```bash\n(.*?)```", _setup_section(), flags=re.DOTALL)
    lines = [c.strip() for c in commands]
    assert len(lines) == 2 and all("\n" not in c for c in lines), lines
    dashboard, tests = lines
    assert dashboard.endswith("ctxdesk dashboard")
    assert "pytest" in tests


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    tests_command = re.findall(r"```bash\n(.*?)```", _setup_section(), flags=re.DOTALL)[1].strip()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "set -euo pipefail" in ci
    ci_commands = [
        line.strip() for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]
    # .ci/run quiets pip; the command is otherwise the README's, word for word.
    assert tests_command.replace("pip install -e", "pip install -q -e") in ci_commands


@pytest.mark.parametrize("index", range(len(_blocks("python"))))
def test_readme_python_example_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code = _blocks("python")[index]
    exec(compile(code, f"README.md python block {index}", "exec"), {"__name__": f"readme_example_{index}"})


def test_readme_settings_example_is_valid(tmp_path: Path) -> None:
    from engine import load_settings, resolve_model_settings

    (toml,) = _blocks("toml")
    path = tmp_path / "settings.toml"
    path.write_text(toml, encoding="utf-8")
    resolved = resolve_model_settings("gpt-4o", settings=load_settings(path))
    assert resolved.effective_window == 111_360
