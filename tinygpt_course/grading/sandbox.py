"""The sandboxed half of an independent check.

The grader forks it from a forkserver that has imported torch once (``child``). A job names
the checks module, the trusted set-up cells (from source/), the learner's answer cell, a seed
drawn by the grader, the output path and the folders the learner's code must not read. It binds the checker's ``extract_ns`` before any other code
runs, installs an audit hook (no reading or listing of the blocked folders, no subprocesses),
runs the set-up cells and then the answer cell, and writes the raw record with torch.save.
The grader loads it with ``weights_only=True`` (plain data only) and judges it itself.
"""
import importlib
import os
import sys

BLOCKED_EVENTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                  "os.fork", "os.forkpty", "pty.spawn")


def install_audit_hook(blocked_roots, allowed_write):
    blocked = [os.path.realpath(p) for p in blocked_roots]

    def inside(path):
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return any(real == b or real.startswith(b + os.sep) for b in blocked)

    def hook(event, args):
        if event in BLOCKED_EVENTS:
            raise PermissionError(f"not allowed while grading: {event}")
        if event in ("open", "os.listdir", "os.scandir", "shutil.copyfile", "os.rename") and args:
            path = args[0]
            if isinstance(path, (str, bytes, os.PathLike)) and inside(path) and not (
                    allowed_write and os.path.realpath(os.fsdecode(path)) == allowed_write):
                raise PermissionError(f"not allowed while grading: reading {os.fsdecode(path)}")

    sys.addaudithook(hook)


def run_cell(source, ns, label):
    # Lesson cells are plain Python; a line magic (%...) or shell escape (!...) is skipped.
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    exec(compile("\n".join(lines), f"<{label}>", "exec"), ns)


def main(job):
    checks = importlib.import_module(job["checks"])
    extract_ns = checks.extract_ns          # bound before any learner code runs
    import torch
    save = torch.save
    out_path = os.path.realpath(job["out"])
    install_audit_hook(job["blocked"], out_path)
    ns = {"__name__": "__main__"}
    for i, source in enumerate(job["trusted"]):
        run_cell(source, ns, f"set-up cell {i + 1}")
    if job["answer"] is None:
        rec = {"init_error": "no answer: the answer cell is missing or is no longer a code cell"}
    else:
        try:
            run_cell(job["answer"], ns, "your answer cell")
            rec = extract_ns(ns, job["seed"])
        except NotImplementedError:
            rec = {"init_error": "unanswered"}
        except BaseException as exc:  # the learner's code: report it, whatever it is
            rec = {"init_error": f"your answer cell raised {type(exc).__name__}: {exc}"}
    save(rec, out_path)


def child(job, env, limit_bytes):
    """The entry of a re-run forked from the forkserver (which has torch imported already):
    a scratch folder, a clean environment, capped memory, output to a file, then main()."""
    import resource
    os.chdir(job["scratch"])
    os.environ.clear()
    os.environ.update(env)
    log = os.open(os.path.join(job["scratch"], "output.txt"), os.O_WRONLY | os.O_CREAT, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    main(job)

