# expect: shapes=1 weight_count=0 positions=1 forward=2 loss=2 generate=2
# why: the loss detached (to print it, say): its number is right, but training's backward pass from it reaches no weight
# mistake: gradient_detached
# fails: weight_count wrong_value: .detach() in forward cuts it off
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
        loss = F.cross_entropy(logits.view(B * T, vocab_size), targets.view(B * T)).detach()
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, generator=None):
        # max_new_tokens times: crop to the window, last position's probabilities, draw, append
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -block_size:])                 # at most 8 letters of context
            probs = F.softmax(logits[:, -1, :], dim=-1)            # [B, 27]: the next letter
            nxt = torch.multinomial(probs, num_samples=1, generator=generator)   # [B, 1]
            idx = torch.cat([idx, nxt], dim=1)
        return idx
