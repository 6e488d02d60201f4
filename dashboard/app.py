"""ctxdesk dashboard entry: ``streamlit run dashboard/app.py -- [DB files or folders]``.

The picture frame: page config, the shared sidebar, then ``st.navigation(...).run()``.
With no paths (and no $CTXDESK_DB_PATHS) it opens the bundled sample data in data/.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `streamlit run` puts dashboard/ on sys.path, not the repo root
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from dashboard import warm  # noqa: E402

warm.wait_for_warm_up()  # the server's warm-up imports what follows: never import it beside it

from dashboard import state  # noqa: E402
from engine import install_log_redaction  # noqa: E402

install_log_redaction()  # a provider's error echoing a key, logged by an action, is redacted

# The tab icon is drawn here: a Material icon or an emoji as page_icon is fetched from a CDN, and
# the page makes no request beyond 127.0.0.1.
st.set_page_config(page_title="ctxdesk", page_icon=state.page_icon(), layout="wide")

PAGES = [
    st.Page("views/sessions.py", title="Sessions", icon=":material/list:", default=True),
    st.Page("views/timeline.py", title="Context timeline", icon=":material/stacked_line_chart:"),
    st.Page("views/why_stop.py", title="Why did it stop?", icon=":material/help:"),
    st.Page("views/compaction.py", title="Compaction", icon=":material/compress:"),
    st.Page("views/offloaded.py", title="Offloaded results", icon=":material/inventory_2:"),
    st.Page("views/tools.py", title="Tools", icon=":material/build:"),
    st.Page("views/requests.py", title="Requests", icon=":material/http:"),
    st.Page("views/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("views/data_browser.py", title="Data", icon=":material/table:"),
    st.Page("views/model_settings.py", title="Model settings", icon=":material/tune:"),
]

pg = st.navigation(PAGES)
state.pin_signature()
state.sidebar()
pg.run()
