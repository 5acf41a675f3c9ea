# expect: shapes=0 weight_count=1 out_is_proj=0 attention_weights=2 causal=0
# why: only the last position returned
# mistake: out_shape
# fails: out_is_proj wrong_shape: forward gave [32, 32], expected [32, 8, 32]
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))[:, -1]
