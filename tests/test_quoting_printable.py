"""`printable` and `printable_tree` (llmd/quoting.py): what a terminal would act on is shown as
its escape, everything else as it is."""

from __future__ import annotations

from llmd.quoting import printable, printable_tree


def test_control_characters_are_escaped_and_text_is_kept() -> None:
    assert printable("a\x1b[31mb") == "a\\x1b[31mb"
    assert printable("bell\x07 cr\r del\x7f c1\x85") == "bell\\x07 cr\\x0d del\\x7f c1\\x85"
    kept = "line\nnext\ttab é 中 [b] \\x1b"
    assert printable(kept) is kept


def test_every_string_of_a_tree_keys_included() -> None:
    tree = {"a\x1b": ["x\x1by", 3, None, {"k": "\x07"}], "n": 1.5}
    assert printable_tree(tree) == {"a\\x1b": ["x\\x1by", 3, None, {"k": "\\x07"}], "n": 1.5}
