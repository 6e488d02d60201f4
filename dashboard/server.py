"""The dashboard's server process: ``python dashboard/server.py run dashboard/app.py [options] -- [paths]``.

Streamlit's own command line (``python -m streamlit``), with two start-up savings for the first
paint (#36.12); ``ctxdesk dashboard`` starts the server this way:

- Streamlit 1.67 parses the metadata of every installed distribution at start, looking for v2 custom
  components (about 1.2 s with ~640 distributions, no option turns it off). The dashboard uses
  none, so on the Streamlit versions checked here the scan is skipped; on any other it runs.
- The first page run imports pandas, DuckDB and the dashboard and opens the DuckDB connection (about
  a second, cached for later runs). A thread does that (dashboard/warm.py) as soon as the server
  listens, while the browser loads Streamlit's scripts; the page run waits for it rather than
  importing the same modules beside it.
- Python's automatic garbage collections ran about twenty times while Streamlit, pandas, DuckDB and
  the dashboard were imported, each walking the whole growing heap: 0.2-0.3 s of the start's
  1.1-1.4 s of processor time (gc.callbacks: one full collection 0.22 s). None runs until the
  warm-up is over; then what the start built (modules, classes: it lives as long as the server)
  is frozen out of later collections, and collecting resumes. Left behind: ~2,000 unreachable
  objects (0.6 MB) the imports made.
- Streamlit's first element of the process looks at the whole call stack (``inspect.stack()``, with
  the source file of every frame: 0.1-0.3 s) to tell whether it runs in a REPL, only to print a
  warning a served app never prints; the server says it has looked (on the versions checked here).

Run as a script (not ``-m``), so neither ``engine.cli`` nor anything else is imported before the
server starts.
"""

from __future__ import annotations

import gc
import logging
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Streamlit versions whose internals the two savings were checked against (a prefix match): the
#: start-up component scan (``Runtime.__init__`` calls ``BidiComponentManager.discover_and_register_components``)
#: and the REPL check (``delta_generator._maybe_print_use_warning``, once per process).
SCAN_SKIPPED_ON = ("1.67.",)
#: How long the warm-up waits for the server to start listening before it gives up.
WARM_WAIT_S = 120.0


def skips_component_scan(version: str) -> bool:
    """Whether the component scan (and the REPL check) is skipped on this Streamlit version."""
    return version.startswith(SCAN_SKIPPED_ON)


def skip_component_scan() -> bool:
    """Make Streamlit's start-up scan for installed v2 components a no-op (the dashboard uses none);
    True when done, False (Streamlit untouched) on a version not checked here."""
    import streamlit

    if not skips_component_scan(streamlit.__version__):
        return False
    from streamlit.components.v2.component_manager import BidiComponentManager

    def no_scan(self: BidiComponentManager, *, start_file_watching: bool = True) -> None:
        """No installed v2 component is looked for: the dashboard uses none (dashboard/server.py)."""

    BidiComponentManager.discover_and_register_components = no_scan  # type: ignore[method-assign]
    return True


def skip_repl_check() -> bool:
    """Mark Streamlit's once-per-process "run it with streamlit run" check as done (a served app is
    never in a REPL, and the server's runtime exists: the check prints nothing); True when done,
    False (Streamlit untouched) on a version not checked here."""
    import streamlit

    if not skips_component_scan(streamlit.__version__):
        return False
    from streamlit import delta_generator

    delta_generator._use_warning_has_been_displayed = True
    return True


def _warm_when_listening() -> None:
    from dashboard import warm

    try:
        if _wait_until_listening():
            _warm_up_quietly(warm.warm_up)
    finally:
        resume_collections()
        warm.end_warm_up()  # done, or never started: page runs stop waiting for it


def resume_collections() -> None:
    """End of the start (main paused the collector): what it built is frozen out of later
    collections (the server keeps it), and collections resume."""
    gc.freeze()
    gc.enable()


def _wait_until_listening() -> bool:
    """Wait until the server listens (and bootstrap has set sys.argv to the app's): the imports then
    take turns with serving the page, rather than delaying the health check."""
    from streamlit.runtime import Runtime, RuntimeState

    deadline = time.monotonic() + WARM_WAIT_S
    while time.monotonic() < deadline:
        if Runtime.exists() and Runtime.instance().state != RuntimeState.INITIAL:
            return True
        time.sleep(0.02)
    return False


def _warm_up_quietly(warm_up: Callable[[], object]) -> None:
    # The overview is read outside any page run: Streamlit warns once per call that there is no
    # script context, which is expected here.
    context_log = logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context")
    level = context_log.level
    context_log.setLevel(logging.ERROR)
    try:
        warm_up()
    finally:
        context_log.setLevel(level)


def main(argv: list[str]) -> None:
    """Streamlit's command line over ``argv`` (``run app.py ...``), with the savings above."""
    if str(ROOT) not in sys.path:  # run as a script, dashboard/ is on sys.path, not the repo root
        sys.path.insert(0, str(ROOT))
    gc.disable()  # until the warm-up is over: resume_collections
    skip_component_scan()
    skip_repl_check()
    from dashboard import warm

    warm.expect_warm_up()  # from now on the first page run waits for the warm-up's imports
    threading.Thread(target=_warm_when_listening, name="ctxdesk-warm-up", daemon=True).start()
    from streamlit.web.cli import main as streamlit_main

    sys.argv = ["streamlit", *argv]
    streamlit_main(prog_name="streamlit")


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from dashboard import server  # the module the pages can import, not this __main__ copy

    server.main(sys.argv[1:])
