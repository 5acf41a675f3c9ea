"""The classroom, live: JupyterHub (hub/jupyterhub_config.py) + configurable-http-proxy + nbgrader's
filesystem exchange, with a teacher and two students as real local Unix users (one uid each: the
same exchange and permissions hub/z2jh/values.yaml sets up on Kubernetes).

Before the hub starts, student 2 squats the course's exchange folder; the hub must take it back
for the teacher. The hub's database and cookie secret must be 0600. The teacher logs in (their
course folder is copied in at their server's start, as on Kubernetes), and in a Jupyter terminal
(a login shell would lose the course environment) generates and releases `multihead`. Student 1, in
a real browser: no formgrader; a terminal finds `nbgrader`; their server, kernel and terminal have
the memory cap, and an allocation past it fails with MemoryError; they fetch, answer, validate and
submit. Student 2, on the command line, submits a wrong answer, then tries to list, read, delete
and overwrite what is not theirs in the exchange (refused), and submits a spoof in student 1's
name after student 1's real submission; the teacher collects, collects again with --update (the
spoof is refused: student 1's own submission is kept and graded), autogrades, releases feedback and
exports; the formgrader counts the submissions; the students fetch their feedback.

Needs root, useradd/runuser, configurable-http-proxy, /usr/bin/chromium and /usr/bin/python3 with
venv (`bash course.sh test` installs them as root). Skipped without them, except when CI is set.
Screenshots: screenshots/hub-*.png; hub log and grades: tests/artifacts/hub*. Takes 3-4 minutes
when the test venv is readable by every user, 1.5-2.5 more when it must make one (hub/README.md).
"""
import csv
import json
import os
import pwd
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tinygpt_course.testing import hub as hh
from tinygpt_course.testing import notebooks

REPO = hh.REPO
SHOTS = REPO / "screenshots"
TEACHER, STUDENT1, STUDENT2 = "tgteacher", "tgstudent1", "tgstudent2"
GROUP = "tgstudents"     # the hub lets the group's members in as students
ASSIGNMENT, COURSE_ID, COURSE_DIR = "multihead", "tinygpt", "tinygpt"
MEMORY_MB = 1536         # the students' cap in this test (TINYGPT_LEARNER_MEMORY_MB): the lesson fits
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _answers():
    """The reference answer (source/'s solution cell, markers removed) and a wrong one: no projection."""
    right = notebooks.solution(ASSIGNMENT).strip("\n")
    wrong = re.sub(r"return self\.proj\((.*)\)", r"return \1", right)
    assert wrong != right, "could not make the wrong answer (forward without self.proj)"
    return notebooks.lesson_source(ASSIGNMENT).answer_id, right, wrong


def _skip_or_fail():
    missing = hh.missing_tools()
    if missing and not hh.ci():
        pytest.skip("live hub test needs " + "; ".join(missing) + " (CI=true runs it, and fails without them)")
    assert not missing, "CI is set, and the live hub test needs: " + "; ".join(missing)


def _shot(page, name):
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / f"hub-{name}.png"))


def _login(context, hub, user, password):
    """Log in through the hub's login page; returns the page once JupyterLab is up."""
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", password)
    page.click("#login_submit")
    page.wait_for_url(re.compile(rf"/user/{user}/lab"), timeout=180_000)   # spawn can take a while
    page.locator("#jp-main-dock-panel").wait_for(state="visible", timeout=120_000)
    page.locator("#jp-menu-panel div.lm-MenuBar-itemLabel", has_text="Nbgrader").wait_for(timeout=120_000)
    return page


def _open_nbgrader_menu(page):
    """Open the Nbgrader menu of the menu bar; returns the open menu."""
    label = page.locator("#jp-menu-panel div.lm-MenuBar-itemLabel", has_text="Nbgrader")
    menu = page.locator(".lm-Menu", has=page.locator('li[data-command^="nbgrader:"]'))
    for _ in range(5):
        label.click()
        try:
            menu.wait_for(state="visible", timeout=10_000)
            return menu
        except Exception:
            page.keyboard.press("Escape")
    raise AssertionError("the Nbgrader menu did not open")


def _nbgrader_menu_commands(page):
    menu = _open_nbgrader_menu(page)
    # the menu lists every nbgrader command; Lumino hides those no enabled plugin registered
    cmds = [li.get_attribute("data-command") for li in menu.locator("li[data-command]").all() if li.is_visible()]
    page.keyboard.press("Escape")
    return cmds


def _menu_command(page, command):
    _open_nbgrader_menu(page).locator(f'li[data-command="{command}"]').click()


def _wait_list(page, name, n, timeout=120_000):
    rows = page.locator(f"#{name}_assignments_list > .list_item")
    deadline = time.time() + timeout / 1000
    while time.time() < deadline:
        if rows.count() == n:
            return rows
        page.wait_for_timeout(500)
    raise AssertionError(f"the Assignments panel's {name} list has {rows.count()} rows, not {n}")


def _nbgrader(user, args, hub, role, cwd=None):
    return hh.run_as(user, [str(hub.venv / "bin" / "nbgrader"), *args], hub.role_env(role), cwd=cwd)


# A command in a real Jupyter terminal of the logged-in user: the terminals REST API and its
# websocket, from the page (its cookies and XSRF token), exactly as JupyterLab's Terminal does.
_TERMINAL_JS = """
async ([base, command, marker, timeoutMs]) => {
  const m = document.cookie.match(/(?:^|; )_xsrf=([^;]*)/);
  const headers = {'X-XSRFToken': m ? decodeURIComponent(m[1]) : ''};
  const r = await fetch(base + 'api/terminals', {method: 'POST', headers});
  if (!r.ok) return {out: 'POST api/terminals answered ' + r.status, done: false};
  const name = (await r.json()).name;
  const ws = new WebSocket(base.replace(/^http/, 'ws') + 'terminals/websocket/' + name);
  let out = '';
  const done = await new Promise(resolve => {
    const timer = setTimeout(() => resolve(false), timeoutMs);
    ws.onopen = () => ws.send(JSON.stringify(['stdin', command + '\\r']));
    ws.onmessage = ev => {
      const msg = JSON.parse(ev.data);
      if (msg[0] === 'stdout') { out += msg[1]; if (out.includes(marker)) { clearTimeout(timer); resolve(true); } }
    };
    ws.onerror = () => { clearTimeout(timer); resolve(false); };
  });
  ws.close();
  await fetch(base + 'api/terminals/' + name, {method: 'DELETE', headers});
  return {out, done};
}
"""


def _terminal(page, hub, user, command, timeout=120):
    """Run command in a new Jupyter terminal of user; returns what the terminal printed. The end
    marker is computed by the shell, so the echo of the typed line never matches it."""
    marker = "TG_DONE_42"
    r = page.evaluate(_TERMINAL_JS, [f"{hub.url}/user/{user}/", f'{command}; echo "TG_RC=$?"; echo "TG_DONE_$((40+2))"',
                                     marker, timeout * 1000])
    assert r["done"], f"{user}'s terminal did not finish `{command}` in {timeout}s:\n{r['out'][-3000:]}"
    return r["out"]


def _terminal_rc(out):
    return int(re.findall(r"TG_RC=(\d+)", out)[-1])


def _limits(pid):
    """RLIMIT_DATA (soft) of a process, from /proc: bytes, or None for unlimited."""
    line = next(l for l in Path(f"/proc/{pid}/limits").read_text().splitlines() if l.startswith("Max data size"))
    soft = line.split()[3]
    return None if soft == "unlimited" else int(soft)


def _pids(user, needle):
    """Processes of user whose command line contains needle."""
    uid = pwd.getpwnam(user).pw_uid
    out = []
    for pid in hh.pids_of_uid(uid):
        try:
            if needle.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(pid)
        except FileNotFoundError:
            pass
    return out


def _learner_memory(user):
    """PSS and USS (private) of all of user's processes (server, kernels, terminals), MiB."""
    pss = uss = 0
    for pid in hh.pids_of_uid(pwd.getpwnam(user).pw_uid):
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        kb = {k: int(v) for k, v in re.findall(r"^(\w+):\s+(\d+) kB", text, re.M)}
        pss += kb.get("Pss", 0)
        uss += kb.get("Private_Clean", 0) + kb.get("Private_Dirty", 0)
    return pss / 1024, uss / 1024


def _disabled_extensions(page):
    """The lab extensions JupyterLab's page config switches off for this user."""
    return page.evaluate("JSON.parse(document.getElementById('jupyter-config-data').textContent).disabledExtensions")


def _mode(path):
    return os.lstat(path).st_mode & 0o7777


@pytest.mark.slow
def test_classroom_on_jupyterhub():
    _skip_or_fail()
    from playwright.sync_api import sync_playwright

    grade_id, right, wrong = _answers()
    # not under /tmp: the grading sandbox mounts its own /tmp, which would hide a venv made there
    base = Path(tempfile.mkdtemp(prefix="tinygpt-hub-", dir="/var/tmp"))
    base.chmod(0o755)                  # hub users read the venv and the role config below it
    artifacts = REPO / "tests" / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    users, hub, pw, browser = [], None, None, None
    t0 = time.time()
    stages, last = [], [t0, "venv, users, hub"]

    def mark(next_stage):
        """Close the running stage (for the timings printed at the end) and start the next."""
        now = time.time()
        stages.append(f"{last[1]} {now - last[0]:.0f}s")
        last[:] = [now, next_stage]
    try:
        venv = hh.make_course_venv(base, artifacts / "hub-pip.log")
        t_venv = time.time() - t0
        course_src = hh.course_source_copy(base)    # what the teacher's server start copies in
        passwords = {}
        users.append(GROUP)
        hh.add_group(GROUP, {TEACHER, STUDENT1, STUDENT2})
        # student 2 works on the command line only: left out of the group, the hub must refuse them
        for name, groups in ((TEACHER, ()), (STUDENT1, (GROUP,)), (STUDENT2, ())):
            users.append(name)
            passwords[name] = hh.add_user(name, groups)
        env1, env2 = {}, {}

        # --- a squatter: an exchange left from an old install (1777), where student 2 made the
        # course's folder first (nbgrader's release would stop with "You don't own the directory")
        exchange = base / "exchange"
        exchange.mkdir()
        exchange.chmod(0o1777)
        squat = ("mkdir {0}/{1} && echo trap > {0}/{1}/trap && chmod 777 {0}/{1}").format(exchange, COURSE_ID)
        hh.run_as(STUDENT2, ["sh", "-c", squat], {"PATH": "/usr/bin:/bin"})
        assert (exchange / COURSE_ID).stat().st_uid == hh.uid(STUDENT2)

        hub = hh.Hub(venv, base / "state", exchange, [TEACHER], GROUP, artifacts / "hub.log",
                     course_source=course_src, memory_mb=MEMORY_MB)
        hub.start()
        env1, env2 = hub.role_env("student"), hub.role_env("student")

        mark("state and exchange")
        # --- the hub's own files: the database (ports, token hashes, users) and cookie secret 0600
        db, secret = hub.state / "jupyterhub.sqlite", hub.state / "jupyterhub_cookie_secret"
        assert _mode(db) == 0o600 and _mode(secret) == 0o600, (oct(_mode(db)), oct(_mode(secret)))
        assert _mode(hub.state) == 0o711, oct(_mode(hub.state))
        r = hh.run_as(STUDENT2, ["cat", str(db), str(secret)], env2, check=False)
        assert r.returncode != 0 and not r.stdout, "a student can read the hub's database or cookie secret"
        # --- the exchange: root 1777 (root's), the course folder the teacher's, the squat moved aside
        course_x = exchange / COURSE_ID
        assert _mode(exchange) == 0o1777 and exchange.stat().st_uid == 0, oct(_mode(exchange))
        st = os.lstat(course_x)
        assert (st.st_uid, _mode(course_x)) == (hh.uid(TEACHER), 0o755), \
            f"the course's exchange folder is uid {st.st_uid}, mode {oct(_mode(course_x))}: not the teacher's 0755"
        assert not (course_x / "trap").exists(), "the squatter's folder is still the course's exchange folder"
        made = {d: (os.lstat(course_x / d).st_uid, oct(_mode(course_x / d))) for d in ("outbound", "inbound", "feedback")}
        assert made == {"outbound": (hh.uid(TEACHER), "0o755"), "inbound": (hh.uid(TEACHER), "0o3733"),
                        "feedback": (hh.uid(TEACHER), "0o711")}, made
        aside = list(exchange.glob(f".squatted-{COURSE_ID}-uid{hh.uid(STUDENT2)}-*"))
        assert len(aside) == 1 and (aside[0] / "trap").exists(), list(exchange.iterdir())
        for attack in (f"rm -rf {course_x}", f"mv {course_x} {exchange}/mine", f"mkdir {course_x}/outbound"):
            r = hh.run_as(STUDENT2, ["sh", "-c", attack], env2, check=False)
            assert r.returncode != 0, f"student 2 could `{attack}`"
        assert os.lstat(course_x).st_uid == hh.uid(TEACHER)

        pw = sync_playwright().start()
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)

        mark("the teacher releases in a terminal")
        # --- the teacher: their course folder appears at their server's start; a Jupyter terminal
        # has the course environment; generate and release there
        tctx = browser.new_context(viewport={"width": 1400, "height": 900})
        tp = _login(tctx, hub, TEACHER, passwords[TEACHER])
        course = hh.home(TEACHER) / COURSE_DIR
        assert (course / "nbgrader_config.py").read_bytes() == (REPO / "nbgrader_config.py").read_bytes()
        assert (course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").exists()
        assert course.stat().st_uid == hh.uid(TEACHER) and _mode(course) == 0o700, oct(_mode(course))
        out = _terminal(tp, hub, TEACHER, "command -v nbgrader")
        assert f"{venv}/bin/nbgrader" in out, f"the teacher's terminal does not find the course's nbgrader:\n{out}"
        out = _terminal(tp, hub, TEACHER, f"cd ~/{COURSE_DIR} && nbgrader generate_assignment {ASSIGNMENT} "
                                          f"&& nbgrader release_assignment {ASSIGNMENT}", timeout=600)
        assert _terminal_rc(out) == 0, f"generate/release in the teacher's terminal failed:\n{out[-4000:]}"
        released = course_x / "outbound" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        assert released.exists()
        released_bytes = released.read_bytes()

        mark('log-in refused')
        # --- log-in: a local user who is neither a teacher nor in the students' group is refused
        octx = browser.new_context()
        other = octx.new_page()
        other.goto(f"{hub.url}/hub/login")
        other.fill("#username_input", STUDENT2)
        other.fill("#password_input", passwords[STUDENT2])
        other.click("#login_submit")
        deadline = time.time() + 60      # refused: the login page again with an error; let in: spawning
        while time.time() < deadline and not other.locator(".login_error").is_visible() \
                and "/hub/login" in other.url:
            other.wait_for_timeout(500)
        assert other.locator(".login_error").is_visible() and "/hub/login" in other.url, \
            f"the hub let in {STUDENT2}, who is neither a teacher nor in group {GROUP}: {other.url}"
        octx.close()

        mark('student 1')
        # --- student 1, in the browser: no formgrader; a terminal with nbgrader and the memory cap
        s1ctx = browser.new_context(viewport={"width": 1400, "height": 900})
        s1 = _login(s1ctx, hub, STUDENT1, passwords[STUDENT1])
        _shot(s1, "1-student-lab")
        cmds = _nbgrader_menu_commands(s1)
        assert "nbgrader:open-assignment-list" in cmds, f"student 1 has no Assignment List: {cmds}"
        assert "nbgrader:open-formgrader" not in cmds, f"student 1 has the formgrader in the menu: {cmds}"
        assert "nbgrader:open-course-list" not in cmds, f"student 1 has the course list in the menu: {cmds}"
        teacher_lab = {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:course-list",
                       "@jupyter/nbgrader:create-assignment"}
        assert teacher_lab <= set(_disabled_extensions(s1)), "student 1's JupyterLab has nbgrader's teacher extensions"
        assert not teacher_lab & set(_disabled_extensions(tp)), "the teacher's JupyterLab lacks nbgrader's teacher extensions"
        r = s1.request.get(f"{hub.url}/user/{STUDENT1}/formgrader", max_redirects=0)
        assert r.status in (403, 404), f"a student's /formgrader answered {r.status}"
        r = s1.request.get(f"{hub.url}/user/{STUDENT1}/lab")
        assert "frame-ancestors 'none'" in r.headers.get("content-security-policy", ""), \
            "a student's server should keep JupyterHub's frame-ancestors 'none'"
        out = _terminal(s1, hub, STUDENT1, "command -v nbgrader")
        assert f"{venv}/bin/nbgrader" in out, f"student 1's terminal does not find the course's nbgrader:\n{out}"
        # why terminals are not login shells: with the same environment, a login shell loses the venv
        if re.search(r"^\s*PATH=", Path("/etc/profile").read_text(), re.M):     # Debian's does
            r = hh.run_as(STUDENT1, ["bash", "-l", "-c", "command -v nbgrader || echo not-found"], env1, check=False)
            assert "not-found" in r.stdout, f"a login shell kept the course's PATH here: {r.stdout}"
        cap = MEMORY_MB * 2 ** 20
        (server1,) = _pids(STUDENT1, "jupyterhub-singleuser")
        assert _limits(server1) == cap, f"student 1's server has RLIMIT_DATA {_limits(server1)}, not {cap}"
        (tserver,) = _pids(TEACHER, "jupyterhub-singleuser")
        assert _limits(tserver) is None, "the teacher's server should not be capped"
        grab = "python -c 'b = bytearray({}); print(\"TG_GOT\", len(b) >> 20, \"MiB\")'"
        out = _terminal(s1, hub, STUDENT1, grab.format(cap + 2 ** 28))
        assert "MemoryError" in out and "TG_GOT" not in out.replace('"TG_GOT"', ""), \
            f"an allocation past the cap should fail with MemoryError in the terminal:\n{out[-2000:]}"
        out = _terminal(s1, hub, STUDENT1, grab.format(cap // 4))
        assert f"TG_GOT {cap // 4 >> 20} MiB" in out, f"an allocation under the cap failed:\n{out[-2000:]}"

        # fetch, answer, validate, submit
        _menu_command(s1, "nbgrader:open-assignment-list")
        s1.locator(".lm-TabBar-tab .lm-TabBar-tabLabel", has_text="Assignments").wait_for()
        rows = _wait_list(s1, "released", 1)
        assert rows.first.locator(".item_name").inner_text().strip() == ASSIGNMENT
        _shot(s1, "2-student-released")
        rows.first.locator(".item_status button", has_text="Fetch").click()
        rows = _wait_list(s1, "fetched", 1)
        nb_path = hh.home(STUDENT1) / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        assert nb_path.exists(), "fetching in the Assignments panel should put the notebook in the student's home"

        s1.locator("#fetched_assignments_list a", has_text=ASSIGNMENT).first.click()
        item = s1.locator(f"#nbgrader-{COURSE_ID}-{ASSIGNMENT}")
        item.locator(".list_item .item_name a", has_text=ASSIGNMENT).first.click()
        answer = s1.locator(".jp-Notebook .jp-Cell").filter(has_text="raise NotImplementedError()").first
        answer.wait_for(timeout=120_000)
        answer.scroll_into_view_if_needed()
        answer.locator(".cm-content").click()
        s1.keyboard.press("Control+a")
        s1.keyboard.insert_text(right)
        s1.keyboard.press("Control+s")
        deadline, saved_answer = time.time() + 60, None
        while time.time() < deadline and saved_answer != right.strip():
            time.sleep(0.5)
            try:
                saved = json.loads(nb_path.read_text())
            except ValueError:           # caught mid-write
                continue
            saved_answer = "".join("".join(c["source"]) for c in saved["cells"]
                                   if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id).strip()
        assert saved_answer == right.strip(), "the saved answer cell is not the reference answer"
        _shot(s1, "3-student-answered")

        # the whole lesson in the learner's own (capped) kernel: Run > Run All Cells
        s1.locator("#jp-menu-panel div.lm-MenuBar-itemLabel", has_text="Run").first.click()
        s1.locator('li[data-command="runmenu:run-all"], li[data-command="notebook:run-all-cells"]').first.click()
        prompts = s1.locator(".jp-Notebook .jp-CodeCell .jp-InputPrompt")
        deadline = time.time() + 240
        while time.time() < deadline:
            texts = prompts.all_inner_texts()
            if texts and not any("*" in t for t in texts) and re.search(r"\d", texts[-1]):
                break
            s1.wait_for_timeout(1000)
        errors = s1.locator(".jp-Notebook .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        assert re.search(r"\d", prompts.all_inner_texts()[-1]), "Run All did not reach the last cell"
        s1.wait_for_timeout(2000)
        steady = _learner_memory(STUDENT1)

        peak, sampling = [0.0, 0.0], [True]

        def sample():
            while sampling[0]:
                peak[:] = [max(a, b) for a, b in zip(peak, _learner_memory(STUDENT1))]
                time.sleep(0.2)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        s1.locator(".jp-NotebookPanel-toolbar").get_by_text("Validate", exact=True).click()
        dialog = s1.locator(".jp-Dialog")
        try:
            dialog.wait_for(timeout=240_000)
        finally:
            sampling[0] = False
            sampler.join()
        print(f"hub learner memory (all of {STUDENT1}'s processes, MiB): after the whole lesson PSS {steady[0]:.0f}, "
              f"USS {steady[1]:.0f}; peak during Validate PSS {peak[0]:.0f}, USS {peak[1]:.0f} "
              f"({errors.count()} stderr outputs in the lesson)")
        s1.wait_for_timeout(500)
        _shot(s1, "4-student-validated")
        dialog_text = dialog.inner_text()
        assert "Success" in dialog_text, f"Validate did not pass the reference answer (under the cap):\n{dialog_text[:2000]}"
        dialog.locator("button").last.click()
        kernels = _pids(STUDENT1, "ipykernel")
        assert kernels, "student 1's notebook has no kernel running"
        assert all(_limits(k) == cap for k in kernels), "student 1's kernels do not have the memory cap"

        s1.locator(".lm-TabBar-tab .lm-TabBar-tabLabel", has_text="Assignments").click()
        rows = _wait_list(s1, "fetched", 1)
        rows.first.locator(".item_status button", has_text="Submit").click()
        _wait_list(s1, "submitted", 1)
        _shot(s1, "5-student-submitted")
        inbound = course_x / "inbound"
        (real1,) = [p.name for p in inbound.iterdir() if p.name.startswith(f"{STUDENT1}+{ASSIGNMENT}+")]

        mark('student 2')
        # --- student 2, on the command line: a wrong answer (forward skips the projection)
        _nbgrader(STUDENT2, ["fetch_assignment", ASSIGNMENT], hub, "student")
        edit = ("import json, sys; p = sys.argv[1]; nb = json.load(open(p))\n"
                "[c.update(source=sys.argv[3]) for c in nb['cells']"
                " if c['metadata'].get('nbgrader', {}).get('grade_id') == sys.argv[2]]\n"
                "json.dump(nb, open(p, 'w'), indent=1)")
        nb2 = hh.home(STUDENT2) / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        hh.run_as(STUDENT2, [str(venv / "bin" / "python"), "-c", edit, str(nb2), grade_id, wrong], env2)
        _nbgrader(STUDENT2, ["submit", ASSIGNMENT], hub, "student")

        mark('privacy')
        # --- privacy: students read neither each other's work nor the teacher's course; nobody but
        # the teacher lists the submissions, deletes them or changes the release
        subs = sorted(p.name for p in inbound.iterdir())
        assert any(s.startswith(f"{STUDENT2}+{ASSIGNMENT}+") for s in subs), subs
        r = hh.run_as(STUDENT1, ["ls", str(inbound)], env1, check=False)
        assert r.returncode != 0, f"student 1 can list the exchange's inbound (submissions): {r.stdout}"
        r = hh.run_as(STUDENT2, ["sh", "-c", f"cat {inbound}/{STUDENT1}+*/{ASSIGNMENT}.ipynb"], env2, check=False)
        assert r.returncode != 0 and "self.heads" not in r.stdout, "student 2 can read student 1's submission"
        r = hh.run_as(STUDENT1, ["cat", str(nb2)], env1, check=False)
        assert r.returncode != 0, "student 1 can read student 2's notebook in their home"
        r = hh.run_as(STUDENT1, ["cat", str(course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")],
                      env1, check=False)
        assert r.returncode != 0 and "BEGIN SOLUTION" not in r.stdout, \
            "student 1 can read the teacher's source notebook (with the solution)"
        r = hh.run_as(STUDENT1, ["ls", str(course)], env1, check=False)
        assert r.returncode != 0, "student 1 can list the teacher's course folder"
        outbound_nb = course_x / "outbound" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        # A submission's folder is 0777 (nbgrader's choice, so the teacher can delete it): what keeps
        # it safe is that nobody but the teacher can list inbound/, and its name ends in 72 random
        # bits. So the attacks go by the names a student can know.
        for attack in (f"rm -r {inbound}", f"rm -r {inbound}/{STUDENT1}+*", f"mv {inbound} {exchange}/gone",
                       f"mv {inbound}/{STUDENT1}+* {inbound}/{STUDENT2}+{ASSIGNMENT}+x",
                       f"cp {nb2} {outbound_nb}", f"rm -r {course_x}/outbound/{ASSIGNMENT}",
                       f"mkdir {course_x}/outbound/{ASSIGNMENT}-extra", f"mv {course_x}/outbound {exchange}/x"):
            r = hh.run_as(STUDENT2, ["sh", "-c", attack], env2, check=False)
            assert r.returncode != 0, f"student 2 could `{attack}`"
            assert (inbound / real1 / f"{ASSIGNMENT}.ipynb").exists(), \
                f"student 1's submission is gone after `{attack}`: {sorted(os.listdir(inbound))}"
        assert outbound_nb.read_bytes() == released_bytes, "the released notebook changed"

        mark('the teacher')
        # --- the teacher: the formgrader inside JupyterLab (framing allowed for them only)
        cmds = _nbgrader_menu_commands(tp)
        assert "nbgrader:open-formgrader" in cmds, f"the teacher has no formgrader in the menu: {cmds}"
        r = tp.request.get(f"{hub.url}/user/{TEACHER}/formgrader")
        assert r.status == 200, f"the teacher's /formgrader answered {r.status}"
        assert "frame-ancestors 'self'" in r.headers.get("content-security-policy", ""), \
            "the teacher's framing header is not relaxed: the formgrader cannot show inside JupyterLab"
        _menu_command(tp, "nbgrader:open-formgrader")
        frame = tp.frame_locator("iframe").first
        frame.locator("text=" + ASSIGNMENT).first.wait_for(timeout=120_000)
        # the formgrader grades with the course's own nbgrader_config.py (the teacher role loads it)
        frame.get_by_text("Current configuration", exact=False).first.click()
        frame.get_by_text("add_missing_cells", exact=False).first.wait_for(timeout=30_000)
        _shot(tp, "6-teacher-formgrader")

        mark('the teacher collects; a spoof')
        # --- collect; then student 2 submits in student 1's name (newer than student 1's own); the
        # teacher collects again with --update: the spoof is refused, student 1's submission stays
        _nbgrader(TEACHER, ["collect", ASSIGNMENT], hub, "teacher", cwd=course)
        _nbgrader(STUDENT2, ["submit", ASSIGNMENT, f"--student={STUDENT1}"], hub, "student")
        spoofs = [p.name for p in inbound.iterdir() if p.name.startswith(f"{STUDENT1}+") and p.name != real1]
        assert len(spoofs) == 1 and inbound.joinpath(spoofs[0]).stat().st_uid == hh.uid(STUDENT2), spoofs
        r = _nbgrader(TEACHER, ["collect", "--update", ASSIGNMENT], hub, "teacher", cwd=course)
        (artifacts / "hub-collect-update.log").write_text(r.stdout + r.stderr)
        assert spoofs[0] in r.stdout + r.stderr, f"collect --update does not report the spoof:\n{r.stderr[-3000:]}"
        kept = course / "submitted" / STUDENT1 / ASSIGNMENT
        real_ts = real1.split("+")[2]
        assert (kept / "timestamp.txt").read_text().strip() == real_ts, \
            "collect --update replaced student 1's own submission with student 2's spoof"

        mark('the teacher grades')
        for args in (["autograde", ASSIGNMENT], ["generate_feedback", ASSIGNMENT],
                     ["release_feedback", ASSIGNMENT], ["export", "--to", "grades.csv"]):
            _nbgrader(TEACHER, args, hub, "teacher", cwd=course)
        grades = {row["student_id"]: row for row in csv.DictReader(open(course / "grades.csv"))}
        shutil.copy(course / "grades.csv", artifacts / "hub-grades.csv")
        g1, g2 = grades[STUDENT1], grades[STUDENT2]
        assert float(g1["max_score"]) == sum(notebooks.points(ASSIGNMENT).values()), g1
        assert float(g1["score"]) == float(g1["max_score"]), f"student 1 (reference answer) lost points: {g1}"
        assert float(g2["score"]) < float(g2["max_score"]), f"student 2 (no projection) got full marks: {g2}"
        # the formgrader's Manage Assignments counts the collected submissions
        r = tp.request.get(f"{hub.url}/user/{TEACHER}/formgrader/api/assignments")
        counts = {a["name"]: a["num_submissions"] for a in r.json()}
        assert counts.get(ASSIGNMENT) == 2, f"the formgrader counts {counts} submissions"
        tp.goto(f"{hub.url}/user/{TEACHER}/formgrader/manage_assignments")
        cell = tp.locator("tr", has_text=ASSIGNMENT).locator(".num-submissions").first
        deadline = time.time() + 60
        while time.time() < deadline and cell.inner_text().strip() != "2":
            tp.wait_for_timeout(500)
        _shot(tp, "9-teacher-manage-assignments")
        assert cell.inner_text().strip() == "2", f"Manage Assignments shows {cell.inner_text()!r} submissions"

        mark('feedback')
        # --- feedback: student 1 in the browser, student 2 on the command line; nobody lists it
        s1.locator(".lm-TabBar-tab .lm-TabBar-tabLabel", has_text="Assignments").click()
        s1.locator("#refresh_assignments_list").click()
        fb_dir = hh.home(STUDENT1) / ASSIGNMENT / "feedback"
        fb1 = []
        for _ in range(3):     # a click that lands while the list is being redrawn is lost: try again
            _wait_list(s1, "submitted", 1)
            button = s1.locator("#submitted_assignments_list button", has_text="Fetch Feedback").first
            button.wait_for(timeout=60_000)
            button.click()
            deadline = time.time() + 30
            while time.time() < deadline and not fb1:
                fb1 = list(fb_dir.glob(f"*/{ASSIGNMENT}.html"))
                time.sleep(0.5)
            if fb1:
                break
        assert fb1, "student 1's feedback HTML did not arrive in their home"
        view = s1.locator("#submitted_assignments_list a", has_text="view feedback").first
        view.wait_for(timeout=60_000)
        view.click()      # opens the feedback itself (hub/labextension), not only its folder
        s1.locator(".lm-TabBar-tab .lm-TabBar-tabLabel", has_text=f"{ASSIGNMENT}.html").wait_for(timeout=60_000)
        s1.frame_locator(".jp-HTMLViewer iframe").first.get_by_text("Score", exact=False).first.wait_for(timeout=60_000)
        _shot(s1, "7-student-feedback")
        _nbgrader(STUDENT2, ["fetch_feedback", ASSIGNMENT], hub, "student")
        fb2 = list((hh.home(STUDENT2) / ASSIGNMENT / "feedback").glob(f"*/{ASSIGNMENT}.html"))
        assert fb2, "student 2's feedback HTML did not arrive in their home"
        score = lambda html: re.search(r"Score:\s*([\d.]+)\s*/\s*([\d.]+)", html)
        m1, m2 = score(fb1[0].read_text()), score(fb2[0].read_text())
        assert m1 and m1.group(1) == m1.group(2), "student 1's feedback does not show full marks"
        assert m2 and float(m2.group(1)) < float(m2.group(2)), "student 2's feedback shows full marks"
        feedback_x = course_x / "feedback"
        assert len(list(feedback_x.iterdir())) == 2
        for attack in (f"ls {feedback_x}", f"cat {feedback_x}/*.html", f"rm -rf {feedback_x}"):
            r = hh.run_as(STUDENT2, ["sh", "-c", attack], env2, check=False)
            assert r.returncode != 0 and "Score" not in r.stdout, f"student 2 could `{attack}`"
        assert len(list(feedback_x.iterdir())) == 2
        s1.goto(f"{hub.url}/user/{STUDENT1}/files/{ASSIGNMENT}/feedback/{fb1[0].parent.name}/{ASSIGNMENT}.html")
        s1.wait_for_load_state()
        _shot(s1, "8-student-feedback-html")
        mark("end")
        print("hub test stages (each until the next):", "; ".join(stages))
        print(f"hub test: venv {t_venv:.0f}s, total {time.time() - t0:.0f}s; "
              f"grades {STUDENT1} {g1['score']}/{g1['max_score']}, {STUDENT2} {g2['score']}/{g2['max_score']}")
    finally:
        t1 = time.time()
        problems = []

        def attempt(what, fn, *args):
            """One clean-up step; a failing one must not stop the ones after it."""
            try:
                fn(*args)
            except Exception as e:  # noqa: BLE001
                problems.append(f"{what}: {e!r}")

        if browser is not None:
            attempt("closing the browser", browser.close)
        if pw is not None:
            attempt("stopping playwright", pw.stop)
        if hub is not None:
            attempt("stopping the hub", hub.stop)
        t2 = time.time()
        for name in users[1:]:
            attempt(f"removing {name}", hh.remove_user, name)
        if users:
            attempt(f"removing group {GROUP}", hh.remove_group, GROUP)
        t3 = time.time()
        shutil.rmtree(base, ignore_errors=True)
        print(f"hub test clean-up: browser and hub {t2 - t1:.0f}s, users {t3 - t2:.0f}s, "
              f"files {time.time() - t3:.0f}s" + "".join(f"\n  {p}" for p in problems))
