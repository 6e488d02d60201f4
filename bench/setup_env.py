"""Create bench/.venv for the comparison benchmarks: ``python -m bench.setup_env``.

The venv sees the project's packages (``--system-site-packages``) and adds langchain-core,
which the project itself never depends on. Safe to run again; a working venv is kept.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.common import VENV_DIR

REQUIREMENTS = ("langchain-core>=0.3.46,<2",)
PIP_TIMEOUT_S = 600


class SetupError(Exception):
    """The venv could not be created or langchain-core could not be installed."""


def venv_python(venv: Path = VENV_DIR) -> Path:
    return venv / "bin" / "python"


def is_ready(venv: Path = VENV_DIR) -> bool:
    python = venv_python(venv)
    if not python.exists():
        return False
    probe = subprocess.run(
        [str(python), "-c", "import langchain_core.messages.utils"], capture_output=True, timeout=120
    )
    return probe.returncode == 0


def ensure_venv(venv: Path = VENV_DIR) -> Path:
    """The venv's python, creating the venv and installing langchain-core when needed."""
    if is_ready(venv):
        return venv_python(venv)
    steps = (
        [sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
        [
            str(venv_python(venv)),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            *REQUIREMENTS,
        ],
    )
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SetupError(f"{' '.join(step[:4])}: {exc}") from exc
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise SetupError(f"{' '.join(step[:4])} exited {done.returncode}: {tail[0]}")
    if not is_ready(venv):
        raise SetupError(f"{venv} was created but cannot import langchain_core")
    return venv_python(venv)


def main() -> int:
    try:
        python = ensure_venv()
    except SetupError as exc:
        print(f"bench/.venv not ready: {exc}", file=sys.stderr)
        return 1
    print(python)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
