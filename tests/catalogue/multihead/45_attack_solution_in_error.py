# expect: shapes=0 weight_count=0 out_is_proj=0 attention_weights=0 causal=0
# why: attack: MultiHead() raises, as its error, every definition of MultiHead found in its process's memory (the solution, where the re-run had held it) and 200000 more characters over many lines: the verdict quotes one capped line, and no line of the solution
# fails: shapes build_error: MultiHead() failed
import re as _re


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


class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        raise RuntimeError("found: " + " ".join(_definitions()) + ("\n" + "A" * 2000) * 100)
