"""A lesson's checks in the learner's own kernel: the runner's printout, the numbers note and the
visible checks (what JupyterLab's Validate reports).

- ``Printout`` runs the runner cell step by step. A step that fails in the learner's code does
  not stop the cell: it says in one short paragraph what went wrong, reusing the judges'
  diagnosis of the checks that cover the step's lines, and the next steps (and Run All) go on.
- ``check`` judges the learner's class, made with the lesson's default seed, against
  ``reference.rec`` (the record of the lesson's solution for that seed, stored as data), and
  fails too when the runner could not print the check's lines or printed one that differs from
  the documented printout.
- ``explain_numbers`` compares the lines the runner printed, and only those, with the
  documented printout, stored as data in ``printout.txt`` beside the judge (generated from the
  source notebook's "What you should see": ``python -m tinygpt_course.checks.notebook``).

Grading does not use any of this as evidence: it re-runs the answer in a sandbox with a seed of
its own. Nothing here computes a lesson's answer: expected values are stored data.
"""
import argparse
import ast
import contextlib
import functools
import importlib
import io
import os
import re
import signal
import sys
import threading
from importlib import resources

import torch

from . import CheckFailed, paragraph, tutor
from .protocol import Kind, Verdict
from .record import RecordRejected, as_data

STEP_SECONDS = 10        # a step (or a check's run of the learner's code) longer than this is stopped
_latest = {}             # lesson name -> its last Printout in this kernel
_too_slow = []           # (lesson name, the learner's objects) that ran out of time once
_reported = []           # (lesson name, the learner's objects, mistake id, the check that said it)


@functools.lru_cache(maxsize=None)
def reference(lesson_name):
    """The stored record of the lesson's solution, for its default seed."""
    from .protocol import load_lesson
    from .record import decode
    path = resources.files(f"tinygpt_course.checks.{lesson_name}") / "reference.rec"
    return decode(path.read_bytes(), load_lesson(lesson_name).schema)


@functools.lru_cache(maxsize=None)
def documented(lesson_name):
    """The printout the lesson documents, line by line (stored data)."""
    path = resources.files(f"tinygpt_course.checks.{lesson_name}") / "printout.txt"
    return tuple(path.read_text(encoding="utf-8").splitlines())


def label(line):
    """What a printout line is about: the words before its first ':' or '['."""
    return re.split(r"[:\[]", line, maxsplit=1)[0].strip()


class OutOfTime(Exception):
    """Raised in the learner's code when a step runs longer than STEP_SECONDS."""


@contextlib.contextmanager
def time_limit(seconds):
    """Interrupt the block after `seconds` with OutOfTime (None, or not the main thread: no limit)."""
    if seconds is None or threading.current_thread() is not threading.main_thread() \
            or not hasattr(signal, "setitimer"):
        yield
        return

    def stop(signum, frame):
        raise OutOfTime(f"did not finish within {seconds:g} seconds")
    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def namespace(notebook_globals, names):
    """{name: the notebook's object} for the names a lesson's checks read; NameError in the
    learner's terms when one is missing (its cell did not run, or stopped with an error)."""
    for name in names:
        if name not in notebook_globals:
            raise NameError(missing_name(notebook_globals, name))
    return {name: notebook_globals[name] for name in names}


def missing_name(notebook_globals, name):
    """Why `name` is not defined, in the learner's terms: the cell that defines it (found in
    IPython's input history) has a syntax error, or has not run to its end."""
    defines = re.compile(rf"^\s*(class|def)\s+{re.escape(name)}\b|^\s*{re.escape(name)}\s*=", re.M)
    for source in reversed(notebook_globals.get("In") or []):
        if isinstance(source, str) and defines.search(source):
            try:
                compile(source, "<your cell>", "exec")
            except SyntaxError as exc:
                return (f"{name} is not defined: the cell that defines it has a syntax error on "
                        f"its line {exc.lineno}: {exc.msg}. Fix it and run the cells again.")
            break
    return (f"{name} is not defined: the cell that defines it has not run to its end. Run the "
            "cells from the top (Run All) and fix the first one that shows an error.")


def _slow(lesson, ns):
    return any(name == lesson.name and len(objs) == len(ns) and all(a is b for a, b in zip(objs, ns.values()))
               for name, objs in _too_slow)


def verdict(lesson, check_id, ns):
    """The Verdict of one check for the names in ns (the learner's MultiHead, embed, xb, ...)."""
    if _slow(lesson, ns):
        return Verdict.fail(Kind.FORWARD_ERROR, slow(), "too_slow")
    extract = importlib.import_module(lesson.extract_module).extract
    try:
        with time_limit(STEP_SECONDS):
            rec = extract(ns, lesson.default_seed)
    except OutOfTime:
        _too_slow.append((lesson.name, tuple(ns.values())))
        return Verdict.fail(Kind.FORWARD_ERROR, slow(), "too_slow")
    try:                     # the record as grading judges it: data that fits the lesson's table
        rec = as_data(rec, lesson.schema)
    except RecordRejected as exc:
        return Verdict.fail(Kind.NO_RESULT, f"the record is not what the checks produce ({exc})")
    return lesson.verdict(check_id, rec, reference(lesson.name))


def slow():
    return (f"your code did not finish within {STEP_SECONDS:g} seconds: look for a loop that never "
            "ends (a `while` whose condition stays true) in your class.")


def check_in(lesson, check_id, notebook_globals, names, free=()):
    """check() on the notebook's own names: a missing one fails the check in the learner's terms."""
    try:
        ns = namespace(notebook_globals, names)
    except NameError as missing:
        raise CheckFailed(f"[{lesson.checks[check_id]}] {missing}") from None
    check(lesson, check_id, ns, free)


def first_report(lesson, ns, mistake, check_id):
    """The check that first reported `mistake` for these very objects in this kernel (check_id
    itself when none did, or when it is check_id's own report run again)."""
    objects = tuple(ns.values())
    for name, objs, said, first in _reported:
        if name == lesson.name and said == mistake and len(objs) == len(objects) \
                and all(a is b for a, b in zip(objs, objects)):
            return first
    _reported.append((lesson.name, objects, mistake, check_id))
    return check_id


def check(lesson, check_id, ns, free=()):
    """Print a tick and the message, or raise CheckFailed naming the likely mistake.

    Beyond the verdict on the learner's class, the check's printout lines count: if the runner
    (with this very class) could not print them, or printed one that differs from the documented
    printout, the check fails. Lines whose label is in `free` may differ (their numbers depend
    on the order the learner's code draws random numbers; the verdict covers them)."""
    v = verdict(lesson, check_id, ns)
    lines = lesson.checks[check_id]
    if not v.passed:
        first = first_report(lesson, ns, v.mistake, check_id)
        if first != check_id:    # Validate shows every failing cell: one message per mistake
            failed = CheckFailed(f"[{lines}] the same mistake as the check `{first}` above: "
                                 f"{lesson.all_mistakes.get(v.mistake, v.mistake)}.")
            failed.repeat_of = first
            raise failed
        failed = CheckFailed(f"[{lines}] {v.message}")
        failed.hint = tutor.offer(lesson, check_id, v.mistake, v.where)   # the button, or rung 1 as text
        raise failed
    problem = printout_problem(lesson, check_id, ns, free)
    if problem:
        raise CheckFailed(f"[{lines}] {problem}")
    print("\u2713", v.message)


def printout_problem(lesson, check_id, ns, free=()):
    """What is wrong with the runner's lines for check_id, or None (also when the runner has
    not run with these very objects: then the verdict alone counts)."""
    p = _latest.get(lesson.name)
    if p is None or not p.made_with(ns):
        return None
    if check_id in p.failed:
        return ("the printout above could not print these lines with your code: "
                + p.failed[check_id].rstrip(".") + ".")
    want = {label(line): line for line in documented(lesson.name)}
    for line, ids in p.lines:
        if check_id in ids and label(line) not in free and want.get(label(line), line) != line:
            return (f"the printout above shows `{line}`, the lesson documents `{want[label(line)]}`: "
                    "your code gives another result here.")
    return None


def assigned_names(source):
    """The names a cell's code assigns at its top level (not inside functions, lambdas or
    comprehensions, which have scopes of their own)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()

    class Visitor(ast.NodeVisitor):
        def visit_Name(self, node):
            if isinstance(node.ctx, ast.Store):
                names.add(node.id)

        def own_scope(self, node):
            pass
        visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = own_scope
        visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = own_scope
    Visitor().visit(tree)
    return names


def forget_previous_run(notebook_globals):
    """Delete what the running cell (IPython's last input) assigned in an earlier run: a step that
    fails now must not leave an old value for a later step to print as if it were new."""
    cell = (notebook_globals.get("In") or [""])[-1]
    if isinstance(cell, str) and "Printout(" in cell:
        for name in assigned_names(cell):
            notebook_globals.pop(name, None)


class _Tee(io.TextIOBase):
    """Writes through to the cell's output and keeps a copy."""

    def __init__(self, out):
        self.out, self.copy = out, io.StringIO()

    def write(self, text):
        self.copy.write(text)
        return self.out.write(text)

    def flush(self):
        self.out.flush()


class Printout:
    """The runner cell's printout, run step by step.

    ``with printout.step('shapes'):`` runs the lines of the check 'shapes'. If the learner's code
    fails there, the step prints a short diagnosis (the first failing verdict of the step's
    checks, then of the other checks) instead of a traceback, and the cell goes on."""

    def __init__(self, lesson, ns, names):
        self.lesson, self.globals, self.names = lesson, ns, tuple(names)
        self.objects = {name: ns.get(name) for name in self.names}   # what this printout ran
        self.lines = []        # (printed line, ids of the checks of its step)
        self.failed = {}       # check id -> what its step said
        self.said = []         # diagnoses printed so far
        self.out_of_time = False
        _latest[lesson.name] = self
        forget_previous_run(ns)

    def made_with(self, ns):
        return all(self.objects.get(k) is v for k, v in ns.items() if k in self.objects)

    def namespace(self):
        return namespace(self.globals, self.names)

    @contextlib.contextmanager
    def step(self, *check_ids, what=None):
        """Run the block; if the learner's code fails in it, say why and go on. `what` names
        something other than printout lines (a plot): its failure then counts against no check."""
        for cid in check_ids:
            if cid not in self.lesson.checks:
                raise KeyError(f"unknown check {cid!r}; {self.lesson.name} has {list(self.lesson.checks)}")
        tee = _Tee(sys.stdout)
        # a step of the printout is milliseconds of work: past STEP_SECONDS it is a loop that
        # never ends. A plot may take seconds on a busy machine: no limit, unless a step already
        # ran out of time (then it would only run the same loop again)
        limit = 2 if self.out_of_time else None if what else STEP_SECONDS
        try:
            with contextlib.redirect_stdout(tee), time_limit(limit):
                yield self
        except Exception as exc:   # the learner's code failed here: say why, and go on
            printed = self._record(tee, () if what else check_ids)
            self._fail(check_ids, exc, what, printed)
        else:
            self._record(tee, () if what else check_ids)

    def _record(self, tee, check_ids):
        lines = tee.copy.getvalue().splitlines()
        self.lines += [(line, check_ids) for line in lines]
        return len(lines)

    def _fail(self, check_ids, exc, what, printed):
        if isinstance(exc, OutOfTime):
            message = slow()
            if not self.out_of_time:   # first time: remember it, so the checks do not run it again
                self.out_of_time = True
                _too_slow.append((self.lesson.name, tuple(self.objects[n] for n in self.names)))
        else:
            message = self.diagnosis(check_ids, exc)
        if not what:
            for cid in check_ids:
                self.failed[cid] = message
        subject = what or " / ".join(self.lesson.checks[cid] for cid in check_ids)
        done = f"stopped after {printed} line{'s' if printed > 1 else ''}" if printed else "not printed"
        if what:
            done = "not shown"
        if message not in self.said:   # said once is enough: the numbers note lists what is missing
            self.said.append(message)
            print(paragraph(f"\u2717 {subject}: {done}, because {message}"))

    def diagnosis(self, check_ids, exc):
        """The first failing verdict of the step's checks, then of the others; else the error."""
        try:
            ns = self.namespace()
        except NameError as missing:
            return str(missing)
        order = list(check_ids) + [c for c in self.lesson.checks if c not in check_ids]
        for cid in order:
            v = verdict(self.lesson, cid, ns)
            if not v.passed:
                return v.message
        return (f"your code raised {type(exc).__name__}: {exc}. (With the checks' fixed weights it "
                "runs: look at what this step does differently.)")


def explain_numbers(printout, free=(), what="weight lines"):
    """Say how the lines the runner printed, and only those, compare with the documented ones.

    Every printed line that differs is shown beside the documented one, with the checks that
    judge it and what they say with this very code; a differing line is never called right.
    `free` are the labels of the lines whose numbers also depend on the order in which the
    learner's code draws random numbers (`what` names them)."""
    if printout is None or not (printout.lines or printout.failed):
        print("Nothing was printed above: run the cell above first.")
        return
    lesson = printout.lesson
    doc = {label(line): line for line in documented(lesson.name)}
    printed = {label(line): (line, ids) for line, ids in printout.lines}
    missing = [lab for lab in doc if lab not in printed]
    differ = [(lab, line, ids) for lab, (line, ids) in printed.items() if lab in doc and doc[lab] != line]
    if not (missing or differ):
        print(f"\u2713 your {len(printed)} lines are the documented ones.")
        return
    said = []
    if missing:
        which = f" ({', '.join(f'`{m}`' for m in missing)})" if len(missing) <= 4 else ""
        said.append(paragraph(f"The printout above could not print {len(missing)} of its {len(doc)} lines{which}: "
                              "the messages under it and the checks below say what to fix."))
    if differ:
        said.append(f"{len(differ)} printed line{'s differ' if len(differ) > 1 else ' differs'} from the "
                    "documented printout:")
    told = set()    # a mistake said once: the next lines it explains point back to it
    for lab, line, ids in differ:
        judged = ", ".join(f"`{cid}`" for cid in ids) or "no check"
        verdicts = _verdicts(printout, ids)
        failed = [v for v in verdicts or () if not v.passed]
        if verdicts is None:
            how = f"judged by {judged}: the checks below say what to fix."
        elif failed and failed[0].message in told:
            how = f"judged by {judged}, which fails with fixed starting weights: the mistake said above."
        elif failed:
            told.add(failed[0].message)
            how = f"judged by {judged}, which fails with fixed starting weights: {failed[0].message}"
        elif lab in free:
            how = (f"judged by {judged}, which runs your class with fixed starting weights and passes: "
                   f"these numbers also follow the random weights your code drew (another layer first, "
                   f"or an extra random draw, gives other {what}), so the check is what counts here.")
        else:
            how = (f"judged by {judged}, which passes with fixed starting weights, while your printout "
                   "differs: the check's cell below says why.")
        said += [f"  yours:      {line}", f"  documented: {doc[lab]}", paragraph(how, indent="  ")]
    print("\n".join(said))


def _verdicts(printout, check_ids):
    """The verdicts of check_ids for the objects the printout ran, or None when they are gone."""
    try:
        ns = printout.namespace()
    except NameError:
        return None
    return [verdict(printout.lesson, cid, ns) for cid in sorted(check_ids)]


class InKernel:
    """What a lesson's checks package gives its notebook, from its Lesson and the names its
    checks read from the notebook (in the order of its check() arguments). `free` are the labels
    of the printout lines whose numbers depend on the order the learner's code draws random
    numbers, `what` names them in the numbers note. In the notebook::

        from tinygpt_course.checks import multihead as checks
        printout = checks.Printout(globals())        # the runner cell, step by step
        with printout.step('shapes'):
            ...
        checks.explain_numbers(printout)             # the numbers note
        checks.check('shapes', globals())            # a check cell

    A passing check prints a line starting with a tick; a failing one raises CheckFailed with
    the likely mistake and its fix. Nothing here computes the lesson's answer: the expected
    values are the solution's record (reference.rec) and the documented printout (printout.txt),
    both stored data."""

    def __init__(self, lesson, names, free=(), what="weight lines"):
        self.lesson, self.names, self.free, self.what = lesson, tuple(names), tuple(free), what

    def Printout(self, notebook_globals):
        """The runner's printout: each `with printout.step(check):` block that fails in the
        learner's code says why in one paragraph, and the cell goes on."""
        return Printout(self.lesson, notebook_globals, self.names)

    def check(self, name, *objects):
        """Run one check in this kernel; raise CheckFailed with the diagnosis when it fails.
        ``check(name, globals())`` reads the names from the notebook (a missing one fails in the
        learner's terms); ``check(name, *objects)`` takes them in the order of `names`."""
        if len(objects) == 1 and isinstance(objects[0], dict):
            check_in(self.lesson, name, objects[0], self.names, free=self.free)
        else:
            check(self.lesson, name, dict(zip(self.names, objects)), free=self.free)

    def explain_numbers(self, printout):
        """Say how the printed lines, and only those, compare with the documented ones."""
        explain_numbers(printout, free=self.free, what=self.what)

    def hint(self, check_id):
        """Print the next hint (tinygpt_course.checks.tutor) for the mistake check_id named."""
        tutor.hint(self.lesson, check_id)

    def exports(self):
        """What a lesson's checks package gives its notebook: CheckFailed (what a failing check
        cell raises), CHECKS (check id -> the printout lines it covers), Printout, check,
        explain_numbers and hint (the next rung of a failed check's hint ladder)."""
        return CheckFailed, self.lesson.checks, self.Printout, self.check, self.explain_numbers, self.hint


# --- the documented printout, stored as data ------------------------------------------------

def documented_in(notebook_path):
    """The lines of the "What you should see" block of a source notebook."""
    import nbformat
    nb = nbformat.read(notebook_path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "markdown" and "What you should see" in c.source)
    return re.search(r"```\n(.*?)\n```", cell.source, re.S).group(1).splitlines()


def printout_path(lesson_name):
    return os.path.join(os.path.dirname(__file__), lesson_name, "printout.txt")


def main(argv=None):
    p = argparse.ArgumentParser(description="Write each lesson's documented printout (printout.txt) "
                                            "from its source notebook's 'What you should see'.")
    p.add_argument("lessons", nargs="+")
    p.add_argument("--course-dir", default=".", help="the course folder holding source/ (default: .)")
    args = p.parse_args(argv)
    for lesson in args.lessons:
        lines = documented_in(os.path.join(args.course_dir, "source", lesson, f"{lesson}.ipynb"))
        with open(printout_path(lesson), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        print(printout_path(lesson))
    return 0


if __name__ == "__main__":
    sys.exit(main())
