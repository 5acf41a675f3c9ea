# expect: shapes=0 weight_count=1 out_is_proj=0 attention_weights=0 causal=0
# why: tampering: prints the documented lines and replaces the checker with a no-op
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return torch.zeros(x.shape)

print("out is proj(head 1 and head 2 side by side): True")
checks.check = lambda *args, **kwargs: print("\u2713 passed")
