# expect: shapes=0 weight_count=1 out_is_proj=0 attention_weights=0 causal=0
# why: the heads' outputs handed to torch.cat as a generator expression (round brackets), not a list
# mistake: generator_to_cat
# fails: out_is_proj forward_error: must be tuple of Tensors, not generator
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat((head(x) for head in self.heads), dim=-1))
