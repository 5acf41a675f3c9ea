"""Code that runs learner code at grading time: the re-run zygote and its per-job workers.

Trusted code (tinygpt_course.grading) never imports this package: it starts
``python -m tinygpt_course.rerun.server`` and talks to it over a pipe; every job runs in a fresh
fork of it inside a bubblewrap sandbox of its own.
"""
