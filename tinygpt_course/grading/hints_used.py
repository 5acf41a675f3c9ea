"""The hint rungs a learner used, kept for the teacher as data.

The tutor (tinygpt_course/checks/tutor.py) keeps the rungs a learner used in widget state, which
JupyterLab saves into the notebook's ``metadata.widgets``: each hint box's ``tinygpt_hints`` (one
check's entry) and the tutor's ledger's ``tinygpt_hints_used`` (every entry of the kernel and of
the notebook as it was saved before a kernel restart). The course's JupyterLab extension
(hub/labextension, plugin keep-hints) keeps them in ``metadata.tinygpt_hints_used`` too, merged on
every save, so that a save right after a kernel restart (empty widget state) loses none. Neither
can stay: the widget state is learner-made markup (SanitizeOutputs drops it, and executing the
notebook replaces it with the grading kernel's own widgets), and both are whatever the learner's
file says. So ``KeepHintsUsed``, a sanitize step (before the notebook runs), reads the tutor's
entries out of both (hints.metadata_entries), drops ``metadata.tinygpt_hints_used`` and writes them
as checked plain values into ``metadata.tinygpt.hints_used``: ``[{lesson, check, mistake,
rungs}]``, names that are snake_case ids, rungs among 1, 2, 3, one entry per (lesson, check,
mistake), at most MAX_ENTRIES (hints.checked, hints.merged). Nothing else of the metadata is read.
No score depends on it: it is what the teacher (the formgrader's notebook, the class report) sees.
"""
from nbgrader.preprocessors import NbGraderPreprocessor

from ..checks.hints import KEPT, metadata_entries


class KeepHintsUsed(NbGraderPreprocessor):
    """Lift the tutor's rungs used out of the notebook's metadata (kept list and widget state)
    into metadata.tinygpt.hints_used, as checked data."""

    def preprocess(self, nb, resources):
        used = metadata_entries(nb.metadata)
        nb.metadata.pop(KEPT, None)          # the learner's copy goes; the checked one stays
        tinygpt = nb.metadata.get("tinygpt")
        if isinstance(tinygpt, dict):
            tinygpt.pop("hints_used", None)   # only what the notebook's hints show counts
            if used:
                tinygpt["hints_used"] = used
                self.log.info("hints used: %d check(s)", len(used))
        return nb, resources
