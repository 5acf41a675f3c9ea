"""Bytes are budgeted where the grader reads them (tinygpt_course/grading/output_budget.py).

One answer prints 250 MB in one `print`; a classmate's is the plain right answer. Both are graded by
the real `nbgrader autograde`, each in a process of its own whose peak memory is measured
(resource.getrusage(RUSAGE_CHILDREN) of a wrapper that starts it), then `nbgrader generate_feedback`.
The printing learner's autograded/ and feedback/ hold a few MB at most, the grader's peak memory
stays under 2x the plain answer's, the cut is marked, and the scores are the plain answer's.
With c.RobustExecute.message_limit/output_limit/kernel_output_limit = 0 (the caps off) the
same run puts 239 MB in autograded/ and the grader reaches 5x the plain answer's memory.
"""
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tinygpt_course.grading.output_budget import PREFIX, OutputBudget, cut_note, output_chars
from tinygpt_course.testing.course import BIN, env, make_course, nbgrader, scores, submit
from tinygpt_course.testing.notebooks import release_path, solution, with_answer

BOMB = 250_000_000          # characters of the one print
MB = 1 << 20
# the grader's peak memory, in KiB, of the command given: the largest process it waited for
PEAK = "import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; " \
       "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)"


def folder_bytes(path):
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def autograde_peak(course, student):
    proc = subprocess.run([sys.executable, "-c", PEAK, str(BIN / "nbgrader"), "autograde", "multihead",
                           "--student", student, "--create"], cwd=course, env=env(), capture_output=True,
                          text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return int(proc.stdout.split()[-1])


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = make_course(tmp_path_factory.mktemp("budget"), extra_config="c.IndependentChecks.timeout = 60\n")
    right = solution("multihead")
    submit(course, "plain", "multihead", with_answer(release_path("multihead"), right))
    submit(course, "bomb", "multihead", with_answer(release_path("multihead"),
                                                    right + f"\nprint('x' * {BOMB})\n"))
    peaks = {s: autograde_peak(course, s) for s in ("plain", "bomb")}
    nbgrader(course, "generate_feedback", "multihead")
    return course, peaks


def test_an_output_bomb_leaves_a_few_megabytes_on_disk(graded):
    course, _ = graded
    for where in ("autograded", "feedback"):
        plain, bomb = (folder_bytes(course / where / s / "multihead") for s in ("plain", "bomb"))
        assert bomb < plain + 3 * MB, (where, plain, bomb)


def test_the_cut_is_marked_and_the_score_is_the_plain_answers(graded):
    course, _ = graded
    nb = nbformat.read(course / "autograded" / "bomb" / "multihead" / "multihead.ipynb", as_version=4)
    texts = [o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert any("[output cut here" in t for t in texts), "no note where the output was cut"
    assert scores(course, "multihead", "bomb") == scores(course, "multihead", "plain")
    assert sum(scores(course, "multihead", "plain").values()) > 0


def test_the_graders_memory_stays_under_twice_a_plain_answers(graded):
    _, peaks = graded
    assert peaks["bomb"] < 2 * peaks["plain"], peaks


# --- the two steps on their own ------------------------------------------------------------------

def test_budget_cuts_an_output_and_the_notebooks_total_and_says_so():
    budget = OutputBudget(output_limit=100, kernel_limit=250)
    outs = []
    for i in range(50):                               # one stream, growing past its limit
        outs.append(nbformat.v4.new_output("stream", name="stdout", text="y" * 10))
        budget.take(outs, outs[-1], 0)
    assert sum(output_chars(o) for o in outs) < 100 + 200 and "[output cut here" in outs[-1].text
    error = nbformat.v4.new_output("error", ename="ValueError", evalue="z" * 10_000, traceback=["z" * 10_000])
    outs = [error]
    kept = budget.take(outs, error, 1)
    assert kept.output_type == "error" and kept.ename == "ValueError" and output_chars(kept) < 600
    outs = [nbformat.v4.new_output("stream", name="stdout", text="w" * 10_000)]
    budget.take(outs, outs[0], 2)                     # the notebook's total is spent
    more = nbformat.v4.new_output("stream", name="stderr", text="v")
    outs.append(more)
    assert budget.take(outs, more, 2) is None and len(outs) == 1
    assert cut_note(250, "characters of output per notebook") in outs[0].text
    failed = nbformat.v4.new_output("error", ename="AssertionError", evalue="wrong", traceback=["wrong"])
    outs.append(failed)                               # a test cell's error, past every budget, stays
    assert budget.take(outs, failed, 2).output_type == "error" and outs[-1].ename == "AssertionError"


def test_pictures_have_a_budget_of_their_own_kept_whole_or_dropped_with_a_note():
    budget = OutputBudget(output_limit=100, kernel_limit=250, image_limit=1000, kernel_image_limit=1500)

    def picture(n, plain="<Figure>"):
        return nbformat.v4.new_output("display_data", data={"image/png": "A" * n, "text/plain": plain})

    outs = [picture(800)]                              # 8x the text's budget: kept whole
    assert budget.take(outs, outs[0], 0)["data"]["image/png"] == "A" * 800
    outs.append(picture(800))                         # past the notebook's pictures: dropped
    kept = budget.take(outs, outs[1], 0)
    assert "image/png" not in kept["data"] and kept["data"]["text/plain"].startswith("<Figure>")
    assert cut_note(1500, "characters of pictures per notebook (image/png dropped)") in kept["data"]["text/plain"]
    outs.append(picture(2000))                        # past one picture's: dropped
    kept = budget.take(outs, outs[2], 0)
    assert "image/png" not in kept["data"] and "(image/png had 2000)" in kept["data"]["text/plain"]
    outs.append(picture(100, plain="p" * 500))        # its text cut, its (small) picture kept
    kept = budget.take(outs, outs[3], 1)
    assert kept["data"]["image/png"] == "A" * 100 and "[output cut here" in kept["data"]["text/plain"]
    assert [o["data"].get("image/png") for o in budget.final(outs)] == ["A" * 800, None, None, "A" * 100]


def test_an_update_is_budgeted_as_each_output_it_rewrites():
    budget = OutputBudget(output_limit=100, kernel_limit=1000)
    update = nbformat.v4.new_output("display_data", data={"text/plain": "u" * 5000})
    cut = budget.take_update(update, copies=3)
    assert output_chars(cut) < 100 + 200 and budget.total == 300
    assert budget.take_update(nbformat.v4.new_output("display_data", data={"text/plain": "v" * 5000}),
                              copies=20) is not None and budget.total <= 1000
    assert budget.take_update(nbformat.v4.new_output("display_data", data={"text/plain": "w"}), copies=1) is None


def test_a_real_run_keeps_a_plot_and_budgets_display_updates(tmp_path):
    """Through RobustExecute and a real kernel (no sandbox: it budgets what comes back): a 300 KB
    picture is kept whole, the rest of the notebook's pictures stop at kernel_image_limit, and a
    display shown 20 times then updated with 1.9 MB (nbclient writes an update over every output
    of its id, in any earlier cell, past output()) keeps the notebook's text within its budget.
    Without the image budget the plot is cut to its text; without the update's, 38 MB stay."""
    from traitlets.config import Config

    from tinygpt_course.grading.execute import RobustExecute

    cells = ["from IPython.display import display\n"
             "display({'image/png': 'A' * 300_000, 'text/plain': '<Figure>'}, raw=True)",
             "for i in range(10):\n"
             "    display({'image/png': 'B' * 900_000, 'text/plain': 'more'}, raw=True)",
             "for i in range(20):\n"
             "    h = display({'text/plain': 'small'}, raw=True, display_id='d')",
             "h.update({'text/plain': 'u' * 1_900_000}, raw=True)"]
    spec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells], metadata={"kernelspec": spec})
    config = Config()
    config.Sandbox.enabled = False
    config.SandboxedKernelManager.fork_from_template = False
    ex = RobustExecute(config=config, timeout=60)
    nb, _ = ex.preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    outputs = [o for c in nb.cells for o in c.outputs]
    assert outputs[0]["data"]["image/png"] == "A" * 300_000
    pictures = sum(len(o.get("data", {}).get("image/png", "")) for o in outputs)
    assert pictures <= ex.kernel_image_limit and pictures >= ex.kernel_image_limit - 900_000
    text = sum(output_chars(o, images=False) for o in outputs)
    assert text <= ex.kernel_output_limit + 100 * PREFIX, text


def test_a_message_too_large_is_replaced_before_it_is_decoded():
    """A real kernel prints 5 MB in one print; its client reads iopub through BudgetedChannel with
    a 1 MB limit: what arrives is the note with the text's first characters, not 5 MB."""
    import asyncio

    from jupyter_client.manager import AsyncKernelManager

    async def run():
        km = AsyncKernelManager(client_class="tinygpt_course.grading.output_budget.BudgetedClient")
        await km.start_kernel()
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=60)
            kc.iopub_channel.message_limit = MB
            msg_id = kc.execute("print('x' * 5_000_000)")
            texts = []
            while True:
                msg = await kc.get_iopub_msg(timeout=60)
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                if msg["msg_type"] == "stream":
                    texts.append(msg["content"]["text"])
                if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                    return "".join(texts)
        finally:
            kc.stop_channels()
            await km.shutdown_kernel(now=True)

    text = asyncio.run(run())
    assert len(text) < MB and "[output cut here" in text and text.startswith("x" * 500), len(text)


def test_widget_messages_are_not_gathered(tmp_path):
    """A cell that opens 50 comms of 100 KB state each: nothing of it stays in the grader."""
    from traitlets.config import Config

    from tinygpt_course.grading.execute import RobustExecute

    code = ("from comm import create_comm\n"
            "for i in range(50):\n"
            "    create_comm(target_name='jupyter.widget', data={'state': {'_model_name': 'X', 'v': 'q' * 100_000}})\n")
    spec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)], metadata={"kernelspec": spec})
    config = Config()
    config.Sandbox.enabled = False
    config.SandboxedKernelManager.fork_from_template = False
    ex = RobustExecute(config=config, timeout=60)
    nb, _ = ex.preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    assert not ex.widget_state and "widgets" not in nb.metadata, len(ex.widget_state)
