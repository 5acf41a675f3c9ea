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

# Seconds one cell may run while grading; a teacher can raise it.
c.Execute.timeout = 60
