# expect: shapes=0 weight_count=0 positions=0 forward=0 loss=0 generate=0
# why: the released stub, unanswered
# mistake: unanswered
# fails: shapes unanswered: still unanswered
class GPT(nn.Module):
    """The tiny GPT: embeddings, n_layer blocks, a final layer norm, one score per next symbol."""

    def __init__(self):
        super().__init__()
        # token_emb, pos_emb, blocks (nn.Sequential of n_layer Block()s), ln_f, lm_head
        # YOUR CODE HERE
        raise NotImplementedError()

    def forward(self, idx, targets=None):
        # idx, targets: [B, T] letter ids; returns (logits [B, T, vocab_size], loss or None)
        # YOUR CODE HERE
        raise NotImplementedError()

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, generator=None):
        # max_new_tokens times: crop to the window, last position's probabilities, draw, append
        # YOUR CODE HERE
        raise NotImplementedError()
