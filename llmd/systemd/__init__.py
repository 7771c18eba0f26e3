"""systemd integration without libsystemd: the sd_notify protocol and the watchdog interval.

May import: supervisor.
"""
