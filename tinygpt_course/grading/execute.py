"""nbgrader's Execute, run in the grading sandbox and hardened for a class of 800.

The kernel is started by :class:`~tinygpt_course.grading.kernel.SandboxedKernelManager`: an
ipykernel inside bubblewrap (no course folder, no gradebook, no network, its own PIDs, capped
memory, CPU time and processes; see tinygpt_course.grading.sandbox and ``c.Sandbox.*``).

Stock nbgrader 0.9.6 loses the whole submission when the kernel dies (``os._exit``, a
segfault, the kernel killed for memory): no autograded copy, no feedback, and the command
exits 1. After an endless loop it pays the timeout again in every later cell that calls the
looping code. Here a dead kernel or a timeout stops execution: the cell gets a clear error,
every later code cell gets a "not run" error (so its checks score 0), and grading goes on.
A kernel that does not answer even after the timeout's interrupt (nbclient's "Timeout waiting
for IOPub output": seen with memory held at the cgroup's cap), or that breaks its own messaging
(a process flood at the sandbox's cap: ipykernel cannot start a thread, and nbclient then
raises on a message), is treated the same way; stock nbgrader loses the whole submission there.
"""
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.v4 import new_output

from nbgrader.preprocessors import Execute

from .kernel import SandboxedKernelManager


def error_output(ename, message):
    return new_output("error", ename=ename, evalue=message, traceback=[f"{ename}: {message}"])


class RobustExecute(Execute):

    def __init__(self, *args, **kwargs):
        # nbgrader's Execute sets AsyncKernelManager as a keyword: ours comes first
        kwargs.setdefault("kernel_manager_class", SandboxedKernelManager)
        super().__init__(*args, **kwargs)

    def preprocess(self, nb, resources=None, km=None):
        self._stop_reason = None
        return super().preprocess(nb, resources, km)

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
            return cell, resources
        except CellTimeoutError:
            self.log.warning("the kernel stopped answering in cell %d", index)
            cell.outputs.append(error_output(
                self.error_on_timeout["ename"],
                f"this cell did not finish within the {self.timeout} s limit, and the kernel did not "
                "answer once interrupted"))
            self._stop_reason = f"not run: an earlier cell ran past the {self.timeout} s limit"
            return cell, resources
        except Exception as exc:        # the kernel's messaging broke (nbclient's own errors are above)
            self.log.warning("the kernel stopped working in cell %d: %s: %.300s", index, type(exc).__name__, exc)
            cell.outputs.append(error_output(
                "KernelBroken", "the kernel stopped working while running this cell (too many processes?)"))
            self._stop_reason = "not run: the kernel stopped working in an earlier cell"
            return cell, resources
        if any(o.output_type == "error" and o.get("ename") == self.error_on_timeout["ename"]
               for o in cell.outputs):
            self._stop_reason = f"not run: an earlier cell ran past the {self.timeout} s limit"
        return cell, resources
