"""The what-if on the Model settings page in a real browser (Debian chromium through Playwright against
`streamlit run`), over a real Claude Code session imported from tests/fixtures: the replay's sentence is
engine.replay's, its table and per-call chart are drawn, nothing fails. Screenshot:
tests/artifacts/screenshots/whatif.png."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dashboard.analysis import whatif
from tests.browser.test_dashboard_browser import (  # noqa: F401 (browser and page are fixtures)
    _check_page,
    _open,
    _serve,
    _settle,
    _shot_whole_page,
    browser,
    page,
)
from tests.test_whatif_page import CLAUDE, LOW, imported, replayed

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def served_claude(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    base = tmp_path_factory.mktemp("browser_whatif")
    db = base / "cc.db"
    sid, recorded = imported(db, *sorted((CLAUDE / "compact_auto" / "transcripts").glob("*.jsonl")))
    with _serve([db], base) as server:
        yield {**server, "sid": sid, "recorded": recorded}


def test_the_what_if_replays_a_real_session_and_says_what_replay_session_says(
    served_claude: dict[str, object],
    page: object,  # noqa: F811 (the fixture imported above)
) -> None:
    _open(page, f"{served_claude['url']}/model_settings?session=cc::{served_claude['sid']}")
    page.get_by_role("heading", name="What if", exact=True).wait_for()
    page.get_by_text("Replay this session", exact=True).click()
    _settle(page)
    for label, value in (
        ("trigger (prompt tokens)", LOW.trigger), ("keep (recent tool uses)", LOW.keep),
        ("compact_20260112 trigger", LOW.provider_compact_trigger),
        ("ctxdesk compaction trigger (share of the limit)", LOW.ctxdesk_compact_share),
    ):  # fmt: skip
        box = page.get_by_label(label, exact=True)
        box.fill(str(value))
        box.press("Enter")
        _settle(page)
    direct = replayed(served_claude["recorded"], LOW)  # engine.replay.replay_session itself
    sentence = whatif.headline(direct)
    page.get_by_text(sentence, exact=True).wait_for()
    page.get_by_text(whatif.fidelity(direct), exact=True).wait_for()
    # The chart is drawn after the sentence (and below the timeline's own chart): wait for its panels.
    for title in ("Prompt tokens", "Cache reads", "Cost so far (USD)"):
        page.locator(".js-plotly-plot").get_by_text(title, exact=True).first.wait_for()
    _check_page(page, "what if")
    _shot_whole_page(page, "whatif")
