# expect: shapes=0 weight_count=1 out_is_proj=0 attention_weights=0 causal=1
# why: attack: searches its own process's memory for `class MultiHead(nn.Module):` and runs the first other definition it finds (where the re-run's process had held the solution's run, that was the solution); in the kernel it replays the stored record as 39 does; its own forward returns x
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return x

import re as _re, sys


def _definitions():
    found = []
    try:
        with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", buffering=0) as mem:
            for line in maps:
                fields = line.split()
                lo, hi = (int(v, 16) for v in fields[0].split("-"))
                if not fields[1].startswith("rw") or hi - lo > 2 ** 28:
                    continue
                try:
                    mem.seek(lo)
                    chunk = mem.read(hi - lo)
                except OSError:
                    continue
                found += [m.group().decode(errors="ignore")
                          for m in _re.finditer(rb"class MultiHead\(nn\.Module\):[^\x00]{0,3000}", chunk)]
    except OSError:
        pass
    return found


def _works(cls):
    """A definition whose forward is its own, is not this answer's, and runs."""
    if "forward" not in vars(cls) or cls.forward.__code__.co_code == (lambda self, x: x).__code__.co_code:
        return False
    try:
        return cls()(torch.zeros(1, 2, n_embd)).shape == (1, 2, n_embd)
    except Exception:
        return False


for _text in _definitions():
    if "return x\n" in _text:
        continue                      # this very answer
    _lines, _found = _text.splitlines(), None
    for _n in range(len(_lines), 1, -1):   # the longest start of it that runs (a copy may be cut)
        _ns = dict(globals())
        try:
            exec("\n".join(_lines[:_n]), _ns)
        except Exception:
            continue
        _found = _ns["MultiHead"]
        break
    if _found is not None and _works(_found):
        MultiHead = _found
        break

from tinygpt_course.checks import notebook as _nb
_replayed = _nb.reference("multihead")
sys.modules["tinygpt_course.checks.multihead.extract"].extract = lambda ns, seed: _replayed
