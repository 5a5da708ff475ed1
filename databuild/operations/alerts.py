"""Alert channels (apprise notification URLs from the settings) and delivery to one of them.

Channels are named in workflow histories by a digest of their URL, never by the URL, which often holds
a token. Delivery is one notification to one channel; each channel's AlertChannel workflow sends its
messages one at a time and retries them, so a channel that is down delays only its own."""

import hashlib
from dataclasses import dataclass
from urllib.parse import urlencode

import apprise

from databuild.config import Settings
from databuild.domain.alerts import SEVERITY, Alert, receives
from databuild.errors import InvalidInputError

# Channel types that carry the alert's fields as structured data (apprise's `:key=value` payload extras).
STRUCTURED = {"json", "jsons", "form", "forms", "xml", "xmls"}


@dataclass(frozen=True)
class Channel:
    url: str
    tags: frozenset[str] = frozenset()

    @property
    def id(self) -> str:
        return "ch-" + hashlib.sha256(self.url.encode()).hexdigest()[:16]

    @property
    def shown(self) -> str:
        """The URL as logs and errors may show it (apprise's privacy form hides tokens)."""
        plugin = apprise.Apprise.instantiate(self.url)
        if plugin is None:
            return self.url.split(":", 1)[0] + "://…"
        return str(plugin.url(privacy=True))  # type: ignore[no-untyped-call]


def channels(settings: Settings) -> list[Channel]:
    """Every channel the settings name. Raises InvalidInputError naming a URL apprise cannot use or a
    configuration file it cannot read."""
    found: list[Channel] = []
    if settings.alert_urls is not None:
        for url in filter(None, (u.strip() for u in settings.alert_urls.get_secret_value().split(","))):
            if apprise.Apprise.instantiate(url) is None:
                scheme = url.split(":", 1)[0]
                raise InvalidInputError(
                    f"DATABUILD_ALERT_URLS has a URL apprise cannot use ({scheme}://…): check its syntax at "
                    "https://github.com/caronc/apprise/wiki, e.g. json://host:port/path or mailto://user:pass@host"
                )
            found.append(Channel(url))
    if settings.alert_config is not None:
        if not settings.alert_config.is_file():
            raise InvalidInputError(
                f"DATABUILD_ALERT_CONFIG={settings.alert_config} is not a file: point it at an apprise "
                "configuration file (text or YAML), or unset it"
            )
        config = apprise.AppriseConfig()
        config.add(str(settings.alert_config.resolve()))
        services = config.services()
        if not services:  # apprise skips what it cannot read: a file of none is a mistake, not "no alerts"
            raise InvalidInputError(
                f"DATABUILD_ALERT_CONFIG={settings.alert_config} names no channel apprise can read: write one "
                "notification URL a line (text) or an apprise YAML file (https://github.com/caronc/apprise/wiki/"
                "config), or unset it"
            )
        for server in services:
            found.append(Channel(str(server.url(privacy=False)), frozenset(server.tags)))  # type: ignore[no-untyped-call]
    return list({c.id: c for c in found}.values())


def route(alert: Alert, settings: Settings) -> list[str]:
    """The ids of the channels that receive ``alert``."""
    return [c.id for c in channels(settings) if receives(set(c.tags), alert)]


class DeliveryError(Exception):
    """A channel did not take an alert (worth trying again later)."""


def deliver(alert: Alert, channel_id: str, settings: Settings) -> bool:
    """Send ``alert`` to one channel; False if the settings no longer name it (nothing to do). Raises
    DeliveryError if the channel did not take it."""
    channel = next((c for c in channels(settings) if c.id == channel_id), None)
    if channel is None:
        return False
    alert = linked(alert, settings)  # a digest links to a page of its own
    url = channel.url
    scheme = url.split(":", 1)[0].lower()
    if scheme in STRUCTURED:
        url += ("&" if "?" in url else "?") + urlencode({f":{k}": v for k, v in alert.fields().items()})
    plugin = apprise.Apprise.instantiate(url)
    if plugin is None:
        raise DeliveryError(f"apprise cannot use {channel.shown}")
    sent = plugin.notify(
        body=alert.body(), title=alert.title, notify_type=apprise.NotifyType(SEVERITY[alert.kind])
    )
    if not sent:
        raise DeliveryError(f"{channel.shown} did not take the {alert.kind.value} alert for {alert.subject}")
    return True


def linked(alert: Alert, settings: Settings) -> Alert:
    """The alert with its dashboard link made absolute."""
    if alert.link.startswith("/"):
        return alert.model_copy(update={"link": settings.dashboard_url.rstrip("/") + alert.link})
    return alert
