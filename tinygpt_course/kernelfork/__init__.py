"""The kernel template: a warm process that forks learner kernels, each into its own sandbox.

Started by the grader (tinygpt_course.grading.kernel) as ``python -m tinygpt_course.kernelfork.server``;
the grader never imports this package: learner code runs in what it forks.
"""
