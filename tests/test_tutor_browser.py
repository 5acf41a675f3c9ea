"""The tutor in a real browser (JupyterLab 4, Chromium; issue 22 item 2, issue 32 item 4), one
lab for the whole story: a wrong answer, Run All, the failing check shows a "hint" button and
says how to get the rungs (not rung 1 itself: the button is there); `checks.hint('shapes')` run
twice prints rungs 1 then 2, which the box shows too, its backticked words rendered as code.
After save the notebook file holds the rungs used: in the widget state JupyterLab saves with the
course's settings (hub/roles.py) and in metadata.tinygpt_hints_used (the course's JupyterLab
extension, hub/labextension, plugin keep-hints). After Kernel > Restart a save before any cell
runs writes an empty widget state, and the file still holds the rungs (the extension's list);
after the set-up cell the check failing again continues from there (its box shows rungs 1 and 2,
the button gives rung 3), and a save holds them in the widget state again (the tutor's ledger,
read back from the file). Validate, where no one can press a button, shows rung 1 and how to get
the next. Last, the defence switched off: the same lab with the plugin disabled, on the notebook
as JupyterLab without it saves it, loses the rungs on that save after a restart."""
import importlib
import json
import re
import time

from tinygpt_course.checks import hints, tutor
from tinygpt_course.testing import catalogue

# lab, page, screenshots; skipped only without /usr/bin/chromium outside CI (CI=true must run it)
pytest_plugins = [f"{__package__}.conftest_browser" if __package__ else "conftest_browser"]

# a right answer with super().__init__() left out: the shared ladder `missing_super_init`
ANSWER = catalogue.answer("multihead", "01_right_comprehension").code.replace("super().__init__()", "pass")
MISTAKE, CHECK = "missing_super_init", "shapes"
USED = [{"lesson": "multihead", "check": CHECK, "mistake": MISTAKE, "rungs": [1, 2, 3]}]
USED_TWO = [{**USED[0], "rungs": [1, 2]}]
PLUGIN = "tinygpt-feedback:keep-hints"     # hub/labextension/index.js


def squashed(text):
    return " ".join(text.split())


def saved_metadata(path):
    """The saved notebook's metadata, or {}."""
    try:
        return json.loads(path.read_text()).get("metadata", {})
    except (OSError, ValueError):
        return {}


def saved(path):
    """The saved notebook's widget state (metadata.widgets' models), or {}."""
    return saved_metadata(path).get("widgets", {}).get(hints.STATE, {}).get("state", {})


def saved_hints(path):
    """The tutor's entries in the saved notebook's widget state, merged as grading reads them."""
    return hints.merged(hints.widget_entries({hints.STATE: {"state": saved(path)}}))


def saved_kept(path):
    """What the saved notebook's metadata.tinygpt_hints_used holds, as written (None: no such key)."""
    return saved_metadata(path).get(hints.KEPT)


def wait_saved(page, path, want, kept, seconds=120):
    """Save (Ctrl+S, again every few seconds: a kernel restart may still be under way) until the
    file is written again with hint entries `want` in its widget state and `kept` (None: no key)
    in metadata.tinygpt_hints_used; returns the models saved."""
    before = path.stat().st_mtime_ns
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        page.keyboard.press("Control+s")
        for _ in range(5):
            time.sleep(1)
            if path.stat().st_mtime_ns != before and (saved_hints(path), saved_kept(path)) == (want, kept):
                return saved(path)
    assert path.stat().st_mtime_ns != before, "the notebook was not saved"
    assert (saved_hints(path), saved_kept(path)) == (want, kept), saved_metadata(path)


def restart_kernel(page):
    """Kernel > Restart Kernel…, confirmed."""
    from playwright.sync_api import expect

    page.locator(".lm-MenuBar-item", has_text="Kernel").click()
    page.locator(".lm-Menu-item", has_text="Restart Kernel…").first.click()
    page.locator(".jp-Dialog").get_by_role("button", name="Confirm Kernel Restart").click()
    expect(page.locator("#jp-main-statusbar")).to_contain_text("| Idle", timeout=120_000)


def run_in_place(page, cell):
    """Run one cell where it is (Ctrl+Enter in its editor)."""
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+Enter")


def test_hints_step_by_step_survive_a_kernel_restart_and_validate_shows_rung_one(lab, page, screenshots, tmp_path):
    from playwright.sync_api import expect

    browser = importlib.import_module(f"{__package__}.test_browser" if __package__ else "test_browser")
    assert ANSWER.count("pass") == 1
    ladder = hints.ladder("multihead", MISTAKE)
    assert "`" in ladder[1]      # rung 2 has code in backticks: it must render as code
    nb, answer, first_code = browser.open_lesson(page, lab)
    answer.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(ANSWER)
    expect(answer.locator(".cm-content")).not_to_contain_text("NotImplementedError")
    browser.run_all(page, first_code)

    check = nb.locator(".jp-CodeCell").filter(has_text=f"checks.check('{CHECK}', globals())")
    out = check.locator(".jp-OutputArea")
    expect(out).to_contain_text("Check failed:", timeout=180_000)
    said = squashed(out.inner_text())
    assert "Module.__init__()" in said and squashed(tutor.pointer(CHECK)) in said, said
    assert squashed(tutor.rung_text(ladder, 1)) not in said     # the button is there: no rung yet
    button = out.get_by_role("button", name="hint")
    expect(button).to_have_count(1)
    shown = out.locator(".tinygpt-hint")
    expect(shown).to_have_count(0)

    # the text route: a new cell below the check, run twice, prints rung 1 then rung 2
    check.locator(".jp-InputPrompt").click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")
    page.keyboard.press("Enter")
    page.keyboard.insert_text(f"checks.hint('{CHECK}')")
    hint_cell = nb.locator(".jp-CodeCell").filter(
        has=page.locator(".cm-content", has_text=re.compile(rf"^checks\.hint\('{CHECK}'\)$")))
    expect(hint_cell).to_have_count(1)
    hint_out = hint_cell.locator(".jp-OutputArea")
    for n in (1, 2):
        run_in_place(page, hint_cell)
        expect(hint_out).to_contain_text(f"Hint {n} of 3", timeout=60_000)
        assert squashed(hint_out.inner_text()) == squashed(tutor.rung_text(ladder, n))
        expect(shown).to_have_count(n, timeout=60_000)        # the box walks the same ladder
    code = shown.nth(1).locator("code")                        # markdown: backticks render as code
    expect(code.first).to_be_visible()
    assert "`" not in shown.nth(1).inner_text() and code.first.inner_text() in ladder[1]
    expect(button).to_be_enabled()

    # save: the notebook file's metadata holds the rungs used, in the widget state and in the
    # extension's list
    path = tmp_path / "lesson" / "multihead.ipynb"
    wait_saved(page, path, USED_TWO, USED_TWO)

    # Kernel > Restart: no widget is left in the kernel, so a save before any cell runs writes an
    # empty widget state; the extension's list still holds the rungs
    restart_kernel(page)
    models = wait_saved(page, path, [], USED_TWO)
    assert not any("tinygpt_hints" in m.get("state", {}) or "tinygpt_hints_used" in m.get("state", {})
                   for m in models.values())
    # the set-up cell's import reads the rungs back from the file
    for attempt in range(3):               # until the cells run in the new kernel
        run_in_place(page, first_code)
        run_in_place(page, hint_cell)      # after the set-up: `checks` is there again, nothing failed yet
        try:
            expect(hint_out).to_contain_text("has not failed in this kernel", timeout=60_000)
            break
        except AssertionError:
            if attempt == 2:
                raise

    # Run All again: the check fails again and its box continues from the rungs used (not rung 1);
    # the button gives rung 3, the last
    browser.run_all(page, first_code)
    expect(out).to_contain_text("Check failed:", timeout=180_000)
    expect(shown).to_have_count(2, timeout=60_000)
    button = out.get_by_role("button", name="hint")
    expect(button).to_be_enabled()
    button.click()
    expect(shown).to_have_count(3, timeout=60_000)
    assert [squashed(t) for t in shown.all_inner_texts()] == \
        [squashed(tutor.rung_text(ladder, i).replace("`", "")) for i in (1, 2, 3)]   # code spans: no backticks
    expect(button).to_be_disabled()     # three rungs: the last one shown
    check.scroll_into_view_if_needed()
    page.screenshot(path=screenshots / "browser_tutor_three_rungs.png")
    run_in_place(page, hint_cell)
    expect(hint_out).to_contain_text("That was the last hint", timeout=60_000)
    models = wait_saved(page, path, USED, USED)
    assert any("tinygpt_hints_used" in m.get("state", {}) for m in models.values())   # the ledger too

    # Validate (headless: no one to press a button) shows rung 1 and how to get the next
    nb.locator(".validate-button").click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Validation Results", timeout=180_000)
    said = squashed(dialog.inner_text())
    page.screenshot(path=screenshots / "browser_tutor_validate.png")
    assert squashed(tutor.rung_text(ladder, 1)) in said and f"checks.hint('{CHECK}')" in said, said
    dialog.get_by_role("button", name="Ok").click()

    # the defence switched off: the plugin disabled (the lab reads page_config.json at each page
    # load), the notebook as JupyterLab saves it without the plugin (the rungs in its widget state
    # only): after Kernel > Restart the same save loses the rungs
    (tmp_path / "lab-app-settings" / "page_config.json").write_text(json.dumps({"disabledExtensions": [PLUGIN]}))
    notebook = json.loads(path.read_text())
    del notebook["metadata"][hints.KEPT]
    path.write_text(json.dumps(notebook))
    page.on("dialog", lambda d: d.accept())   # leave the page even if JupyterLab asks
    page.goto(lab, timeout=120_000)
    expect(page.locator("#jp-main-statusbar")).to_contain_text(re.compile(r"\(ipykernel\) \| Idle"),
                                                               timeout=120_000)
    expect(nb.locator(".jp-CodeCell").filter(has_text=f"checks.check('{CHECK}', globals())")).to_have_count(1)
    assert (saved_hints(path), saved_kept(path)) == (USED, None)
    restart_kernel(page)
    wait_saved(page, path, [], None)
