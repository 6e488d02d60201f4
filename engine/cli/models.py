"""``ctxdesk models``: resolved window settings and where each value came from."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

from engine.cli.common import EXIT_OK

if TYPE_CHECKING:
    from engine.calibration import Calibration
    from engine.settings import Settings
from engine.textfmt import format_table

MODEL_FIELDS = (
    "context_window", "max_output_tokens", "buffer_tokens", "context_budget", "tokenizer",
    "note_threshold", "compact_threshold", "hard_block_threshold",
    "result_offload_threshold", "tool_deferral_threshold", "tool_response_max_bytes",
)  # fmt: skip


def cmd_models(args: argparse.Namespace, out: TextIO) -> int:
    from engine.settings import load_settings, resolve_model_settings

    if args.calibrate is not None:
        from engine.calibration_pairs import refit_calibration
        from engine.cli.common import database_or_default

        sources = args.calibrate or [database_or_default(None, args.settings)]  # every stored call
        print(calibration_text(refit_calibration(sources)), file=out)
        return EXIT_OK
    if args.calibration:
        from engine.calibration import load_calibration

        print(calibration_text(load_calibration()), file=out)
        return EXIT_OK
    settings = load_settings(args.settings)
    if args.name is None:
        from engine.model_table import load_model_table

        table = load_model_table(settings.model_table_path())
        names = [n for n in settings.models] or [
            "claude-sonnet-4-6", "claude-opus-4-7", "claude-haiku-4-5", "gpt-4o", "gpt-4.1", "gpt-5",
        ]  # fmt: skip
        rows = []
        for name in names:
            r = resolve_model_settings(name, settings=settings, table=table)
            rows.append((name, r.provider or "", r.context_window, r.max_output_tokens, r.limit.tokens,
                         r.compact_tokens, r.sources["context_window"]))  # fmt: skip
        print(
            format_table(
                ("model", "provider", "window", "max output", "limit", "compact at", "window from"), rows
            ),
            file=out,
        )
        print(f"\n{len(table):,} models known ({table.source}); `ctxdesk models NAME` for one", file=out)
        return EXIT_OK
    resolved = resolve_model_settings(args.name, provider=args.provider, settings=settings)
    info = resolved.model_info
    print(f"model {resolved.model}  provider {resolved.provider or '-'}"
          + (f"  (table entry {info.name})" if info else "  (not in the model table)"), file=out)  # fmt: skip
    rows = [(field, getattr(resolved, field), resolved.sources.get(field, "")) for field in MODEL_FIELDS]
    print(format_table(("setting", "value", "from"), rows), file=out)
    limit = resolved.limit
    derived = [
        ("window less reserve and buffer", limit.uncapped),
        ("limit" + (" (capped by context_budget)" if limit.tokens < limit.uncapped else ""), limit.tokens),
        ("note at", resolved.note_tokens), ("compact at", resolved.compact_tokens),
        ("hard block at", resolved.hard_block_tokens), ("tool deferral above", resolved.tool_deferral_tokens),
    ]  # fmt: skip
    print("\n" + format_table(("derived", "tokens"), derived), file=out)
    print("\n" + imported_limit_text(args.name, settings, args.provider), file=out)
    from engine.calibration import estimator_for
    from engine.errors import ConfigError
    from engine.tokens import get_tokenizer

    try:
        counter, problem = estimator_for(resolved.tokenizer, resolved.model), ""
    except ConfigError as exc:  # as the session manager does: the static estimator, and why
        counter, problem = get_tokenizer(resolved.tokenizer), f" (the calibration is not used: {exc})"
    print(f"counted before the provider answers with: {counter.info.description}{problem}", file=out)
    return EXIT_OK


def imported_limit_text(model: str, settings: Settings, provider: str | None) -> str:
    """What an imported session of ``model`` is measured against, and why (``limit_for_model``)."""
    from engine.settings import IMPORTED_LIMIT_PRECEDENCE, limit_for_model

    limit = limit_for_model(model, settings=settings, provider=provider)
    order = " > ".join(PRECEDENCE_WORDS[s] for s in IMPORTED_LIMIT_PRECEDENCE)
    said = (
        f"limit {limit.tokens:,} tokens (window {limit.window:,} from the {PRECEDENCE_WORDS[limit.source]})"
        if limit is not None
        else "limit not known unless the file records its window (never the built-in default)"
    )
    return f"imported sessions of this model: {said}\n  the window is the first found of: {order}"


#: ``Limit.source`` of an imported session's window, in words.
PRECEDENCE_WORDS = {
    "settings": "your [models]/[providers] entry",
    "file": "file's own window",
    "model table": "model table",
    "defaults": "your [defaults]",
}


def calibration_text(calibration: Calibration) -> str:
    """The stored calibration: per estimator and model family, its data, weights and held-out error."""
    from engine.calibration import FEATURES, calibration_path, static_weights

    lines = [f"calibration file: {calibration_path()}"]
    if not calibration.fits:
        return "\n".join(
            [*lines, "no calibration yet: `ctxdesk models --calibrate DB_OR_TRANSCRIPTS...` fits one"]
        )
    for key, fit in sorted(calibration.fits.items()):
        held = fit.held_out
        verdict = (
            "used: better than the static estimator held out"
            if fit.usable
            else "not used: " + ("no second conversation to hold out" if held is None else "the static estimator is as good held out")
        )  # fmt: skip
        lines += [
            "",
            f"{key}  ({fit.pairs:,} growth pairs from {fit.groups} conversation(s), fitted {fit.fitted_utc}): {verdict}",
        ]
        static = static_weights(fit.estimator)
        rows = [(f, f"{fit.weights[f]:.4f}", f"{static[f]:.4f}") for f in FEATURES]
        lines.append(format_table(("feature", "calibrated", "static"), rows))
        if held is not None:
            lines.append(
                f"held out by conversation ({held.pairs:,} pairs): mean absolute growth error "
                f"{held.calibrated_pct:.2f}% calibrated, {held.static_pct:.2f}% static"
            )
            rows = [(g, n, f"{c:.2f}%", f"{st:.2f}%") for g, (n, c, st) in sorted(held.by_group.items())]
            lines.append(format_table(("held-out conversation", "pairs", "calibrated", "static"), rows))
    return "\n".join(lines)


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("models", help="resolved window settings and where each value came from")
    p.add_argument("name", nargs="?", metavar="NAME")
    p.add_argument("--provider", default=None, help="provider id when the name does not say")
    p.add_argument(
        "--calibration",
        action="store_true",
        help="show the token estimator's calibration ($CTXDESK_CALIBRATION, else beside the settings file)",
    )
    p.add_argument(
        "--calibrate", nargs="*", metavar="SOURCE", default=None,
        help="fit the calibration to the provider's counts in these session databases or transcripts (none: the "
        "default database), and store it",
    )  # fmt: skip
    p.set_defaults(run=cmd_models)
