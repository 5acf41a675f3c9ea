# expect: shapes=1 weight_count=1 layer_norms=2 residuals=2 causal=1
# why: the feed-forward's layers named as nanoGPT names them, nn.Sequential(OrderedDict(c_fc=..., relu=..., c_proj=...))
from collections import OrderedDict


class Block(nn.Module):
    '''A transformer block: attention, then feed-forward, each added to its input.'''

    def __init__(self):
        super().__init__()
        # self.sa, then self.ffwd (Linear 32 -> 128, ReLU, Linear 128 -> 32), then self.ln1, self.ln2
        self.sa = MultiHead()                                   # gather from earlier positions
        self.ffwd = nn.Sequential(OrderedDict(                  # nanoGPT's names for its layers
            c_fc=nn.Linear(n_embd, 4 * n_embd), relu=nn.ReLU(), c_proj=nn.Linear(4 * n_embd, n_embd)))
        self.ln1 = nn.LayerNorm(n_embd)                         # normalises the attention's input
        self.ln2 = nn.LayerNorm(n_embd)                         # normalises the feed-forward's input

    def forward(self, x):
        # x plus the attention of ln1(x); then that plus the feed-forward of its ln2
        x = x + self.sa(self.ln1(x))                            # residual around the attention
        x = x + self.ffwd(self.ln2(x))                          # residual around the feed-forward
        return x                                                # [B, T, 32], like the input
