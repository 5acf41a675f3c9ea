"""Pieces every lesson's extract half shares."""
LAST = 7  # the last position of a window of 8


def error_text(exc):
    return f"{type(exc).__name__}: {exc}"


def changed_last_letter(xb, vocab_size=27):
    """The batch with the letter at the last position replaced by the next symbol."""
    xb2 = xb.clone()
    xb2[:, LAST] = (xb2[:, LAST] + 1) % vocab_size
    return xb2


def build(cls, describe, rec, what, *args):
    """The learner's object and its description in rec['structure'], or None with
    rec['init_error'] saying why ('unanswered' for the released stub)."""
    try:
        m = cls(*args)
    except NotImplementedError:
        rec["init_error"] = "unanswered"
        return None
    except Exception as exc:
        rec["init_error"] = error_text(exc)
        return None
    try:
        rec["structure"] = describe(m)
    except Exception as exc:
        rec["init_error"] = f"describing your {what} failed: " + error_text(exc)
        return None
    return m


def forward_record(m, x, rec, prefix, hooks=()):
    """Run m(x) with `hooks` in place and remove them after. Records rec[prefix + 'out'], or
    rec[prefix + 'error'] saying what went wrong, in the learner's terms."""
    import torch
    try:
        out = m(x)
        if torch.is_tensor(out):
            rec[prefix + "out"] = out.detach().clone()
        else:
            rec[prefix + "error"] = f"forward returned {type(out).__name__}, not a tensor"
    except BaseException as exc:  # the learner's code: anything can happen
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        rec[prefix + "error"] = error_text(exc)
    finally:
        for hook in hooks:
            hook.remove()
