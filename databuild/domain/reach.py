"""Which wants a backfill's cancel or pause reaches: pure rules over the derivative graph the BEL read.

A backfill's wants start derivative wants for their missing inputs, and those start more. A derivative
want is one per input partition and data time, so wants outside the backfill (an interactive want for
the same day, another backfill) may need the same derivative. Stopping it would stop them too; so a
cancel or pause reaches a derivative only when every open want that needs it is the backfill's own or a
derivative the backfill reaches itself. A want that has ended needs nothing.
"""

from collections.abc import Iterable, Mapping, Set


def descendants(roots: Iterable[str], parents: Mapping[str, Iterable[str]]) -> set[str]:
    """Every want derived, transitively, from ``roots`` (``parents``: derivative -> who derived it)."""
    children: dict[str, set[str]] = {}
    for child, derived_by in parents.items():
        for parent in derived_by:
            children.setdefault(parent, set()).add(child)
    found: set[str] = set()
    level = set(roots)
    while level:
        found |= level
        level = {child for want in level for child in children.get(want, ())} - found
    return found - set(roots)


def reached(members: Set[str], parents: Mapping[str, Iterable[str]], open_wants: Set[str]) -> set[str]:
    """The derivative wants below ``members`` (a backfill's wants) that no open want outside needs.

    ``parents`` maps each derivative below the members to every want that derived it (the whole list:
    a parent missing from it would be taken for one that needs nothing); ``open_wants`` holds the wants
    that have not ended. The largest set that qualifies: a derivative stays reached unless an open parent
    is neither a member nor reached itself, so a parent reached through another path counts as the
    backfill's."""
    found = descendants(members, parents)
    children: dict[str, set[str]] = {}
    for child in found:
        for parent in parents.get(child, ()):
            children.setdefault(parent, set()).add(child)
    # Take out each derivative an outside open want needs; whatever it alone kept in is looked at again.
    unsure = sorted(found)
    while unsure:
        want = unsure.pop()
        if want in found and any(
            parent in open_wants and parent not in members and parent not in found
            for parent in parents.get(want, ())
        ):
            found.discard(want)
            unsure.extend(children.get(want, ()))
    return found
