"""The contract between grading and a lesson's checks, as code both sides import.

A lesson's checks live in the package ``tinygpt_course.checks.<lesson>`` and come in two halves:

- ``extract.py``, the **learner side**: ``extract(ns, seed) -> dict`` runs the learner's code
  (``ns`` is the namespace of the lesson's set-up cells with the answer cell run after them),
  loads fixed weights drawn from ``seed`` by parameter name and records *raw observations* only:
  shapes, names, types, tensors. Nothing in a record is a verdict. At grading time it runs in
  the sandbox, so a record is untrusted data: it comes back as bytes in the records' format
  (``record.py``: safetensors and flat JSON, no pickle), checked against the lesson's table
  ``schema.py`` before any judge reads it.
- ``judge.py``, the **trusted side**: ``LESSON``, an instance of a :class:`Lesson` subclass whose
  ``judge(check_id, rec, ref)`` compares the learner's record with ``ref``, the record that the
  *same* extract made of the lesson's own solution (from ``source/``, run in the sandbox too,
  with the same seed). The judge derives every fact it uses from raw values, ignores anything a
  record says about itself (its seed, for one), and returns a :class:`Verdict`. It imports no
  learner-side module: grading imports judges, never extracts.

So no reference implementation lives in the installed library: the expected numbers come from
running the teacher's solution, at grading time with a seed drawn by the grader, and in the
learner's notebook from ``reference.rec``, the record of the solution for the notebook's seed,
stored as data beside the judge (``python -m tinygpt_course.grading.reference`` writes it; a test
checks it is current).

A check's id is the ``grade_id`` of its test cell in the lesson's notebook; grading checks that
the two sets agree before it grades anything.
"""
import ast
import difflib
import enum
import importlib
import re
from dataclasses import dataclass

from ..config import SIZES
from .hints import place

ATOL = 1e-5   # two records' numbers are the same when every entry is within this
QUOTE_LIMIT = 300   # characters of learner text a verdict may quote


def quote(text, limit=QUOTE_LIMIT):
    """Learner-made text (an exception's message, a last line of output) as a verdict may quote
    it: its first non-empty line, whitespace collapsed, at most `limit` characters. A record is
    untrusted: a message holding a whole file, or many lines, is not copied into feedback."""
    lines = [ln for ln in str(text).splitlines() if ln.strip()]
    line = " ".join(lines[0].split()) if lines else ""
    more = len(lines) > 1
    if len(line) > limit:
        line, more = line[:limit].rstrip(), True
    return line + (" [...]" if more else "")


class Kind(str, enum.Enum):
    """What kind of result a verdict is. Code decides on the kind, never on message text."""
    PASSED = "passed"
    UNANSWERED = "unanswered"          # the released stub is still there
    BUILD_ERROR = "build_error"        # the learner's class could not be built
    STRUCTURE = "structure"            # layers stored or sized other than the task asks
    UNREGISTERED = "unregistered"      # layers hidden from PyTorch (a plain list): only counts differ
    FORWARD_ERROR = "forward_error"    # forward raised, or gave no tensor
    WRONG_SHAPE = "wrong_shape"
    WRONG_VALUE = "wrong_value"        # the numbers differ from the solution's under the same weights
    NOT_CAUSAL = "not_causal"
    NO_RESULT = "no_result"            # grading only: the re-run gave nothing to judge


# The mistakes the shared steps name (every lesson's Lesson.mistakes adds its own). A mistake id
# names the cause, lowercase snake_case, and is stable: hint ladders and the class report key on it.
SHARED_MISTAKES = {
    "unanswered": "the released stub (raise NotImplementedError()) is still there",
    "build_error": "building the learner's class raised an error",
    "forward_error": "forward (or generate) raised an error, or gave no tensor",
    "no_result": "grading's re-run gave nothing to judge (crash, time-out, missing answer cell)",
    "too_slow": "the learner's code ran longer than a check allows (a loop that never ends)",
    "ignores_last_letter": "changing the last letter did not change the last position's output",
    "dropout_on": "something random (dropout with p > 0) runs in forward: two runs on one input differ",
    "not_computed": "a check's numbers are not what the learner's layers give with the fixed weights: "
                    "the part the check credits never ran on the input, or the record was not made by running it",
}
# The raw Python and torch errors learners hit in the answer cell: a build_error or forward_error
# is refined into one of these where the record's raw observations show it (raw_mistake).
RAW_MISTAKES = {
    "missing_super_init": "the class never called super().__init__(), so PyTorch cannot keep its layers",
    "undefined_size": "NameError on a size (n_embd, head_size, block_size, ...): not defined where it is used",
    "undefined_name": "NameError: a name used before it was defined (or spelt otherwise)",
    "generator_by_position": "torch.multinomial(probs, 1, generator): its third parameter is replacement; a generator goes by name",
    "tensor_as_condition": "a tensor used as a condition (if targets:): a tensor of several numbers is neither true nor false",
    "used_before_assigned": "a local variable read before the line that assigns it ran (lines in the wrong order, or one left out)",
    "module_not_imported": "NameError on a module (math, np, ...): used without importing it",
    "module_list_called": "an nn.ModuleList (or ModuleDict) called as a layer: it holds layers but has no forward",
    "generator_to_cat": "torch.cat (or torch.stack) given a generator expression, not a list of tensors",
    "self_forgotten": "a layer used without `self.` (key(x) for self.key(x))",
    "attribute_not_set": "forward reads an attribute of self that __init__ never set",
    "module_class_not_instance": "a layer class stored or called where a layer is needed (nn.Linear, not nn.Linear(...))",
    "matmul_shapes": "the two sides of `@` (matmul) have shapes that do not fit",
    "wrong_view": "view or reshape asked for a shape the tensor cannot take",
    "layer_input_shape": "a layer (nn.Linear, nn.LayerNorm, ...) got a tensor of a shape it was not built for",
}
SHARED_MISTAKES.update(RAW_MISTAKES)
# what cuts a weight off from training (Lesson.gradient_problem), by the cutter forward used
CUTTERS = ("detach", "data", "no_grad", "set_grad_enabled", "inference_mode")
CUTTER_WORDS = {"detach": ".detach()", "data": ".data", "no_grad": "torch.no_grad()",
                "set_grad_enabled": "torch.set_grad_enabled(False)", "inference_mode": "torch.inference_mode()"}
CUTTER_MISTAKES = {"detach": "gradient_detached", "data": "gradient_data", "no_grad": "gradient_no_grad",
                   "set_grad_enabled": "gradient_no_grad", "inference_mode": "gradient_no_grad"}
SHARED_MISTAKES.update({
    "gradient_detached": "a .detach() in forward cuts weights off from training: no gradient reaches them",
    "gradient_data": "a .data in forward cuts weights off from training: no gradient reaches them",
    "gradient_no_grad": "a torch.no_grad() block (or set_grad_enabled(False), inference_mode()) in forward cuts weights "
                        "off from training: no gradient reaches them",
    "gradient_cut": "several of .detach(), .data and torch.no_grad() in forward, and weights no gradient reaches",
    "backward_error": "a backward pass from the output raised (an in-place change autograd needed, ...)",
})
SIZE_NAMES = tuple(SIZES.__dataclass_fields__)   # n_embd, head_size, block_size, ...
# names a learner uses for modules they did not import (the lessons' set-up imports torch, nn, F)
MODULE_NAMES = ("math", "np", "numpy", "torch", "nn", "F", "functional", "random")
# torch's containers: calling one raises NotImplementedError from torch itself, not the stub's
CONTAINERS = ("ModuleList", "ModuleDict", "ParameterList", "ParameterDict")


def unanswered(rec, prefix):
    """The step under `prefix` raised the released stub's NotImplementedError: raised by the
    learner's code itself, by a `raise` line (where the line is known), not by a torch module (a
    ModuleList called as a layer raises one too) nor by torch's own kernels (softmax of a bool
    tensor, cross_entropy of swapped arguments raise one from the line that calls them)."""
    if rec.get(prefix + "exception") != "NotImplementedError" or rec.get(prefix + "error_module") is not None:
        return False
    line = rec.get(prefix + "error_line")
    if not line:
        return True
    tree = line_tree(line)
    return tree is None or bool(tree.body) and isinstance(tree.body[0], ast.Raise)


def line_tree(line):
    """The learner's raising line as an ast, or None: a line cut from a longer statement is
    tried as an expression in brackets too."""
    line = (line or "").strip()[:500]
    for text in (line, f"({line})", line.rstrip(":") + ": pass" if line.endswith(":") else None):
        if text:
            try:
                return ast.parse(text)
            except (SyntaxError, ValueError, RecursionError):
                continue
    return None


def _called(node):
    """The name a call's function goes by (`torch.cat` and `cat`: 'cat'), '' for any other node."""
    if not isinstance(node, ast.Call):
        return ""
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")


def _uses(tree):
    """Which error-prone operations a line holds: {'matmul', 'view'}."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.MatMult):
            found.add("matmul")
        elif _called(node) in ("matmul", "bmm", "mm"):
            found.add("matmul")
        elif _called(node) in ("view", "reshape"):
            found.add("view")
    return found


def _joins_a_generator(tree):
    """The line calls torch.cat or torch.stack on a generator expression, which they refuse:
    they take a list or tuple of tensors."""
    return any(_called(node) in ("cat", "stack", "concat", "concatenate") and node.args
               and isinstance(node.args[0], ast.GeneratorExp) for node in ast.walk(tree))


def joins_along(tree):
    """The dims the line's torch.cat (or stack) calls join along, as written (a number, or None
    when not a plain number): [0] for torch.cat([idx, nxt], dim=0)."""
    dims = []
    for node in ast.walk(tree):
        if _called(node) in ("cat", "stack", "concat"):
            given = [k.value for k in node.keywords if k.arg == "dim"] + node.args[1:2]
            value = None
            if given:
                try:
                    value = ast.literal_eval(given[0])
                except ValueError:
                    value = None
            dims.append(value if isinstance(value, int) else 0 if not given else None)
    return dims


def _generator_by_position(tree):
    """The line calls torch.multinomial with a third positional argument: its third parameter
    is `replacement`, so a generator must be passed by name (generator=...)."""
    return any(_called(node) == "multinomial" and len(node.args) >= 3 for node in ast.walk(tree))


def _tensor_as_condition(tree):
    """The line is an `if` or `while` (or a conditional expression) whose test is a bare value,
    `if targets:` or `if not targets:`: a tensor of several numbers has no truth value."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            test = node.test.operand if isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not) \
                else node.test
            if isinstance(test, (ast.Name, ast.Attribute, ast.Subscript)):
                return True
    return False


def raw_mistake(rec, prefix):
    """The raw Python or torch error a failed build (prefix 'init_') or forward pass shows, as a
    RAW_MISTAKES id, decided on the record's raw observations (the exception's type, the missing
    name, the learner's raising line parsed with ast, the object's state), never on a message's
    words; None when none fits (the caller keeps build_error / forward_error)."""
    exception, name = rec.get(prefix + "exception"), rec.get(prefix + "error_name")
    if rec.get(prefix + "module_state_missing") is True or rec.get("init_module_state_missing") is True:
        return "missing_super_init"
    if exception == "NameError" and isinstance(name, str):
        if rec.get(prefix + "error_name_is_attribute") is True:
            return "self_forgotten"
        if name in MODULE_NAMES:
            return "module_not_imported"
        if name in SIZE_NAMES or difflib.get_close_matches(name, SIZE_NAMES, n=1, cutoff=0.8):
            return "undefined_size"
        return "undefined_name"
    if exception == "UnboundLocalError":
        return "used_before_assigned"
    if exception == "AttributeError" and rec.get(prefix + "error_on_self") is True:
        return "attribute_not_set"
    if exception == "NotImplementedError" and rec.get(prefix + "error_module") in CONTAINERS:
        return "module_list_called"
    if exception == "TypeError":
        tree = line_tree(rec.get(prefix + "error_line"))
        if tree is not None and _joins_a_generator(tree):
            return "generator_to_cat"
        if tree is not None and _generator_by_position(tree):
            return "generator_by_position"
    if exception == "RuntimeError":
        tree = line_tree(rec.get(prefix + "error_line"))
        if tree is not None and _tensor_as_condition(tree):
            return "tensor_as_condition"
    classes = rec.get(prefix + "module_classes")
    if exception == "TypeError" and isinstance(classes, list) and classes:
        return "module_class_not_instance"
    if exception == "RuntimeError":
        tree = line_tree(rec.get(prefix + "error_line"))
        uses = _uses(tree) if tree is not None else set()
        if rec.get(prefix + "error_module") and not uses:
            return "layer_input_shape"
        if len(uses) == 1:
            return "matmul_shapes" if "matmul" in uses else "wrong_view"
    return None


# the shared kinds whose mistake is the kind itself when a judge names none
_KIND_MISTAKES = {Kind.UNANSWERED: "unanswered", Kind.BUILD_ERROR: "build_error",
                  Kind.FORWARD_ERROR: "forward_error", Kind.NO_RESULT: "no_result"}
MISTAKE_ID = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")


@dataclass(frozen=True)
class Verdict:
    """One check's result: passed or not, a message in the learner's terms, its kind, and for a
    failure the mistake it names (a stable id: ``Lesson.mistakes`` or ``SHARED_MISTAKES``)."""
    passed: bool
    message: str
    kind: Kind
    mistake: str = None
    where: str = None     # where a raw error was raised (hints.PLACES): its hint ladder's place

    @classmethod
    def ok(cls, message):
        return cls(True, message, Kind.PASSED)

    @classmethod
    def fail(cls, kind, message, mistake=None, where=None):
        """A failed check. `mistake` may be left out only for the shared kinds (unanswered,
        build_error, forward_error, no_result), whose mistake is the kind's own id. `where`: the
        place a raw error was raised (hints.place), which picks its hint ladder."""
        kind = Kind(kind)
        assert kind is not Kind.PASSED
        mistake = mistake or _KIND_MISTAKES.get(kind)
        if not (isinstance(mistake, str) and MISTAKE_ID.match(mistake)):
            raise ValueError(f"a failed Verdict names its mistake as a snake_case id, not {mistake!r}")
        return cls(False, message, kind, mistake, where)


# --- what every judge compares records with (trusted; torch is imported where it is used) ------

def close(a, b):
    """a and b are tensors of one shape holding the same numbers (within ATOL)."""
    import torch
    return torch.is_tensor(a) and torch.is_tensor(b) and a.shape == b.shape and torch.allclose(a, b, atol=ATOL)


def shape_of(t):
    """A recorded tensor's shape as a list, None for anything else."""
    import torch
    return list(t.shape) if torch.is_tensor(t) else None


def n_params(structure):
    """Weights to learn in a record's structure: its (name, shape) parameters, added up."""
    import torch
    return sum(int(torch.Size(shape).numel()) for _, shape in structure["params"])


class Lesson:
    """What grading and the notebook need to know about one lesson's checks.

    Subclasses set ``name``, ``checks`` and ``task_class``, and judge each check in a method
    ``_<check id>(rec, ref)``; ``judge`` runs the steps every lesson shares first.
    """
    name = ""
    checks = {}          # check id (== grade_id of its test cell) -> the printout lines it covers
    default_seed = 2024  # the fixed weights of the in-notebook checks; grading draws its own
    task_class = ""      # the class the learner completes, as messages name it: "MultiHead"
    build_args = ""      # how the lesson builds it: "16" for Head(16)
    methods = "__init__ and forward"   # what the learner completes in it
    mistakes = {}        # mistake id -> what it is, one line: every id this lesson's judge names

    shape_checks = ("shapes", "weight_count")   # checks that compare no numbers: dropout spoils none
    # Every point needs the right computation: a check that passes on a relation between the
    # record's own numbers (shapes, counts, earlier positions unchanged) must also find, in the
    # part it credits, numbers only the learner's layers give with the fixed weights drawn from
    # the grader's seed (``anchor``). Off (tests only), a record replayed from other weights, or
    # made up to agree with itself, scores those checks.
    anchored = True
    # the checks that can pass on a relation between the record's own numbers, each with the
    # forward run (the record's prefix) whose numbers may show the computation; weight_count has
    # none: only the stored layers, run alone, show it
    anchored_checks = {"weight_count": None, "shapes": "", "causal": "changed_"}

    @property
    def all_mistakes(self):
        """Every mistake id a verdict of this lesson can name: the shared steps' and its own."""
        return {**SHARED_MISTAKES, **self.mistakes}

    @property
    def unanswered(self):
        return (f"{self.task_class} is still unanswered: replace the `raise NotImplementedError()` lines "
                f"in {self.methods} with your code (the hint is above the answer cell).")

    def build_problem(self, rec):
        """The failed Verdict when the learner's object could not be built, or stores a layer
        class where a layer belongs (`self.proj = nn.Linear`), else None."""
        classes = rec.get("init_module_classes")
        if not rec.get("init_error") and isinstance(classes, list) and classes:
            name, cls = (str(x) for x in classes[0][:2])
            return Verdict.fail(Kind.STRUCTURE, (
                f"self.{quote(name, 40)} holds the class {quote(cls, 40)} itself, not a layer made from it: "
                f"a layer is made by calling its class with its sizes, {quote(cls, 40)}(...)."),
                "module_class_not_instance")
        if not rec.get("init_error"):
            return None
        if unanswered(rec, "init_"):
            return Verdict.fail(Kind.UNANSWERED, self.unanswered)
        return Verdict.fail(Kind.BUILD_ERROR,
                            f"{self.task_class}({self.build_args}) failed: {quote(rec['init_error'])}",
                            raw_mistake(rec, "init_") or "build_error", place(rec, "init_"))

    @property
    def extract_module(self):
        """The learner-side module, by name: imported only where learner code runs."""
        return f"tinygpt_course.checks.{self.name}.extract"

    @property
    def schema(self):
        """The table a record of this lesson must fit (``tinygpt_course.checks.<lesson>.schema``,
        data only: trusted code imports it)."""
        return importlib.import_module(f"tinygpt_course.checks.{self.name}.schema").SCHEMA

    def structure_problem(self, check_id, rec, ref):
        """How the learner's object stores its layers, against the solution's, as a failed
        Verdict (STRUCTURE, or UNREGISTERED for layers merely hidden from PyTorch), or None."""
        return None

    def judge(self, check_id, rec, ref):
        """Verdict for check_id, comparing the learner's record with the solution's: an object
        that could not be built fails every check; so does a structural slip (layers stored or
        sized otherwise), except that layers merely hidden from PyTorch (UNREGISTERED) cost only
        the count when the forward pass ran; then the check's own ``_<check id>(rec, ref)``."""
        problem = self.build_problem(rec) or self.structure_problem(check_id, rec, ref)
        if problem and (check_id == "weight_count" or problem.kind is not Kind.UNREGISTERED
                        or ("out" not in rec and "error" not in rec)):
            return problem
        if check_id not in self.shape_checks:
            problem = self.random_problem(rec)
            if problem:
                return problem
        verdict = getattr(self, "_" + check_id)(rec, ref)
        if verdict.passed and self.anchored:
            missing = self.anchor(check_id, rec, ref)
            if missing:
                return Verdict.fail(Kind.WRONG_VALUE, (
                    f"{missing} Each check is scored on numbers that your {self.task_class} computes with "
                    "the fixed weights, not on numbers that only agree with each other."), "not_computed")
        if verdict.passed and check_id == "weight_count" and self.gradients_checked:
            return self.gradient_problem(rec) or verdict
        return verdict

    # The weights counted are weights to learn: weight_count also needs a backward pass from the
    # output to reach each of them (common.gradients). Off (tests only), a cut gradient goes unseen.
    gradients_checked = True

    def gradient_problem(self, rec):
        """A weight that training would never change, as a failed Verdict, or None. Decided on
        the record's two measurements: the parameters a backward pass does not reach, and those it
        still does not reach with torch's graph cutters made harmless. A weight only the cutters
        cut is named by the cutter forward used; a weight forward never uses is left to the checks
        that see the layer unused."""
        g = rec.get("grad")
        if not isinstance(g, dict):
            return Verdict.fail(Kind.NO_RESULT, "no gradient was measured: the record lacks it.", "no_result")
        if g.get("error"):
            return Verdict.fail(Kind.FORWARD_ERROR, (
                f"a backward pass from your {self.task_class}'s output, as training does, raised "
                f"{quote(g['error'])}"), "backward_error")
        if g.get("cut") is None:   # forward raised or gave no numbers: the other checks say so
            return None
        cut, free = g["cut"], set(g.get("cut_free") or [])
        by = [c for c in CUTTERS if c in (g.get("by") or [])]
        lost = [name for name in cut if name not in free]
        if not lost:
            return None
        names = ", ".join(f"self.{quote(n, 60)}" for n in lost[:4]) + (f" and {len(lost) - 4} more" if len(lost) > 4 else "")
        how = " or ".join(CUTTER_WORDS[c] for c in by) or "something that leaves autograd's graph"
        mistakes = {CUTTER_MISTAKES[c] for c in by}
        mistake = mistakes.pop() if len(mistakes) == 1 else "gradient_cut"
        return Verdict.fail(Kind.WRONG_VALUE, (
            f"no gradient reaches {names} from your {self.task_class}'s output: {how} in forward cuts it "
            "off, so training would never change those weights (the numbers are right, the model does "
            "not learn). Use the tensors themselves."), mistake)

    def layers_computed(self, rec, ref):
        """For each stored layer the extract ran alone on a known input (rec['alone'] and the
        like), whether it gave what the solution's layer gives with the fixed weights: a list
        of bools."""
        raise NotImplementedError

    def forward_computed(self, rec, ref, prefix):
        """The learner's forward pass recorded under `prefix` holds numbers only the fixed weights
        give: an output or a hand-over between layers that is the solution's."""
        raise NotImplementedError

    def anchor(self, check_id, rec, ref):
        """Why the record's numbers for ``check_id`` are not what the learner's layers compute
        with the fixed weights, one sentence; None when they are. weight_count needs every
        stored layer, run alone, to give the solution's numbers; another check in
        anchored_checks needs one of them to, or its forward run to hold the solution's
        numbers: no record made without running the learner's layers with the grader's
        weights passes it. The other checks compare the solution's numbers themselves."""
        if check_id not in self.anchored_checks:
            return None
        layers, prefix = self.layers_computed(rec, ref), self.anchored_checks[check_id]
        if prefix is None:         # the weights counted: every stored layer must be the lesson's
            return None if layers and all(layers) else (
                f"your {self.task_class}'s stored layers, each run alone on a known input, do not give "
                "what the lesson's layers give with the fixed weights.")
        if any(layers) or self.forward_computed(rec, ref, prefix):
            return None
        return (f"neither your {self.task_class}'s stored layers nor its forward pass give the numbers of "
                "the lesson's layers with the fixed weights.")

    def random_problem(self, rec, key="out"):
        """Two runs on the same input (rec[key], rec['again_' + key]) gave different numbers:
        something random is left on in forward, dropout most likely. A failed Verdict, or None."""
        import torch
        a, b = rec.get(key), rec.get("again_" + key)
        if torch.is_tensor(a) and torch.is_tensor(b) and a.shape == b.shape \
                and not torch.allclose(a, b, atol=ATOL, equal_nan=True):
            return Verdict.fail(Kind.WRONG_VALUE, (
                f"two runs of your {self.task_class} on the same input gave different numbers: something "
                "random runs in forward, most likely dropout (nn.Dropout with p > 0 zeroes random "
                "numbers while the model trains). The lesson's model has no dropout: leave it out, or "
                "make it nn.Dropout(0.0)."), "dropout_on")
        return None

    def forward_raised(self, rec, prefix=""):
        """The forward pass raised (rec[prefix + 'error']): the stub's NotImplementedError is
        UNANSWERED, anything else a FORWARD_ERROR. None when it did not raise."""
        if not rec.get(prefix + "error"):
            return None
        if unanswered(rec, prefix):
            return Verdict.fail(Kind.UNANSWERED, self.unanswered)
        return Verdict.fail(Kind.FORWARD_ERROR, f"forward raised {quote(rec[prefix + 'error'])}",
                            raw_mistake(rec, prefix) or "forward_error", place(rec, prefix))

    def causal(self, out, changed_out, mixes, mistake="sees_the_future"):
        """Changing the last letter of every window (changed_out) must leave the earlier
        positions' outputs as they are and change the last one's. `mixes` tells the learner
        what mixes positions in this lesson, `mistake` names it."""
        last = SIZES.last
        if not close(out[:, :last], changed_out[:, :last]):
            return Verdict.fail(Kind.NOT_CAUSAL, "changing the last letter changed earlier positions: " + mixes,
                                mistake)
        if close(out[:, last], changed_out[:, last]):
            return Verdict.fail(Kind.NOT_CAUSAL, "changing the last letter did not change the last position's output.",
                                "ignores_last_letter")
        return Verdict.ok(f"change position {last}: positions 0-{last - 1} stay the same | position {last} changes")

    def verdict(self, check_id, rec, ref):
        """judge(), for any record at all: an unknown id is a bug, a malformed record a failure."""
        if check_id not in self.checks:
            raise KeyError(f"unknown check {check_id!r}; {self.name} has {list(self.checks)}")
        if not isinstance(rec, dict):
            return Verdict.fail(Kind.NO_RESULT, "the re-run's result is not a record")
        try:
            return self.judge(check_id, rec, ref)
        except Exception as exc:   # a malformed record is the submission's fault, not a crash
            return Verdict.fail(Kind.NO_RESULT,
                                f"the result of your code could not be checked ({quote(f'{type(exc).__name__}: {exc}')})")


def load_lesson(name):
    """The Lesson object of tinygpt_course.checks.<name>.judge, checked to be one."""
    if not name.isidentifier():
        raise ValueError(f"not a lesson name: {name!r}")
    module = importlib.import_module(f"tinygpt_course.checks.{name}.judge")
    lesson = getattr(module, "LESSON", None)
    if not isinstance(lesson, Lesson) or lesson.name != name:
        raise TypeError(f"tinygpt_course.checks.{name}.judge.LESSON is not the Lesson of {name!r}")
    return lesson
