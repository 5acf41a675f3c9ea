# expect: shapes=1 weight_count=0 out_is_proj=2 attention_weights=2 causal=1
# why: the heads run inside torch.no_grad(): the numbers are right, but no head ever learns
# mistake: gradient_no_grad
# fails: weight_count wrong_value: torch.no_grad() in forward cuts it off
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        with torch.no_grad():
            joined = torch.cat([head(x) for head in self.heads], dim=-1)
        return self.proj(joined)
