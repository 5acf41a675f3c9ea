"""Reading the course as `nbgrader autograde` does, finding submissions and what is graded."""
import os
import re


def load_course(assignment):
    """Read the course config as `nbgrader autograde` does; return its CourseDirectory.

    This also imports nbgrader and whatever the config's preprocessors import, once, here:
    the forked workers inherit them instead of paying nbgrader's start per submission.
    """
    from nbgrader.apps.autogradeapp import AutogradeApp
    from nbgrader.apps.nbgraderapp import NbGraderApp
    from nbgrader.converters import Autograde
    from traitlets.utils.importstring import import_item

    app = NbGraderApp.instance()
    app.initialize(["autograde", assignment])
    sub = app.subapp
    coursedir = sub.coursedir
    coursedir.assignment_id = assignment
    # the whole config (nbgrader_config.py's c.Sandbox, c.IndependentChecks, ...): coursedir.config
    # holds only what was loaded before the course's config file, so prepare_checks takes this one
    coursedir.course_config = sub.config
    converter = Autograde(coursedir=coursedir, parent=sub)
    for pp in list(converter.sanitize_preprocessors) + list(converter.autograde_preprocessors):
        if isinstance(pp, str):
            import_item(pp)
    # and what a first autograde imports on its way: the exchange classes the config names, and
    # what jupyter_client's search for the python3 kernel's spec imports (ipykernel's spec, and
    # IPython, asked for its folder): 0.1 s of CPU in each worker otherwise
    for name in sub.config.get("ExchangeFactory", {}).values():
        if isinstance(name, str):
            import_item(name)
    for name in ("IPython.paths.get_ipython_dir", "ipykernel.kernelspec.RESOURCES"):
        import_item(name)
    AutogradeApp.clear_instance()
    NbGraderApp.clear_instance()
    try:    # the course's grading steps use torch in the grader too: import it once, here
        import torch  # noqa: F401
    except ImportError:
        pass
    return coursedir


def prepare_checks(coursedir, assignment):
    """Draw the grading seed and run each checked notebook's solution once, here, so the forked
    workers inherit both instead of each running the solution again. Returns the lessons whose
    answers are re-run (each worker's re-run zygotes)."""
    import glob

    from tinygpt_course.grading.independent import PrepareChecks
    step = PrepareChecks(config=getattr(coursedir, "course_config", coursedir.config))
    lessons = []
    for path in sorted(glob.glob(os.path.join(coursedir.format_path(coursedir.source_directory, ".", assignment),
                                              "*.ipynb"))):
        name = os.path.splitext(os.path.basename(path))[0]
        _, resources = step.preprocess(None, {"nbgrader": {"assignment": assignment, "notebook": name}})
        source = resources["tinygpt"]["source"]
        if source is not None:
            lessons.append(source.name)
    return lessons


def find_submissions(coursedir, assignment):
    """{student: submitted folder} for every submitted/<student>/<assignment>/ holding a notebook."""
    import glob
    pattern = re.compile(coursedir.format_path(coursedir.submitted_directory, "(?P<student>[^/]+)",
                                               re.escape(assignment), escape=True) + "$")
    excluded = set(filter(None, coursedir.student_id_exclude.split(",")))
    found = {}
    for folder in sorted(glob.glob(coursedir.format_path(coursedir.submitted_directory, "*", assignment))):
        m = pattern.match(folder)
        if m and m["student"] not in excluded and glob.glob(os.path.join(folder, coursedir.notebook_id + ".ipynb")):
            found[m["student"]] = folder
    return found


def _newest_mtime(folder, names=None):
    times = [os.path.getmtime(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs
             if names is None or f in names]
    return max(times, default=None)


def is_graded(coursedir, assignment, student, submitted, gradebook):
    """Whether nbgrader's output for this submission is there, up to date, and in the gradebook."""
    students, names = gradebook
    if student not in students:
        return False
    dest = coursedir.format_path(coursedir.autograded_directory, student, assignment)
    # the notebooks nbgrader grades: those of the assignment (it skips any other)
    notebooks = {f for f in os.listdir(submitted) if f.endswith(".ipynb") and f[:-len(".ipynb")] in names}
    if not os.path.isdir(dest) or not notebooks <= set(os.listdir(dest)):
        return False
    new, old = coursedir.get_existing_timestamp(submitted), coursedir.get_existing_timestamp(dest)
    if new is not None and old is not None:          # nbgrader's own rule (timestamp.txt)
        return not new > old
    src_time, dest_time = _newest_mtime(submitted), _newest_mtime(dest, notebooks or None)
    return src_time is not None and dest_time is not None and src_time <= dest_time


def gradebook_state(coursedir, assignment):
    """(students with a submission, the assignment's notebook names) from the gradebook;
    None if the assignment is not there."""
    from nbgrader.api import Gradebook, MissingEntry
    with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
        try:
            a = gb.find_assignment(assignment)
        except MissingEntry:
            return None
        return {s.student.id for s in a.submissions}, {nb.name for nb in a.notebooks}
