# expect: shapes=0 weight_count=0 out_is_proj=0 attention_weights=0 causal=0
# why: plain nn.Linear layers in place of the Head class
# mistake: head_type
# fails: shapes structure: should hold Head objects
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([nn.Linear(n_embd, 16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))
