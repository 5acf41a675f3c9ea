# expect: shapes=0 weight_count=1 out_is_proj=0 attention_weights=0 causal=0
# why: heads added instead of joined
# mistake: heads_summed
# says: added or averaged
# runner: added or averaged
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(self.heads[0](x) + self.heads[1](x))
