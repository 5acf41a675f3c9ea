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

A kernel that does not come up at all (its sandbox not made, or the kernel dead before it answers
``kernel_info``: seen as "Resource temporarily unavailable" when the machine is short of processes
or memory for a moment, other graders' sandboxes at their caps) fails before any learner code has
run: that is the grader's trouble, not the learner's, so the start is tried again with a new
kernel manager, ``start_attempts`` times in all, before nbgrader reports the submission.

What the kernel sends back is budgeted as it is read (tinygpt_course.grading.output_budget):
``message_limit`` bytes per message part, ``output_limit`` characters per output and
``kernel_output_limit`` per notebook, with a note where output was cut. nbgrader's LimitOutput
(lines) still runs later; this is what keeps the grader's memory and the saved notebooks small.
"""
import time

from jupyter_core.utils import run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat.v4 import new_output, output_from_msg
from traitlets import Float, Integer

from nbgrader.preprocessors import Execute

from .kernel import SandboxedKernelManager
from .output_budget import MESSAGE_LIMIT, OutputBudget


def error_output(ename, message):
    return new_output("error", ename=ename, evalue=message, traceback=[f"{ename}: {message}"])


class RobustExecute(Execute):

    start_attempts = Integer(3, help=(
        "Times a grading kernel is started before nbgrader reports the submission: a start that "
        "fails (the sandbox or the kernel did not come up) has run no learner code, so it is tried "
        "again with a new kernel manager.")).tag(config=True)
    start_pause = Float(2.0, help=(
        "Seconds waited before the n-th new start (n times this), so that a moment's shortage of "
        "processes or memory on the machine can pass.")).tag(config=True)

    message_limit = Integer(MESSAGE_LIMIT, help=(
        "Bytes of one part of one message from the grading kernel that the grader decodes: a larger "
        "part (one huge print, a huge exception message) is replaced by a note with its first "
        "characters, without being copied or decoded. 0: no limit.")).tag(config=True)
    output_limit = Integer(100_000, help=(
        "Characters kept of one output (a cell's stdout or stderr, an error, a display); the rest is "
        "dropped as it arrives, with a note where it was cut. 0: no limit.")).tag(config=True)
    kernel_output_limit = Integer(1_000_000, help=(
        "Characters of output kept for the whole notebook's run; past them every cell's output is "
        "dropped as it arrives, with a note. 0: no limit.")).tag(config=True)
    image_limit = Integer(1_000_000, help=(
        "Characters (of base64) of one picture (image/png, image/jpeg) kept: pictures are budgeted "
        "apart from text, kept whole or dropped with a note; a lesson's plot is 100-300 thousand. "
        "0: no limit.")).tag(config=True)
    kernel_image_limit = Integer(5_000_000, help=(
        "Characters of pictures kept for the whole notebook's run; past them each picture is "
        "dropped as it arrives, with a note. 0: no limit.")).tag(config=True)

    def __init__(self, *args, **kwargs):
        # nbgrader's Execute sets AsyncKernelManager as a keyword: ours comes first
        kwargs.setdefault("kernel_manager_class", SandboxedKernelManager)
        super().__init__(*args, **kwargs)

    def preprocess(self, nb, resources=None, km=None):
        self._stop_reason = None
        big = 2 ** 62
        self._budget = OutputBudget(self.output_limit or big, self.kernel_output_limit or big,
                                    self.image_limit or big, self.kernel_image_limit or big)
        return super().preprocess(nb, resources, km)

    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        if self.message_limit:
            km.client_class = "tinygpt_course.grading.output_budget.BudgetedClient"
        return km

    def start_new_kernel_client(self, **kwargs):
        super().start_new_kernel_client(**kwargs)
        for channel in (self.kc.shell_channel, self.kc.iopub_channel):
            if hasattr(channel, "message_limit"):
                channel.message_limit = self.message_limit

    def handle_comm_msg(self, outs, msg, cell_index):
        """Widget (comm) messages are not kept: nbclient would gather their state, and an Output
        widget's captured outputs, into the notebook's metadata with no budget, and SanitizeOutputs
        drops that widget state anyway (KeepHintsUsed reads the submitted one before the run)."""
        return None

    def output(self, outs, msg, display_id, cell_index):
        """nbclient appends each output here: the budget keeps, cuts or drops it at once."""
        out = super().output(outs, msg, display_id, cell_index)
        if out is None or not outs or outs[-1] is not out:
            return out
        return self._budget.take(outs, out, cell_index)

    def _update_display_id(self, display_id, msg):
        """An update_display_data rewrites the data of every earlier output with its display id,
        past nbclient's output(): its content is budgeted here first, as that many outputs."""
        targets = sum(len(ix) for ix in self._display_id_map.get(display_id, {}).values())
        if not targets:
            return None
        if msg["header"]["msg_type"] == "update_display_data":
            msg["header"]["msg_type"] = "display_data"
        try:
            out = output_from_msg(msg)
        except ValueError:
            return None
        out = self._budget.take_update(out, targets)
        if out is None:
            return None
        for cell_idx, output_indices in self._display_id_map[display_id].items():
            outputs = self.nb["cells"][cell_idx]["outputs"]
            for output_idx in output_indices:
                # an output the budget dropped left its index behind: it may point past the end,
                # or at a later output of another kind
                if output_idx < len(outputs) and "data" in outputs[output_idx]:
                    outputs[output_idx]["data"] = out["data"]
                    outputs[output_idx]["metadata"] = out["metadata"]
        return None

    def start_new_kernel(self, **kwargs):
        """Start the kernel and its client (nbclient's setup_kernel calls this first); a start
        that fails is tried again, up to start_attempts in all (a kernel manager the caller
        passed in is the caller's: started once)."""
        attempts = max(1, self.start_attempts) if self.owns_km else 1
        for attempt in range(1, attempts + 1):
            try:
                super().start_new_kernel(**kwargs)
                self.start_new_kernel_client()
                return
            except Exception as exc:
                if attempt >= attempts:
                    raise
                self.log.warning("the grading kernel did not start (attempt %d of %d): %s: %.300s; starting a "
                                 "new one", attempt, attempts, type(exc).__name__, exc)
                self._discard_kernel()
                time.sleep(self.start_pause * attempt)
                self.km = self.create_kernel_manager()

    def _discard_kernel(self):
        """What a failed start left: its kernel (if any), its sandbox and its folder."""
        km = self.km
        if km is not None:
            try:
                self._cleanup_kernel()
            except Exception as exc:      # a kernel that never started may have nothing to shut down
                self.log.debug("cleaning up a kernel that did not start: %s", exc)
            if getattr(km, "_box", None) is not None:
                # the shutdown failed before its clean-up (a client that could not connect): the
                # sandbox, with the kernel in it, goes anyway
                try:
                    run_sync(km.cleanup_resources)()
                except Exception as exc:
                    self.log.warning("could not remove a failed kernel's sandbox: %s", exc)
        self.kc = self.km = None

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
        cell.outputs = self._budget.final(cell.outputs)
        if any(o.output_type == "error" and o.get("ename") == self.error_on_timeout["ename"]
               for o in cell.outputs):
            self._stop_reason = f"not run: an earlier cell ran past the {self.timeout} s limit"
        return cell, resources
