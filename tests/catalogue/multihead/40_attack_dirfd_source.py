# expect: shapes=0 weight_count=1 out_is_proj=0 attention_weights=0 causal=1
# why: attack: finds the course root from the stack and the working folder, opens source/ with dir_fd and runs the solution; forward returns x (trivially causal: 2 of 7)
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return x

import inspect, json, os
_roots = {os.path.abspath(os.path.join(os.getcwd(), "../../.."))}
for _frame in inspect.stack():
    _roots.add(os.path.dirname(os.path.abspath(_frame.filename)))
for _root in _roots:
    try:
        _fd = os.open(_root, os.O_RDONLY)
        _src = os.open("source/multihead/multihead.ipynb", os.O_RDONLY, dir_fd=_fd)
        with os.fdopen(_src) as _f:
            for _cell in json.load(_f)["cells"]:
                if _cell["metadata"].get("nbgrader", {}).get("solution"):
                    exec("".join(_cell["source"]))
    except Exception:
        pass
