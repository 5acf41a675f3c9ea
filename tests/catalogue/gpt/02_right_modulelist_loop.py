# expect: shapes=1 weight_count=1 positions=1 forward=2 loss=2 generate=2
# why: right, written differently: blocks in an nn.ModuleList run in a loop, reshape(-1) for the loss, a while loop in generate
class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.token_emb = nn.Embedding(vocab_size, n_embd)
        self.pos_emb = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList()
        for _ in range(n_layer):
            self.blocks.append(Block())
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size)

    def forward(self, idx, targets=None):
        T = idx.size(1)
        x = self.token_emb(idx) + self.pos_emb(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    def generate(self, idx, max_new_tokens, generator=None):
        with torch.no_grad():
            added = 0
            while added < max_new_tokens:
                context = idx[:, -block_size:]
                logits, _ = self.forward(context)
                probs = logits[:, -1].softmax(dim=-1)
                idx = torch.cat((idx, torch.multinomial(probs, 1, generator=generator)), dim=-1)
                added += 1
        return idx
