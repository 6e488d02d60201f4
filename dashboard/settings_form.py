"""The Model settings page's pure half (no streamlit here): a draft of the settings file as plain
dicts, parsed from text fields and validated into engine.settings.Settings; the file as last read
(an invalid edit keeps the last valid settings), a disk edit merged under unsaved edits, and a
Save that writes only what the user edited and refuses to overwrite a file changed since read."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import ConfigError
from engine.settings import Settings, load_settings, save_settings

LEVELS = ("defaults", "providers", "models")
INT_FIELDS = (
    "context_window", "buffer_tokens", "max_output_tokens", "tool_response_max_bytes",
    "result_offload_threshold", "context_budget",
)  # fmt: skip
FLOAT_FIELDS = ("note_threshold", "compact_threshold", "hard_block_threshold", "tool_deferral_threshold")
EDITABLE_FIELDS = (
    "context_window", "max_output_tokens", "buffer_tokens", "context_budget", "note_threshold",
    "compact_threshold", "hard_block_threshold", "result_offload_threshold", "tool_response_max_bytes",
    "tool_deferral_threshold", "tokenizer",
)  # fmt: skip


def draft_of(settings: Settings) -> dict[str, Any]:
    """The settings as a plain nested dict (unset fields and empty levels left out)."""
    dumped = settings.model_dump(exclude_none=True, exclude={"source"})
    out: dict[str, Any] = {}
    for key, value in dumped.items():
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if v != {}}
            if not value:
                continue
        out[key] = value
    return out


def level_values(draft: dict[str, Any], level: str, name: str | None) -> dict[str, Any]:
    if level == "defaults":
        return dict(draft.get("defaults", {}))
    return dict(draft.get(level, {}).get(name or "", {}))


def parse_field(field: str, text: str) -> Any:
    """A text field's value: blank is "not set" (None); numbers parsed by the field's type."""
    text = text.strip()
    if not text:
        return None
    if field in INT_FIELDS or field in FLOAT_FIELDS:
        text = text.replace("_", "").replace(",", "")
    if field in INT_FIELDS:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"expected a whole number, got {text!r}", field=field) from None
    if field in FLOAT_FIELDS:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"expected a number like 0.95, got {text!r}", field=field) from None
    return text


def with_level(draft: dict[str, Any], level: str, name: str | None, values: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``draft`` with one level's values replaced (None values dropped, empty levels removed)."""
    if level not in LEVELS:
        raise ConfigError(f"unknown settings level {level!r}", field="level")
    out = copy.deepcopy(draft)
    clean = {k: v for k, v in values.items() if v is not None}
    if level == "defaults":
        if clean:
            out["defaults"] = clean
        else:
            out.pop("defaults", None)
        return out
    if not name:
        raise ConfigError(f"a {level[:-1]} name is required", field=level)
    table = dict(out.get(level, {}))
    if clean:
        table[name] = clean
    else:
        table.pop(name, None)
    if table:
        out[level] = table
    else:
        out.pop(level, None)
    return out


@dataclass(frozen=True)
class Validated:
    settings: Settings | None
    error: ConfigError | None


def validate(draft: dict[str, Any], *, source: str | None = None) -> Validated:
    """Settings from the draft, or the ConfigError naming the bad field."""
    try:
        return Validated(Settings.from_dict(draft, source=source), None)
    except ConfigError as exc:
        return Validated(None, exc)


# -- the file on disk: last valid settings, live reload, safe save -------------------------------

#: A draft flattened to {(level, name, field): value}; ``name`` is "" for defaults and top-level keys.
FlatKey = tuple[str, str, str]


def flatten(draft: dict[str, Any]) -> dict[FlatKey, Any]:
    out: dict[FlatKey, Any] = {}
    for key, value in draft.items():
        if key in ("providers", "models") and isinstance(value, dict):
            for name, fields in value.items():
                for field, v in fields.items():
                    out[(key, name, field)] = v
        elif key == "defaults" and isinstance(value, dict):
            for field, v in value.items():
                out[("defaults", "", field)] = v
        else:
            out[("", "", key)] = value
    return out


def unflatten(flat: dict[FlatKey, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for (level, name, field), value in sorted(flat.items()):
        if value is None:
            continue
        if level == "":
            out[field] = value
        elif level == "defaults":
            out.setdefault("defaults", {})[field] = value
        else:
            out.setdefault(level, {}).setdefault(name, {})[field] = value
    return out


def edits_of(draft: dict[str, Any], base: dict[str, Any]) -> dict[FlatKey, Any]:
    """What the user changed on the page: each entry that differs from the file as it was read
    (a value of None means the user cleared it)."""
    d, b = flatten(draft), flatten(base)
    return {k: d.get(k) for k in d.keys() | b.keys() if d.get(k) != b.get(k)}


def apply_edits(onto: dict[str, Any], edits: dict[FlatKey, Any]) -> dict[str, Any]:
    """``onto`` with only ``edits`` applied: every entry the user did not touch is kept as it is."""
    flat = flatten(onto)
    flat.update(edits)
    return unflatten(flat)


def field_key(generation: int, level: str, name: str | None, field: str) -> str:
    """The Model settings page's widget key of ``field`` (a new ``generation`` makes the fields anew)."""
    return f"ms_{generation}_{level}_{name}_{field}"


def with_typed(
    draft: dict[str, Any], shown: Mapping[str, Any], generation: int, level: str, name: str | None
) -> dict[str, Any]:
    """``draft`` with what the page's fields hold (``shown``: its widget values): a value typed in the
    run that also finds the file changed on disk, where the fields are made anew before they are read,
    would be lost. An entry that does not parse leaves the draft as it is."""
    if level != "defaults" and not name:
        return draft
    typed: dict[str, Any] = {}
    for field in EDITABLE_FIELDS:
        key = field_key(generation, level, name, field)
        if key not in shown:
            return draft  # not drawn in this generation: nothing typed
        try:
            typed[field] = (shown[key] or None) if field == "tokenizer" else parse_field(field, shown[key])
        except ConfigError:
            return draft
    return with_level(draft, level, name, typed)


def rebase(draft: dict[str, Any], old_base: dict[str, Any], new_base: dict[str, Any]) -> dict[str, Any]:
    """The draft after the file changed on disk: the new file, with the user's unsaved edits kept."""
    return apply_edits(new_base, edits_of(draft, old_base))


def describe_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """One line per entry that differs, ``models.gpt-4o.context_window: 128000 -> 64000``."""
    b, a = flatten(before), flatten(after)
    lines = []
    for key in sorted(b.keys() | a.keys()):
        if b.get(key) != a.get(key):
            name = ".".join(p for p in key if p)
            old = "not set" if b.get(key) is None else repr(b.get(key))
            new = "not set" if a.get(key) is None else repr(a.get(key))
            lines.append(f"{name}: {old} -> {new}")
    return lines


def file_signature(path: Path) -> tuple[int, int, int] | None:
    """(mtime_ns, size, inode) of the file, None when it does not exist."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


@dataclass(frozen=True)
class FileState:
    """The settings file as the page last read it.

    ``draft`` is the last *valid* content (an invalid edit keeps the previous one) and ``error``
    why the file on disk is not valid now. ``signature`` identifies what was read.
    """

    path: Path
    signature: tuple[int, int, int] | None
    draft: dict[str, Any]
    error: ConfigError | None = None

    @property
    def exists(self) -> bool:
        return self.signature is not None


def read_file(path: Path, previous: FileState | None = None) -> FileState:
    """The file's state now; unchanged files are not re-read. An invalid file keeps ``previous``'s
    last valid draft (empty when there never was one) and carries the error."""
    signature = file_signature(path)
    if previous is not None and previous.path == path and previous.signature == signature:
        return previous
    if signature is None:
        return FileState(path, None, {})
    try:
        draft = draft_of(load_settings(path))
    except ConfigError as exc:
        kept = previous.draft if previous is not None and previous.path == path else {}
        return FileState(path, signature, kept, exc)
    return FileState(path, signature, draft)


@dataclass(frozen=True)
class SaveOutcome:
    """What Save did: ``written`` the new state, or ``refused`` with the reason and what changed."""

    state: FileState
    written: bool
    problem: str | None = None
    changes: tuple[str, ...] = ()


def save_draft(draft: dict[str, Any], loaded: FileState) -> SaveOutcome:
    """Write the user's edits of ``loaded`` (the file as read), keeping every other entry.

    Refused (nothing written) when the file changed on disk since it was read (the changes are
    listed: reload, then edit again) or when the file on disk is invalid (Save would replace it).
    """
    now = read_file(loaded.path)
    if now.signature != loaded.signature:
        if now.error is not None:
            return SaveOutcome(loaded, False, f"the file changed on disk and is now invalid: {now.error}")
        changes = tuple(describe_changes(loaded.draft, now.draft)) or ("(formatting only)",)
        return SaveOutcome(
            loaded, False, "the file changed on disk since it was read; it was not overwritten", changes
        )
    if now.error is not None:
        return SaveOutcome(
            loaded, False, f"the file on disk is invalid and would be replaced: fix it first ({now.error})"
        )
    merged = apply_edits(now.draft, edits_of(draft, loaded.draft))
    checked = validate(merged, source=str(loaded.path))
    if checked.error is not None:
        return SaveOutcome(loaded, False, f"not valid: {checked.error}")
    save_settings(checked.settings, loaded.path)
    return SaveOutcome(read_file(loaded.path), True)
