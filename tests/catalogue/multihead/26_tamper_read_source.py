# expect: shapes=0 weight_count=0 out_is_proj=0 attention_weights=0 causal=0
# why: tampering: reads the instructor's source notebook by relative path and runs its solution
import json, glob
for _path in glob.glob("../../../source/*/*.ipynb") + glob.glob("../../source/*/*.ipynb"):
    for _cell in json.load(open(_path))["cells"]:
        if _cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            exec("".join(_cell["source"]))
open("../../../gradebook.db", "rb").read(10)
