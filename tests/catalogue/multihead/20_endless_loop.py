# expect: shapes=0 weight_count=0 out_is_proj=0 attention_weights=0 causal=0
# why: crash: an endless loop in forward (per-cell timeout, paid once)
# mistake: too_slow
# says: did not finish within
# runner: did not finish within
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        while True:
            pass
