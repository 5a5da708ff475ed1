"""Whether a new instance's schema differs from the one before it: a pure rule over recorded facts."""

from databuild.models import InstanceFacts


def schema_changed(previous: InstanceFacts | None, current: InstanceFacts | None) -> bool:
    """True when both instances recorded a schema and the columns differ in name, type or order.

    Nullability is left out: Spark reads every Parquet column back as nullable, so readers cannot tell
    it apart, and a literal turning into an expression would otherwise flag a change nobody sees.
    Unknown on either side (an external instance, one recorded before facts were) is no change: the
    flag is for changes we can show, not for gaps in what was recorded."""
    if previous is None or current is None:
        return False
    return [(c.name, c.type) for c in previous.columns] != [(c.name, c.type) for c in current.columns]
