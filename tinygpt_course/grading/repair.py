"""Before nbgrader autogrades one learner: set aside what is not data; give broken or renamed
notebooks a result.

- A submitted folder that is not plain data (a symlink, a FIFO or a device in it, a folder chain
  deeper than ``c.SubmissionTree.max_depth``, too many entries or bytes: an LMS zip unpacked in
  ``submitted/``) is moved aside to ``submitted/<student>/.refused-<assignment>-<time>`` with an
  error naming the student and the thing refused, before nbgrader walks it: nbgrader's own copy
  of a submission's other files follows symlinks as the teacher (``notes.html`` -> the
  gradebook lands in the feedback) and recurses (an 1100-deep chain is a RecursionError). The
  hook is the only step that runs before that copy; its exceptions are only logged, so it moves
  the folder rather than raising. That learner is not graded; the rest of the class is.
- A notebook that is not valid JSON stops stock nbgrader for that learner (no autograded copy,
  an error at the end of the run). Here it is kept as ``<name>.ipynb.broken`` and replaced by
  the released notebook with a note at the top, so the learner is graded (zero on every
  answer-dependent check) and the feedback says why.
- A renamed notebook (the expected file missing, exactly one other notebook of this
  assignment present) is copied to the expected name and graded; the original stays.
"""
import glob
import logging
import os
import shutil

import nbformat

from .sanitize_outputs import shown

log = logging.getLogger("tinygpt.grading")


def _readable(path):
    try:
        nbformat.read(path, as_version=4)
        return True
    except Exception:
        return False


def _note(nb, text):
    cell = nbformat.v4.new_markdown_cell(f"**Grading note:** {text}")
    nb.cells.insert(0, cell)
    return nb


def pre_convert_hook(assignment=None, student=None, notebooks=None, **_):
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Application
    if not notebooks:
        return
    folder = os.path.dirname(notebooks[0])
    config = Application.instance().config if Application.initialized() else None
    coursedir = CourseDirectory(config=config) if config else CourseDirectory()
    if _set_aside(folder, config):
        notebooks[:] = []          # nbgrader then stops this learner (no notebooks), and only them
        return
    release = coursedir.format_path(coursedir.release_directory, ".", assignment)
    expected = sorted(os.path.basename(p) for p in glob.glob(os.path.join(release, "*.ipynb")))
    for name in expected:
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            others = [p for p in glob.glob(os.path.join(folder, "*.ipynb"))
                      if os.path.basename(p) not in expected and _readable(p)]
            if len(others) == 1:
                nb = nbformat.read(others[0], as_version=4)
                _note(nb, f"your notebook was submitted as {shown(os.path.basename(others[0]))}; "
                          f"it was graded as `{name}`.")
                nbformat.write(nb, path)
                notebooks.append(path)
                log.warning("%s: graded renamed notebook %s as %s", student, others[0], name)
            continue
        if not _readable(path):
            shutil.move(path, path + ".broken")
            nb = nbformat.read(os.path.join(release, name), as_version=4)
            _note(nb, f"the submitted `{name}` could not be read (it is not a valid notebook, "
                      f"so it may have been damaged by hand-editing); it is kept as `{name}.broken` "
                      "for your teacher, and this unanswered copy was graded in its place.")
            nbformat.write(nb, path)
            log.warning("%s: %s is not a valid notebook; kept as %s.broken", student, path, name)


def _set_aside(folder, config):
    """Move a submitted folder that is not plain data out of nbgrader's way; True if it was."""
    import datetime

    from .owner import submission_problem
    refusal = submission_problem(folder, None, config=config)
    if refusal is None:
        return False
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    parent, name = os.path.split(os.path.abspath(folder))
    if os.path.islink(parent):                  # submitted/<student> itself is the link: move it
        parent, name = os.path.split(parent)
    aside = os.path.join(parent, f".refused-{name}-{stamp}")
    os.rename(os.path.join(parent, name), aside)     # rename moves the entry, follows nothing
    log.error("FLAGGED, not graded: %s: %s; moved aside to %s", folder, refusal, aside)
    return True


class ForgetDuplicates:
    """After DeduplicateIds: a duplicated graded cell keeps a bare nbgrader entry without a
    grade_id, which makes nbgrader 0.9.6's OverwriteCells.add_missing_cells fail with
    KeyError and lose the whole submission. Such copies become plain, ungraded cells."""

    def __call__(self, nb, resources):
        for cell in nb.cells:
            nbg = cell.metadata.get("nbgrader")
            if nbg is not None and "grade_id" not in nbg:
                del cell.metadata["nbgrader"]
        return nb, resources


class RestoreDeletedCells:
    """Before OverwriteCells: put deleted graded and answer cells back where source/ has them.

    nbgrader 0.9.6's own add_missing_cells assumes the cell before a deleted one is a graded or
    answer cell; in our lessons it is usually a read-only markdown cell, and nbgrader fails
    with KeyError, losing the submission. Here the cell goes back after the nearest cell
    before it that the submission still has; OverwriteCells then fills in its source."""

    def __call__(self, nb, resources):
        from nbgrader.api import Gradebook
        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gb:
            source = gb.find_notebook(info["notebook"], info["assignment"])
            order = [c.name for c in source.source_cells]
            cells = {c.name: c for c in source.source_cells}
            points = {c.name: c.max_score for c in source.grade_cells}
            answers = {c.name for c in source.solution_cells}
            for name in order:
                present = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
                if name in present or (name not in points and name not in answers):
                    continue
                before = [n for n in order[:order.index(name)] if n in present]
                at = present.index(before[-1]) + 1 if before else 0
                nb.cells.insert(at, self._cell(cells[name], name, points.get(name), name in answers))
                log.warning("%s: restored deleted cell %s from source", info["student"], name)
        return nb, resources

    @staticmethod
    def _cell(src, name, points, is_answer):
        meta = {"grade": points is not None, "solution": is_answer, "locked": not is_answer,
                "task": False, "grade_id": name, "schema_version": 3}
        if points is not None:
            meta["points"] = points
        make = nbformat.v4.new_code_cell if src.cell_type == "code" else nbformat.v4.new_markdown_cell
        return make(src.source, metadata={"nbgrader": meta})
