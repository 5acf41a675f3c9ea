"""nbgrader's Execute, hardened for a class of 800.

Stock nbgrader 0.9.6 loses the whole submission when the kernel dies (``os._exit``, a
segfault, the kernel killed for memory): no autograded copy, no feedback, and the command
exits 1. After an endless loop it pays the timeout again in every later cell that calls the
looping code. Here a dead kernel or a timeout stops execution: the cell gets a clear error,
every later code cell gets a "not run" error (so its checks score 0), and grading goes on.
The kernel's address space is capped so runaway memory ends in a MemoryError, not in the
machine's out-of-memory killer.
"""
import resource

from nbclient.exceptions import DeadKernelError
from nbformat.v4 import new_output
from traitlets import Integer

from nbgrader.preprocessors import Execute


def error_output(ename, message):
    return new_output("error", ename=ename, evalue=message, traceback=[f"{ename}: {message}"])


class RobustExecute(Execute):
    memory_limit_mb = Integer(
        6144, help="Address-space cap for the learner's kernel, in MB (0: no cap)").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        self._stop_reason = None
        self.stop_events = []
        return super().preprocess(nb, resources, km)

    def start_new_kernel_client(self):
        kc = super().start_new_kernel_client()
        process = getattr(getattr(self.km, "provisioner", None), "process", None)
        if self.memory_limit_mb and process is not None:
            limit = self.memory_limit_mb * 2 ** 20
            try:
                resource.prlimit(process.pid, resource.RLIMIT_AS, (limit, limit))
            except (OSError, ValueError) as exc:  # not fatal: grading goes on without a cap
                self.log.warning("could not cap the kernel's memory: %s", exc)
        return kc

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        if self._stop_reason:
            cell.outputs = [error_output("NotRun", self._stop_reason)]
            return cell, resources
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self.log.warning("the kernel died in cell %d", index)
            cell.outputs.append(error_output(
                "DeadKernelError",
                "the kernel died while running this cell (os._exit, a crash, or too much memory)"))
            self._stop_reason = "not run: the kernel died in an earlier cell"
            self.stop_events.append(("dead kernel", index))
            return cell, resources
        if any(o.output_type == "error" and o.get("ename") == self.error_on_timeout["ename"]
               for o in cell.outputs):
            self._stop_reason = f"not run: an earlier cell ran past the {self.timeout} s limit"
            self.stop_events.append(("timeout", index))
        return cell, resources
