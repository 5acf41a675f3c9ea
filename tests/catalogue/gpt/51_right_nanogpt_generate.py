# expect: shapes=1 weight_count=1 positions=1 forward=2 loss=2 generate=2
# why: nanoGPT's generate: crop with idx if short enough, logits / temperature, top_k left out, sample, append
class GPT(nn.Module):
    """The tiny GPT: embeddings, n_layer blocks, a final layer norm, one score per next symbol."""

    def __init__(self):
        super().__init__()
        # token_emb, pos_emb, blocks (nn.Sequential of n_layer Block()s), ln_f, lm_head
        self.token_emb = nn.Embedding(vocab_size, n_embd)     # which letter
        self.pos_emb = nn.Embedding(block_size, n_embd)       # where it is in the window
        self.blocks = nn.Sequential(*[Block() for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)                      # the last block's output, on one scale
        self.lm_head = nn.Linear(n_embd, vocab_size)          # one score per possible next symbol

    def forward(self, idx, targets=None):
        # idx, targets: [B, T] letter ids; returns (logits [B, T, vocab_size], loss or None)
        B, T = idx.shape
        x = self.token_emb(idx) + self.pos_emb(torch.arange(T))   # [B, T, 32]: what + where
        logits = self.lm_head(self.ln_f(self.blocks(x)))           # [B, T, 27]
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(B * T, vocab_size), targets.view(B * T))
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= block_size else idx[:, -block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float('Inf')
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1, generator=generator)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx
