# expect: shapes=0 weight_count=0 out_is_proj=0 attention_weights=0 causal=0
# why: the projection without bias (4096 weights): a structural slip fails every check, as in every lesson
# mistake: proj_no_bias
# fails: weight_count structure: not 4096
# says: no bias
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd, bias=False)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))
