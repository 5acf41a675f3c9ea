"""The names list, the 27-symbol vocabulary, and the lesson's batch of windows.

Every lesson cuts its batch the same way: the names joined by '\n' into one long text, and
SIZES.batch_size windows of SIZES.block_size symbols taken at offsets drawn from a fixed seed
(SIZES.batch_seed), so every learner, the grader and the documented printout see the same batch.
"""
import functools
from importlib import resources
from pathlib import Path

import torch

from tinygpt_course.config import SIZES

VOCAB = ["\n"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]  # '\n' ends a name
STOI = {ch: i for i, ch in enumerate(VOCAB)}
_VOCAB_SET = set(VOCAB)


class NamesDataError(ValueError):
    """The names data is missing or holds something the vocabulary cannot encode."""


def names_path() -> Path:
    return Path(str(resources.files(__package__) / "names.txt"))


def load_names(path=None) -> list[str]:
    """The names, one per line, checked against the vocabulary."""
    path = Path(path) if path is not None else names_path()
    if not path.is_file():
        raise NamesDataError(
            f"names file not found: {path}. It ships with the course library; "
            "reinstall it, or rebuild it with scripts/make_names.py")
    names = path.read_text(encoding="utf-8").split()
    if not names:
        raise NamesDataError(f"names file is empty: {path}")
    if set("".join(names)) - _VOCAB_SET:     # one pass over all names; the loop finds the culprit
        for lineno, name in enumerate(names, 1):
            bad = sorted(set(name) - _VOCAB_SET)
            if bad:
                raise NamesDataError(
                    f"{path}, name {lineno} {name!r}: symbol(s) {bad} are not in the vocabulary "
                    "(the 26 letters a-z; '\\n' ends a name)")
    return names


def encode(text: str) -> list[int]:
    bad = sorted(set(text) - _VOCAB_SET)
    if bad:
        raise NamesDataError(f"cannot encode {text!r}: {bad} not in the vocabulary")
    return [STOI[ch] for ch in text]


def decode(ids) -> str:
    return "".join(VOCAB[int(i)] for i in ids)


def joined(names):
    """The names joined by '\n' (and one after the last), checked against the vocabulary."""
    text = "\n".join(names) + "\n"
    bad = sorted(set(text) - _VOCAB_SET)
    if bad:
        raise NamesDataError(f"cannot encode the names: {bad} not in the vocabulary")
    return text


@functools.cache
def _shipped_text():
    """joined(load_names()), read and checked once per process: a notebook cuts its batch two or
    three times (set-up, checks), and a grading kernel inherits it from its warm template."""
    return joined(load_names())


def get_batch(names=None, batch_size=SIZES.batch_size, block_size=SIZES.block_size, seed=SIZES.batch_seed):
    """(batch_size, block_size) symbol ids: windows cut from the names joined by '\n'.

    Offsets come from a private generator, so the batch never depends on (or disturbs)
    the global random state the learner's code uses.
    """
    text = _shipped_text() if names is None else joined(names)
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randint(len(text) - block_size, (batch_size,), generator=gen)
    # only the windows are encoded, not the whole ~200k-symbol text: the same ids, 100x less work
    return torch.tensor([encode(text[s:s + block_size]) for s in starts.tolist()], dtype=torch.long)
