"""The hint rungs a learner used, kept for the teacher as data.

The tutor (tinygpt_course/checks/tutor.py) keeps the rungs a learner used in its widget's state,
which JupyterLab saves into the notebook's ``metadata.widgets``. That state cannot stay: it is
learner-made markup (SanitizeOutputs drops it), and executing the notebook replaces it with the
grading kernel's own widgets. So ``KeepHintsUsed``, a sanitize step (before the notebook runs),
reads the tutor's entries out of it and writes them as checked plain values into
``metadata.tinygpt.hints_used``: ``[{lesson, check, mistake, rungs}]``, names that are snake_case
ids, rungs among 1, 2, 3, at most MAX_ENTRIES. Nothing else of the widget state is read. No
score depends on it: it is what the teacher (the formgrader's notebook, the class report) sees.
"""
import re

from nbgrader.preprocessors import NbGraderPreprocessor

STATE = "application/vnd.jupyter.widget-state+json"
NAME = re.compile(r"[a-z][a-z0-9_]{0,59}")
MAX_ENTRIES = 100


def hints_used(widgets):
    """The tutor's entries of a notebook's widget state, checked: [{lesson, check, mistake, rungs}]."""
    try:
        models = list(widgets[STATE]["state"].values())
    except (KeyError, TypeError, AttributeError):
        return []
    used = []
    for model in models:
        state = model.get("state") if isinstance(model, dict) else None
        entry = checked(state.get("tinygpt_hints") if isinstance(state, dict) else None)
        if entry:
            used.append(entry)
    return used[:MAX_ENTRIES]


def checked(h):
    """One entry {lesson, check, mistake, rungs} as plain checked values (snake_case names, rungs
    among 1-3, sorted), or None: what is kept, and what the class report reads back."""
    if not isinstance(h, dict) or not all(isinstance(h.get(k), str) and NAME.fullmatch(h[k])
                                          for k in ("lesson", "check", "mistake")):
        return None
    rungs = h.get("rungs")
    if isinstance(rungs, list) and rungs and all(type(r) is int and 1 <= r <= 3 for r in rungs):
        return {"lesson": h["lesson"], "check": h["check"], "mistake": h["mistake"], "rungs": sorted(set(rungs))}
    return None


class KeepHintsUsed(NbGraderPreprocessor):
    """Lift the tutor's rungs used out of the widget state into metadata.tinygpt.hints_used."""

    def preprocess(self, nb, resources):
        used = hints_used(nb.metadata.get("widgets"))
        tinygpt = nb.metadata.get("tinygpt")
        if isinstance(tinygpt, dict):
            tinygpt.pop("hints_used", None)   # only what the widget state shows counts
            if used:
                tinygpt["hints_used"] = used
                self.log.info("hints used: %d check(s)", len(used))
        return nb, resources
