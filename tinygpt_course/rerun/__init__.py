"""Code that runs learner code at grading time, inside the sandbox.

Trusted code (tinygpt_course.grading) never imports this package: it starts
``python -m tinygpt_course.rerun.server`` inside bubblewrap and talks to it over a pipe.
"""
