# expect: shapes=1 weight_count=1 out_is_proj=2 attention_weights=2 causal=1
# why: attack: a right answer that writes to fd 2 (once the grader's own log): tries to truncate it, then forges a "FLAGGED" line about a classmate
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))

import os
try:
    os.ftruncate(2, 0)
except OSError:
    pass
os.write(2, b"\r\x1b[2KFLAGGED 01_right_comprehension: copied the solution (forged)\n")
