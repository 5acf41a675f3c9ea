# expect: shapes=0 weight_count=1 out_is_proj=0 attention_weights=0 causal=1
# why: attack: in the re-run, takes the previous job's reply from the frames its process was forked in and leaves it as its own record (graded right after a right answer, that was 7/7); in the kernel it replays the stored record as 39 does; its own forward returns x
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return x

import os, sys
_frame = sys._getframe()
while _frame is not None:
    _reply = _frame.f_locals.get("payload")
    if isinstance(_reply, bytes) and _reply:
        open("record.bin", "wb").write(_reply)
        os._exit(0)
    _frame = _frame.f_back

from tinygpt_course.checks import notebook as _nb
_replayed = _nb.reference("multihead")
sys.modules["tinygpt_course.checks.multihead.extract"].extract = lambda ns, seed: _replayed
