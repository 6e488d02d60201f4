"""What changed in GitHub Copilot CLI's files before 1.0.102 (1.0.34-1.0.92 run offline against the
scripted model server, scripts/real_agents_copilot.py): no ``session.usage_record`` (each run's
totals by model, in its ``session.shutdown``, are all they keep of the provider's counts), the model
named only in ``session.model_change``, and a reply's tool results sent in the order the tools
completed, not the order the model asked for them."""

from __future__ import annotations

from typing import Any

from engine.agent_versions import release
from engine.importers.parsing.parsed import ParsedSession
from engine.importers.parsing.readers import as_count

#: The first release that records each call's usage and sends results in the order of the calls.
CALLS_COUNTED_FROM = (1, 0, 102)


def results_by_completion(version: object) -> bool:
    """Whether Copilot CLI ``version`` sent a reply's tool results in the order they completed."""
    found = release(version)
    return found is not None and found < CALLS_COUNTED_FROM


def chosen_model(start: dict[str, Any], events: list[tuple[int, dict[str, Any]]]) -> str | None:
    """The model chosen at the start (``session.start``), else the first one switched to (before
    1.0.102 it is named only in ``session.model_change``)."""
    if isinstance(start.get("selectedModel"), str) and start["selectedModel"]:
        return str(start["selectedModel"])
    changes = (
        (e.get("data") or {}).get("newModel") for _, e in events if e.get("type") == "session.model_change"
    )
    return next((str(m) for m in changes if isinstance(m, str) and m), None)


def keep_run_totals(session: ParsedSession, events: list[tuple[int, dict[str, Any]]]) -> None:
    """A file of a Copilot CLI without ``session.usage_record`` (before 1.0.102) counts no call:
    each run's totals by model (``session.shutdown``'s ``modelMetrics``) are all it keeps, kept in
    the metadata (``provider_run_totals``) and said in a note."""
    runs = []
    shutdowns = (e.get("data") or {} for _, e in events if e.get("type") == "session.shutdown")
    for run, data in enumerate(shutdowns):
        metrics = data.get("modelMetrics")
        for model, metric in (metrics if isinstance(metrics, dict) else {}).items():
            usage = metric.get("usage") if isinstance(metric, dict) else None
            if isinstance(usage, dict):
                count = (metric.get("requests") or {}).get("count")
                runs.append(
                    {
                        "run": run,
                        "model": str(model),
                        "requests": as_count(count),
                        **{k: as_count(usage.get(k)) for k in _TOTALS},
                    }
                )
    version = next(
        (str(e["data"].get("copilotVersion")) for _, e in events if e.get("type") == "session.start"), "?"
    )
    said = "; ".join(
        f"{r['model']}: {r['requests']} calls, {r['inputTokens']:,} prompt tokens ({r['cacheReadTokens']:,} of them "
        f"cache reads), {r['outputTokens']:,} output"
        for r in runs
    )
    session.notes.append(
        f"Copilot CLI {version} keeps no usage per call (no session.usage_record): the calls are counted by "
        f"ctxdesk alone" + (f"; the runs' own totals: {said}" if runs else "")
    )
    if runs:
        session.metadata["provider_run_totals"] = runs


#: The totals a ``session.shutdown`` keeps per model (``modelMetrics.<model>.usage``).
_TOTALS = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens")


__all__ = ["CALLS_COUNTED_FROM", "chosen_model", "keep_run_totals", "results_by_completion"]
