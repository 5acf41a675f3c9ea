"""Grading steps plugged into nbgrader's pipelines through nbgrader_config.py.

- execute.RobustExecute: nbgrader's Execute that survives a dead kernel, stops at the first
  timeout instead of paying it once per cell, and caps the kernel's memory.
- independent.IndependentChecks: re-runs the learner's answer in a sandboxed process with the
  trusted set-up cells from source/, judges it in the grader, and withdraws the points of every
  check the learner's kernel passed but the independent run did not confirm.
- independent.RecordFlags: after nbgrader saved the scores, writes why a submission was flagged
  into the gradebook as the answer cell's comment, for the teacher.
- feedback.ExplainChecks: feedback shows each check's name, points and diagnosis, never a line
  of a hidden test.
- repair.pre_convert_hook: a notebook that is not valid JSON or was renamed still gets a result.
"""
