"""The hint rungs a learner used, kept for the teacher as data.

The tutor (tinygpt_course/checks/tutor.py) keeps the rungs a learner used in widget state, which
JupyterLab saves into the notebook's ``metadata.widgets``: each hint box's ``tinygpt_hints`` (one
check's entry) and the tutor's ledger's ``tinygpt_hints_used`` (every entry of the kernel and of
the notebook as it was saved before a kernel restart: the ledger is what keeps them across one).
That state cannot stay: it is learner-made markup (SanitizeOutputs drops it), and executing the
notebook replaces it with the grading kernel's own widgets. So ``KeepHintsUsed``, a sanitize step
(before the notebook runs), reads the tutor's entries out of it and writes them as checked plain
values into ``metadata.tinygpt.hints_used``: ``[{lesson, check, mistake, rungs}]``, names that are
snake_case ids, rungs among 1, 2, 3, one entry per (lesson, check, mistake), at most MAX_ENTRIES
(hints.checked, hints.merged). Nothing else of the widget state is read. No score depends on it: it
is what the teacher (the formgrader's notebook, the class report) sees.
"""
from nbgrader.preprocessors import NbGraderPreprocessor

from ..checks.hints import merged, widget_entries


def hints_used(widgets):
    """The tutor's entries of a notebook's widget state, checked and merged:
    [{lesson, check, mistake, rungs}]."""
    return merged(widget_entries(widgets))


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
