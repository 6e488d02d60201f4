"""A deterministic corpus of realistic agent traffic for the benchmarks and reliability tests.

``generate_history(n, seed=)`` returns ``n`` messages shaped like a coding agent's session:
user requests (some not in English), assistant replies with JSON tool arguments, and tool
results holding code, JSON, long logs and non-ASCII text. The same ``(n, seed)`` always gives
the same messages, on any machine, so numbers from different runs describe the same input.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from typing import Any

from engine.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock

#: Kinds of content the token benchmarks report separately.
KINDS = ("prose", "code", "json", "log", "non_ascii")

_WORDS_TEXT = (
    "the a an to of and in for with on is that this it we be as are by not or from at should "
    "will function module test failing passes error config value request response file path line "
    "change update fix refactor cache token context window budget session message tool result "
    "output input schema field default parse render query index table column migration commit "
    "branch build deploy server client timeout retry handler worker queue event stream buffer "
    "limit threshold summary history turn prompt model provider usage latency memory disk "
    "because however then first next finally also instead so but when if after before while look "
    "check read run open see found seems looks like probably likely exactly already still"
)
_WORDS = tuple(_WORDS_TEXT.split())

_IDENTS_TEXT = (
    "session_id user_id request payload items result config settings counter total offset limit "
    "tokens messages handler client store cache index cursor row record path data buffer chunk "
    "parser writer reader response status retries deadline window budget summary"
)
_IDENTS = tuple(_IDENTS_TEXT.split())

_NON_ASCII = (
    "Der Test schlägt fehl, weil die Größe des Puffers überschritten wird. Könnten Sie prüfen, ob "
    "die Konfiguration übernommen wurde?",
    "Le fichier de configuration est introuvable ; vérifiez le chemin et réessayez à nouveau.",
    "¿Puedes revisar por qué la función devuelve un valor vacío cuando la sesión está llena?",
    "Сервер возвращает ошибку 503, когда очередь переполнена. Нужно увеличить тайм-аут.",
    "このテストはキャッシュが無効になると失敗します。トークン数の計算を確認してください。",
    "请检查上下文窗口的预算，并在压缩之前保存会话快照。日志中有很多重复的条目。",
    "세션 기록이 너무 길어서 요약이 필요합니다. 도구 결과를 먼저 정리해 주세요.",
    "الخادم لا يستجيب بعد تحديث الإعدادات، يرجى التحقق من السجلات.",
    "Ελέγξτε το αρχείο ρυθμίσεων και επανεκκινήστε την υπηρεσία.",
    "Build ✅ passed, deploy 🚀 queued, tests ⚠️ flaky — see ➜ https://ci.example/run/42 🙏",
    "Naïve café façade: coöperate, résumé, jalapeño, Ångström, Œuvre, smørrebrød, Łódź.",
)

_TOOLS = ("bash", "read_file", "edit_file", "grep", "list_dir", "http_get", "search_code")


class _Gen:
    """Text generators over one seeded random source."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)

    def words(self, n: int) -> str:
        return " ".join(self.r.choices(_WORDS, k=n))

    def sentence(self) -> str:
        s = self.words(self.r.randint(6, 22))
        return s[0].upper() + s[1:] + self.r.choice((".", ".", ".", "?", ":"))

    def prose(self, target_chars: int) -> str:
        parts: list[str] = []
        size = 0
        while size < target_chars:
            if self.r.random() < 0.15:
                item = "\n".join(f"- {self.sentence()}" for _ in range(self.r.randint(2, 5)))
            else:
                item = " ".join(self.sentence() for _ in range(self.r.randint(2, 6)))
            if self.r.random() < 0.2:
                item += f" See `{self.path()}` line {self.r.randint(1, 900)}."
            parts.append(item)
            size += len(item) + 2
        return "\n\n".join(parts)

    def non_ascii(self, target_chars: int) -> str:
        parts: list[str] = []
        size = 0
        while size < target_chars:
            item = self.r.choice(_NON_ASCII)
            if self.r.random() < 0.3:
                item += f" ({self.ident()}={self.r.randint(0, 10_000)})"
            parts.append(item)
            size += len(item) + 1
        return " ".join(parts)

    def ident(self) -> str:
        return self.r.choice(_IDENTS) + (f"_{self.r.choice(_IDENTS)}" if self.r.random() < 0.4 else "")

    def path(self) -> str:
        depth = self.r.randint(1, 4)
        dirs = "/".join(
            self.r.choice(("src", "engine", "tests", "lib", "app", "pkg", "core", "utils"))
            for _ in range(depth)
        )
        return f"{dirs}/{self.ident()}.{self.r.choice(('py', 'py', 'ts', 'go', 'rs', 'toml', 'md'))}"

    def code(self, target_chars: int) -> str:
        lines: list[str] = []
        size = 0
        while size < target_chars:
            name = self.ident()
            args = ", ".join(self.ident() for _ in range(self.r.randint(0, 4)))
            block = [f"def {name}({args}) -> dict[str, int]:", f'    """{self.sentence()}"""']
            for _ in range(self.r.randint(3, 12)):
                indent = "    " * self.r.randint(1, 3)
                choice = self.r.random()
                if choice < 0.3:
                    block.append(
                        f"{indent}{self.ident()} = {self.ident()}.get({self.ident()!r}, {self.r.randint(0, 99)})"
                    )
                elif choice < 0.5:
                    block.append(f"{indent}if {self.ident()} > {self.r.randint(0, 4096)}:")
                elif choice < 0.65:
                    block.append(f"{indent}for {self.ident()} in range(len({self.ident()})):")
                elif choice < 0.8:
                    block.append(f"{indent}# {self.words(self.r.randint(4, 10))}")
                else:
                    block.append(f'{indent}raise ValueError(f"bad {{{self.ident()}!r}} in {self.path()}")')
            block.append(f"    return {{{self.ident()!r}: {self.ident()}}}")
            lines.extend([*block, ""])
            size += sum(len(line) + 1 for line in block) + 1
        return "\n".join(lines)

    def json_value(self, depth: int = 0) -> Any:
        choice = self.r.random()
        if depth < 3 and choice < 0.3:
            return {self.ident(): self.json_value(depth + 1) for _ in range(self.r.randint(1, 5))}
        if depth < 3 and choice < 0.4:
            return [self.json_value(depth + 1) for _ in range(self.r.randint(1, 4))]
        if choice < 0.55:
            return self.r.randint(-1000, 10**9)
        if choice < 0.65:
            return round(self.r.uniform(0, 1000), 4)
        if choice < 0.72:
            return self.r.choice((True, False, None))
        if choice < 0.8:
            return f"{self.r.getrandbits(64):016x}"
        if choice < 0.86:
            return f"2025-{self.r.randint(1, 12):02d}-{self.r.randint(1, 28):02d}T{self.r.randint(0, 23):02d}:{self.r.randint(0, 59):02d}:00Z"
        if choice < 0.9:
            return self.r.choice(_NON_ASCII)[:40]
        return self.words(self.r.randint(1, 8))

    def json_text(self, target_chars: int) -> str:
        items: list[Any] = []
        size = 0
        while size < target_chars:
            item = {
                "id": self.r.randint(1, 10**6),
                **{self.ident(): self.json_value(1) for _ in range(self.r.randint(2, 6))},
            }
            items.append(item)
            size += len(json.dumps(item, ensure_ascii=False))
        indent = 2 if self.r.random() < 0.5 else None
        return json.dumps(
            {"items": items, "total": len(items), "next": None}, ensure_ascii=False, indent=indent
        )

    def log(self, target_chars: int) -> str:
        lines: list[str] = []
        size = 0
        level_weights = (("INFO", 70), ("DEBUG", 15), ("WARNING", 10), ("ERROR", 5))
        levels = [lv for lv, _ in level_weights]
        weights = [w for _, w in level_weights]
        while size < target_chars:
            choice = self.r.random()
            if choice < 0.75:
                ts = f"2025-03-{self.r.randint(1, 28):02d}T{self.r.randint(0, 23):02d}:{self.r.randint(0, 59):02d}:{self.r.randint(0, 59):02d}.{self.r.randint(0, 999):03d}Z"
                line = (
                    f"{ts} {self.r.choices(levels, weights)[0]:<7} [worker-{self.r.randint(0, 15)}] "
                    f"request_id={self.r.getrandbits(48):012x} {self.r.choice(('GET', 'POST', 'PUT'))} "
                    f"/api/v1/{self.ident()}/{self.r.randint(1, 99999)} {self.r.choice((200, 200, 200, 201, 404, 500, 503))} "
                    f"{self.r.uniform(0.1, 900):.1f}ms"
                )
            elif choice < 0.85:
                line = f'  File "/srv/app/{self.path()}", line {self.r.randint(1, 2000)}, in {self.ident()}'
            elif choice < 0.95:
                line = f"{self.path()}::test_{self.ident()} {self.r.choice(('PASSED', 'PASSED', 'PASSED', 'FAILED', 'SKIPPED'))} [{self.r.randint(0, 100):3d}%]"
            else:
                line = f"sha256:{self.r.getrandbits(256):064x}  {self.path()}"
            lines.append(line)
            size += len(line) + 1
        return "\n".join(lines)

    def text_of(self, kind: str, target_chars: int) -> str:
        return _MAKERS[kind](self, target_chars)

    # -- message sizes ------------------------------------------------------------------------
    def result_size(self) -> tuple[str, int]:
        """Kind and size of one tool result: mostly small-to-medium, sometimes a long log."""
        kind = self.r.choices(("code", "json", "log", "prose", "non_ascii"), (30, 25, 25, 12, 8))[0]
        if kind == "log" and self.r.random() < 0.1:
            return kind, self.r.randint(5_000, 25_000)
        return kind, int(self.r.lognormvariate(6.0, 0.9))  # median ~400 characters


_MAKERS: dict[str, Callable[[_Gen, int], str]] = {
    "prose": _Gen.prose,
    "code": _Gen.code,
    "json": _Gen.json_text,
    "log": _Gen.log,
    "non_ascii": _Gen.non_ascii,
}


def sample_texts(kind: str, count: int, *, seed: int = 0, chars: int = 2_000) -> list[str]:
    """``count`` texts of one content kind, each about ``chars`` characters."""
    if kind not in _MAKERS:
        raise ValueError(f"unknown content kind {kind!r}; known: {', '.join(KINDS)}")
    gen = _Gen(seed * 7919 + KINDS.index(kind))
    return [gen.text_of(kind, int(chars * gen.r.uniform(0.5, 1.5))) for _ in range(count)]


def _tool_input(gen: _Gen, name: str) -> dict[str, Any]:
    if name == "bash":
        return {"command": f"pytest -x {gen.path()} -k {gen.ident()} 2>&1 | tail -n {gen.r.randint(20, 200)}"}
    if name == "read_file":
        return {"path": gen.path(), "offset": gen.r.randint(0, 500), "limit": 200}
    if name == "edit_file":
        return {
            "path": gen.path(),
            "old_str": gen.code(gen.r.randint(40, 300)),
            "new_str": gen.code(gen.r.randint(40, 400)),
        }
    if name == "grep":
        return {"pattern": f"def {gen.ident()}\\(", "path": gen.path().rsplit("/", 1)[0], "context": 2}
    if name == "http_get":
        return {
            "url": f"https://api.example.com/v1/{gen.ident()}?page={gen.r.randint(1, 9)}",
            "headers": {"accept": "application/json"},
        }
    if name == "search_code":
        return {
            "query": gen.words(gen.r.randint(2, 6)),
            "language": gen.r.choice(("python", "go", "rust")),
            "max_results": 20,
        }
    return {"path": gen.path().rsplit("/", 1)[0], "recursive": gen.r.random() < 0.5}


def iter_history(*, seed: int = 0) -> Iterator[Message]:
    """An endless stream of turns: user request, tool loop (0-6 rounds), final answer."""
    gen = _Gen(seed)
    call = 0
    while True:
        if gen.r.random() < 0.12:
            request = gen.non_ascii(gen.r.randint(60, 400))
        else:
            request = gen.prose(gen.r.randint(20, 600))
        yield Message(role="user", content=request)
        for _ in range(gen.r.choices(range(7), (10, 20, 20, 18, 14, 10, 8))[0]):
            uses: list[ToolUseBlock] = []
            for _ in range(1 if gen.r.random() < 0.8 else gen.r.randint(2, 3)):
                call += 1
                name = gen.r.choice(_TOOLS)
                uses.append(ToolUseBlock(id=f"toolu_{call:08d}", name=name, input=_tool_input(gen, name)))
            thought = gen.prose(gen.r.randint(20, 300)) if gen.r.random() < 0.6 else ""
            blocks: list[Any] = [TextBlock(text=thought)] if thought else []
            yield Message(role="assistant", content=[*blocks, *uses])
            results = []
            for use in uses:
                kind, size = gen.result_size()
                results.append(
                    ToolResultBlock(
                        tool_use_id=use.id, content=gen.text_of(kind, size), is_error=gen.r.random() < 0.05
                    )
                )
            yield Message(role="user", content=results)
        answer = gen.prose(gen.r.randint(60, 1_000))
        if gen.r.random() < 0.3:
            answer += "\n\n```python\n" + gen.code(gen.r.randint(100, 600)) + "\n```"
        yield Message(role="assistant", content=answer)


def generate_history(n: int, *, seed: int = 0) -> list[Message]:
    """The first ``n`` messages of the seeded stream (a prefix of a longer history)."""
    out: list[Message] = []
    for message in iter_history(seed=seed):
        if len(out) >= n:
            break
        out.append(message)
    return out


def corpus_stats(messages: list[Message]) -> dict[str, int]:
    """Sizes of a history, for the tables: messages, characters, UTF-8 bytes."""
    texts = [json.dumps(m.model_dump(mode="json")["content"], ensure_ascii=False) for m in messages]
    return {
        "messages": len(messages),
        "chars": sum(len(t) for t in texts),
        "bytes": sum(len(t.encode("utf-8")) for t in texts),
    }
