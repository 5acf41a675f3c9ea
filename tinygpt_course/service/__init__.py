"""tinygpt-grading-service: grades each submission as it arrives, one learner at a time.

- queue.py: the durable queue (one SQLite file in the course folder): in order, each submission
  once, retries then flags what crashes, the per-learner rate limit; the contract between the parts;
- runner.py and the command line: notice new submissions in the exchange's inbound folder, queue
  them, then collect, autograde and release feedback for one learner at a time
  (`tinygpt-grading-service run|status`).
"""
