"""Build engine/data/models.json from the public model tables in ../shared/models.

    python scripts/build_model_table.py [--shared DIR] [--out PATH] [--check]

Reads every ``litellm-<version>_model_prices_and_context_window_backup.json`` (newest first) and
``models-dev_resolved_from_toml.json``; keeps the text chat models of the providers in
``PROVIDERS``; merges them by the rules in ``RULES``, which are also written into the output.
``--check`` exits 1 when the committed table differs from what the inputs give.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.model_table import LITELLM_TIER, LITELLM_TIER_FIELDS, match_model_name  # noqa: E402
from engine.settings import DEFAULT_BUFFER_TOKENS  # noqa: E402

DEFAULT_SHARED = Path(os.environ.get("CTXDESK_SHARED_DIR", ROOT.parent / "shared")) / "models"
DEFAULT_OUT = ROOT / "engine" / "data" / "models.json"
MODELS_DEV_FILE = "models-dev_resolved_from_toml.json"
LITELLM_FILE = re.compile(r"litellm-(\d+(?:\.\d+)*)_model_prices_and_context_window(?:_backup)?\.json")

#: models.dev provider id -> LiteLLM provider id (the ids settings files use).
PROVIDERS = {
    "anthropic": "anthropic",
    "openai": "openai",
    "google": "gemini",
    "mistral": "mistral",
    "deepseek": "deepseek",
    "llama": "meta_llama",
    "alibaba": "dashscope",
}
#: models.dev's router: its models are priced as it bills them; a name no provider above lists (a session
#: routed through OpenRouter, e.g. ``meta-llama/llama-4-maverick``) is taken from it, a listed one never is.
FALLBACK_PROVIDER = "openrouter"
LITELLM_MODES = {"chat", "responses"}
#: Anthropic prices a 1-hour cache write at twice the base input price (a 5-minute write at 1.25x).
ANTHROPIC_1H_WRITE_MULTIPLIER = 2
#: Names of models that do not take and give text chat: embeddings, speech, images, moderation.
NOT_CHAT = re.compile(
    r"embed|tts|transcri|whisper|image|imagen|realtime|audio|ocr|moderation|guard|dall-e|sora|"
    r"computer-use|native-audio|live-|lyria|^ft:"
)
RULES = [
    "text chat models of anthropic, openai, gemini, mistral, deepseek, meta_llama, dashscope",
    "names lower case, without provider prefix",
    "context_window and max_output_tokens are taken as a pair from the first source whose pair "
    f"leaves room for a prompt (max_output + {DEFAULT_BUFFER_TOKENS} < window): models.dev "
    "(limit.context is the total window), then LiteLLM files newest first (max_input_tokens); "
    "if none does, the first source's window is kept and max_output_tokens left unset",
    "costs per token from LiteLLM newest first, else models.dev per million / 1e6",
    f"a model none of those providers lists (and no name of theirs answers by the lookup's rules) is taken "
    f"from models.dev's {FALLBACK_PROVIDER}: the router's own price and window, its id without the vendor prefix",
    "cache_write_cost_per_token is the 5-minute cache write; cache_write_1h_cost_per_token is LiteLLM's "
    "cache_creation_input_token_cost_above_1hr from the same source as the other costs; where that source "
    f"has none, anthropic models get {ANTHROPIC_1H_WRITE_MULTIPLIER} x input_cost_per_token "
    "(Anthropic's published 1-hour write price; the 5-minute write is 1.25 x input)",
    "long_context_threshold and the *_above_threshold prices: the lowest long-context tier of the same source "
    "(LiteLLM *_above_<N>k_tokens, models.dev cost.tiers); a call whose prompt exceeds the threshold is priced "
    "at them whole",
]


def per_token(per_million: Any) -> float | None:
    """USD per million tokens -> USD per token, without binary rounding noise."""
    if per_million is None:
        return None
    return float(Decimal(str(per_million)) / Decimal(1_000_000))


def litellm_files(shared: Path) -> list[tuple[str, Path]]:
    found = [(m.group(1), p) for p in shared.iterdir() if (m := LITELLM_FILE.fullmatch(p.name))]
    found.sort(key=lambda item: tuple(int(part) for part in item[0].split(".")), reverse=True)
    return [(f"litellm-{version}", path) for version, path in found]


def litellm_candidates(label: str, data: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, fields) of the wanted LiteLLM entries; provider-routed keys before bare ones."""
    wanted = set(PROVIDERS.values())
    keys = sorted(data, key=lambda k: (not k.startswith(f"{data[k].get('litellm_provider')}/"), k))
    for key in keys:
        raw = data[key]
        if not isinstance(raw, dict) or raw.get("litellm_provider") not in wanted:
            continue
        if raw.get("mode") not in LITELLM_MODES or not isinstance(raw.get("max_input_tokens"), int):
            continue
        name = (key.split("/", 1)[1] if "/" in key else key).lower()
        if "/" in name or NOT_CHAT.search(name):
            continue
        output = raw.get("max_output_tokens") or raw.get("max_tokens")
        yield (
            name,
            {
                "provider": raw["litellm_provider"],
                "limits": (raw["max_input_tokens"], output if isinstance(output, int) else None),
                "costs": {
                    "input_cost_per_token": raw.get("input_cost_per_token"),
                    "output_cost_per_token": raw.get("output_cost_per_token"),
                    "cache_read_cost_per_token": raw.get("cache_read_input_token_cost"),
                    "cache_write_cost_per_token": raw.get("cache_creation_input_token_cost"),
                    "cache_write_1h_cost_per_token": raw.get("cache_creation_input_token_cost_above_1hr"),
                    **tier_costs(raw),
                },
                "source": label,
            },
        )


def tier_costs(raw: dict[str, Any]) -> dict[str, Any]:
    """LiteLLM's lowest long-context tier (``*_above_<N>k_tokens``), or every field None."""
    found = sorted(int(m.group(1)) for k in raw if (m := LITELLM_TIER.fullmatch(k)))
    if not found:
        return {"long_context_threshold": None, **dict.fromkeys(LITELLM_TIER_FIELDS)}
    n = found[0]
    return {
        "long_context_threshold": n * 1000,
        **{field: raw.get(f"{stem}_above_{n}k_tokens") for field, stem in LITELLM_TIER_FIELDS.items()},
    }


def models_dev_tier(cost: dict[str, Any]) -> dict[str, Any]:
    """models.dev's first ``tiers`` entry (prices per million above ``tier.size`` tokens)."""
    tiers = [t for t in cost.get("tiers") or [] if isinstance((t.get("tier") or {}).get("size"), int)]
    if not tiers:
        return {"long_context_threshold": None, **dict.fromkeys(LITELLM_TIER_FIELDS)}
    t = min(tiers, key=lambda t: t["tier"]["size"])
    return {
        "long_context_threshold": t["tier"]["size"],
        "input_cost_per_token_above_threshold": per_token(t.get("input")),
        "output_cost_per_token_above_threshold": per_token(t.get("output")),
        "cache_read_cost_per_token_above_threshold": per_token(t.get("cache_read")),
        "cache_write_cost_per_token_above_threshold": per_token(t.get("cache_write")),
    }


def models_dev_candidates(
    data: dict[str, Any], providers: dict[str, str] = PROVIDERS
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, fields) of models.dev's chat models of ``providers`` (models.dev id -> our provider id); a
    routed id (``vendor/model``) is named without its vendor only for the fallback router."""
    for provider_id, provider in sorted(providers.items()):
        for model_id, raw in sorted(data.get(provider_id, {}).get("models", {}).items()):
            name = model_id.lower()
            if provider_id == FALLBACK_PROVIDER:
                if name.startswith(("~", f"{FALLBACK_PROVIDER}/")):
                    continue  # a moving alias (~vendor/x-latest) or the router's own routing (auto, free)
                name = name.rsplit("/", 1)[-1]
                if not any(c.isdigit() or c == "-" for c in name):
                    continue  # a bare word (switchpoint/router, perplexity/sonar) is no name to match others by
            limit, cost = raw.get("limit") or {}, raw.get("cost") or {}
            modalities = raw.get("modalities") or {}
            if "/" in name or NOT_CHAT.search(name) or not isinstance(limit.get("context"), int):
                continue
            if "text" not in modalities.get("input", ["text"]) or "text" not in modalities.get(
                "output", ["text"]
            ):
                continue
            yield (
                name,
                {
                    "provider": provider,
                    "limits": (limit["context"], limit.get("output")),
                    "costs": {
                        "input_cost_per_token": per_token(cost.get("input")),
                        "output_cost_per_token": per_token(cost.get("output")),
                        "cache_read_cost_per_token": per_token(cost.get("cache_read")),
                        "cache_write_cost_per_token": per_token(cost.get("cache_write")),
                        "cache_write_1h_cost_per_token": None,  # models.dev lists one cache_write price
                        **models_dev_tier(cost),
                    },
                    "source": "models.dev",
                },
            )


def has_room(limits: tuple[int, int | None]) -> bool:
    window, output = limits
    return window > 0 and output is not None and output > 0 and output + DEFAULT_BUFFER_TOKENS < window


def merge(candidates: list[dict[str, Any]]) -> dict[str, Any]:
    """One table entry from a model's candidates, in source preference order."""
    limits_from = next((c for c in candidates if has_room(c["limits"])), None)
    if limits_from is not None:
        window, output = limits_from["limits"]
    else:
        limits_from = candidates[0]
        window, output = limits_from["limits"][0], None
    entry: dict[str, Any] = {
        "provider": limits_from["provider"],
        "context_window": window,
        "max_output_tokens": output,
    }
    priced = [c for c in candidates if c["source"] != "models.dev"] + [
        c for c in candidates if c["source"] == "models.dev"
    ]
    costs_from = next((c for c in priced if c["costs"]["input_cost_per_token"] is not None), None)
    entry.update(costs_from["costs"] if costs_from else dict.fromkeys(candidates[0]["costs"]))
    if (
        entry["provider"] == "anthropic"
        and entry["cache_write_1h_cost_per_token"] is None
        and entry["input_cost_per_token"] is not None
    ):
        price = Decimal(str(entry["input_cost_per_token"])) * ANTHROPIC_1H_WRITE_MULTIPLIER
        entry["cache_write_1h_cost_per_token"] = float(price)
    entry["source"] = limits_from["source"]
    entry["cost_source"] = costs_from["source"] if costs_from else None
    return {k: v for k, v in entry.items() if v is not None}


def build(shared: Path) -> dict[str, Any]:
    inputs = [("models.dev", shared / MODELS_DEV_FILE), *litellm_files(shared)]
    by_name: dict[str, list[dict[str, Any]]] = {}
    for label, path in inputs:
        data = json.loads(path.read_text(encoding="utf-8"))
        found = models_dev_candidates(data) if label == "models.dev" else litellm_candidates(label, data)
        seen: set[str] = set()
        for name, candidate in found:
            if name not in seen:  # one candidate per name and source: the first, provider-routed key
                seen.add(name)
                by_name.setdefault(name, []).append(candidate)
    routed = json.loads(inputs[0][1].read_text(encoding="utf-8"))
    listed = set(by_name)
    for name, candidate in models_dev_candidates(routed, {FALLBACK_PROVIDER: FALLBACK_PROVIDER}):
        # only a name the providers' entries do not already answer (exactly, dated, dotted or as a variant),
        # so no lookup that finds a provider's own entry today finds the router's; the router's first id wins
        if name not in by_name and match_model_name(name, listed) is None:
            by_name[name] = [candidate]
    models = {name: merge(candidates) for name, candidates in sorted(by_name.items())}
    about = {
        "generated_by": "scripts/build_model_table.py",
        "inputs": [
            {"source": label, "file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
            for label, path in inputs
        ],
        "rules": RULES,
        "count": len(models),
    }
    return {"_about": about, "models": models}


def render(table: dict[str, Any]) -> str:
    return json.dumps(table, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=DEFAULT_SHARED, help="directory with the model tables")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="table to write or check")
    parser.add_argument("--check", action="store_true", help="fail if --out differs from a fresh build")
    args = parser.parse_args(argv)
    text = render(build(args.shared))
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is stale: run python scripts/build_model_table.py", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {json.loads(text)['_about']['count']} models to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
