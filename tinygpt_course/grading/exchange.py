"""nbgrader collect that only collects submissions made by the student they name.

Stock ``nbgrader collect`` warns when an inbound submission ``alice+multihead+<time>+<id>`` is
owned by bob (``nbgrader submit --student=alice`` run by bob), then collects it anyway; with
``--update`` (the formgrader's Collect button) it replaces alice's real submission. Here such a
submission is left in inbound, not collected, and logged as an error; alice's newest submission
of her own is collected instead. Plug it in with
``c.ExchangeFactory.collect = "tinygpt_course.grading.exchange.CheckedCollect"``.
"""
import os

from nbgrader.exchange.default.collect import ExchangeCollect

from .owner import owner_problem


class CheckedCollect(ExchangeCollect):

    def init_src(self):
        super().init_src()
        # super() kept each student's newest record; keep instead their newest genuine one
        import glob
        student = self.coursedir.student_id or "*"
        pattern = os.path.join(self.inbound_path, f"{student}+{self.coursedir.assignment_id}+*")
        by_student = {}
        self.spoofed = []
        for path in glob.glob(pattern):
            rec = self._path_to_record(path)
            problem = owner_problem(path, rec["username"])
            if problem:
                self.spoofed.append((rec["filename"], problem))
                self.log.error("not collected: %s: %s", rec["filename"], problem)
                continue
            by_student.setdefault(rec["username"], []).append(rec)
        self.src_records = [self._pick(recs) for recs in by_student.values()]

    def _pick(self, records):
        records = self._sort_by_timestamp(records)
        if self.duedate is not None and self.before_duedate:
            before = [r for r in records if r["timestamp"] <= self.duedate]
            if before:
                return before[0]
        return records[0]
