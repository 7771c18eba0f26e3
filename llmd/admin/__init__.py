"""The admin API's client side: what `llmd` and `llmd-top` use to reach the daemon's Unix
socket (llmd/daemon/admin_api.py serves it), and the status as text.

May import: the base modules only.
"""
