"""The model limits an OpenCode (or Kilo CLI) user set in the app's config: the window its automatic
compaction worked with, where the model table's would be wrong (a custom provider's model, a limit
set lower than the model's).

OpenCode reads ``config.json``, ``opencode.json`` then ``opencode.jsonc`` in its config folder
(``$XDG_CONFIG_HOME/opencode``, else ``~/.config/opencode``), then the project's ``opencode.jsonc`` /
``opencode.json`` (the nearest up from the session's folder), each merged over the last (Kilo CLI:
``kilo.json``, ``kilo.jsonc`` in ``~/.config/kilo``). A model's ``provider.<id>.models.<model>.limit``
(``context``, ``output``, ``input``) replaces models.dev's. OpenCode compacts once a call's tokens
reach ``context - min(output, 32,000)`` (``input - compaction.reserved`` when ``input`` is set):
:func:`usable_tokens`. Read as the files are at import time (the session may have run with others).

The config folder of a database: the user's own when the database is in the user's data folder;
for a copied database ``<x>/data/<app>/<app>.db``, ``<x>/config/<app>`` (XDG folders kept side by
side, as the real-agent fixtures keep them) or, under ``<home>/.local/share``, ``<home>/.config``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.importers.parsing.readers import as_count

#: OpenCode's cap on the output it reserves (``OUTPUT_TOKEN_MAX``), and the reserve below an
#: ``input`` limit when the config sets no ``compaction.reserved`` (``COMPACTION_BUFFER``).
OUTPUT_TOKEN_MAX = 32_000
COMPACTION_BUFFER = 20_000


@dataclass(frozen=True)
class ModelLimit:
    """A model's limits as the config sets them, and the file that set them."""

    context: int
    output: int
    input: int | None
    reserved: int | None  # the config's compaction.reserved
    path: str

    def usable_tokens(self) -> int:
        """The tokens at which OpenCode compacts automatically (0: it never does)."""
        if self.context <= 0:
            return 0
        max_output = min(self.output, OUTPUT_TOKEN_MAX) or OUTPUT_TOKEN_MAX
        if self.input:
            reserved = self.reserved if self.reserved is not None else min(COMPACTION_BUFFER, max_output)
            return max(0, self.input - reserved)
        return max(0, self.context - max_output)


def config_files(app: str) -> tuple[str, ...]:
    """The global config files of ``app``, in the order read (each over the last)."""
    return ("config.json", f"{app}.json", f"{app}.jsonc")


def is_config_file(path: Path, app: str) -> bool:
    """A config file of ``app`` in its config folder (it accompanies the app's database: a folder
    import does not read it as a transcript)."""
    return path.parent.name == app and path.name in config_files(app)


def config_folder(
    database: Path, app: str, env: Mapping[str, str] | None = None, home: Path | None = None
) -> Path | None:
    """The config folder that goes with ``database`` (the module's docstring), None when none exists."""
    env = os.environ if env is None else env
    home = Path.home() if home is None else home
    data_home = database.resolve().parent.parent
    own_data = Path(env["XDG_DATA_HOME"]) if env.get("XDG_DATA_HOME") else home / ".local" / "share"
    if _same(data_home, own_data):
        base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
        candidates = [base / app]
    else:
        candidates = [data_home.parent / "config" / app]
        if data_home.name == "share" and data_home.parent.name == ".local":
            candidates.append(data_home.parent.parent / ".config" / app)
    return next((c for c in candidates if c.is_dir()), None)


def model_limits(
    database: Path,
    app: str,
    project_folders: Iterable[str],
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> dict[tuple[str, str], ModelLimit]:
    """{(provider id, model id): its limits} set in the config that goes with ``database`` and in the
    projects of its sessions (a project's own config over the global one)."""
    folder = config_folder(database, app, env, home)
    files = [folder / name for name in config_files(app)] if folder is not None else []
    limits = _limits_in(_merged(files))
    for project in dict.fromkeys(project_folders):
        own = _project_file(Path(project), app)
        if own is not None:
            limits.update(_limits_in(_merged([*files, own])))
    return limits


def session_models(messages: Iterable[tuple[str, str, dict[str, Any]]]) -> dict[str, tuple[str, str]]:
    """{session id: the (provider id, model id) most of its assistant messages name}."""
    counts: dict[str, Counter[tuple[str, str]]] = {}
    for _, session_id, info in messages:
        provider, model = info.get("providerID"), info.get("modelID")
        if info.get("role") == "assistant" and isinstance(provider, str) and isinstance(model, str):
            counts.setdefault(session_id, Counter())[(provider, model)] += 1
    return {sid: c.most_common(1)[0][0] for sid, c in counts.items()}


def jsonc_loads(text: str) -> Any:
    """JSON with comments (``//``, ``/* */``) and trailing commas, as OpenCode's ``.jsonc`` allows."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        after = _past_comment(text, i)
        if text[i] == '"':
            end = i + 1
            while end < n and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            out.append(text[i : end + 1])
            i = end + 1
        elif after is not None:
            i = after
        elif text[i] == "," and _closes_next(text, i + 1):
            i += 1  # a trailing comma
        else:
            out.append(text[i])
            i += 1
    return json.loads("".join(out))


def _past_comment(text: str, at: int) -> int | None:
    """Where the comment starting at ``at`` ends (None: none starts there)."""
    if text.startswith("//", at):
        end = text.find("\n", at)
        return len(text) if end < 0 else end
    if text.startswith("/*", at):
        end = text.find("*/", at + 2)
        return len(text) if end < 0 else end + 2
    return None


def _closes_next(text: str, at: int) -> bool:
    """Whether the next character at or after ``at`` that is no space or comment closes an object or array."""
    while at < len(text):
        after = _past_comment(text, at)
        if after is not None:
            at = after
        elif text[at].isspace():
            at += 1
        else:
            return text[at] in "}]"
    return False


def _merged(files: Iterable[Path]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for path in files:
        value = _read(path)
        if value:
            merged = _merge(merged, _with_paths(value, str(path)))
    return merged


def _with_paths(config: dict[str, Any], path: str) -> dict[str, Any]:
    """``config`` with each model that sets a limit marked with the file's path (kept by the merge)."""
    providers = config.get("provider")
    if not isinstance(providers, dict):
        return config
    marked: dict[str, Any] = {}
    for provider_id, provider in providers.items():
        models = provider.get("models") if isinstance(provider, dict) else None
        if isinstance(models, dict):
            models = {
                m: {**v, "__limit_path__": path} if isinstance(v, dict) and "limit" in v else v
                for m, v in models.items()
            }
            provider = {**provider, "models": models}
        marked[provider_id] = provider
    return {**config, "provider": marked}


def _read(path: Path) -> dict[str, Any] | None:
    """A config file's object; None when it is missing or not a JSON(C) object (never an error: the
    import goes on with the model table's limits)."""
    try:
        value = jsonc_loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged into ``base``, objects key by key (OpenCode's ``mergeDeep``)."""
    out = dict(base)
    for key, value in over.items():
        out[key] = (
            _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def _limits_in(config: dict[str, Any]) -> dict[tuple[str, str], ModelLimit]:
    compaction = config.get("compaction") if isinstance(config.get("compaction"), dict) else {}
    reserved = _count(compaction.get("reserved"))
    limits: dict[tuple[str, str], ModelLimit] = {}
    providers = config.get("provider") if isinstance(config.get("provider"), dict) else {}
    for provider_id, provider in providers.items():
        models = provider.get("models") if isinstance(provider, dict) else None
        for model_id, model in (models or {}).items() if isinstance(models, dict) else ():
            limit = model.get("limit") if isinstance(model, dict) else None
            context = _count(limit.get("context")) if isinstance(limit, dict) else None
            if not isinstance(limit, dict) or context is None:
                continue
            limits[(str(provider_id), str(model_id))] = ModelLimit(
                context=context, output=_count(limit.get("output")) or 0, input=_count(limit.get("input")),
                reserved=reserved, path=str(model.get("__limit_path__", "")),
            )  # fmt: skip
    return limits


def _project_file(folder: Path, app: str) -> Path | None:
    """The nearest ``<app>.jsonc`` / ``<app>.json`` from ``folder`` up to its repository's root (the
    folder holding ``.git``; none: the filesystem's), as OpenCode looks; None: none, or no such folder."""
    if not folder.is_absolute() or not folder.is_dir():
        return None
    for place in (folder, *folder.parents):
        for name in (f"{app}.jsonc", f"{app}.json"):
            if (place / name).is_file():
                return place / name
        if (place / ".git").exists():
            return None
    return None


def _count(value: Any) -> int | None:
    """A number of tokens the config sets (capped as every count from a source is), None when it sets none."""
    return (
        as_count(value)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
        else None
    )


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False
