"""Constituency trees for parsing as translation (section 6.3): read, write, linearise and repair.

A sentence is translated into its linearised tree, as in Vinyals et al. (2015), whom the paper follows:

    (S (NP (DT the) (NN cat)) (VP (VBZ sleeps)) (. .))
    -> source:  the cat sleeps .
    -> target:  (S (NP XX XX )NP (VP XX )VP XX )S                       leaves="xx" (the default)
    -> target:  (S (NP DT NN )NP (VP VBZ )VP . )S                       leaves="pos"

Choices, stated:
- Words never appear in the target: each leaf is a placeholder, and the words are put back from the source in
  order when the output is turned into a tree. With ``leaves="xx"`` every leaf is ``XX`` (Vinyals et al.; the
  part-of-speech tags are not predicted, and EVALB does not score them); with ``leaves="pos"`` the leaf is the
  word's tag, so the round trip tree -> target -> tree is exact, tags included.
- Closing brackets carry their label (``)NP``), which Vinyals et al. found to help; the tokens are separate words
  so a word-piece vocabulary keeps them whole.
- A malformed output is repaired into a tree (``from_target``), and how is reported: closing brackets without an
  opening one are dropped, a closing bracket of another label closes the innermost open constituent, unclosed
  constituents are closed at the end, constituents left without leaves are removed, leaves beyond the sentence
  length are dropped and missing ones are attached to the root, and an output that is not one constituent
  spanning the sentence is wrapped in one (``S``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Optional, Sequence, Union

Leaves = Literal["xx", "pos"]
PLACEHOLDER = "XX"
WRAP_LABEL = "S"


@dataclass(frozen=True)
class Tree:
    """A constituent: a label over children; a preterminal's only child is its word (a str)."""

    label: str
    children: tuple[Union["Tree", str], ...]

    @property
    def is_preterminal(self) -> bool:
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def words(self) -> list[str]:
        out: list[str] = []
        for child in self.children:
            out.extend([child] if isinstance(child, str) else child.words())
        return out

    def tags(self) -> list[str]:
        if self.is_preterminal:
            return [self.label]
        return [tag for child in self.children if isinstance(child, Tree) for tag in child.tags()]

    def __str__(self) -> str:
        inner = " ".join(str(child) for child in self.children)
        return f"({self.label} {inner})"


class TreeError(ValueError):
    """A bracketed tree that cannot be read."""


_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def read_tree(text: str) -> Tree:
    """A Penn Treebank bracketed tree; an unlabelled outer pair, ``( (S ...) )``, is dropped, and so is ``TOP``/
    ``ROOT`` over a single constituent, so every tree's root is its top constituent."""
    tokens = _TOKEN.findall(text)
    if not tokens:
        raise TreeError("empty tree")
    position = 0

    def node() -> Union[Tree, str]:
        nonlocal position
        if position >= len(tokens):
            raise TreeError(f"unbalanced brackets in {text.strip()[:80]!r}")
        token = tokens[position]
        position += 1
        if token == ")":
            raise TreeError(f"unexpected ')' in {text.strip()[:80]!r}")
        if token != "(":
            return token
        label = ""
        if position < len(tokens) and tokens[position] not in ("(", ")"):
            label = tokens[position]
            position += 1
        children = []
        while position < len(tokens) and tokens[position] != ")":
            children.append(node())
        if position >= len(tokens):
            raise TreeError(f"unbalanced brackets in {text.strip()[:80]!r}")
        position += 1
        if not children:
            raise TreeError(f"empty constituent ({label}) in {text.strip()[:80]!r}")
        return Tree(label, tuple(children))

    tree = node()
    if position != len(tokens):
        raise TreeError(f"text after the tree in {text.strip()[:80]!r}")
    if not isinstance(tree, Tree):
        raise TreeError(f"a bare word, not a tree: {text.strip()[:80]!r}")
    while tree.label in ("", "TOP", "ROOT") and len(tree.children) == 1 and isinstance(tree.children[0], Tree):
        tree = tree.children[0]
    return tree


def to_target(tree: Tree, leaves: Leaves = "xx") -> list[str]:
    """The linearised tree: ``(LABEL`` ... ``)LABEL`` with one placeholder (or tag) per word."""
    if tree.is_preterminal:
        return [PLACEHOLDER if leaves == "xx" else tree.label]
    out = [f"({tree.label}"]
    for child in tree.children:
        if isinstance(child, str):  # a word directly under a phrase: no tag to keep
            out.append(PLACEHOLDER)
        else:
            out.extend(to_target(child, leaves))
    out.append(f"){tree.label}")
    return out


@dataclass(frozen=True)
class Repair:
    """What ``from_target`` had to change to make a tree; all zero for a well-formed output."""

    dropped_tokens: int = 0  # lone "(" or ")"
    dropped_closings: int = 0
    relabelled_closings: int = 0
    closed_at_end: int = 0
    empty_removed: int = 0
    leaves_dropped: int = 0
    leaves_added: int = 0
    wrapped: bool = False

    @property
    def needed(self) -> bool:
        return any(vars(self).values())

    def describe(self) -> str:
        parts = [
            f"{name.replace('_', ' ')} {value}"
            for name, value in vars(self).items()
            if value and not isinstance(value, bool)
        ]
        return ", ".join(parts + (["wrapped in (S ...)"] if self.wrapped else [])) or "none"


def from_target(tokens: Sequence[str], words: Sequence[str], leaves: Leaves = "xx") -> tuple[Tree, Repair]:
    """The tree an output token sequence describes, with the source ``words`` as its leaves, repaired if needed.

    Leaves are the tokens that are not brackets; with ``leaves="pos"`` each becomes its word's tag, with ``"xx"``
    the tag is ``XX`` (as it is for leaves the repair adds).
    """
    if not words:
        raise ValueError("from_target needs the sentence's words (at least one)")
    counts = dict.fromkeys(
        (
            "dropped_tokens",
            "dropped_closings",
            "relabelled_closings",
            "closed_at_end",
            "empty_removed",
            "leaves_dropped",
        ),
        0,
    )
    stack: list[tuple[str, list]] = [("", [])]  # a sentinel holds the top level
    used = 0
    for token in tokens:
        if token in ("(", ")"):
            counts["dropped_tokens"] += 1
        elif token.startswith("("):
            stack.append((token[1:], []))
        elif token.startswith(")"):
            if len(stack) == 1:
                counts["dropped_closings"] += 1
                continue
            label, children = stack.pop()
            counts["relabelled_closings"] += token[1:] != label
            _close(label, children, stack[-1][1], counts)
        elif used >= len(words):
            counts["leaves_dropped"] += 1
        else:
            stack[-1][1].append(Tree(PLACEHOLDER if leaves == "xx" else token, (words[used],)))
            used += 1
    while len(stack) > 1:
        counts["closed_at_end"] += 1
        label, children = stack.pop()
        _close(label, children, stack[-1][1], counts)
    top = stack[0][1]
    missing = tuple(Tree(PLACEHOLDER, (word,)) for word in words[used:])
    if len(top) == 1 and not top[0].is_preterminal:  # one constituent: missing leaves attach to it
        tree, wrapped = Tree(top[0].label, top[0].children + missing), False
    else:
        tree, wrapped = Tree(WRAP_LABEL, tuple(top) + missing), True
    return tree, Repair(**counts, leaves_added=len(missing), wrapped=wrapped)


def _close(label: str, children: list, parent: list, counts: dict) -> None:
    if children:
        parent.append(Tree(label, tuple(children)))
    else:
        counts["empty_removed"] += 1


def plain_label(label: str) -> str:
    """A label without function tags and indices (``NP-SBJ-1``, ``NP=2`` -> ``NP``); ``-NONE-`` stays."""
    if not label.startswith("-"):
        for separator in ("-", "="):
            label = label.split(separator, 1)[0]
    return label


TRACE = "-NONE-"


def normalize(tree: Tree) -> Optional[Tree]:
    """The tree a parser is trained to produce, as is usual for the WSJ: empty elements (``-NONE-``) and the
    constituents left empty by their removal are gone, and labels are plain (no function tags or indices).
    Punctuation stays (EVALB ignores it when scoring). None when nothing is left."""
    if tree.is_preterminal:
        return None if tree.label == TRACE else Tree(tree.label, tree.children)
    children = [child if isinstance(child, str) else normalize(child) for child in tree.children]
    children = [child for child in children if child is not None]
    return Tree(plain_label(tree.label), tuple(children)) if children else None


def strip_tags(tree: Tree) -> Tree:
    """The tree with every tag replaced by ``XX``: what the ``xx`` target can describe."""
    if tree.is_preterminal:
        return Tree(PLACEHOLDER, tree.children)
    return Tree(tree.label, tuple(child if isinstance(child, str) else strip_tags(child) for child in tree.children))


def source_of(tree: Tree) -> str:
    return " ".join(tree.words())


def target_of(tree: Tree, leaves: Leaves = "xx") -> str:
    return " ".join(to_target(tree, leaves))


def parse_output(text: str, words: Sequence[str], leaves: Leaves = "xx") -> tuple[Tree, Repair]:
    return from_target(text.split(), words, leaves)


def first_problem(text: str) -> Optional[str]:
    """Why a treebank line is not a tree (None when it is)."""
    try:
        read_tree(text)
    except TreeError as error:
        return str(error)
    return None
