"""The dashboard's server process: ``python dashboard/server.py run dashboard/app.py [options] -- [paths]``.

Streamlit's own command line (``python -m streamlit``), with start-up savings for the first paint
(#36.12); ``ctxdesk dashboard`` starts the server this way:

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
- The browser fetches an element's script (a chunk of Streamlit's bundle) only when the element
  first arrives, and the page's metrics arrive behind the sidebar's widgets, whose thirty-odd
  chunks take the browser's six connections first: the first metric was painted 0.5-1.0 s after it
  arrived (a one-metric app: 0.3 s). index.html now imports the metric's script as soon as
  Streamlit's own bundle has run, while the page's first run is still under way: 0.17-0.43 s
  (median 0.23, against 0.94; 5 alternated pairs at load 5.5-7.7). Only on the versions checked
  here, and only when that script is found: otherwise index.html is Streamlit's own.

Run as a script (not ``-m``), so neither ``engine.cli`` nor anything else is imported before the
server starts.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: Streamlit versions whose internals the savings were checked against (a prefix match): the
#: start-up component scan (``Runtime.__init__`` calls ``BidiComponentManager.discover_and_register_components``),
#: the REPL check (``delta_generator._maybe_print_use_warning``, once per process) and the static
#: files' handler (``starlette_static_routes.create_streamlit_static_handler``, serving index.html).
SCAN_SKIPPED_ON = ("1.67.",)
#: How long the warm-up waits for the server to start listening before it gives up.
WARM_WAIT_S = 120.0
#: The elements whose scripts index.html imports before the page asks for them: the Sessions
#: page's headline metrics, the first useful paint (#36.12).
PRELOADED_ELEMENTS = ("Metric",)


def skips_component_scan(version: str) -> bool:
    """Whether the component scan (and the REPL check, and the index's preload) is done on this
    Streamlit version."""
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


def element_scripts(static_js: Path, elements: tuple[str, ...] = PRELOADED_ELEMENTS) -> list[str]:
    """The file names of the ``elements``' scripts in Streamlit's bundle (``Metric.<hash>.js``); an
    element with no such file, or more than one, is left out."""
    found = []
    for element in elements:
        names = [p.name for p in static_js.glob(f"{element}.*.js") if p.name.count(".") == 2]
        if len(names) == 1:
            found.append(names[0])
    return found


def preload_script(scripts: list[str]) -> str:
    """A module script for index.html importing ``scripts`` (beside Streamlit's own index script,
    whose address they are resolved against, as its own imports are) once that script has run."""
    names = ", ".join(f'"{name}"' for name in scripts)
    return (
        '<script type="module">/* ctxdesk (dashboard/server.py): the first paint\'s element scripts */\n'
        'const index = document.querySelector(\'script[type="module"][src*="/index."]\');\n'
        f"if (index) for (const name of [{names}]) import(new URL(name, index.src).href).catch(() => {{}});\n"
        "</script>\n"
    )


def preload_first_paint() -> bool:
    """Serve index.html with :func:`preload_script` of :data:`PRELOADED_ELEMENTS` before its
    ``</head>``; True when done, False (Streamlit untouched) on a version not checked here or when
    no such script is found."""
    import streamlit

    if not skips_component_scan(streamlit.__version__):
        return False
    from streamlit.web.server.starlette import starlette_static_routes

    scripts = element_scripts(Path(streamlit.__file__).parent / "static" / "static" / "js")
    if not scripts:
        return False
    make_handler = starlette_static_routes.create_streamlit_static_handler

    def handler_with_preload(directory: str, base_url: str | None) -> Any:
        handler = make_handler(directory, base_url)
        index = Path(directory) / "index.html"
        real = os.path.realpath(index)
        html = index.read_text(encoding="utf-8").replace("</head>", preload_script(scripts) + "</head>", 1)
        get_response = handler.get_response

        async def get_index_with_preload(path: str, scope: Any) -> Any:
            from starlette.responses import HTMLResponse

            response = await get_response(path, scope)
            served = getattr(response, "path", None)  # a file's; index.html also for a page's own URL
            if (
                served is not None
                and os.path.basename(served) == "index.html"
                and os.path.realpath(served) == real
            ):
                return HTMLResponse(html, headers={"Cache-Control": "no-cache"})
            return response

        handler.get_response = get_index_with_preload
        return handler

    starlette_static_routes.create_streamlit_static_handler = handler_with_preload
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
    preload_first_paint()
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
