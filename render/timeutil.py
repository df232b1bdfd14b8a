"""RFC 3339 timestamps as Kubernetes writes them (UTC, whole seconds, `Z`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

# datetime's last moment: computed times saturate here instead of overflowing (a status may say 9999).
END_OF_TIME = datetime.max.replace(tzinfo=UTC)


def format_time(t: datetime) -> str:
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    try:
        t = t.astimezone(UTC)
    except OverflowError:
        t = END_OF_TIME if t.year > 1 else datetime.min.replace(tzinfo=UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def add_seconds(t: datetime, seconds: int) -> datetime:
    """t + seconds, saturated at END_OF_TIME (and at datetime.min for negative seconds)."""
    try:
        return t + timedelta(seconds=seconds)
    except OverflowError:
        return END_OF_TIME if seconds > 0 else datetime.min.replace(tzinfo=UTC)


def parse_time(value: object) -> datetime | None:
    """A timestamp from a live object; None when absent or unreadable."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
        # in UTC, so any two compare and print; an offset that leaves datetime's range is unreadable
        return t.astimezone(UTC) if t.tzinfo else t.replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        return None
