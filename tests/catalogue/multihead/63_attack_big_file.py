# expect: shapes=1 weight_count=1 out_is_proj=2 attention_weights=2 causal=1
# why: attack: a right answer that writes a 1 GiB file into its working folder (once kept in autograded/ and copied into feedback/)
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))

import os
try:
    with open("big.bin", "wb") as _f:
        _chunk = b"x" * (16 << 20)
        for _ in range(64):
            _f.write(_chunk)
except OSError:
    pass
