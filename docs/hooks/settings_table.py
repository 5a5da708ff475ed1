"""MkDocs hook: the configuration page's table of settings is rendered from the settings model
(`databuild/config.py`) at every build, so the page lists exactly the variables DataBuild reads, with
their defaults, ranges and descriptions, and cannot go stale."""

from datetime import timedelta

from mkdocs.exceptions import PluginError
from mkdocs.structure.pages import Page
from pydantic.fields import FieldInfo

from databuild.config import ENV_NAMES, SHOWN_DEFAULT, Settings, setting_range
from databuild.durations import format_duration

PAGE = "configuration.md"
# The line of the page that the table replaces.
MARKER = "<!-- settings table -->"


def shown_default(field: FieldInfo) -> str:
    """A setting's default as the table shows it."""
    extra = field.json_schema_extra
    if isinstance(extra, dict) and SHOWN_DEFAULT in extra:
        return str(extra[SHOWN_DEFAULT])
    value = field.get_default(call_default_factory=True, validated_data={})
    if value in (None, [], {}):
        return "unset"
    if isinstance(value, timedelta):
        text = format_duration(value)
    elif isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, list):
        text = ",".join(value)
    else:
        text = str(value)
    return f"`{text}`"


def settings_table() -> str:
    """The table of variables: one row per field of `Settings`, in the model's order."""
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for name, field in Settings.model_fields.items():
        if not field.description or "|" in field.description:
            raise PluginError(f"setting {name}: give it a description of one table cell (no '|')")
        valid = setting_range(field)
        meaning = f"{field.description} (valid: {valid})" if valid else field.description
        rows.append(f"| `{ENV_NAMES[name]}` | {shown_default(field)} | {meaning} |")
    return "\n".join(rows) + "\n"


def on_page_markdown(markdown: str, *, page: Page, **_: object) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise PluginError(f"{PAGE} has lost the line {MARKER!r} that the settings table replaces")
    return markdown.replace(MARKER, settings_table().rstrip("\n"))
