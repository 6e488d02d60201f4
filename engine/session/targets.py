"""The models a session sends to (its client and fallbacks) and their resolved settings, kept
current under live settings reload: a rejected edit keeps the previous settings in force."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.calibration import Calibration, estimator_for
from engine.clients import ModelClient
from engine.deferral import deferral_budget
from engine.errors import ConfigError, ValidationError
from engine.events import ContextEvent, degraded_event
from engine.guard import GuardTarget
from engine.session.event_building import settings_snapshot
from engine.settings import (
    ResolvedModelSettings,
    Settings,
    SettingsWatcher,
    load_settings,
    resolve_model_settings,
)
from engine.tokens import Tokenizer, get_tokenizer

logger = logging.getLogger(__name__)


def session_estimator(
    settings: ResolvedModelSettings, calibration: Calibration | None = None
) -> tuple[Tokenizer, ContextEvent | None]:
    """The tokenizer a session counts with before the provider answers (the calibrated estimator
    when a usable calibration exists, ``engine.calibration.estimator_for``; ``calibration`` None:
    the user's file), and the ``degraded`` event to record when the calibration file could not be
    read (the static estimator is used)."""
    try:
        return estimator_for(settings.tokenizer, settings.model, calibration), None
    except ConfigError as exc:
        return get_tokenizer(settings.tokenizer), degraded_event(
            "calibration", exc, fallback="static estimator"
        )


SettingsSource = Settings | SettingsWatcher | str | os.PathLike[str] | None


@dataclass(frozen=True)
class Target:
    """One model the session may send to, with its resolved settings."""

    client: ModelClient
    settings: ResolvedModelSettings

    @property
    def guard_target(self) -> GuardTarget:
        return GuardTarget.from_settings(self.settings)

    @property
    def provider(self) -> str | None:
        return self.settings.provider or self.client.provider


class Targets:
    """The primary client and its fallbacks, resolved against the settings in force.

    ``settings`` is a :class:`Settings`, a :class:`SettingsWatcher`, or a TOML path (watched and
    reloaded live, the watcher stopped by :meth:`close`); None reads the default settings once.
    """

    def __init__(self, clients: Sequence[ModelClient], settings: SettingsSource) -> None:
        self._clients = tuple(clients)
        self._own_watcher = False
        if settings is None:
            self._source: Settings | SettingsWatcher = load_settings()
        elif isinstance(settings, Settings | SettingsWatcher):
            self._source = settings
        else:
            self._own_watcher = True
            self._source = SettingsWatcher(settings)
        self._seen: Settings | None = None
        self.all: tuple[Target, ...] = ()
        try:
            self.refresh(initial=True)
        except BaseException:
            self.close()
            raise

    @property
    def primary(self) -> Target:
        return self.all[0]

    def refresh(self, *, initial: bool = False) -> tuple[bool, list[ContextEvent]]:
        """Re-resolve every target when the settings object changed (live reload):
        (changed, events); a rejected edit is a ``degraded`` event, not an error."""
        current = self._source.current if isinstance(self._source, SettingsWatcher) else self._source
        if current is self._seen:
            return False, []
        try:
            targets = tuple(
                Target(c, resolve_model_settings(c.model, provider=c.provider, settings=current))
                for c in self._clients
            )
        except (ConfigError, ValidationError) as exc:
            if initial:
                raise
            logger.warning("new settings rejected for this session, previous ones stay in force: %s", exc)
            self._seen = current
            return False, [degraded_event("settings", exc, fallback="previous_settings")]
        self._seen, self.all = current, targets
        return True, []

    def settings_json(self) -> dict[str, Any]:
        """What ``sessions.settings_json`` stores: the primary's settings, and each fallback's."""
        primary, *fallbacks = self.all
        data = settings_snapshot(primary.settings)
        if fallbacks:
            data["fallbacks"] = [settings_snapshot(t.settings) for t in fallbacks]
        return data

    def deferral_budget(self) -> int:
        s = self.primary.settings
        return deferral_budget(s.limit.tokens, s.tool_deferral_threshold)

    def usable(self, guard_targets: Sequence[GuardTarget]) -> list[Target]:
        """The targets the guard kept, in its order."""
        by_model = {(t.settings.model, t.settings.provider): t for t in self.all}
        return [by_model[(g.model, g.provider)] for g in guard_targets]

    def close(self) -> None:
        """Stop the settings watcher started here."""
        if self._own_watcher and isinstance(self._source, SettingsWatcher):
            self._source.stop()
