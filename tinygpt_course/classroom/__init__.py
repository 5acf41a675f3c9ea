"""tinygpt-grade-class: autograde a whole class on all cores, exactly as `nbgrader autograde` does.

- cli.py: the command line (tinygpt-grade-class) and the run's summary;
- submissions.py: reading the course as nbgrader does, finding submissions, what is graded already;
- pool.py: the forked workers and the queue, retries, progress;
- worker.py: one worker grading one submission with nbgrader's own command;
- lock.py: the gradebook lock that makes the workers take turns on SQLite;
- once.py: what nbgrader rebuilds for every cell or gradebook access (the metadata schema's
  validator, the gradebook's engine), built once per worker;
- shard.py, merge.py: a class graded in N pods (a Kubernetes Indexed Job), then merged (--shards, --merge-shards).

It imports the grading steps (tinygpt_course.grading) only through the course's nbgrader_config.py
and grading.independent.PrepareChecks; it never runs learner code itself.
"""
