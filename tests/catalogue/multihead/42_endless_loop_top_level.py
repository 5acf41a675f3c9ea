# expect: shapes=0 weight_count=0 out_is_proj=0 attention_weights=0 causal=0
# why: crash: an endless loop at the top of the answer cell (the kernel's per-cell timeout, paid once; the re-run's own limit)
# says: MultiHead is not defined: the cell that defines it has not run to its end
while True:
    pass
