# expect: shapes=0 weight_count=1 out_is_proj=0 attention_weights=0 causal=0
# why: the nn.ModuleList called as a layer, self.heads(x): a ModuleList has no forward, PyTorch raises NotImplementedError (not the stub's)
# mistake: module_list_called
# fails: out_is_proj forward_error: is missing the required "forward" function
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat(self.heads(x), dim=-1))
