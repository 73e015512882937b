"""The systemd notification protocol (sd_notify) without libsystemd: one datagram per message.

Why our own: the protocol is a few lines (a `KEY=VALUE` newline-separated datagram to the
AF_UNIX socket named by $NOTIFY_SOCKET; a leading `@` means the abstract namespace), and
every pal daemon (the node agent, the placement daemon) needs the same four messages.
A missing $NOTIFY_SOCKET (not run by systemd, tests, a terminal) makes every call a
no-op; a send error is logged once and never raised, because losing a status line must
never stop a daemon. See sd_notify(3) and systemd.service(5) (Type=notify, WatchdogSec).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

__all__ = ["Notifier"]

log = logging.getLogger(__name__)


class Notifier:
    """Sends READY=1, WATCHDOG=1, STATUS=..., STOPPING=1 to systemd when run under it.

    Built from the environment once (the entry point's job); `env` is injectable for tests.
    """

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        raw = env.get("NOTIFY_SOCKET") or ""
        self._address: str | bytes | None = None
        if raw.startswith("@"):
            self._address = b"\0" + raw[1:].encode()
        elif raw.startswith("/"):
            self._address = raw
        elif raw:
            log.warning("NOTIFY_SOCKET=%r is neither a path nor an abstract socket; not notifying systemd", raw)
        self._watchdog_usec = self._parse_watchdog(env)
        self._sock: socket.socket | None = None
        self._warned = False

    @staticmethod
    def _parse_watchdog(env: Mapping[str, str]) -> int | None:
        """WatchdogSec in microseconds when the watchdog applies to this process (WATCHDOG_PID)."""
        usec, pid = env.get("WATCHDOG_USEC"), env.get("WATCHDOG_PID")
        if not usec:
            return None
        if pid and pid.isdigit() and int(pid) != os.getpid():
            return None
        try:
            value = int(usec)
        except ValueError:
            return None
        return value if value > 0 else None

    @property
    def enabled(self) -> bool:
        """Whether a notification socket is configured (i.e. running under Type=notify)."""
        return self._address is not None

    @property
    def watchdog_interval_s(self) -> float | None:
        """How often to send WATCHDOG=1: half of WatchdogSec, as sd_watchdog_enabled(3) advises; None if off."""
        return None if self._watchdog_usec is None else self._watchdog_usec / 2e6

    def notify(self, **fields: str | int) -> bool:
        """Send one datagram of KEY=VALUE lines; True if it was sent (False when disabled or on error)."""
        if self._address is None:
            return False
        text = "\n".join(f"{key}={str(value).replace(chr(10), ' ')}" for key, value in fields.items())
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(text.encode(), self._address)
        except OSError as exc:
            if not self._warned:
                log.warning("cannot notify systemd through NOTIFY_SOCKET: %s (further errors not logged)", exc)
                self._warned = True
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        """Startup finished (Type=notify units are 'active' from now on)."""
        return self.notify(READY=1, **({"STATUS": status} if status else {}))

    def watchdog(self) -> bool:
        """Keep-alive; must come at least every WatchdogSec or systemd restarts the service."""
        return self.notify(WATCHDOG=1)

    def status(self, text: str) -> bool:
        """Free-form one-line status shown by `systemctl status`."""
        return self.notify(STATUS=text)

    def stopping(self) -> bool:
        """Shutdown begun."""
        return self.notify(STOPPING=1)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
