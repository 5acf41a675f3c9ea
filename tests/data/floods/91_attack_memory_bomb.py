# expect: shapes=1 weight_count=1 out_is_proj=2 attention_weights=2 causal=1
# why: attack: a right answer that then starts 4 child processes each holding 1 GiB (4 GiB in all, twice the test's 2 GiB cap: the address-space cap is per process, each child stays under it) and leaves them holding; the sandbox's memory cgroup has the children over the cap killed (one holds), and the right answer keeps its marks
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))

import os, signal
_kids = []
for _ in range(4):
    _r, _w = os.pipe()
    _kid = os.fork()
    if _kid == 0:
        os.close(_r)
        try:
            _block = b"\x01" * (1 << 30)        # every page written: held, not just reserved
            os.write(_w, b"1")
            while True:
                signal.pause()
        finally:
            os._exit(0)
    os.close(_w)
    os.read(_r, 1)                      # it holds its GiB, or it was killed
    os.close(_r)
    _kids.append(_kid)
_held = sum(os.waitpid(_kid, os.WNOHANG) == (0, 0) for _kid in _kids)
print(f"memory bomb: {_held} of 4 children hold 1 GiB each")
