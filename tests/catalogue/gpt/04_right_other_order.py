# expect: shapes=1 weight_count=1 positions=1 forward=2 loss=2 generate=2
# why: right, but the layers are created in another order (other random starting weights) and nn.functional is spelled out
class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.lm_head = nn.Linear(n_embd, vocab_size)
        self.ln_f = nn.LayerNorm(n_embd)
        self.blocks = nn.Sequential(*(Block() for _ in range(n_layer)))
        self.pos_emb = nn.Embedding(block_size, n_embd)
        self.token_emb = nn.Embedding(vocab_size, n_embd)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        pos = self.pos_emb(torch.arange(0, T, dtype=torch.long))
        logits = self.lm_head(self.ln_f(self.blocks(self.token_emb(idx) + pos)))
        if targets is None:
            return logits, None
        return logits, nn.functional.cross_entropy(logits.view(-1, vocab_size), targets.view(-1))

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, generator=None):
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -block_size:])
            probs = nn.functional.softmax(logits[:, -1, :], dim=1)
            idx = torch.cat([idx, torch.multinomial(probs, num_samples=1, generator=generator)], dim=1)
        return idx
