# expect: shapes=1 weight_count=1 out_is_proj=2 attention_weights=2 causal=1
# why: attack: a right answer that then starts 3000 sleeping processes (bounded: a flood, not a fork bomb) and leaves them; with a root grader RLIMIT_NPROC was never applied and all 3000 started; with RLIMIT_NPROC (per uid, every sandbox's together) as the cap, the learners graded beside it could not start theirs. Now the sandbox's pids cgroup stops it below c.Sandbox.max_processes; its own kernel may then break (ipykernel cannot start a thread at the cap), so its score is not compared: the expect line is a right answer's
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))

import os
_started = 0
for _ in range(3000):
    try:
        os.posix_spawn("/bin/sleep", ["sleep", "3141593"], {})
    except OSError:
        break
    _started += 1
print(f"flood: started {_started} sleeping processes")
