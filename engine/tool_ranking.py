"""BM25F ranking of tool definitions for ``tool_search``: a query against each tool's name, MCP
server, parameter names and description (see :mod:`engine.deferral` for what is searched).

Pure text scoring: terms split on snake_case, camelCase and ``mcp__server__tool``, stop words
dropped, plurals folded and common abbreviations expanded.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from engine.tokens import tool_parts

#: BM25 parameters (the usual defaults) and field weights: a word in the name says more
#: about what a tool does than one in a parameter name, which says more than the description.
#: The MCP server part of a name (``mcp__github__``) is a field of its own, so every tool of a
#: server does not carry two extra name words that dilute its own.
BM25_K1 = 1.2
BM25_B = 0.75
FIELD_WEIGHTS = {"name": 3.0, "params": 2.0, "server": 1.5, "description": 1.0}
#: A tool whose name the query spells out is what was asked for ("create a pull request" is
#: create_pull_request, not create_pull_request_review): scores are multiplied by
#: 1 + NAME_COVERAGE_BOOST x (share of the name's words that are in the query).
NAME_COVERAGE_BOOST = 0.5

_STOPWORDS = frozenset({
    "a", "an", "and", "any", "are", "as", "at", "be", "by", "can", "do", "for", "from", "get", "i",
    "in", "into", "is", "it", "its", "me", "my", "of", "on", "or", "so", "that", "the", "this", "to",
    "use", "using", "with", "you", "your",
})  # fmt: skip
#: Abbreviations people type for what tool descriptions spell out.
_EXPANSIONS = {
    "pr": "pull request",
    "prs": "pull requests",
    "repo": "repository",
    "repos": "repositories",
    "db": "database",
    "dir": "directory",
    "msg": "message",
    "dm": "direct message",
    "sql": "sql query",
}
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def _stem(word: str) -> str:
    # Plurals only: enough to match "comments" to "comment" without conflating verbs.
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("es") and word[-3] in "sxz":
        return word[:-2]
    if len(word) > 4 and word.endswith(("ches", "shes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """Search terms of ``text``: split on snake_case, camelCase, ``mcp__server__tool`` and
    punctuation, lower-cased, stop words dropped, plurals folded, abbreviations expanded."""
    terms: list[str] = []
    for raw in _WORD.findall(text):
        word = raw.lower()
        for part in _EXPANSIONS.get(word, word).split():
            if part not in _STOPWORDS:
                terms.append(_stem(part))
    return terms


def _schema_param_names(schema: Any) -> list[str]:
    """Property names of a JSON schema, nested objects and array items included."""
    names: list[str] = []
    if isinstance(schema, dict):
        for key, sub in (schema.get("properties") or {}).items():
            names.append(str(key))
            names.extend(_schema_param_names(sub))
        names.extend(_schema_param_names(schema.get("items")))
    return names


def split_tool_name(name: str) -> tuple[str | None, str]:
    """(MCP server, tool) of ``mcp__server__tool``; (None, name) for any other name."""
    parts = name.split("__")
    if len(parts) >= 3 and parts[0] == "mcp":
        return parts[1], "__".join(parts[2:])
    return None, name


def tool_fields(definition: dict[str, Any]) -> dict[str, list[str]]:
    """The searchable fields of a definition: name, parameter names, MCP server, description
    (with the parameters' own descriptions)."""
    name, description, schema = tool_parts(definition)
    server, tool = split_tool_name(name)
    return {
        "name": tokenize(tool),
        "params": tokenize(" ".join(_schema_param_names(schema))),
        "server": tokenize(server or ""),
        "description": tokenize(" ".join([description, *_schema_param_descriptions(schema)])),
    }


def _schema_param_descriptions(schema: Any) -> list[str]:
    out: list[str] = []
    if isinstance(schema, dict):
        for sub in (schema.get("properties") or {}).values():
            if isinstance(sub, dict) and isinstance(sub.get("description"), str):
                out.append(sub["description"])
            out.extend(_schema_param_descriptions(sub))
        out.extend(_schema_param_descriptions(schema.get("items")))
    return out


def bm25f_scores(query: str, docs: Sequence[dict[str, list[str]]]) -> list[float]:
    """BM25F: per-field length-normalised term frequencies, weighted and summed, then BM25
    saturation times the term's IDF over the whole document set; then the name-coverage boost."""
    if not docs:
        return []
    query_terms = set(tokenize(query))
    avg_len = {f: (sum(len(d[f]) for d in docs) / len(docs)) or 1.0 for f in FIELD_WEIGHTS}
    counts = [{f: Counter(d[f]) for f in FIELD_WEIGHTS} for d in docs]
    scores = [0.0] * len(docs)
    for term in query_terms:
        df = sum(1 for c in counts if any(term in c[f] for f in FIELD_WEIGHTS))
        if df == 0:
            continue
        idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
        for i, (doc, c) in enumerate(zip(docs, counts, strict=True)):
            tf = sum(
                FIELD_WEIGHTS[f] * c[f][term] / (1 - BM25_B + BM25_B * len(doc[f]) / avg_len[f])
                for f in FIELD_WEIGHTS
                if c[f][term]
            )
            if tf:
                scores[i] += idf * tf * (BM25_K1 + 1) / (tf + BM25_K1)
    for i, doc in enumerate(docs):
        if scores[i] and doc["name"]:
            coverage = len(query_terms.intersection(doc["name"])) / len(set(doc["name"]))
            scores[i] *= 1 + NAME_COVERAGE_BOOST * coverage
    return scores
