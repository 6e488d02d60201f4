"""Sample session databases made by the real session manager around a scripted model.

``generate_demo(out_dir, seed=7)`` runs coding-agent sessions through :class:`SessionManager`
with a :class:`ScriptedClient`, so every event in the files is one the engine really recorded:
offloaded 40 KB git logs and 25 KB test logs, 34 deferred MCP tools found with tool_search,
compactions by chain, sandwich, sliding_window and by hand, a provider context-length error
and its emergency retry, a forced final turn on a 16k-window model, and a fallback skipped for
its small window; and one long session (46 turns on a 32k window) whose context climbs past the
80% note and is compacted at the threshold again and again. The same seed gives the same
sessions (ids, messages, tokens, events).

Data: ``agent`` (models, settings, prompt, tools), ``repo`` (the short sessions' fake repository),
``refunds_files`` / ``refunds_script`` (the long session's files and steps). Code: ``script``
(scripted replies), ``context`` (plays a script through the session manager), ``scenarios`` (one
function per session), ``refunds_workspace`` (the long session's tools and its step player),
``driver`` (writes the databases).
"""

from engine.demo.agent import CODING_DB, DEFAULT_SEED, LIMITS_DB, LONG_MODEL, SETTINGS_FILE
from engine.demo.driver import generate_demo, settle_database
from engine.demo.refunds_workspace import RefundsWorkspace, script_refunds
from engine.demo.repo import FakeRepo
from engine.demo.script import Script

__all__ = [
    "CODING_DB",
    "DEFAULT_SEED",
    "LIMITS_DB",
    "LONG_MODEL",
    "SETTINGS_FILE",
    "FakeRepo",
    "RefundsWorkspace",
    "Script",
    "generate_demo",
    "script_refunds",
    "settle_database",
]
