"""The tutor in a real browser (JupyterLab 4, Chromium; issue 22 item 2): a wrong answer, Run All,
the failing check shows a "hint" button; pressed three times it shows the three rungs of the
mistake's ladder in order; after save the notebook file's metadata holds the rungs used (the
widget state JupyterLab saves with the course's settings, hub/roles.py); and Validate, where
widgets do not render, shows rung 1 and how to get the next."""
import importlib
import json
import time

from tinygpt_course.checks import hints, tutor
from tinygpt_course.testing import catalogue

# lab, page, screenshots; skipped only without /usr/bin/chromium outside CI (CI=true must run it)
pytest_plugins = [f"{__package__}.conftest_browser" if __package__ else "conftest_browser"]

# a right answer with super().__init__() left out: the shared ladder `missing_super_init`
ANSWER = catalogue.answer("multihead", "01_right_comprehension").code.replace("super().__init__()", "pass")
MISTAKE, CHECK = "missing_super_init", "shapes"


def squashed(text):
    return " ".join(text.split())


def saved_hints(path):
    """The tutor's states in the saved notebook's widget state (metadata.widgets), or []."""
    state = json.loads(path.read_text()).get("metadata", {}).get("widgets", {}) \
        .get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    return [m["state"]["tinygpt_hints"] for m in state.values() if "tinygpt_hints" in m.get("state", {})]


def test_hint_button_shows_three_rungs_in_order_and_the_notebook_keeps_them(lab, page, screenshots, tmp_path):
    from playwright.sync_api import expect

    browser = importlib.import_module(f"{__package__}.test_browser" if __package__ else "test_browser")
    assert ANSWER.count("pass") == 1
    ladder = hints.ladder("multihead", MISTAKE)
    nb, answer, first_code = browser.open_lesson(page, lab)
    answer.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(ANSWER)
    expect(answer.locator(".cm-content")).not_to_contain_text("NotImplementedError")
    browser.run_all(page, first_code)

    check = nb.locator(".jp-CodeCell").filter(has_text=f"checks.check('{CHECK}', globals())")
    out = check.locator(".jp-OutputArea")
    expect(out).to_contain_text("Check failed:", timeout=180_000)
    assert "Module.__init__()" in squashed(out.inner_text())
    button = out.get_by_role("button", name="hint")
    expect(button).to_have_count(1)
    shown = out.locator(".tinygpt-hint")
    expect(shown).to_have_count(0)
    for n in (1, 2, 3):
        button.click()
        expect(shown).to_have_count(n, timeout=60_000)
        assert [squashed(t) for t in shown.all_inner_texts()] == \
            [squashed(tutor.rung_text(ladder, i)) for i in range(1, n + 1)]
    expect(button).to_be_disabled()     # three rungs: the last one shown
    check.scroll_into_view_if_needed()
    page.screenshot(path=screenshots / "browser_tutor_three_rungs.png")

    # save: the notebook file's metadata holds the rungs used
    path = tmp_path / "lesson" / "multihead.ipynb"
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 120
    while saved_hints(path) == [] and time.monotonic() < deadline:
        time.sleep(1)
    assert saved_hints(path) == [{"lesson": "multihead", "check": CHECK, "mistake": MISTAKE, "rungs": [1, 2, 3]}]

    # Validate (headless: no widget renders) shows rung 1 and how to get the next
    nb.locator(".validate-button").click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Validation Results", timeout=180_000)
    said = squashed(dialog.inner_text())
    page.screenshot(path=screenshots / "browser_tutor_validate.png")
    assert squashed(tutor.rung_text(ladder, 1)) in said and f"checks.hint('{CHECK}')" in said, said
    dialog.get_by_role("button", name="Ok").click()
