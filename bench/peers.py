"""The tools ctxdesk is compared with and the real agents it is tested against: one pinned list,
where each is installed, and how to install them (``python -m bench.peers install``, which .ci/run runs).

npm packages (the agent CLIs, ccusage) go under one ``node_modules/.bin``: ``$CTXDESK_AGENTS_BIN``
when set, else ``~/.cache/ctxdesk-agents/node_modules/.bin``. PyPI tools that must not enter the
project's own environment go into bench/.venv (``bench.setup_env``); agents whose dependencies clash
with it (Aider, mini-swe-agent) each into a venv of their own beside the npm folder
(``<prefix>/venvs/<name>``). Nothing here names a path of
one machine: a fresh machine gets everything from the registries by running the install.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

AGENTS_BIN_ENV_VAR = "CTXDESK_AGENTS_BIN"
DEFAULT_AGENTS_DIR = Path("~/.cache/ctxdesk-agents")

#: npm packages, pinned: the agents' transcript formats and ccusage's figures are what tests compare with.
NPM_PEERS: dict[str, str] = {
    "claude": "@anthropic-ai/claude-code@2.1.330",
    "codex": "@openai/codex@0.169.0",
    "gemini": "@google/gemini-cli@0.61.0",
    "ccusage": "ccusage@20.0.24",
    "opencode": "opencode-ai@1.18.33",
    "kilo": "@kilocode/cli@7.7.7",
    "copilot": "@github/copilot@1.0.102",
    "qwen": "@qwen-code/qwen-code@0.24.4",
    "cline": "cline@3.0.65",
    "cn": "@continuedev/cli@1.5.47",
}
#: PyPI tools installed into bench/.venv (never into the project's environment), pinned likewise.
VENV_PEERS: dict[str, str] = {
    "claude-cache-audit": "claude-cache-audit==0.1.0",
    "aider": "aider-chat==0.86.2",
    "mini": "mini-swe-agent==2.4.6",
    # a real Phoenix served offline: `ctxdesk export otlp` and the proxy's live export read back (#35)
    "phoenix": "arize-phoenix==20.26.1",
}
#: Agents whose pinned dependencies clash with the project's (litellm, tree-sitter, ...): each gets
#: a venv of its own, ``<agents dir>/venvs/<name>``, without the system site-packages.
ISOLATED_PEERS = frozenset({"aider", "mini", "phoenix"})
#: Peers ``install`` leaves out unless named (``install --only NAME``): .ci/run installs Phoenix (853 MB,
#: minutes) in the background while the tests run; its tests wait for that install.
BACKGROUND_PEERS = frozenset({"phoenix"})
NPM_TIMEOUT_S = 900
#: Longer installs: Phoenix's ~850 MB took ~15 min on the 2-core box under a load of 18 (2026-11-28).
INSTALL_TIMEOUT_S = {"phoenix": 3600}


class PeerInstallError(RuntimeError):
    """npm or pip could not install a pinned peer; the message names the command and its output."""


def agents_dir() -> Path:
    """The npm prefix the peers live under (the parent of ``node_modules/.bin``)."""
    configured = os.environ.get(AGENTS_BIN_ENV_VAR)
    if configured:
        return Path(configured).expanduser().parent.parent
    return DEFAULT_AGENTS_DIR.expanduser()


def agents_bin() -> Path:
    """The ``node_modules/.bin`` folder holding the agent CLIs and ccusage."""
    configured = os.environ.get(AGENTS_BIN_ENV_VAR)
    return Path(configured).expanduser() if configured else agents_dir() / "node_modules" / ".bin"


def npm_bin(name: str) -> Path | None:
    """The installed CLI ``name`` (claude, codex, gemini, ccusage), else None."""
    path = agents_bin() / name
    return path if path.exists() else None


def venv_bin(name: str) -> Path | None:
    """The console script ``name`` of a PyPI peer (bench/.venv, or its own venv), else None."""
    from bench.common import VENV_DIR

    path = (isolated_venv(name) if name in ISOLATED_PEERS else VENV_DIR) / "bin" / name
    return path if path.is_file() else None


def isolated_venv(name: str) -> Path:
    """The venv of an agent installed apart from everything else."""
    return agents_dir() / "venvs" / name


def pinned_npm() -> str:
    return " ".join(NPM_PEERS.values())


def install_npm(prefix: Path | None = None) -> Path:
    """Install every pinned npm peer under ``prefix`` (once: a marker file records the pins)."""
    prefix = prefix or agents_dir()
    marker = prefix / ".pinned"
    wanted = pinned_npm()
    if marker.is_file() and marker.read_text().strip() == wanted and all(map(npm_bin, NPM_PEERS)):
        return prefix / "node_modules" / ".bin"
    prefix.mkdir(parents=True, exist_ok=True)
    command = [
        "npm",
        "install",
        "--silent",
        "--no-audit",
        "--no-fund",
        "--prefix",
        str(prefix),
        *NPM_PEERS.values(),
    ]
    _run(command, NPM_TIMEOUT_S)
    marker.write_text(wanted + "\n")
    return prefix / "node_modules" / ".bin"


def install_venv(only: frozenset[str] | None = None) -> None:
    """Install the pinned PyPI peers into bench/.venv (made first when missing) or venvs of their own:
    ``only`` those named, else all but :data:`BACKGROUND_PEERS`."""
    from bench.setup_env import ensure_venv

    if only is None:
        ensure_venv()
    wanted = only if only is not None else frozenset(VENV_PEERS) - BACKGROUND_PEERS
    missing = [
        spec
        for name, spec in VENV_PEERS.items()
        if name in wanted and name not in ISOLATED_PEERS and venv_bin(name) is None
    ]
    if missing:
        python = ensure_venv()
        _run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *missing],
            NPM_TIMEOUT_S,
        )
    for name in sorted(ISOLATED_PEERS & wanted):
        if venv_bin(name) is None:
            venv = isolated_venv(name)
            _run([sys.executable, "-m", "venv", "--clear", str(venv)], NPM_TIMEOUT_S)
            pip = [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ]
            _run([*pip, VENV_PEERS[name]], INSTALL_TIMEOUT_S.get(name, NPM_TIMEOUT_S))


def _run(command: list[str], timeout: int) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PeerInstallError(f"{' '.join(command[:3])}: {exc}") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-800:]
        raise PeerInstallError(f"{' '.join(command[:3])} exited {done.returncode}: {tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    install = sub.add_parser("install", help="install every pinned peer (npm ones and bench/.venv ones)")
    install.add_argument(
        "--only", action="append", choices=sorted(VENV_PEERS), metavar="NAME",
        help="install only this PyPI peer (repeatable), e.g. phoenix, which a plain install leaves out",
    )  # fmt: skip
    sub.add_parser("where", help="print where each peer is (or 'missing')")
    args = parser.parse_args(argv)
    if args.command == "install" and args.only:
        try:
            install_venv(frozenset(args.only))
        except PeerInstallError as exc:
            print(f"peers: {exc}", file=sys.stderr)
            return 1
    elif args.command == "install":
        if shutil.which("npm") is None:
            print("npm not found: install Node.js and npm first", file=sys.stderr)
            return 1
        try:
            print(install_npm())
            install_venv()
        except PeerInstallError as exc:
            print(f"peers: {exc}", file=sys.stderr)
            return 1
    for name in NPM_PEERS:
        print(f"{name}: {npm_bin(name) or 'missing'}")
    for name in VENV_PEERS:
        print(f"{name}: {venv_bin(name) or 'missing'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
