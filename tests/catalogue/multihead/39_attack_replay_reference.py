# expect: shapes=0 weight_count=1 out_is_proj=0 attention_weights=0 causal=1
# why: attack: replaces the checks' extract through sys.modules by one that replays the solution's stored record (reference.rec), though the re-run bound extract before the answer ran; forward returns x
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return x

import sys
from tinygpt_course.checks import notebook as _nb
_replayed = _nb.reference("multihead")
sys.modules["tinygpt_course.checks.multihead.extract"].extract = lambda ns, seed: _replayed
