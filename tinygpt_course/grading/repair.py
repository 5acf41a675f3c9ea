"""Before nbgrader autogrades one learner: give broken or renamed notebooks a result.

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
    release = coursedir.format_path(coursedir.release_directory, ".", assignment)
    expected = sorted(os.path.basename(p) for p in glob.glob(os.path.join(release, "*.ipynb")))
    for name in expected:
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            others = [p for p in glob.glob(os.path.join(folder, "*.ipynb"))
                      if os.path.basename(p) not in expected and _readable(p)]
            if len(others) == 1:
                nb = nbformat.read(others[0], as_version=4)
                _note(nb, f"your notebook was submitted as `{os.path.basename(others[0])}`; "
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
