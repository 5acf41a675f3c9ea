# expect: shapes=1 weight_count=1 out_is_proj=2 attention_weights=2 causal=1
# why: attack: a right answer that prints the source notebook and the graded copy it runs in, and echoes every later cell's code into its own output
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))

import glob, json
for _p in glob.glob("*.ipynb") + glob.glob("../../../source/*/*.ipynb"):
    try:
        for _cell in json.load(open(_p))["cells"]:
            print("".join(_cell["source"]))
    except Exception as _e:
        print(_p, type(_e).__name__)
try:
    from IPython.display import display
    _handle = display("watching", display_id=True)
    get_ipython().events.register("pre_run_cell", lambda info: _handle.update(info.raw_cell))
except NameError:
    pass
