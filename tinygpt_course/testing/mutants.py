"""Mistakes no catalogue has, found by mutation: each lesson's solution changed one small thing at a
time, as a learner's slip would change it, and judged in-process as the fast tests judge.

A mutant is the solution's class with one change at one place of its syntax tree: an operator
swapped (+ -, * /, @ *, ** *, == !=, < >), a number moved by one, doubled or its sign flipped,
a dimension changed, two arguments swapped, a keyword argument left out, a call skipped (its
first argument instead: a layer, a softmax, a transpose not applied), a function or layer for a
near one (log_softmax, triu, stack, GELU, masked_fill_, ...), a result cut off from training
(.detach()), a sum written in place (x += ...), a name read for another (q @ q), a slice's bound
dropped, a statement left out. Each is judged on every
check of its lesson, with the grader's kind of seed, against the solution's record:

- stillborn: the class cannot even be defined (the answer cell would raise at its top level);
- equivalent: every check passes and the record holds the solution's numbers, every tensor of it
  (dim=-1 for dim=2 on a 3-D tensor; masked_fill_ for masked_fill): not a mistake;
- killed: a check fails; named when a verdict names a mistake of the lesson's own or a raw
  error by what it is, generic when only the shared build or forward error (which quotes it);
  misnamed when a verdict names a mistake no mutant can have made (IMPOSSIBLE: the stub, a
  record not made by running the class, dropout, a loop that never ends);
- survived: every check passes, yet the record's numbers are not the solution's. The course's
  promise is that none survives.

    python -m tinygpt_course.testing.mutants [--out docs/mutation-report.md] [lesson ...]

writes the report (counts per lesson, and each mutant that survived); tests/test_mutants.py runs
the same and compares.
"""
import argparse
import ast
import copy
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

LESSONS = ("head", "multihead", "block", "gpt")
SEED = 24681357                          # a grader's seed: not the notebook's
GENERIC = {"forward_error", "build_error", "no_result", "unanswered", "too_slow"}
# mistakes no mutant can have made: a mutant is no stub, its record was made by running it, it
# adds nothing random and no loop: a verdict naming one of these misnames it
IMPOSSIBLE = {"unanswered", "no_result", "not_computed", "dropout_on", "too_slow"}

SWAPS = {ast.Add: [ast.Sub], ast.Sub: [ast.Add], ast.Mult: [ast.Div, ast.Add], ast.Div: [ast.Mult],
         ast.MatMult: [ast.Mult], ast.Pow: [ast.Mult]}
COMPARES = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.Is: ast.IsNot,
            ast.IsNot: ast.Is, ast.LtE: ast.GtE, ast.GtE: ast.LtE}
DIMS = (-2, -1, 0, 1, 2)
# a function or layer for a near one (torch's own names; an in-place twin)
RENAMES = {"softmax": ["log_softmax", "sigmoid"], "tril": ["triu"], "cat": ["stack"], "masked_fill": ["masked_fill_"],
           "ReLU": ["GELU", "Tanh", "Sigmoid"], "LayerNorm": ["BatchNorm1d"], "Linear": ["Bilinear"],
           "cross_entropy": ["nll_loss", "mse_loss"], "multinomial": ["argmax"], "ones": ["zeros", "rand"],
           "transpose": ["permute"], "Embedding": ["EmbeddingBag"], "ModuleList": ["Sequential"]}


def _changes(node):
    """(what, a function that changes a copy of `node` in place or returns its replacement)."""
    if isinstance(node, ast.BinOp):
        for new in SWAPS.get(type(node.op), []):
            yield f"{type(node.op).__name__} -> {new.__name__}", lambda n, new=new: setattr(n, "op", new()) or n
        yield "left operand only", lambda n: n.left
        yield "right operand only", lambda n: n.right
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        yield "sign dropped", lambda n: n.operand
    elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in COMPARES:
        yield "comparison flipped", lambda n: setattr(n, "ops", [COMPARES[type(n.ops[0])]()]) or n
    elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
        for delta in (1, -1):
            if node.value + delta >= 0 or node.value < 0:
                yield f"{node.value!r} {'+' if delta > 0 else '-'} 1", \
                    lambda n, d=delta: ast.Constant(n.value + d)
        if node.value not in (0, 1, 2):
            yield f"{node.value!r} doubled", lambda n: ast.Constant(n.value * 2)
    elif isinstance(node, ast.Attribute) and node.attr in RENAMES:
        for other in RENAMES[node.attr]:
            yield f"{node.attr} -> {other}", lambda n, o=other: setattr(n, "attr", o) or n
    elif isinstance(node, ast.Constant) and node.value in ("-inf", "inf"):
        for other in ("inf" if node.value == "-inf" else "-inf", "0"):
            yield f"{node.value!r} -> {other!r}", lambda n, o=other: ast.Constant(o)
    elif isinstance(node, ast.Call):
        yield from _call_changes(node)
    elif isinstance(node, ast.Slice):
        for side in ("lower", "upper"):
            if getattr(node, side) is not None:
                yield f"slice's {side} bound dropped", lambda n, s=side: setattr(n, s, None) or n


def _call_changes(node):
    for i, kw in enumerate(node.keywords):
        yield f"keyword {kw.arg}= left out", lambda n, i=i: n.keywords.pop(i) and n
        if kw.arg == "dim" and isinstance(kw.value, (ast.Constant, ast.UnaryOp)):
            for d in DIMS:
                yield f"dim={d}", lambda n, i=i, d=d: setattr(n.keywords[i], "value", ast.Constant(d)) or n
    if len(node.args) >= 2:
        yield "first two arguments swapped", lambda n: setattr(n, "args", [n.args[1], n.args[0], *n.args[2:]]) or n
    if isinstance(node.func, ast.Attribute) and node.func.attr in ("transpose", "view", "masked_fill"):
        yield f".{node.func.attr}(...) not applied", lambda n: n.func.value
    if node.args and not isinstance(node.args[0], ast.Starred) and not (
            isinstance(node.func, ast.Name) and node.func.id in ("range", "super", "float", "len")):
        yield "call skipped: its first argument instead", lambda n: n.args[0]
    if isinstance(node.func, ast.Attribute) and node.func.attr not in ("__init__", "register_buffer"):
        yield "result detached", lambda n: ast.Call(ast.Attribute(n, "detach", ast.Load()), [], [])


def _body_changes(fn):
    """Statements of a method left out, one at a time (not its last: the return)."""
    for i, stmt in enumerate(fn.body[:-1]):
        if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.Expr)) and not (
                isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            yield i, "statement left out"


def _statement_changes(stmt, names):
    """Changes of one statement as a whole: `a = a + b` written in place (`a += b`), and each
    name it reads swapped for another of the method's (q @ q for q @ k)."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
            and isinstance(stmt.value, ast.BinOp) and isinstance(stmt.value.left, ast.Name) \
            and stmt.value.left.id == stmt.targets[0].id:
        yield "written in place", lambda s: ast.AugAssign(s.targets[0], s.value.op, s.value.right)
    reads = [n for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in names]
    for j, name in enumerate(reads):
        for other in names:
            if other != name.id:
                yield f"{name.id} read as {other}", \
                    lambda s, j=j, o=other: _renamed(s, j, o, names)


def _renamed(stmt, j, other, names):
    reads = [n for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in names]
    reads[j].id = other
    return stmt


def _locals(fn):
    """The names a method binds: its arguments (self aside) and what it assigns."""
    names = [a.arg for a in fn.args.args if a.arg != "self"]
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id not in names and n.id != "_":
            names.append(n.id)
    return names


@dataclass
class Mutant:
    where: int        # the changed line of the solution
    what: str
    source: str


def mutants(solution):
    """Every mutant of `solution` (the source of one class), in a fixed order, without repeats."""
    tree = ast.parse(solution)
    cls = tree.body[0]
    seen, out = {ast.unparse(tree)}, []

    def keep(new_tree, line, what):
        try:
            src = ast.unparse(ast.fix_missing_locations(new_tree))
        except Exception:           # a change that leaves no valid tree
            return
        if src not in seen:
            seen.add(src)
            out.append(Mutant(line, what, src))

    methods = [m for m in cls.body if isinstance(m, ast.FunctionDef)]
    for k, method in enumerate(methods):
        nodes = [n for n in ast.walk(method) if not isinstance(n, ast.arguments)]
        for j, node in enumerate(nodes):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue
            for what, change in _changes(node):
                if what == "result detached" and method.name == "__init__":
                    continue        # a layer is not a tensor: no learner detaches one
                new_tree = copy.deepcopy(tree)
                new_method = [m for m in new_tree.body[0].body if isinstance(m, ast.FunctionDef)][k]
                target = [n for n in ast.walk(new_method) if not isinstance(n, ast.arguments)][j]
                replaced = _replace(new_method, target, change(target))
                if replaced:
                    keep(new_tree, getattr(node, "lineno", method.lineno), f"{method.name}: {what}")
        names = _locals(method)
        for i, stmt in enumerate(method.body):
            for what, change in _statement_changes(stmt, names):
                new_tree = copy.deepcopy(tree)
                new_method = [m for m in new_tree.body[0].body if isinstance(m, ast.FunctionDef)][k]
                new_method.body[i] = change(new_method.body[i])
                keep(new_tree, stmt.lineno, f"{method.name}: {what}")
        for i, what in _body_changes(method):
            new_tree = copy.deepcopy(tree)
            new_method = [m for m in new_tree.body[0].body if isinstance(m, ast.FunctionDef)][k]
            line = new_method.body[i].lineno
            del new_method.body[i]
            keep(new_tree, line, f"{method.name}: {what}")
    return out


def _replace(root, target, new):
    """Put `new` where `target` is under root (the same node, changed in place, needs nothing)."""
    if new is target:
        return True
    for parent in ast.walk(root):
        for name, value in ast.iter_fields(parent):
            if value is target:
                setattr(parent, name, new)
                return True
            if isinstance(value, list) and any(v is target for v in value):
                value[[i for i, v in enumerate(value) if v is target][0]] = new
                return True
    return False


@dataclass
class Result:
    mutant: Mutant
    fate: str                                 # stillborn, equivalent, killed, survived
    named: set = field(default_factory=set)   # the mistakes its verdicts name
    points: float = 0.0


def numbers(rec, path=""):
    """{path: tensor} of a record: what its layers computed (counts and names aside: masked_fill_
    for masked_fill computes the same numbers, called otherwise)."""
    import torch
    if torch.is_tensor(rec):
        return {path: rec}
    items = rec.items() if isinstance(rec, dict) else enumerate(rec) if isinstance(rec, list) else ()
    return {k: v for key, value in items for k, v in numbers(value, f"{path}/{key}").items()}


def judge(lesson_name, mutant, ref, points):
    """The Result of one mutant."""
    from ..checks.protocol import load_lesson
    from . import notebooks
    lesson = load_lesson(lesson_name)
    try:
        rec = notebooks.record(lesson_name, mutant.source, SEED)
    except Exception:               # the class statement itself raises: the cell stops there
        return Result(mutant, "stillborn")
    verdicts = {c: lesson.verdict(c, rec, ref) for c in lesson.checks}
    failed = {c: v for c, v in verdicts.items() if not v.passed}
    score = sum(points[c] for c in verdicts if verdicts[c].passed)
    if not failed:
        return Result(mutant, "equivalent" if notebooks.same_record(numbers(rec), numbers(ref)) else "survived",
                      points=score)
    return Result(mutant, "killed", {v.mistake for v in failed.values()}, score)


def run(lesson_name, progress=True):
    """[Result] of every mutant of the lesson's solution."""
    from . import notebooks
    ref = notebooks.solution_record(lesson_name, SEED)
    points = notebooks.points(lesson_name)
    todo = mutants(notebooks.solution(lesson_name))
    return [judge(lesson_name, m, ref, points) for m in tqdm(todo, desc=f"mutants of {lesson_name}",
                                                             disable=not progress, leave=False)]


def counts(results):
    live = [r for r in results if r.fate != "stillborn"]
    killed = [r for r in live if r.fate == "killed"]
    return {"mutants": len(results), "stillborn": len(results) - len(live),
            "equivalent": sum(r.fate == "equivalent" for r in live), "killed": len(killed),
            "named": sum(bool(r.named - GENERIC) for r in killed),
            "generic": sum(not (r.named - GENERIC) for r in killed),
            "misnamed": sum(bool(r.named & IMPOSSIBLE) for r in killed),
            "survived": sum(r.fate == "survived" for r in live)}


COLUMNS = ("mutants", "stillborn", "equivalent", "killed", "named", "generic", "misnamed", "survived")


def report(all_results):
    """The report, as markdown: counts per lesson, then every survivor."""
    lines = ["# Mutation report", "",
             "Generated by `python -m tinygpt_course.testing.mutants --out docs/mutation-report.md`;",
             "`tests/test_mutants.py` runs the same and compares. What each column means: the module's",
             "docstring (`tinygpt_course/testing/mutants.py`). *named*: killed, and a verdict names the",
             "lesson's own mistake or a raw error by what it is; *generic*: killed, named only as the",
             "shared build or forward error, whose message quotes it; *misnamed*: a verdict names a",
             "mistake no mutant can have made (the stub left in, a record not made by running it,",
             "dropout, a loop that never ends).", "",
             "| lesson | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for lesson, results in all_results.items():
        c = counts(results)
        lines.append(f"| {lesson} | " + " | ".join(str(c[k]) for k in COLUMNS) + " |")
    lines += ["", "## Mutants that survived", ""]
    survivors = [(lesson, r) for lesson, results in all_results.items() for r in results if r.fate == "survived"]
    lines += [f"- {lesson}, line {r.mutant.where}: {r.mutant.what}" for lesson, r in survivors] or ["None."]
    lines += ["", "## The mistakes the killed mutants were named by", ""]
    for lesson, results in all_results.items():
        names = {}
        for r in results:
            for m in r.named:
                names[m] = names.get(m, 0) + 1
        lines.append(f"- {lesson}: " + ", ".join(f"{m} {n}" for m, n in sorted(names.items())))
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description="Mutate each lesson's solution and judge every mutant.")
    p.add_argument("--out", help="write the report here (markdown)")
    p.add_argument("lessons", nargs="*", default=list(LESSONS))
    args = p.parse_args(argv)
    start, results = time.monotonic(), {}
    for lesson in args.lessons:
        results[lesson] = run(lesson)
        print(lesson, counts(results[lesson]), flush=True)
    text = report(results)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)
    print(f"{time.monotonic() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
