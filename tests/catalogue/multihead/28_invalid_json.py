# expect: shapes=0 weight_count=0 out_is_proj=0 attention_weights=0 causal=0
# why: broken notebook: not valid JSON (kept as .broken, graded as unanswered with a note)
# notebook: invalid-json
