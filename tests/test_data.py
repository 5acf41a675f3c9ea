import pytest
import torch

from tinygpt_course.data import (VOCAB, NamesDataError, decode, encode, get_batch, load_names,
                                 names_path)


def test_names_file_matches_its_recipe_note():
    names = load_names()
    note = names_path().with_name("names.md").read_text()
    assert f"count: {len(names)} names" in note
    assert len(set(names)) == len(names)                      # de-duplicated
    assert all(n == n.lower() and n.isalpha() for n in names)  # lowercased a-z


def test_vocabulary_is_newline_then_a_to_z():
    assert VOCAB[0] == "\n" and "".join(VOCAB[1:]) == "abcdefghijklmnopqrstuvwxyz"
    assert decode(encode("emma\nliam")) == "emma\nliam"


def test_batch_is_deterministic_and_leaves_global_rng_alone():
    torch.manual_seed(0)
    before = torch.rand(1)
    torch.manual_seed(0)
    a = get_batch()
    after = torch.rand(1)
    assert torch.equal(before, after)
    assert a.shape == (32, 8) and torch.equal(a, get_batch())
    text = "\n".join(load_names()) + "\n"
    assert all(decode(w) in text for w in a)


def test_bad_symbol_gets_a_clear_error(tmp_path):
    bad = tmp_path / "names.txt"
    bad.write_text("emma\nzoë\n")
    with pytest.raises(NamesDataError, match=r"name 2 'zoë'.*\['ë'\]"):
        load_names(bad)


def test_missing_file_gets_a_clear_error(tmp_path):
    with pytest.raises(NamesDataError, match="names file not found"):
        load_names(tmp_path / "nope.txt")
