"""The admin API's client side: what `llmd` and `llmd-top` use to reach the daemon's Unix
socket (llmd/daemon/admin_api.py serves it), the status as text, and the `llmd tenant` verbs
(the tenants file edited in place, then reloaded through the admin API).

May import: releases (its atomic writes), admission, runtime, config, engine (its HTTP client),
console.
"""
