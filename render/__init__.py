"""Pure rendering of an MPIJob into its child objects and status. See docs/architecture.md."""

from render.api import Config, MPIJob, SSHKey
from render.children.workload import kinds as gang_kinds
from render.core import render, render_with_status
from render.errors import FieldError, ValidationError
from render.events import Event, events
from render.keys import generate_ssh_key
from render.lifecycle import next_wakeup, ttl_expired
from render.observed import Observed
from render.parse import parse_mpijob
from render.status import status, wanted_names

__all__ = [
    "Config",
    "Event",
    "FieldError",
    "MPIJob",
    "Observed",
    "SSHKey",
    "ValidationError",
    "events",
    "gang_kinds",
    "generate_ssh_key",
    "next_wakeup",
    "parse_mpijob",
    "render",
    "render_with_status",
    "status",
    "ttl_expired",
    "wanted_names",
]
