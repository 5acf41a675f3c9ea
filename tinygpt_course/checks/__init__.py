"""Checks with diagnoses for the lessons' printouts.

Each lesson's checks are split in two halves so that grading can run them in two processes:
``extract`` runs the learner's code and records raw numbers (it is the only half that touches
learner code), ``judge`` compares those numbers with what trusted code computes and names the
likely mistake. In the notebook both halves run in the learner's kernel; under
``nbgrader autograde`` the grading step in ``tinygpt_course.grading`` runs ``extract`` in a
sandboxed process and ``judge`` in a clean one.
"""
import textwrap

WIDTH = 78   # fits JupyterLab's Validate dialog, and nbgrader validate's 87 columns after its indent


def paragraph(text, width=WIDTH, indent=""):
    """text as one paragraph of lines at most `width` long (words are never cut)."""
    return textwrap.fill(" ".join(str(text).split()), width=width, initial_indent=indent,
                         subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


class CheckFailed(AssertionError):
    """A check that failed, with a diagnosis in the learner's terms.

    IPython shows an exception that has ``_render_traceback_`` as the lines it returns, instead
    of the frames it went through: the learner (and nbgrader's Validate, which shows an error's
    traceback) sees one short paragraph, not the checks' own source and paths.
    """

    repeat_of = None    # the check whose cell, above, said the same mistake in full
    hint = None         # rung 1 of the mistake's hint ladder and how to get the next (checks.tutor)

    def _render_traceback_(self):
        lines = paragraph(f"Check failed: {self}").splitlines()
        return lines + paragraph(self.hint).splitlines() if self.hint else lines
