"""The first paint's element scripts (dashboard/server.py, #36.12): index.html, as the dashboard's
server serves it, imports the metric's script from Streamlit's own bundle before the page asks for
it; anywhere the script is not found, or on a Streamlit version not checked, index.html is Streamlit's."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import streamlit

from dashboard import server

STATIC = Path(streamlit.__file__).parent / "static"
CHECKED = server.skips_component_scan(streamlit.__version__)
APP = "import streamlit as st\n\nst.metric('Sessions', 7)\n"


@pytest.mark.parametrize(
    ("files", "found"),
    [
        pytest.param(["Metric.a1B2-c.js", "MetricChart.x.js", "index.y.js"], ["Metric.a1B2-c.js"], id="one"),
        pytest.param(["Metric.a.js", "Metric.b.js"], [], id="two-builds-of-it"),
        pytest.param(["Metric.a.b.js", "Metric.a.css"], [], id="no-script-of-that-shape"),
        pytest.param([], [], id="none"),
    ],
)
def test_an_elements_script_is_found_only_when_there_is_exactly_one(
    tmp_path: Path, files: list[str], found: list[str]
) -> None:
    for name in files:
        (tmp_path / name).write_text("export {};\n")
    assert server.element_scripts(tmp_path, ("Metric",)) == found


def test_the_preload_imports_each_script_beside_streamlits_index_script() -> None:
    script = server.preload_script(["Metric.abc.js", "DataFrame.d-f.js"])
    assert script.startswith('<script type="module">') and script.rstrip().endswith("</script>")
    assert '["Metric.abc.js", "DataFrame.d-f.js"]' in script
    assert "new URL(name, index.src)" in script and ".catch(" in script  # a missing script changes nothing


@pytest.mark.skipif(not CHECKED, reason="the index is Streamlit's own on this Streamlit")
def test_this_streamlit_has_the_metrics_script_and_the_handler_the_server_wraps() -> None:
    from streamlit.web.server.starlette import starlette_static_routes

    assert len(server.element_scripts(STATIC / "static" / "js")) == len(server.PRELOADED_ELEMENTS)
    assert "</head>" in (STATIC / "index.html").read_text(encoding="utf-8")
    assert callable(starlette_static_routes.create_streamlit_static_handler)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return response.status, response.read().decode("utf-8")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """dashboard/server.py serving a one-metric app (the preload does not depend on the app)."""
    app = tmp_path_factory.mktemp("app") / "app.py"
    app.write_text(APP, encoding="utf-8")
    # The server's warm-up reads the databases it is given: an empty folder, not the checkout's sample.
    env = {**os.environ, "CTXDESK_DB_PATHS": str(tmp_path_factory.mktemp("no-databases"))}
    port = _free_port()
    command = [
        sys.executable, str(server.ROOT / "dashboard" / "server.py"), "run", str(app), "--server.port", str(port),
        "--server.headless", "true", "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
        "--server.fileWatcherType", "none",
    ]  # fmt: skip
    proc = subprocess.Popen(command, cwd=app.parent, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if _get(port, "/_stcore/health")[1].strip() == "ok":
                    break
            except OSError:
                assert proc.poll() is None, "the server exited"
                assert time.monotonic() < deadline, "the server did not listen within 90 s"
                time.sleep(0.2)
        yield port
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.skipif(not CHECKED, reason="the index is Streamlit's own on this Streamlit")
@pytest.mark.parametrize("path", ["/", "/timeline", "/index.html"], ids=["root", "a-page", "the-file"])
def test_the_served_index_imports_the_metrics_script_which_is_served(served: int, path: str) -> None:
    [metric] = server.element_scripts(STATIC / "static" / "js", ("Metric",))
    status, html = _get(served, path)
    assert status == 200
    head, _, body = html.partition("</head>")
    assert f'"{metric}"' in head and body  # in the head, the rest of Streamlit's index kept
    original = (STATIC / "index.html").read_text(encoding="utf-8")
    assert re.sub(r'<script type="module">/\* ctxdesk.*?</script>\n', "", html, flags=re.S) == original
    assert (
        _get(served, f"/static/js/{metric}")[0] == 200
    )  # where the import resolves from /static/js/index.*.js


def test_the_server_wraps_the_index_before_streamlit_starts() -> None:
    import inspect

    body = inspect.getsource(server.main)
    assert body.index("preload_first_paint()") < body.index("streamlit_main(")
