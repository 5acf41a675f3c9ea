# expect: shapes=0 weight_count=0 out_is_proj=0 attention_weights=0 causal=0
# why: one Head object stored twice: a structural slip fails every check, as in every lesson
# mistake: same_head_twice
# says: one Head object twice
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16)] * 2)
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))
