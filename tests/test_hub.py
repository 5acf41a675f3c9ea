"""The classroom, live: JupyterHub (hub/jupyterhub_config.py) + configurable-http-proxy (its own
process, hub/proxy.py) + nbgrader's filesystem exchange, with a teacher and two students as real
local Unix users (one uid each: the same exchange and permissions hub/z2jh/values.yaml sets up on
Kubernetes), installed as hub/README.md says: the users' venv by `course.sh setup hub` (the course
library not editable), the hub's checkout readable by the teachers' group alone.

Before the hub starts, student 2 squats the course's exchange folder; the hub must take it back
for the teacher. The hub's database and cookie secret must be 0600. The teacher logs in (their
course folder is copied in from the checkout at their server's start, as on Kubernetes), and in a
Jupyter terminal (a login shell would lose the course environment) generates and releases
`multihead`. tinygpt-roster makes student 1 from a class list (password, group, private home,
gradebook record with their name). Nothing a student can read holds a solution line. Student 1,
in a real browser: no formgrader; a terminal finds `nbgrader`; their server, kernel and terminal
have the memory cap, and an allocation past it fails with MemoryError; they fetch, answer and run
the lesson; the hub restarts mid-lesson and their server, kernel (a variable) and notebook stay;
they validate and submit. Student 2, on the command line, submits a wrong answer, then tries to
list, read, delete and overwrite what is not theirs in the exchange (refused), and submits a spoof
in student 1's name after student 1's real submission; the teacher collects, collects again with
--update (the spoof is refused: student 1's own submission is kept and graded), autogrades (no
"checksum has changed" warning), autogrades once more through the formgrader (the teacher's memory
then), releases feedback and exports (student 1's name in it); the formgrader counts the
submissions; the students fetch their feedback. Grading on submit (the hub's grading service, on
for head, and block as an exam, from the start): student 2 joins the class's group and logs in;
both students press Submit on head in the Assignment List (1 right, 2 wrong); the hub stops right
after (the service with it) and starts again: each submission is graded once (queue, gradebook,
hub log) and each student's Grading panel shows their own score per check, nobody else's (nor
does the service's api/mine answer); student 1's exam shows "received" only; their third
grading of the day is held, the panel saying until when. Both students are refused every file of source/,
tests/catalogue/ and docs/ by every path they could know. Last, student 1's server as a unit: three
children asking twice the cap together do not get it; setsid, nohup and /dev/shm do not survive
Stop My Server, nor the idle culler (jupyterhub-idle-culler, a 20 s timeout switched on at the end).

Needs root, useradd/runuser, configurable-http-proxy, /usr/bin/chromium, /usr/bin/python3 with
venv and cgroups (`bash course.sh test` installs what it can as root). Skipped without them,
except when CI is set. Screenshots: screenshots/hub-*.png; hub log and grades: tests/artifacts/hub*.
Takes 7-10 minutes on a busy 2-core machine, 2-5 more to make the users' venv
(TINYGPT_HUB_TEST_VENV=/path reuses one made by `course.sh setup hub`).
"""
import csv
import json
import os
import pwd
import re
import shutil
import subprocess
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
TEACHERS_GROUP = "tgteachers"   # who may read the hub's checkout (source/, the catalogue, the guide)
ASSIGNMENT, COURSE_ID, COURSE_DIR = "multihead", "tinygpt", "tinygpt"
FIRST, LAST, EMAIL = "Ada", "Lovelace", "ada@example.org"     # student 1 on the class list
MEMORY_MB = 1536         # the students' cap in this test (TINYGPT_LEARNER_MEMORY_MB): the lesson fits
# grading on submit (hub/README.md): the checkout's nbgrader_config.py turns the grading service on
# for head (graded as submitted) and block (an exam: its learner is told "received" only), before the
# hub starts. Two gradings a learner a day: a learner's third submission is held whatever the
# machine's speed (two a minute, so the first two are never held by the minute's limit)
GRADED, EXAM = "head", "block"
GRADING_CONFIG = f"""
# the live hub test's grading on submit (tests/test_hub.py)
c.GradingService.assignments = [{GRADED!r}]
c.GradingService.received_only = [{EXAM!r}]
c.GradingService.per_minute = 2
c.GradingService.per_day = 2
"""
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _answers():
    """The reference answer (source/'s solution cell, markers removed) and a wrong one: no projection."""
    right = notebooks.solution(ASSIGNMENT).strip("\n")
    wrong = re.sub(r"return self\.proj\((.*)\)", r"return \1", right)
    assert wrong != right, "could not make the wrong answer (forward without self.proj)"
    return notebooks.lesson_source(ASSIGNMENT).answer_id, right, wrong


def _graded_answers():
    """GRADED's reference answer, and a wrong one: the future not masked out."""
    right = notebooks.solution(GRADED).strip("\n")
    wrong = re.sub(r"^.*masked_fill.*\n", "", right, flags=re.M)
    assert wrong != right, "could not make the wrong answer (no mask)"
    return notebooks.lesson_source(GRADED).answer_id, right, wrong


# python -c EDIT notebook grade_id source: the answer cell's source replaced (as the learner)
_EDIT = ("import json, sys; p = sys.argv[1]; nb = json.load(open(p))\n"
         "[c.update(source=sys.argv[3]) for c in nb['cells']"
         " if c['metadata'].get('nbgrader', {}).get('grade_id') == sys.argv[2]]\n"
         "json.dump(nb, open(p, 'w'), indent=1)")


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
    deadline = time.time() + 180                                 # spawn can take a while
    while not re.search(rf"/user/{user}/lab", page.url):
        if time.time() > deadline:
            try:
                text = page.locator("body").inner_text(timeout=5_000)
            except Exception as e:  # noqa: BLE001
                text = f"(the page's text could not be read: {e!r})"
            _shot(page, f"login-{user}-stuck")
            raise AssertionError(f"{user}'s log-in did not reach JupyterLab in 180 s; the page is {page.url}:\n"
                                 + "\n".join(text.split("\n")[:30]))
        page.wait_for_timeout(1_000)
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


# Code run in the kernel of the learner's open notebook, from the page: its session, then the
# kernel's websocket (Jupyter's JSON messages), as JupyterLab's notebook does.
_KERNEL_JS = """
async ([base, path, code, timeoutMs]) => {
  const m = document.cookie.match(/(?:^|; )_xsrf=([^;]*)/);
  const headers = {'X-XSRFToken': m ? decodeURIComponent(m[1]) : ''};
  const r = await fetch(base + 'api/sessions', {headers});
  if (!r.ok) return {out: 'GET api/sessions answered ' + r.status, done: false};
  const s = (await r.json()).find(x => x.path.endsWith(path));
  if (!s) return {out: 'no session for ' + path, done: false};
  const kid = s.kernel.id, msgId = 'tg-' + Math.random();
  const ws = new WebSocket(base.replace(/^http/, 'ws') + 'api/kernels/' + kid + '/channels?session_id=tg-' + Date.now());
  let out = '';
  const done = await new Promise(resolve => {
    const timer = setTimeout(() => resolve(false), timeoutMs);
    ws.onopen = () => ws.send(JSON.stringify({
      header: {msg_id: msgId, msg_type: 'execute_request', username: '', session: 'tg', version: '5.3',
               date: new Date().toISOString()},
      parent_header: {}, metadata: {}, channel: 'shell', buffers: [],
      content: {code, silent: false, store_history: false, user_expressions: {}, allow_stdin: false,
                stop_on_error: true}}));
    ws.onmessage = ev => {
      if (typeof ev.data !== 'string') return;
      const msg = JSON.parse(ev.data);
      if (!msg.parent_header || msg.parent_header.msg_id !== msgId) return;
      if (msg.msg_type === 'stream') out += msg.content.text;
      if (msg.msg_type === 'error') out += msg.content.ename + ': ' + msg.content.evalue;
      if (msg.msg_type === 'status' && msg.content.execution_state === 'idle') { clearTimeout(timer); resolve(true); }
    };
    ws.onerror = () => { clearTimeout(timer); resolve(false); };
  });
  ws.close();
  return {kernel: kid, out, done};
}
"""


def _in_kernel(page, hub, user, notebook, code, timeout=120):
    """Run code in the kernel of user's open notebook; returns (kernel id, what it printed)."""
    r = page.evaluate(_KERNEL_JS, [f"{hub.url}/user/{user}/", notebook, code, timeout * 1000])
    assert r["done"], f"{user}'s kernel did not run `{code}` in {timeout}s: {r['out'][-2000:]}"
    return r["kernel"], r["out"]


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


def _memory(user):
    """PSS, USS (private) and anonymous memory of user's processes, MiB, by kind: the single-user
    server, kernels (ipykernel, the grading template and its forks), everything else (terminals,
    nbgrader, the grading sandbox's re-runs), and in all. Anonymous memory (heap, tensors) is what
    each further learner adds once the libraries' pages are shared; USS also counts library pages
    that no other process maps yet."""
    parts = {"server": [0, 0, 0], "kernels": [0, 0, 0], "other": [0, 0, 0]}
    for pid in hh.pids_of_uid(pwd.getpwnam(user).pw_uid):
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        kb = {k: int(v) for k, v in re.findall(r"^(\w+):\s+(\d+) kB", text, re.M)}
        kind = "server" if b"jupyterhub-singleuser" in cmd else \
            "kernels" if (b"ipykernel" in cmd or b"kernelfork" in cmd) else "other"
        parts[kind][0] += kb.get("Pss", 0) / 1024
        parts[kind][1] += (kb.get("Private_Clean", 0) + kb.get("Private_Dirty", 0)) / 1024
        parts[kind][2] += kb.get("Anonymous", 0) / 1024
    parts["all"] = [sum(v[i] for v in parts.values()) for i in range(3)]
    return parts


def _learner_memory(user):
    """PSS, USS and anonymous memory of all of user's processes (server, kernels, terminals), MiB."""
    return tuple(_memory(user)["all"])


def _show(parts):
    return ", ".join(f"{k} PSS {v[0]:.0f} USS {v[1]:.0f} anon {v[2]:.0f}" for k, v in parts.items())


def _cgroup_of(pid, controller="memory"):
    """The cgroup path of a process in a v1 controller's hierarchy (or v2's, controller '')."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if (controller in names.split(",")) if controller else names == "":
            return path
    return None


def _cgroup_dir(pid):
    """The folder of a process's memory cgroup (v1) or its cgroup (v2)."""
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return Path("/sys/fs/cgroup") / _cgroup_of(pid, "").lstrip("/")
    return Path("/sys/fs/cgroup/memory") / _cgroup_of(pid).lstrip("/")


# Three children of 1 GiB each (each under the per-process RLIMIT_DATA, together twice the
# learner's cap), every page written; each says when it holds its GiB, then waits.
_GREEDY = r"""
import os, signal, sys, time
kids = []
for i in range(3):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        block = b'x' * (1 << 30)
        os.write(w, b'held')
        time.sleep(3600)
        os._exit(0)
    os.close(w)
    kids.append((pid, r))
held = killed = 0
for pid, r in kids:
    if os.read(r, 4) == b'held':
        held += 1
for pid, r in kids:
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        continue
    if got and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        killed += 1
alive = []
for pid, r in kids:
    try:
        os.kill(pid, 0)
        alive.append(pid)
    except ProcessLookupError:
        pass
print('TG_GREEDY', 'alive', len(alive), 'killed', killed, 'said-held', held)
for pid in alive:
    os.kill(pid, signal.SIGKILL)
"""


def _leave_behind(page, hub, user, tag, shm, size):
    """From a learner's terminal (closed after): a setsid'd sleep, a nohup'd python and a /dev/shm
    file of `size` bytes, all outliving the terminal."""
    _terminal(page, hub, user, f"setsid sleep {tag} </dev/null >/dev/null 2>&1 & "
              f"nohup python -c 'import time; time.sleep({tag + 1})' </dev/null >/dev/null 2>&1 & "
              f"head -c {size} /dev/zero > {shm}; sleep 1")
    assert _pids(user, str(tag)) and _pids(user, f"time.sleep({tag + 1})") and shm.exists(), \
        f"the background processes or the /dev/shm file did not start: {hh.pids_of_uid(hh.uid(user))}"


def _all_gone(user, shm, unit, by):
    """No process of the user, no /dev/shm file, no cgroup left after `by` stopped their server."""
    left = hh.pids_of_uid(hh.uid(user))
    assert not left, f"processes of {user} outlived {by}: " + "; ".join(
        f"{p}: {Path(f'/proc/{p}/cmdline').read_bytes().replace(bytes(1), b' ').decode(errors='replace')}"
        for p in left if Path(f"/proc/{p}").exists())
    assert not shm.exists(), f"{shm} outlived {by}"
    assert not unit.exists(), f"{user}'s cgroup {unit} is still there after {by}"


# --- grading on submit --------------------------------------------------------------------------

def _open_assignments(page):
    """nbgrader's Assignments panel, open and refreshed."""
    tab = page.locator(".lm-TabBar-tab .lm-TabBar-tabLabel", has_text="Assignments")
    if not tab.count():
        _menu_command(page, "nbgrader:open-assignment-list")
        tab.first.wait_for()
    tab.first.click()
    page.locator("#refresh_assignments_list").click()


def _row(page, which, assignment):
    """The rows of an assignment in one list of the Assignments panel (released, fetched, submitted)."""
    name = page.locator(".item_name", has_text=re.compile(rf"^\s*{re.escape(assignment)}\s*$"))
    return page.locator(f"#{which}_assignments_list > .list_item").filter(has=name)


def _fetch(page, assignment):
    """Fetch in the Assignments panel; returns once the assignment is in the downloaded list."""
    row = _row(page, "released", assignment).first
    row.wait_for(timeout=120_000)
    row.locator(".item_status button", has_text="Fetch").click()
    _row(page, "fetched", assignment).first.wait_for(timeout=120_000)


def _landed(inbound, user, assignment):
    """The names of user's whole submissions of assignment in the exchange's inbound folder
    (nbgrader submit writes submission_secret.txt last)."""
    return sorted(p.name for p in inbound.iterdir()
                  if p.name.startswith(f"{user}+{assignment}+") and (p / "submission_secret.txt").exists())


def _submit(page, inbound, user, assignment, timeout=120):
    """Press Submit on the assignment's row of the Assignments panel; returns the new submission's
    inbound name, once it is whole."""
    had = _landed(inbound, user, assignment)
    _row(page, "fetched", assignment).first.locator(".item_status button", has_text="Submit").click()
    deadline = time.time() + timeout
    while time.time() < deadline:
        new = sorted(set(_landed(inbound, user, assignment)) - set(had))
        if new:
            assert len(new) == 1, new
            return new[0]
        page.wait_for_timeout(250)
    raise AssertionError(f"{user}'s Submit of {assignment} did not reach the exchange in {timeout} s")


# The grading queue's entries, as JSON: its file opened read-only (the grading page's ReadOnlyQueue),
# as the teacher (root would leave files of its own beside the teacher's queue)
_READ_QUEUE = """
import dataclasses, json, sys
from tinygpt_course.service.web import open_queue
q = open_queue(sys.argv[1])
print(json.dumps([] if q is None else [dict(dataclasses.asdict(e), state=e.state.value) for e in q.entries()]))
"""

# {student: [score, max score]} of an assignment in the teacher's gradebook, read as the teacher
_READ_GRADES = """
import json, sys
from nbgrader.api import Gradebook
with Gradebook('sqlite:///' + sys.argv[1], sys.argv[2]) as gb:
    print(json.dumps({s.student.id: [s.score, s.max_score] for s in gb.assignment_submissions(sys.argv[3])}))
"""


def _queue(hub, course):
    r = hh.run_as(TEACHER, [str(hub.venv / "bin" / "python"), "-c", _READ_QUEUE, str(course)], hub.role_env("teacher"))
    return json.loads(r.stdout)


def _by_key(entries, key):
    """The one queue entry of an inbound submission (the queue holds each once)."""
    found = [e for e in entries if e["key"] == key]
    assert len(found) == 1, f"the queue holds {len(found)} entries for {key}: {entries}"
    return found[0]


def _wait_queue(hub, course, done, what, timeout=600):
    """The queue's entries once done(entries) holds."""
    deadline = time.time() + timeout
    while True:
        entries = _queue(hub, course)
        if done(entries):
            return entries
        if time.time() > deadline:
            raise AssertionError(f"{what}: not so after {timeout} s; the queue: {entries}")
        time.sleep(2)


def _num(v):
    """A score as the Grading panel writes it (hub/labextension/grading.js, num)."""
    return format(round(v, 2), "g")


def _panel(page, needle, timeout=300):
    """The Grading panel's text (hub/labextension/index.js) once it holds needle, an empty line
    between two assignments: the page is not reloaded, nothing is clicked, the panel asks the
    grading service on its own."""
    read = "() => Array.from(document.querySelectorAll('#tinygpt-grading-status pre'), p => p.textContent).join('\\n\\n')"
    deadline, text = time.time() + timeout, ""
    while time.time() < deadline:
        text = page.evaluate(read)
        if needle in text:
            return text
        page.wait_for_timeout(1000)
    raise AssertionError(f"the Grading panel did not show {needle!r} in {timeout} s; it shows:\n{text}")


def _disabled_extensions(page):
    """The lab extensions JupyterLab's page config switches off for this user."""
    return page.evaluate("JSON.parse(document.getElementById('jupyter-config-data').textContent).disabledExtensions")


def _mode(path):
    return os.lstat(path).st_mode & 0o7777


@pytest.mark.slow
def test_classroom_on_jupyterhub(request):
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
        venv = request.getfixturevalue("users_venv")     # course.sh setup hub, once per session
        t_venv = time.time() - t0
        assert not hh.editable_traces(venv), f"the users' venv leads back to a checkout: {hh.editable_traces(venv)}"
        passwords = {}
        users.append(GROUP)
        hh.add_group(GROUP, {TEACHER, STUDENT1, STUDENT2})
        hh.add_group(TEACHERS_GROUP, {TEACHER})
        # the hub's checkout (hub/README.md's /opt/tinygpt-course): the teachers' group reads it, nobody
        # else; the hub runs its config from there, and the teacher's course folder is seeded from it
        checkout = hh.make_checkout(base, TEACHERS_GROUP)
        # grading on submit: the course's config says what the grading service grades (the hub's
        # copy of the course, from which the teacher's folder is made at their first log-in)
        with open(checkout / "nbgrader_config.py", "a") as f:
            f.write(GRADING_CONFIG)
        # student 2 works on the command line only: left out of the group, the hub must refuse them
        # (student 1 comes from the class list, tinygpt-roster, after the teacher's first log-in)
        users.append(STUDENT1)
        hh.remove_user(STUDENT1)
        for name, groups in ((TEACHER, (TEACHERS_GROUP,)), (STUDENT2, ())):
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
                     checkout=checkout, memory_mb=MEMORY_MB, grading=True)
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
        assert (course / "nbgrader_config.py").read_bytes() == (checkout / "nbgrader_config.py").read_bytes() \
            == (REPO / "nbgrader_config.py").read_bytes() + GRADING_CONFIG.encode()
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

        mark('the roster')
        # --- the class list: tinygpt-roster makes student 1 (user, password, group, private home)
        # and their gradebook record with their name, so the export carries it
        roster = base / "roster.csv"
        roster.write_text(f"id,first_name,last_name,email\n{STUDENT1},{FIRST},{LAST},{EMAIL}\n")
        r = subprocess.run([str(venv / "bin" / "tinygpt-roster"), str(roster), "--group", GROUP,
                               "--teacher", TEACHER, "--course-dir", COURSE_DIR, "--comment", hh.USER_TAG,
                               "--passwords", str(base / "passwords.csv")],
                           env=hub.env, capture_output=True, text=True)
        assert r.returncode == 0, f"tinygpt-roster failed:\n{r.stdout}\n{r.stderr}"
        assert _mode(base / "passwords.csv") == 0o600
        (passwords[STUDENT1],) = [row["password"] for row in csv.DictReader(open(base / "passwords.csv"))
                                  if row["id"] == STUDENT1]
        assert _mode(hh.home(STUDENT1)) == 0o700

        mark('no solution readable')
        # --- item 1: nothing a student can read holds a solution line (before anyone has answered:
        # afterwards their own notebooks do). The search covers the hub's folders (venv, checkout,
        # state, exchange: all under base), every home, /srv, /opt, /usr/local, /etc, /dev/shm and
        # the test users' files in /tmp and /var/tmp; it must find the lines where a teacher looks.
        lines = hh.solution_lines()
        assert len(lines) > 20, lines
        roots = [str(base), str(venv), "/home", "/srv", "/opt", "/usr/local", "/etc", "/dev/shm"]
        found = hh.files_holding(STUDENT1, lines, roots, [TEACHER, STUDENT1, STUDENT2], skip=base)
        assert not found, f"a student can read solution lines in: {found}"
        found = hh.files_holding(TEACHER, lines, [str(checkout / "source"), str(course / "source")], [TEACHER], base)
        assert len(found) >= 2 * len(list((REPO / "source").glob("*/*.ipynb"))), \
            f"the search does not find the solutions where the teacher can read them: {found}"

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
        print(f"hub learner memory after the whole lesson, MiB: {_show(_memory(STUDENT1))}")

        mark('the hub restarts mid-lesson')
        # --- item 3: the hub restarts (SIGTERM, as systemctl restart sends it) in the middle of the
        # lesson: the learner's server, kernel (a variable set before) and notebook are still there,
        # and the learner carries on (Validate and submit below, on the same page)
        nb_rel = f"{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
        kernel_id, _ = _in_kernel(s1, hub, STUDENT1, nb_rel, "tg_before_restart = 'still-here-' + str(6 * 7)")
        before = {"server": _pids(STUDENT1, "jupyterhub-singleuser"), "kernels": sorted(_pids(STUDENT1, "ipykernel")),
                  "teacher": _pids(TEACHER, "jupyterhub-singleuser"), "proxy": hub.proxy_pids()}
        nb_before = nb_path.read_bytes()
        rc = hub.stop_hub()
        assert rc == 0, f"the hub did not stop cleanly on SIGTERM (exit {rc})"
        during = {"server": _pids(STUDENT1, "jupyterhub-singleuser"), "kernels": sorted(_pids(STUDENT1, "ipykernel"))}
        assert during == {k: before[k] for k in during}, f"the hub's stop ended learner processes: {before} -> {during}"
        hub.start_hub()
        after = {"server": _pids(STUDENT1, "jupyterhub-singleuser"), "kernels": sorted(_pids(STUDENT1, "ipykernel")),
                 "teacher": _pids(TEACHER, "jupyterhub-singleuser"), "proxy": hub.proxy_pids()}
        assert after == before and before["server"] and before["kernels"], \
            f"servers, kernels or the proxy changed across the hub's restart: {before} -> {after}"
        kernel_after, out = _in_kernel(s1, hub, STUDENT1, nb_rel, "print(tg_before_restart)")
        assert (kernel_after, out.strip()) == (kernel_id, "still-here-42"), \
            f"the kernel lost its variables across the hub's restart: {kernel_id} -> {kernel_after}, {out!r}"
        assert nb_path.read_bytes() == nb_before
        r = s1.request.get(f"{hub.url}/user/{STUDENT1}/api/contents/{nb_rel}?content=0")
        assert r.status == 200, f"the learner's server does not answer through the proxy after the restart: {r.status}"
        print(f"hub restart: {STUDENT1}'s server {before['server']}, kernels {before['kernels']} and the proxy "
              f"{before['proxy']} kept; kernel {kernel_id} still has its variable")

        peak, sampling = [0.0, 0.0, 0.0], [True]

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
              f"USS {steady[1]:.0f}, anon {steady[2]:.0f}; peak during Validate PSS {peak[0]:.0f}, "
              f"USS {peak[1]:.0f}, anon {peak[2]:.0f} "
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
        nb2 = hh.home(STUDENT2) / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        hh.run_as(STUDENT2, [str(venv / "bin" / "python"), "-c", _EDIT, str(nb2), grade_id, wrong], env2)
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
            r = _nbgrader(TEACHER, args, hub, "teacher", cwd=course)
            if args[0] == "autograde":      # the released hidden-test cells are not "changed"
                (artifacts / "hub-autograde.log").write_text(r.stdout + r.stderr)
                assert "has changed" not in r.stdout + r.stderr, \
                    f"autograde reports a changed cell for untouched submissions:\n{r.stderr[-3000:]}"
        grades = {row["student_id"]: row for row in csv.DictReader(open(course / "grades.csv"))}
        shutil.copy(course / "grades.csv", artifacts / "hub-grades.csv")
        g1, g2 = grades[STUDENT1], grades[STUDENT2]
        assert (g1["first_name"], g1["last_name"], g1["email"]) == (FIRST, LAST, EMAIL), \
            f"the export does not carry the roster's name for {STUDENT1}: {g1}"
        assert float(g1["max_score"]) == sum(notebooks.points(ASSIGNMENT).values()), g1
        assert float(g1["score"]) == float(g1["max_score"]), f"student 1 (reference answer) lost points: {g1}"
        assert float(g2["score"]) < float(g2["max_score"]), f"student 2 (no projection) got full marks: {g2}"
        # sizing: the teacher's server after a formgrader autograde (the button's API: the grading
        # template stays in the server for the next one), with every process of the teacher counted
        # the server's own _xsrf cookie (the grading service's page, which the lab extension asks, sets one too)
        xsrf = next((c["value"] for c in tctx.cookies() if c["name"] == "_xsrf"
                     and c["path"].rstrip("/") == f"/user/{TEACHER}"), "")
        r = tp.request.post(f"{hub.url}/user/{TEACHER}/formgrader/api/submission/{ASSIGNMENT}/{STUDENT1}/autograde",
                            headers={"X-XSRFToken": xsrf}, timeout=600_000)
        assert r.status == 200 and r.json().get("success"), f"the formgrader's autograde failed: {r.status} {r.text()[:2000]}"
        tp.wait_for_timeout(2000)
        print(f"hub teacher memory after a formgrader autograde, MiB: {_show(_memory(TEACHER))}")
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
        mark("grading on submit")
        # --- grading on submit (the grading service, hub/README.md): the hub runs it as the teacher
        # on their course folder; the config turned it on for GRADED and EXAM before the hub started.
        # The teacher releases both; student 2 joins the class (the students' group: no restart)
        # and logs in. Both fetch GRADED and press Submit (student 1 right, student 2 wrong): each
        # sees their own score in JupyterLab's Grading panel, no command, no reload.
        for a in (GRADED, EXAM):
            _nbgrader(TEACHER, ["generate_assignment", a], hub, "teacher", cwd=course)
            _nbgrader(TEACHER, ["release_assignment", a], hub, "teacher", cwd=course)
        subprocess.run(["usermod", "-a", "-G", GROUP, STUDENT2], check=True)
        s2ctx = browser.new_context(viewport={"width": 1400, "height": 900})
        s2 = _login(s2ctx, hub, STUDENT2, passwords[STUDENT2])
        s1.goto(f"{hub.url}/user/{STUDENT1}/lab")       # back from the feedback page
        s1.locator("#jp-main-dock-panel").wait_for(state="visible", timeout=120_000)
        g_id, g_right, g_wrong = _graded_answers()
        for page, user, answer in ((s1, STUDENT1, g_right), (s2, STUDENT2, g_wrong)):
            _open_assignments(page)
            _fetch(page, GRADED)
            hh.run_as(user, [str(venv / "bin" / "python"), "-c", _EDIT,
                             str(hh.home(user) / GRADED / f"{GRADED}.ipynb"), g_id, answer], env1)
        key = {STUDENT1: _submit(s1, inbound, STUDENT1, GRADED), STUDENT2: _submit(s2, inbound, STUDENT2, GRADED)}
        # the hub stops right after the submissions land (the service stops with it), then starts
        # again: each is graded once, whatever it was at the stop (not yet seen, queued, being
        # graded: then its grading was cut and is done again, its second attempt; already graded)
        hub.stop_hub()
        service = lambda: _pids(TEACHER, "tinygpt-grading-service") + _pids(TEACHER, "tinygpt_course.service.web")
        deadline = time.time() + 30          # its workers go when they see their parent gone
        while service() and time.time() < deadline:
            time.sleep(0.5)
        assert not service(), f"the grading service outlived the hub: {service()}"
        at_stop = {u: next((e["state"] for e in _queue(hub, course) if e["key"] == k), "not seen")
                   for u, k in key.items()}
        hub.start_hub()
        entries = _wait_queue(hub, course, lambda es: all(
            any(e["key"] == k and e["state"] == "graded" for e in es) for k in key.values()),
            f"both submissions of {GRADED} graded after the hub's restart")
        log = hub.log.read_text(errors="replace")
        result = {}
        for user, k in key.items():
            e = _by_key(entries, k)
            assert e["attempts"] == (2 if at_stop[user] == "grading" else 1), \
                f"{user}'s submission ({at_stop[user]} at the stop) was claimed {e['attempts']} times: {e}"
            graded = re.findall(rf"graded {user}/{GRADED} \(id {e['id']}\): .*", log)
            assert len(graded) == 1 and "feedback released" in graded[0], \
                f"{user}'s submission was graded (feedback released) {len(graded)} times: {graded}"
            result[user] = e["result"]
        r = hh.run_as(TEACHER, [str(venv / "bin" / "python"), "-c", _READ_GRADES, str(course / "gradebook.db"),
                                COURSE_ID, GRADED], hub.role_env("teacher"))
        book = json.loads(r.stdout)
        assert book == {u: result[u]["total"] for u in key}, f"the gradebook {book} vs the queue {result}"
        (a_score, a_max), (b_score, b_max) = result[STUDENT1]["total"], result[STUDENT2]["total"]
        assert a_score == a_max == sum(notebooks.points(GRADED).values()), f"student 1 (right) got {a_score}/{a_max}"
        assert b_score < b_max, f"student 2 (no mask) got full marks: {result[STUDENT2]}"
        heads = {u: f"{GRADED}: graded: {_num(t[0])}/{_num(t[1])}" for u, t in
                 ((u, result[u]["total"]) for u in key)}
        for page, me, other in ((s1, STUDENT1, STUDENT2), (s2, STUDENT2, STUDENT1)):
            text = _panel(page, heads[me])
            for check, (got, most) in result[me]["scores"].items():
                assert f"  {check}: {_num(got)}/{_num(most)}" in text.split("\n"), \
                    f"{me}'s panel lacks {check} {got}/{most}:\n{text}"
            assert heads[other] not in text, f"{me}'s Grading panel shows {other}'s score:\n{text}"
            # the service's answer is theirs alone, whoever a request names; the queue page is the teachers'
            r = page.request.get(f"{hub.url}/services/grading/api/mine?user={other}&student={other}")
            assert r.status == 200, f"{me}'s api/mine answered {r.status}: {r.text()[:500]}"
            mine = r.json()
            assert mine["user"] == me and list(mine["assignments"]) == [GRADED], mine
            assert mine["assignments"][GRADED]["total"] == result[me]["total"], mine
            assert mine["assignments"][GRADED]["submitted"] == key[me].split("+")[2], mine
            r = page.request.get(f"{hub.url}/services/grading/")
            assert r.status == 403, f"{me} (a student) reads the teachers' queue page: {r.status}"
            # the feedback the service released is theirs: fetched, it shows their score
            _nbgrader(me, ["fetch_feedback", GRADED], hub, "student")
            (html_page,) = (hh.home(me) / GRADED / "feedback").glob(f"*/{GRADED}.html")
            m = re.search(r"Score:\s*([\d.]+)\s*/\s*([\d.]+)", html_page.read_text())
            assert m and [float(m.group(1)), float(m.group(2))] == result[me]["total"], \
                f"{me}'s feedback does not show their score {result[me]['total']}"
        _shot(s2, "11-grading-panel-student2")
        _shot(s1, "11-grading-panel")
        shutil.copy(SHOTS / "hub-11-grading-panel.png", REPO / "docs" / "images" / "grading-panel.png")
        print(f"hub grading on submit: at the hub's stop {at_stop}; graded once each after its restart: "
              f"{STUDENT1} {a_score:g}/{a_max:g}, {STUDENT2} {b_score:g}/{b_max:g}")

        # an exam: student 1 submits EXAM; the service grades it (the teacher has the score), the
        # learner is told "received", nothing more
        _fetch(s1, EXAM)
        exam_key = _submit(s1, inbound, STUDENT1, EXAM)
        entries = _wait_queue(hub, course, lambda es: any(e["key"] == exam_key and e["state"] == "graded" for e in es),
                              f"student 1's {EXAM} (an exam) graded")
        exam = _by_key(entries, exam_key)["result"]
        assert exam["received_only"] and not exam["feedback"] and "total" in exam, exam
        fed = sorted(p.name for p in feedback_x.iterdir())
        assert len(fed) == 4, f"feedback in the exchange: multihead's two, head's two, none of the exam: {fed}"
        mine = s1.request.get(f"{hub.url}/services/grading/api/mine").json()
        assert mine["assignments"][EXAM] == {"state": "received", "submitted": exam_key.split("+")[2]}, mine
        text = _panel(s1, f"{EXAM}: received")
        assert [b for b in text.split("\n\n") if b.startswith(f"{EXAM}:")] == [f"{EXAM}: received"], \
            f"the Grading panel shows more of the exam than that it was received:\n{text}"

        # the rate limit: student 1's third grading of the day waits (HELD), and their panel says
        # until when
        third = _submit(s1, inbound, STUDENT1, GRADED)
        entries = _wait_queue(hub, course, lambda es: any(e["key"] == third and e["state"] != "queued" for e in es),
                              "student 1's third submission taken up by the service")
        held = _by_key(entries, third)
        assert held["state"] == "held" and held["not_before"] > time.time(), \
            f"student 1's third submission of the day was not held: {held}"
        # held by the day's limit: until tomorrow, so the panel gives the date with the time
        day, hour = s1.evaluate("t => [new Date(t * 1000).toLocaleDateString(), new Date(t * 1000).toLocaleTimeString()]",
                                held["not_before"])
        text = _panel(s1, f"{GRADED}: waiting")
        (line,) = [ln for ln in text.split("\n") if ln.startswith(f"{GRADED}: waiting")]
        assert "graded from" in line and day in line and hour in line and heads[STUDENT1] not in text, \
            f"the Grading panel does not say the held submission waits until {day} {hour}:\n{text}"
        _shot(s1, "12-grading-held")
        s2ctx.close()

        mark("what students cannot read")
        # --- item 1: every file of source/, tests/catalogue/ and docs/, by every path a student could
        # know: the hub's checkout, the venv (where an install could have put it), the teacher's home
        # and course folder, the hub's state, and /proc of the hub, its proxy and the teacher's server
        # (cwd, root). The teacher reads the checkout (the control: the paths are right).
        secret = sorted(str(p.relative_to(REPO)) for top in ("source", "tests/catalogue", "docs")
                        for p in (REPO / top).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        sites = [str(p) for p in venv.glob("lib/python3*/site-packages")]
        procs = [hub.proc.pid, *hub.proxy_pids(), *_pids(TEACHER, "jupyterhub-singleuser")]
        places = [str(checkout), str(venv), *sites, *[f"{p}/tinygpt_course" for p in sites], str(hh.home(TEACHER)),
                  str(course), str(hub.state), *[f"/proc/{pid}/cwd" for pid in procs],
                  *[f"/proc/{pid}/root{checkout}" for pid in procs]]
        tries = [f"{place}/{rel}" for place in places for rel in secret]
        assert all((checkout / rel).is_file() for rel in secret)
        assert len(hh.readable_as(TEACHER, [str(checkout / rel) for rel in secret])) == len(secret), \
            "the teacher cannot read the hub's checkout"
        for student in (STUDENT1, STUDENT2):
            got = hh.readable_as(student, tries)
            assert not got, f"{student} can read {len(got)} of the course's secret files, e.g. {got[:5]}"
        print(f"hub: students refused {len(tries)} reads each ({len(secret)} files of source/, tests/catalogue/, "
              f"docs/ by {len(places)} paths: {', '.join(places)})")
        # each learner's server wrote a log of its own (hub/server_log.py): root's, 0600, in a 0700
        # folder; no student reads one, their own included (a server prints its URLs' tokens)
        logs = Path(hub.env["TINYGPT_SERVER_LOGS"])
        own = sorted(logs.glob("*.log"))      # student 2 works from the command line: no server yet
        assert logs / f"{STUDENT1}.log" in own and logs / f"{TEACHER}.log" in own, own
        for log in own:
            st = log.stat()
            assert (st.st_uid, st.st_mode & 0o777) == (0, 0o600) and st.st_size > 0, (log, oct(st.st_mode), st.st_size)
        assert (logs.stat().st_uid, logs.stat().st_mode & 0o777) == (0, 0o700)
        for student in (STUDENT1, STUDENT2):
            assert not hh.readable_as(student, [str(log) for log in own]), f"{student} reads a server's log"
        mark("a learner's server is a unit")
        # --- item 2: the whole server is in the learner's cgroup; its memory cap holds for all their
        # processes together; Stop My Server ends every process they started and frees /dev/shm
        s1.goto(f"{hub.url}/user/{STUDENT1}/lab")       # back from the feedback page (a sandboxed document)
        s1.locator("#jp-main-dock-panel").wait_for(state="visible", timeout=120_000)
        (server1,) = _pids(STUDENT1, "jupyterhub-singleuser")
        unit = _cgroup_dir(server1)
        assert unit.name == STUDENT1 and unit.parent.name == "tinygpt-learners", f"student 1's server is in {unit}"
        limit_file = unit / ("memory.max" if (unit / "memory.max").exists() else "memory.limit_in_bytes")
        assert int(limit_file.read_text()) == cap, f"{limit_file}: {limit_file.read_text()}"
        (tserver,) = _pids(TEACHER, "jupyterhub-singleuser")
        assert _cgroup_dir(tserver).name == TEACHER, "the teacher's server is not a unit of its own"
        greedy = base / "greedy.py"
        greedy.write_text(_GREEDY)
        greedy.chmod(0o644)
        out = _terminal(s1, hub, STUDENT1, f"python {greedy}", timeout=300)
        m = re.search(r"TG_GREEDY alive (\d+) killed (\d+)", out)
        assert m, f"the three greedy children did not report:\n{out[-3000:]}"
        alive, killed = int(m.group(1)), int(m.group(2))
        peak_file = unit / ("memory.peak" if (unit / "memory.peak").exists() else "memory.max_usage_in_bytes")
        peak = int(peak_file.read_text()) if peak_file.exists() else 0
        print(f"hub: three children of 1 GiB under a {MEMORY_MB} MiB cap: {alive} alive at the end, {killed} "
              f"OOM-killed; the learner's cgroup peaked at {peak / 2 ** 20:.0f} MiB")
        assert alive * 2 ** 30 <= cap and killed >= 1, f"the cap did not hold for the three children: {out[-2000:]}"
        assert peak <= cap, f"the learner's processes held {peak / 2 ** 20:.0f} MiB together, over the cap"
        assert _pids(STUDENT1, "jupyterhub-singleuser") == [server1], "the OOM killer took the learner's server"

        shm = Path(f"/dev/shm/tg-leftover-{STUDENT1}")
        # the terminal is gone (closed by _leave_behind): what it started lives on, as the issue found
        _leave_behind(s1, hub, STUDENT1, 424242, shm, 67108864)
        s1.goto(f"{hub.url}/hub/home")
        s1.locator("#stop").click()
        s1.locator("#start").wait_for(state="visible", timeout=120_000)
        _shot(s1, "10-student-stopped")
        # the page's button comes back once the hub accepted the stop; the stop itself (the server,
        # then the cgroup) finishes in the hub: wait until the hub says the server is gone
        deadline = time.time() + 180
        while time.time() < deadline:
            r = s1.request.get(f"{hub.url}/hub/api/user")
            if r.status == 200 and not r.json().get("pending") and not hh.pids_of_uid(hh.uid(STUDENT1)):
                break
            s1.wait_for_timeout(500)
        assert r.status == 200 and not r.json().get("pending"), f"the hub did not finish the stop: {r.status} {r.text()[:500]}"
        _all_gone(STUDENT1, shm, unit, "Stop My Server")
        print(f"hub: Stop My Server ended all of {STUDENT1}'s processes (setsid sleep, nohup python) and removed {shm}")

        mark("the idle culler")
        # --- the idle culler: the learner starts their server again, leaves setsid'd and nohup'd
        # processes and a /dev/shm file behind, and closes the tab. Only then is the culler switched
        # on (TINYGPT_CULL_TIMEOUT=20 s, the hub restarted: servers stay), so nothing has to happen
        # before it acts; it must stop the idle server, and the spawner's stop end everything
        s1.locator("#start").click()
        s1.locator("#jp-main-dock-panel").wait_for(state="visible", timeout=180_000)
        (server1,) = _pids(STUDENT1, "jupyterhub-singleuser")
        unit = _cgroup_dir(server1)
        shm = Path(f"/dev/shm/tg-idle-{STUDENT1}")
        _leave_behind(s1, hub, STUDENT1, 525252, shm, 33554432)
        s1.goto("about:blank")                       # the learner leaves: no tab of theirs is open
        hub.env.update(TINYGPT_CULL_TIMEOUT="20")
        hub.restart()
        t_cull = time.time()
        deadline = t_cull + 600                      # the culler looks every 5 s: a generous bound
        while time.time() < deadline:
            r = s1.request.get(f"{hub.url}/hub/api/user")
            if r.status == 200 and r.json().get("server") is None and not r.json().get("pending") \
                    and not hh.pids_of_uid(hh.uid(STUDENT1)) and not shm.exists() and not unit.exists():
                break
            time.sleep(1)
        assert r.status == 200 and r.json().get("server") is None, \
            f"the idle culler did not stop {STUDENT1}'s server: {r.status} {r.text()[:500]}"
        _all_gone(STUDENT1, shm, unit, "the idle culler")
        assert f"Culling server {STUDENT1} " in hub.log.read_text(errors="replace"), \
            "the server was stopped, but the hub log has no 'Culling server' line of jupyterhub-idle-culler"
        print(f"hub: the idle culler (20 s) stopped {STUDENT1}'s idle server {time.time() - t_cull:.0f} s after "
              f"it was switched on: every process (setsid sleep, nohup python), {shm} and the cgroup gone")
        mark("end")
        print("hub test stages (each until the next):", "; ".join(stages))
        print(f"hub test: venv {t_venv:.0f}s, total {time.time() - t0:.0f}s; "
              f"grades {STUDENT1} {g1['score']}/{g1['max_score']}, {STUDENT2} {g2['score']}/{g2['max_score']}")
    except BaseException as e:
        # where it stopped, and what the hub said last: the start of a failure report is what a
        # reader of CI's output sees first
        e.add_note(f"the hub test stopped in its stage {last[1]!r}, {time.time() - last[0]:.0f} s in; "
                   f"before it: {'; '.join(stages)}")
        if hub is not None and hub.log.exists():
            e.add_note("the hub log's last lines:\n" + "\n".join(hub.log.read_text(errors="replace").splitlines()[-40:]))
        raise
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
            attempt(f"removing group {TEACHERS_GROUP}", hh.remove_group, TEACHERS_GROUP)
            attempt("removing the users' cgroups", hh.remove_cgroups, [TEACHER, STUDENT1, STUDENT2])
        t3 = time.time()
        shutil.rmtree(base, ignore_errors=True)
        print(f"hub test clean-up: browser and hub {t2 - t1:.0f}s, users {t3 - t2:.0f}s, "
              f"files {time.time() - t3:.0f}s" + "".join(f"\n  {p}" for p in problems))
