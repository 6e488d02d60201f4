"""A self-calibrating token estimator: fitted to the provider's own counts, per estimator and content kind.

Where a model's tokenizer is not public (Claude: the ``anthropic`` estimator) every count before the
provider answers is an estimate. Every stored call that has both our estimate and the provider's
count is a calibration pair; consecutive calls give the provider's count of what was added between
them (hidden harness text cancels out). :func:`calibrate` fits, per estimator, a weight per content
kind (prose, code, JSON, logs, non-ASCII: tokens of a base encoding) and per character, by
the least absolute relative growth error (non-negative, by reweighted least squares), shrunk toward
the static estimator as if by :data:`SHRINK_PAIRS` pairs of each kind agreeing with it; its
error is measured held out by conversation, never by call (each conversation's pairs predicted by
a fit on the others: a file, or each root session of a file that holds several, such as an
OpenHands evaluation output's instances).
:func:`estimator_for` gives the calibrated tokenizer only when that held-out error beats the static
estimator's, else the static one. Fits are stored per user (:func:`calibration_path`).

One concept over ~400 lines: the features, the fit, the tokenizer built from a fit and the stored
fit are one model whose parts change together (a new feature changes all four).
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import os
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

from engine.errors import ConfigError
from engine.messages import Message
from engine.settings import settings_path, write_atomically
from engine.tokens import (
    ANTHROPIC_CL100K_RATIO,
    ANTHROPIC_TOKENS_PER_CHAR,
    Tokenizer,
    TokenizerInfo,
    get_encoding,
    get_tokenizer,
)

__all__ = [
    "CALIBRATED_ESTIMATORS",
    "CALIBRATION_ENV_VAR",
    "CONTENT_KINDS",
    "DEFAULT_CALIBRATION_PATH",
    "FEATURES",
    "Calibration",
    "CalibrationFit",
    "FeatureCounter",
    "GrowthPair",
    "HeldOut",
    "calibrate",
    "calibrated_tokenizer",
    "calibration_path",
    "classify_text",
    "estimator_for",
    "fit_key",
    "load_calibration",
    "model_family",
    "save_calibration",
    "static_weights",
]

ContentKind = Literal["prose", "code", "json", "logs", "non_ascii"]
CONTENT_KINDS: tuple[ContentKind, ...] = ("prose", "code", "json", "logs", "non_ascii")
#: One weight each: base-encoding tokens of text of each kind, and characters of any text.
FEATURES: tuple[str, ...] = (*(f"tokens_{k}" for k in CONTENT_KINDS), "chars")
CALIBRATION_ENV_VAR = "CTXDESK_CALIBRATION"
DEFAULT_CALIBRATION_PATH = Path("~/.config/ctxdesk/calibration.json")
#: Estimators worth calibrating (the exact encodings count text exactly already).
CALIBRATED_ESTIMATORS = ("anthropic", "chars/4", "runes*2/5")
#: Pull of the fit toward the static estimator's weights, as if it were this many growth pairs of
#: each kind agreeing with it: a kind seen in few pairs keeps about the static weight instead of a
#: fitted extreme. Each pseudo-pair holds as much of its feature as a pair that has any and is
#: weighed in the same absolute error as the data (:func:`fit_weights`).
SHRINK_PAIRS = 8.0
#: Rounds of iteratively reweighted least squares (the error measured is absolute, not squared: a
#: few calls with unlogged harness text must not pull every weight toward them).
IRLS_ROUNDS = 12
#: Relative residual below which a row's weight stops growing (keeps the reweighting finite).
IRLS_FLOOR = 0.005
#: A text's kind is decided on its first characters (a 1 MB tool result is not scanned whole).
_SAMPLE_CHARS = 4_000
#: ... and on its first lines (a log's or a file's first 40 lines say what it is).
_SAMPLE_LINES = 40

#: Log output (timestamps, levels, test verdicts, ls -l, file:line: messages): at a line's start, or anywhere in it.
_LOG_AT_START = re.compile(r"^(?:[d-][rwx-]{9}|[ \t]*at \S+:\d+|\S+:\d+(?::\d+)?:)", re.M)
_LOG_ANYWHERE = re.compile(
    r"\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d|\b(?:INFO|WARN(?:ING)?|ERROR|DEBUG|TRACE|FATAL|PASSED|FAILED|SKIPPED)\b"
)
#: Code (Claude Code's numbered file lines, keywords, indented lines ending in a symbol; braces, arrows).
_CODE_AT_START = re.compile(
    r"^(?:[ \t]*\d+\u2192|[ \t]*(?:def|class|import|from|function|const|let|var|return|if|for|while|export"
    r"|package|public|private|#include|fn|use|type|interface)\b|[ \t]{2,}\S.*[()=:][ \t]*$)",
    re.M,
)
_CODE_ANYWHERE = re.compile(r"[;{}][ \t]*$|=>", re.M)
_TEXT_LINES = re.compile(r"^[ \t]*\S", re.M)
_NEWLINE = re.compile("\n")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _lines_matching(sample: str, newlines: list[int], *patterns: re.Pattern[str]) -> int:
    """How many lines of ``sample`` one of ``patterns`` matches in (each pattern scans once, in C)."""
    return len({bisect.bisect_left(newlines, m.start()) for p in patterns for m in p.finditer(sample)})


def classify_text(text: str) -> ContentKind:
    """The content kind of a text, from its first characters: ``non_ascii`` when 15% of them are,
    ``json`` for a JSON object or array, ``code`` / ``logs`` when 30% of its first lines look like it
    (Claude Code's numbered file lines are code), else ``prose``."""
    sample = text[:_SAMPLE_CHARS]
    if not sample:
        return "prose"
    if not sample.isascii() and len(_NON_ASCII.findall(sample)) >= 0.15 * len(sample):
        return "non_ascii"
    stripped = sample.strip()
    if stripped[:1] in "{[" and (len(text) > _SAMPLE_CHARS or text.rstrip()[-1:] in "}]") and '"' in stripped:
        return "json"
    head = "\n".join(sample.split("\n", _SAMPLE_LINES)[:_SAMPLE_LINES])
    lines = len(_TEXT_LINES.findall(head))
    if lines >= 2:
        newlines = [m.start() for m in _NEWLINE.finditer(head)]
        logs = _lines_matching(head, newlines, _LOG_AT_START, _LOG_ANYWHERE)
        code = _lines_matching(head, newlines, _CODE_AT_START, _CODE_ANYWHERE)
        if max(logs, code) >= 0.3 * lines:
            return "logs" if logs > code else "code"
    return "prose"


def model_family(model: str | None) -> str:
    """The family a model's calibration is kept under: its name's leading letters, provider prefix
    dropped (``claude-sonnet-4-5`` -> ``claude``, ``meta-llama/llama-4-maverick`` -> ``llama``)."""
    name = (model or "").rsplit("/", 1)[-1].strip().lower()
    match = re.match(r"[a-z]+", name)
    return match.group(0) if match else "unknown"


def fit_key(estimator: str, model: str | None) -> str:
    """Where a fit is stored: ``ESTIMATOR:FAMILY`` (``anthropic:claude``, ``chars/4:llama``)."""
    return f"{estimator}:{model_family(model)}"


def base_encoding(estimator: str) -> str:
    """The exact encoding whose counts are the features of ``estimator``'s calibration."""
    return "cl100k_base" if estimator == "anthropic" else "o200k_base"


def static_weights(estimator: str) -> dict[str, float]:
    """The static estimator in the calibration's features (what a fit is compared with and shrunk toward)."""
    tokens, chars = {
        "anthropic": (ANTHROPIC_CL100K_RATIO, ANTHROPIC_TOKENS_PER_CHAR),
        "chars/4": (0.0, 0.25),
        "runes*2/5": (0.0, 0.4),
    }.get(estimator, (1.0, 0.0))
    return {**{f"tokens_{k}": tokens for k in CONTENT_KINDS}, "chars": chars}


class FeatureCounter:
    """Features of texts and messages for one estimator: base-encoding tokens by kind, characters.

    A message's features come from the estimator's own traversal of its blocks (a Tokenizer whose
    text count records the features and counts 0), so they cover exactly the texts the estimate
    counts; what it counts besides (message and tool-block framing, images) is the message's
    ``framing``. Cached by message content.
    """

    def __init__(self, estimator: str) -> None:
        self.estimator = estimator
        self._encoding = get_encoding(base_encoding(estimator))
        self._static = get_tokenizer(estimator)
        self._recorded = np.zeros(len(FEATURES))
        self._recorder = Tokenizer(
            TokenizerInfo(f"{estimator}:features", False, "records calibration features",
                          tool_block_tokens=self._static.info.tool_block_tokens,
                          ascii_structured_arguments=self._static.info.ascii_structured_arguments),
            self._record,
        )  # fmt: skip
        self._messages: dict[str, tuple[int, np.ndarray]] = {}

    def text(self, text: str) -> np.ndarray:
        """The features of one text."""
        vector = np.zeros(len(FEATURES))
        if text:
            vector[CONTENT_KINDS.index(classify_text(text))] = len(self._encoding.encode_ordinary(text))
            vector[-1] = len(text)
        return vector

    def _record(self, text: str) -> int:
        self._recorded += self.text(text)
        return 0

    def message(self, message: Message) -> tuple[int, np.ndarray]:
        """(framing tokens, features) of one message as the estimator counts it."""
        key = message.content_hash
        cached = self._messages.get(key)
        if cached is None:
            self._recorded = np.zeros(len(FEATURES))
            self._recorder.clear_cache()  # a repeated text must be recorded again
            framing = self._recorder.count_message(message)
            cached = self._messages[key] = (framing, self._recorded)
        return cached

    def messages(self, messages: Iterable[Message]) -> np.ndarray:
        total = np.zeros(len(FEATURES))
        for message in messages:
            total = total + self.message(message)[1]
        return total


@dataclass(frozen=True)
class GrowthPair:
    """What one call added over the call before it, by our estimate and by the provider.

    ``features`` are those of the messages added; ``static`` is the growth of our recorded
    estimate; ``provider`` the growth of the provider's count (> 0). ``group`` is what held-out
    error is measured by (the source file, or the root session).
    """

    group: str
    features: tuple[float, ...]
    static: float
    provider: int


class HeldOut(BaseModel):
    """Mean absolute relative growth error on pairs predicted by a fit that did not see their group."""

    model_config = ConfigDict(frozen=True)

    groups: int = Field(description="Groups (files) held out one at a time.")
    pairs: int
    calibrated_pct: float = Field(description="Calibrated estimator, mean absolute % error.")
    static_pct: float = Field(description="Static estimator on the same pairs, mean absolute % error.")
    by_group: dict[str, tuple[int, float, float]] = Field(
        default_factory=dict, description="group -> (pairs, calibrated %, static %)."
    )


class CalibrationFit(BaseModel):
    """One estimator's calibration: its weights, the data it saw and its held-out error."""

    model_config = ConfigDict(frozen=True)

    estimator: str = Field(description="Tokenizer id calibrated (``anthropic``, ``chars/4``, ...).")
    family: str = Field(description="Model family the pairs came from (``claude``, ``llama``, ...).")
    base_encoding: str
    weights: dict[str, float] = Field(description="Feature -> tokens per unit (FEATURES).")
    pairs: int
    groups: int
    held_out: HeldOut | None = Field(description="None with fewer than two groups: nothing to hold out.")
    fitted_utc: str

    @property
    def usable(self) -> bool:
        """Better than the static estimator on held-out pairs (else the static one is used)."""
        return self.held_out is not None and self.held_out.calibrated_pct < self.held_out.static_pct


class Calibration(BaseModel):
    """The calibration file: one fit per estimator and model family (:func:`fit_key`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    fits: dict[str, CalibrationFit] = Field(default_factory=dict)

    def with_fit(self, fit: CalibrationFit) -> Calibration:
        return self.model_copy(update={"fits": {**self.fits, f"{fit.estimator}:{fit.family}": fit}})


# -- fitting -------------------------------------------------------------------------------------


def predict(pair: GrowthPair, weights: dict[str, float], estimator: str) -> float:
    """The calibrated growth: the recorded estimate's growth, its text part re-weighted."""
    static = static_weights(estimator)
    return pair.static + sum(
        (weights[f] - static[f]) * x for f, x in zip(FEATURES, pair.features, strict=True)
    )


def fit_weights(pairs: Sequence[GrowthPair], estimator: str) -> dict[str, float]:
    """Non-negative weights minimising the relative growth error, shrunk toward the static ones.

    The target of a pair is the provider's growth less what the estimate grew by besides its text
    (framing); rows are divided by the provider's growth (relative error, as the error is
    measured). The error minimised is absolute (iteratively reweighted least squares), and the
    prior is :data:`SHRINK_PAIRS` pseudo-pairs per feature in that same error: each holds as much of
    its feature as the pairs that have any, and is reweighted by its own residual as a data row is
    (a prior left unweighted beside rows weighted by 1 / residual pulled ~20x less than it said).
    Exact non-negative least squares by trying every active set (six features: 64 small solves).
    """
    static = np.array([static_weights(estimator)[f] for f in FEATURES])
    if not pairs:
        return dict(zip(FEATURES, static.tolist(), strict=True))
    x = np.array([p.features for p in pairs], dtype=float)
    provider = np.array([p.provider for p in pairs], dtype=float)
    rest = np.array([p.static for p in pairs], dtype=float) - x @ static
    a = x / provider[:, None]
    y = (provider - rest) / provider
    having = (a != 0).sum(axis=0)
    # of a feature, in a pair that has it; a feature no pair has: a unit row that keeps it static
    typical = np.where(having > 0, np.abs(a).sum(axis=0) / np.maximum(having, 1), 1.0)
    w = static
    for _ in range(IRLS_ROUNDS):  # least absolute error: every row weighted by 1 / its residual
        row = _irls_weights(a @ w - y)
        prior = np.diag(np.sqrt(SHRINK_PAIRS) * typical * _irls_weights(typical * (w - static)))
        w = _nnls(np.vstack([a * row[:, None], prior]), np.concatenate([y * row, prior @ static]))
    return {f: round(float(v), 6) for f, v in zip(FEATURES, w, strict=True)}


def _irls_weights(residuals: np.ndarray) -> np.ndarray:
    """Row weights that make a least-squares solve minimise the absolute residuals (square roots of
    1 / |residual|, floored at :data:`IRLS_FLOOR`)."""
    return 1 / np.sqrt(np.maximum(np.abs(residuals), IRLS_FLOOR))


def _nnls(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Exact non-negative least squares of a few columns: the best of every active set."""
    best, best_residual = np.zeros(a.shape[1]), math.inf
    for size in range(a.shape[1], 0, -1):
        for active in itertools.combinations(range(a.shape[1]), size):
            w = np.zeros(a.shape[1])
            w[list(active)] = np.linalg.lstsq(a[:, active], y, rcond=None)[0]
            if (w >= 0).all():
                residual = float(np.sum((a @ w - y) ** 2))
                if residual < best_residual:
                    best, best_residual = w, residual
    return best


def mean_abs_pct(pairs: Sequence[GrowthPair], estimate: Callable[[GrowthPair], float]) -> float:
    return 100 * statistics.fmean(abs(estimate(p) - p.provider) / p.provider for p in pairs)


def held_out_error(pairs: Sequence[GrowthPair], estimator: str) -> HeldOut | None:
    """Each group's pairs predicted by a fit on the other groups; None with fewer than two groups."""
    groups = sorted({p.group for p in pairs})
    if len(groups) < 2:
        return None
    by_group: dict[str, tuple[int, float, float]] = {}
    predicted: list[tuple[GrowthPair, float]] = []
    for group in groups:
        weights = fit_weights([p for p in pairs if p.group != group], estimator)
        held = [p for p in pairs if p.group == group]
        predicted += [(p, predict(p, weights, estimator)) for p in held]
        by_group[group] = (
            len(held),
            round(mean_abs_pct(held, lambda p: predict(p, weights, estimator)), 2),  # noqa: B023 - used at once
            round(mean_abs_pct(held, lambda p: p.static), 2),
        )
    return HeldOut(
        groups=len(groups),
        pairs=len(predicted),
        calibrated_pct=round(
            100 * statistics.fmean(abs(e - p.provider) / p.provider for p, e in predicted), 2
        ),
        static_pct=round(mean_abs_pct([p for p, _ in predicted], lambda p: p.static), 2),
        by_group=by_group,
    )


def calibrate(pairs: Sequence[GrowthPair], estimator: str, family: str) -> CalibrationFit:
    """Fit ``estimator`` for ``family`` on every pair; its error measured held out by group."""
    return CalibrationFit(
        estimator=estimator,
        family=family,
        base_encoding=base_encoding(estimator),
        weights=fit_weights(pairs, estimator),
        pairs=len(pairs),
        groups=len({p.group for p in pairs}),
        held_out=held_out_error(pairs, estimator),
        fitted_utc=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )


# -- using a fit ---------------------------------------------------------------------------------


def calibrated_tokenizer(fit: CalibrationFit) -> Tokenizer:
    """A tokenizer counting text with the fit's weights (framing as the static estimator's).

    Its id stays the estimator's (stored sessions name the estimator; the description says it
    was calibrated), and it is never exact."""
    features = FeatureCounter(fit.estimator)
    weights = np.array([fit.weights[f] for f in FEATURES])
    static = get_tokenizer(fit.estimator)

    def count(text: str) -> int:
        return math.ceil(float(features.text(text) @ weights))

    info = TokenizerInfo(
        fit.estimator,
        False,
        f"{static.info.description}; calibrated on {fit.pairs} calls' growth ({fit.fitted_utc})",
        tool_block_tokens=static.info.tool_block_tokens,
        ascii_structured_arguments=static.info.ascii_structured_arguments,
    )
    return Tokenizer(info, count)


_tokenizers: dict[tuple[str, str], Tokenizer] = {}


def estimator_for(
    tokenizer_id: str, model: str | None = None, calibration: Calibration | None = None
) -> Tokenizer:
    """The tokenizer to count ``model``'s prompts with before the provider answers: the calibrated
    one when a stored fit for the estimator and the model's family beats the static estimator held
    out, else ``get_tokenizer(tokenizer_id)``. ``calibration`` None reads the user's file
    (:func:`load_calibration`; a bad file raises :class:`ConfigError`)."""
    static = get_tokenizer(tokenizer_id)
    if static.id not in CALIBRATED_ESTIMATORS:
        return static
    book = calibration if calibration is not None else load_calibration()
    fit = book.fits.get(fit_key(static.id, model))
    if fit is None or not fit.usable:
        return static
    key = (fit_key(static.id, model), fit.fitted_utc)
    if key not in _tokenizers:
        _tokenizers[key] = calibrated_tokenizer(fit)
    return _tokenizers[key]


# -- the file ------------------------------------------------------------------------------------


def calibration_path(path: str | os.PathLike[str] | None = None) -> Path:
    """``path``, else $CTXDESK_CALIBRATION, else ``calibration.json`` beside the settings file in
    use, else ~/.config/ctxdesk/calibration.json."""
    if path is not None:
        return Path(path).expanduser()
    if os.environ.get(CALIBRATION_ENV_VAR):
        return Path(os.environ[CALIBRATION_ENV_VAR]).expanduser()
    settings = settings_path()
    return (
        settings.parent / "calibration.json"
        if settings is not None
        else DEFAULT_CALIBRATION_PATH.expanduser()
    )


def load_calibration(path: str | os.PathLike[str] | None = None) -> Calibration:
    """The stored calibration (empty when there is no file); :class:`ConfigError` for a bad one."""
    target = calibration_path(path)
    try:
        text = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Calibration()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the calibration file: {exc}", source=str(target)) from exc
    try:
        return Calibration.model_validate(json.loads(text))
    except (json.JSONDecodeError, PydanticValidationError) as exc:
        raise ConfigError(f"invalid calibration file: {exc}".splitlines()[0], source=str(target)) from exc


def save_calibration(calibration: Calibration, path: str | os.PathLike[str] | None = None) -> Path:
    """Write the calibration atomically (temp file, then replace): a failed write keeps the old file."""
    target = calibration_path(path)
    text = calibration.model_dump_json(indent=1) + "\n"
    try:
        write_atomically(target, text)
    except OSError as exc:
        raise ConfigError(
            f"cannot write the calibration file: {exc.strerror or exc}", source=str(target)
        ) from exc
    _tokenizers.clear()
    return target
