"""Streamlit glue shared by the pages: which files, the cached DuckDB connection, cached queries,
the selected session, and the shared sidebar. Data access itself lives in dashboard.data.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, NamedTuple, ParamSpec, TypeVar

import duckdb
import pandas as pd
import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from dashboard import data, display, import_status
from engine.errors import ContextDeskError
from engine.settings import DEFAULT_SETTINGS_PATH, FileChangeWatcher, settings_path
from engine.store.factory import redact_url

if TYPE_CHECKING:  # annotations only: the findings load in a child process (dashboard.actions)
    from engine.findings import Finding

P = ParamSpec("P")
T = TypeVar("T")

APP_SCRIPT = Path(__file__).resolve().parent / "app.py"
SELECTED_KEY = "selected_session"
EDITED_SETTINGS_KEY = "edited_settings"
LIVE_INTERVAL_S = 1.0
#: How often the page looks at the settings file's change count (kept by an OS watch, so a look is
#: an attribute read): a disk edit shows within this plus one page run.
SETTINGS_CHECK_S = 0.25
#: The Model settings page's state: the draft, the file as read, the widgets' generation, and the
#: session the model picker last followed.
SETTINGS_DRAFT_KEY = "settings_draft"
SETTINGS_FILE_KEY = "settings_file"
SETTINGS_GENERATION_KEY = "settings_generation"
SETTINGS_SESSION_KEY = "_ms_session"
GOTO_SETTINGS_KEY = "_goto_model_settings"
SIGNATURE_KEY = "_files_signature"
SETTINGS_SEEN_KEY = "_settings_generation_seen"
TICKS_KEY = "_live_ticks"
ACTION_KEY = "_pending_action"


class SessionRef(NamedTuple):
    db: str
    session_id: str

    @property
    def key(self) -> str:
        return f"{self.db}::{self.session_id}"

    @classmethod
    def parse(cls, key: str) -> SessionRef:
        db, _, sid = key.partition("::")
        return cls(db, sid)


# No cache spinner: it takes a slot on the page only when the cache misses (every commit of a
# live writer), which shifts every later element and leaves stale copies (two Apply buttons).
@st.cache_resource(max_entries=4, show_spinner=False)
def _connection(paths: tuple[str, ...], identity: tuple[Any, ...]) -> duckdb.DuckDBPyConnection:
    # The sqlite scanner reads the files at each query, so a commit needs no new connection (a
    # re-attach per commit made every page run cold while an agent writes); a file replaced by
    # another (``identity``: its inode) or a new file in a folder does.
    # One junk file must not hide the others: it is skipped and named in the sidebar.
    return data.connect(list(paths), skip_invalid=True)  # files, or postgresql:// URLs kept as str


@st.cache_data(max_entries=512, show_spinner=False)
def _query(
    _conn: duckdb.DuckDBPyConnection,
    signature: tuple[Any, ...],
    name: str,
    args: tuple[Any, ...],
    kwargs: tuple[tuple[str, Any], ...],
    _function: Callable[..., Any],
) -> Any:
    # ``name`` (the function's module and name) with the arguments is the cache key; the function
    # itself is not hashed.
    return data.read(_conn, lambda cursor: _function(cursor, *args, **dict(kwargs)))


@st.cache_data(max_entries=64, show_spinner=False)
def _findings(
    db_path: str, session_id: str, settings_file: str | None, signature: tuple[Any, ...]
) -> list[Finding]:
    # ``signature`` (the database file, its WAL and the settings file) is only the cache key.
    return data.session_findings(db_path, session_id, settings_file)


def findings(ref: SessionRef) -> list[Finding]:
    """engine.findings.find_waste of a session, cached until its database or the settings change;
    shows a warning (and returns nothing) when they cannot be computed."""
    db_path = database_paths()[ref.db]
    settings_file = settings_path()
    watched = [db_path] + ([settings_file] if settings_file is not None else [])
    try:
        with st.spinner("Looking for wasted context…"):  # always drawn: the page layout stays put
            return _findings(
                str(db_path), ref.session_id, str(settings_file) if settings_file else None,
                data.files_signature(watched),
            )  # fmt: skip
    except ContextDeskError as exc:
        st.warning(f"Findings are unavailable for this session: {display.md(exc)}")
        return []


def paths() -> list[Path]:
    """Database files from argv after ``--``, $CTXDESK_DB_PATHS, or the bundled sample data."""
    return data.loaded_paths(["--", *data.script_args(sys.argv, APP_SCRIPT)])


def signature() -> tuple[Any, ...]:
    return data.files_signature(paths())


#: The databases' signature this run reads them at (app.py pins it before the sidebar).
RUN_SIGNATURE_KEY = "_run_signature"


def pin_signature() -> None:
    """Read the databases' signature once for this run: the sidebar and the page then read one version
    of the data (with an import committing beside the page, the sidebar said 211 sessions and the
    page's metric 215)."""
    st.session_state[RUN_SIGNATURE_KEY] = signature()


def connection() -> duckdb.DuckDBPyConnection:
    """The shared connection for the current file versions; shows st.error and stops on failure."""
    try:
        files = paths()
        conn = _connection(tuple(str(p) for p in files), data.files_identity(files))
    except ContextDeskError as exc:
        st.error(f"Cannot open the session databases: {display.md(exc)}")
        st.stop()
        raise  # unreachable: st.stop() ends the run
    skipped = data.read(conn, data.skipped_files)
    if skipped and not data.read(conn, data.database_paths):
        reasons = "; ".join(reason for _, reason in skipped)
        st.error(f"Cannot open the session databases: {display.md(reasons)}")
        st.stop()
    return conn


def read(function: Any, *args: Any) -> Any:
    """``function(cursor, *args)`` on the shared connection, uncached (dashboard.data.read)."""
    return data.read(connection(), function, *args)


def database_paths() -> dict[str, Path]:
    """db label -> file path (or postgresql:// URL) of every loaded database."""
    return read(data.database_paths)


def query(
    function: Callable[Concatenate[duckdb.DuckDBPyConnection, P], T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """``function(cursor, *args)`` (a query of dashboard.data, e.g. ``query(data.timeline, db,
    session_id)``), cached until a database file changes (as of the run's pinned signature)."""
    name = f"{function.__module__}.{function.__qualname__}"
    pinned = st.session_state.get(RUN_SIGNATURE_KEY) or signature()
    return _query(connection(), pinned, name, args, tuple(sorted(kwargs.items())), function)


def overview() -> pd.DataFrame:
    return query(data.sessions_overview)


def selected() -> SessionRef | None:
    key = st.session_state.get(SELECTED_KEY)
    return SessionRef.parse(key) if key else None


def select(ref: SessionRef) -> None:
    st.session_state[SELECTED_KEY] = ref.key


def require_session() -> tuple[SessionRef, pd.Series]:
    """The selected session and its overview row; defaults to the first session, stops if none."""
    df = overview()
    if df.empty:
        st.info("No sessions in the loaded databases. Run `ctxdesk demo --out data` or pass database paths.")
        st.stop()
    ref = selected()
    match = df[(df["db"] == ref.db) & (df["session_id"] == ref.session_id)] if ref else df.iloc[0:0]
    if match.empty:
        ref = SessionRef(str(df.iloc[0]["db"]), str(df.iloc[0]["session_id"]))
        select(ref)
        match = df.iloc[[0]]
    # Missing values as None (not NaN/NA): pages test ``row["model"] or ...``.
    return ref, match.iloc[0].map(display.value_or_none)


def session_label(row: pd.Series) -> str:
    return display.session_line(row["title"], str(row["session_id"]), row["model"], str(row["db"]))


def session_labels(df: pd.DataFrame) -> dict[str, str]:
    """``db::id`` -> a label no other session of ``df`` has (two with one title and model are told
    apart by their ids): what every session picker shows."""
    labels = {SessionRef(str(r["db"]), str(r["session_id"])).key: session_label(r) for _, r in df.iterrows()}
    return display.distinct_labels(labels, lambda key: SessionRef.parse(key).session_id)


def _on_sidebar_pick() -> None:
    st.session_state[SELECTED_KEY] = st.session_state["_sidebar_session"]


def sidebar() -> None:
    """The shared sidebar: what is loaded, the selected session, and live follow."""
    conn = connection()
    files = paths()
    df = overview()
    linked = st.query_params.get("session")
    if linked and linked != st.session_state.get("_linked_session"):
        # A link like ?session=<db>::<id> (or a plain id unique across the databases) selects that
        # session once; later picks win.
        st.session_state["_linked_session"] = linked
        found = data.resolve_session_link(linked, df)
        if found is not None:
            st.session_state[SELECTED_KEY] = SessionRef(*found).key
        else:
            st.session_state["_link_problem"] = linked
    problem = st.session_state.pop("_link_problem", None)
    with st.sidebar:
        st.caption(f"{len(files)} database(s), {len(df)} session(s)")
        import_status.import_progress(files)  # an import still filling these databases (--from)
        if problem is not None:
            count = int((df["session_id"] == problem).sum()) if not df.empty else 0
            # The id came from the URL: it is not put into markdown.
            st.warning(
                f"The session in the link is in {count} databases: link it as `db::id`."
                if count > 1
                else "The session in the link is not in the loaded databases."
            )
        for path, reason in data.read(conn, data.skipped_files):
            st.warning(f"Skipped {display.md(path)}: {display.md(reason)}", icon=":material/warning:")
        with st.expander("Loaded files", expanded=False):
            for db, path in data.database_paths(conn).items():
                st.text(f"{db}: {redact_url(str(path))}")
        if not df.empty:
            labels = session_labels(df)
            keys = list(labels)
            current = st.session_state.get(SELECTED_KEY)
            if current not in labels:
                current = keys[0]
                st.session_state[SELECTED_KEY] = current
            st.session_state["_sidebar_session"] = current
            st.selectbox(
                "Session",
                keys,
                format_func=labels.__getitem__,
                key="_sidebar_session",
                on_change=_on_sidebar_pick,
            )
        live = st.toggle("Live: follow changes", value=True, help="Re-query when a database file changes")
        if st.session_state.get(EDITED_SETTINGS_KEY) is not None:
            st.caption("Charts re-projected under edited model settings.")
        if live and action_pending():
            st.caption("Live follow paused while an action runs.")
    # This full run shows the files as they are now: the watch below compares against that, so
    # running it inline never restarts the run that carries a click.
    st.session_state[SIGNATURE_KEY] = watched_signature()
    st.session_state[SETTINGS_SEEN_KEY] = settings_generation()
    if live and not action_pending():
        _watch_files()


def watched_signature() -> tuple[Any, ...]:
    """The databases' and the settings file's (path, mtime, size): any commit or edit changes it."""
    settings_file = settings_path()
    return signature() + data.files_signature([settings_file] if settings_file is not None else [])


@st.cache_resource(show_spinner=False)
def _settings_watcher(path: str) -> FileChangeWatcher:
    # One OS watch per settings file for the whole server: every open page reads its count.
    return FileChangeWatcher(path)


def settings_generation() -> int:
    """How many times the settings file has changed on disk since the server started watching it."""
    settings_file = settings_path() or DEFAULT_SETTINGS_PATH.expanduser()
    return _settings_watcher(str(Path(settings_file).expanduser().absolute())).generation


@st.fragment(run_every=SETTINGS_CHECK_S)
def _watch_files() -> None:
    # Each run reads the settings file's change count (no I/O); the databases are stat'ed once per
    # LIVE_INTERVAL_S. A change reruns the whole page at once.
    if action_pending():
        return
    generation = settings_generation()
    changed = st.session_state.get(SETTINGS_SEEN_KEY, generation) != generation
    st.session_state[SETTINGS_SEEN_KEY] = generation
    ticks = st.session_state.get(TICKS_KEY, 0) + 1
    st.session_state[TICKS_KEY] = ticks
    if not changed and ticks % round(LIVE_INTERVAL_S / SETTINGS_CHECK_S):
        return
    current = watched_signature()
    previous = st.session_state.get(SIGNATURE_KEY)
    st.session_state[SIGNATURE_KEY] = current
    if changed or (previous is not None and previous != current):
        st.rerun(scope="app")


# -- actions a person clicks ------------------------------------------------------------------
# A click is recorded by its button's on_click callback, which Streamlit runs before the script
# body: a later rerun (a live-follow refresh, another widget) can no longer lose it. The page
# then runs the pending action and clears it; live reruns stay paused until then.


def request_action(name: str, session_key: str | None = None) -> None:
    """``on_click`` of an action button: remember that ``name`` was asked for (on this session)."""
    st.session_state[ACTION_KEY] = {"name": name, "session": session_key, "page": _page_name()}


def pending_action(name: str, session_key: str | None = None) -> bool:
    """True when ``name`` (for this session) was clicked and has not run yet."""
    pending = st.session_state.get(ACTION_KEY)
    return pending is not None and pending["name"] == name and pending["session"] == session_key


def finish_action() -> None:
    """The pending action ran (its outcome is in session state): clear it and rerun, so live
    follow, paused for the action, starts again and the page shows the outcome."""
    st.session_state.pop(ACTION_KEY, None)
    st.rerun()


def action_pending() -> bool:
    pending = st.session_state.get(ACTION_KEY)
    if pending is not None and pending.get("page") != _page_name():
        # Clicked on a page the user has left before it ran: it will not run.
        st.session_state.pop(ACTION_KEY, None)
        return False
    return pending is not None


def _page_name() -> str | None:
    ctx = get_script_run_ctx()
    return ctx.page_script_hash if ctx is not None else None


def page_icon() -> Any:
    """The browser tab's icon as an image made in memory (three bars of a context budget)."""
    from PIL import Image, ImageDraw

    icon = Image.new("RGBA", (64, 64), (0, 0, 0, 0))
    draw = ImageDraw.Draw(icon)
    draw.rounded_rectangle((4, 4, 60, 60), radius=12, fill=(76, 120, 168, 255))
    for i, (height, colour) in enumerate(((40, (242, 183, 1)), (28, (255, 255, 255)), (16, (214, 39, 40)))):
        draw.rectangle((14 + i * 14, 52 - height, 24 + i * 14, 52), fill=(*colour, 255))
    return icon


def prefill_setting(model: str, field: str, value: int | float) -> None:
    """``on_click`` of a suggested fix: put ``field = value`` for ``model`` into the Model settings
    draft (unsaved, on top of the file and any other unsaved edit) and open that page on it."""
    from dashboard import settings_form

    path = settings_path() or DEFAULT_SETTINGS_PATH.expanduser()
    loaded = st.session_state.get(SETTINGS_FILE_KEY)
    if loaded is None or loaded.path != path:
        loaded = settings_form.read_file(path)
        st.session_state[SETTINGS_FILE_KEY] = loaded
        st.session_state[SETTINGS_DRAFT_KEY] = loaded.draft
    draft = st.session_state.get(SETTINGS_DRAFT_KEY, loaded.draft)
    values = {**settings_form.level_values(draft, "models", model), field: value}
    st.session_state[SETTINGS_DRAFT_KEY] = settings_form.with_level(draft, "models", model, values)
    st.session_state[SETTINGS_GENERATION_KEY] = st.session_state.get(SETTINGS_GENERATION_KEY, 0) + 1
    st.session_state["ms_level"] = "models"
    st.session_state["ms_model"] = model
    st.session_state[SETTINGS_SESSION_KEY] = st.session_state.get(SELECTED_KEY)  # keep this model picked
    st.session_state[GOTO_SETTINGS_KEY] = True


@st.cache_data(max_entries=8, show_spinner="Pricing model calls…")
def _call_costs(_conn: duckdb.DuckDBPyConnection, signature: tuple[Any, ...]) -> pd.DataFrame:
    # ``signature`` (the database files and their WALs) is only the cache key.
    return data.read(_conn, data.call_costs)


def call_costs() -> pd.DataFrame:
    """Every loaded model call priced, with its cache cause (dashboard.data.costs.call_costs), cached
    until a database file changes."""
    return _call_costs(connection(), signature())
