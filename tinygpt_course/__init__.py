"""tinygpt-course: the course library (data, plots, checks, grading).

It never holds an exercise's solution: learners have it installed and can read it.
"""
__version__ = "0.1.0"
