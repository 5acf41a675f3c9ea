"""nbgrader configuration for tinygpt-course (run nbgrader commands from this folder)."""
import os

c = get_config()  # noqa: F821  (nbgrader provides get_config)

c.CourseDirectory.course_id = "tinygpt"
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))

# What the learner sees where a solution was cut out.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# A deleted test cell comes back from source/ (instead of going to manual grading).
c.OverwriteCells.add_missing_cells = True

# --- grading a teacher can trust (tinygpt_course/grading) ---------------------------------
from nbconvert.preprocessors import ClearMetadataPreprocessor  # noqa: E402
from nbgrader.preprocessors import (  # noqa: E402
    AssignLatePenalties, CheckCellMetadata, ClearOutput, DeduplicateIds, IgnorePattern, LimitOutput,
    OverwriteCells, OverwriteKernelspec, SaveAutoGrades)

from tinygpt_course.grading.execute import RobustExecute  # noqa: E402
from tinygpt_course.grading.feedback import ExplainChecks, WrapLongLines  # noqa: E402
from tinygpt_course.grading.hiddentests import RestoreHiddenTests  # noqa: E402
from tinygpt_course.grading.independent import IndependentChecks, PrepareChecks, RecordFlags  # noqa: E402
from tinygpt_course.grading.owner import CheckOwner  # noqa: E402
from tinygpt_course.grading.repair import (  # noqa: E402
    ForgetDuplicates, RestoreDeletedCells, pre_convert_hook)
from tinygpt_course.grading.hints_used import KeepHintsUsed  # noqa: E402
from tinygpt_course.grading.integrity import CommentIntegrity, NoteChangedCells, NoteDeletedCells  # noqa: E402
from tinygpt_course.grading.sanitize_outputs import SanitizeOutputs  # noqa: E402
from tinygpt_course.grading.verdicts import RecordVerdicts  # noqa: E402

# Sanitizing as nbgrader does it, after an ownership check (a submission whose files belong to
# another Unix user is not graded), plus two repairs: duplicated or deleted cells lose nothing;
# and a released test cell, unchanged, gets its hidden tests back before OverwriteCells compares
# checksums (nbgrader would report every hidden-test cell as changed; any real change still is).
# KeepHintsUsed keeps the tutor's hint rungs used as data (metadata.tinygpt.hints_used) before
# the run replaces the widget state. NoteDeletedCells and NoteChangedCells keep, as data, which
# graded cells the learner deleted and which read-only cells they edited, before they are put
# back (tinygpt-grade-class and the class report show them).
c.Autograde.sanitize_preprocessors = [CheckOwner, KeepHintsUsed, ClearOutput, DeduplicateIds, ForgetDuplicates(),
                                      NoteDeletedCells, RestoreDeletedCells(), OverwriteKernelspec,
                                      RestoreHiddenTests, NoteChangedCells, OverwriteCells, CheckCellMetadata]

# nbgrader's autograde pipeline with steps swapped in or added: PrepareChecks first (reads
# source/ and runs the solution before any learner code runs), RobustExecute for Execute (the
# kernel runs in the sandbox), IndependentChecks right after it, SanitizeOutputs before the
# notebook is saved (the formgrader shows the autograded notebook's outputs as they are: only
# text, checked images and cleaned HTML stay; learner markdown is shown as text), RecordFlags
# after the scores, and CommentIntegrity the cells grading put back (grading/integrity.py), in
# the gradebook's comments. RecordVerdicts keeps the re-run's verdict of each check (kind, mistake) in
# the autograded notebook's test-cell metadata, for tinygpt-class-report; scores are untouched.
c.Autograde.autograde_preprocessors = [
    PrepareChecks, RobustExecute, IndependentChecks, RecordVerdicts, IgnorePattern, ClearMetadataPreprocessor,
    LimitOutput, SanitizeOutputs, SaveAutoGrades, RecordFlags, CommentIntegrity, AssignLatePenalties,
    CheckCellMetadata]
c.RobustExecute.timeout = 60               # seconds one cell may run
c.IndependentChecks.timeout = 120          # seconds for the whole independent re-run
c.Autograde.pre_convert_hook = pre_convert_hook   # broken or renamed notebooks still get a result
# nbconvert checks the whole notebook against the format's schema after each of the two dozen
# steps above: once after the last is enough (a notebook is still checked when read, and before
# it is written; a step that broke it still fails it, named by the last step's name)
c.Exporter.optimistic_validation = True

# The sandbox every run of learner code goes through (bubblewrap; README "Grading sandbox").
# Without bubblewrap grading refuses; c.Sandbox.enabled = False opts out (with a warning).
c.Sandbox.memory_limit_mb = 6144           # address space of each process in the sandbox
c.Sandbox.cpu_limit_s = 900                # CPU seconds of each process in the sandbox
c.Sandbox.max_processes = 512              # processes and threads per sandbox (pids cgroup; without one, of its uid)
c.Sandbox.file_size_limit_mb = 256         # the largest file learner code may write
c.Sandbox.tmp_size_mb = 512                # its /tmp (home, kernel folder), a tmpfs gone with the sandbox
c.Sandbox.shm_size_mb = 64                 # its /dev/shm
c.Sandbox.uid = 65534                      # learner code's uid, outside too with a root grader
# Each grading kernel is forked from a warm template (torch, matplotlib, ipykernel and the course
# library imported once per grading process) and joins a sandbox of its own: no kernel start and
# no `import torch` per notebook (bench/README.md). False starts every kernel afresh.
c.SandboxedKernelManager.fork_from_template = True

# The exchange takes data, not paths (tinygpt_course/grading/exchange.py): collect copies only
# regular files and folders, by handle, within c.SubmissionTree's bounds, and only submissions
# made by the student they name (nbgrader only warns); release_feedback publishes only the
# feedback of the lesson's own notebooks.
c.ExchangeFactory.collect = "tinygpt_course.grading.exchange.CheckedCollect"
c.ExchangeFactory.release_feedback = "tinygpt_course.grading.exchange.CheckedReleaseFeedback"
c.SubmissionTree.max_depth = 10            # folders in a submission nest at most this deep
c.SubmissionTree.max_entries = 1000        # files and folders in one submission, at most

# Feedback shows each check's name, points and diagnosis, never a hidden test's code nor a line
# of the solution; SanitizeOutputs again, for notebooks autograded before it was in the pipeline.
c.GenerateFeedback.preprocessors = ["nbgrader.preprocessors.GetGrades", SanitizeOutputs, ExplainChecks,
                                    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor", WrapLongLines]
# The feedback page loads nothing from outside the machine: nbgrader's feedback template fetches
# MathJax from a CDN, and no lesson writes any math ($...$): the course's templates (searched
# before nbgrader's and nbconvert's) hold a mathjax macro that loads none.
import nbgrader  # noqa: E402
import tinygpt_course.grading  # noqa: E402
c.HTMLExporter.extra_template_basedirs = [
    os.path.join(os.path.dirname(tinygpt_course.grading.__file__), "templates"),
    os.path.join(os.path.dirname(nbgrader.__file__), "server_extensions", "formgrader", "templates")]

# Grades for an LMS: uncomment and `nbgrader export` writes canvas_grades.csv, the gradebook CSV
# Canvas imports (tinygpt_course/export.py); as it is, nbgrader's own grades.csv.
# c.ExportApp.plugin_class = "tinygpt_course.export.CanvasCsvExport"
