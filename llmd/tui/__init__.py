"""llmd-top: the live terminal dashboard (Textual). It renders Status snapshots fetched from
the admin API (`client`), and acts through it; nothing else in llmd imports Textual.

May import: admin, runtime, arguments, config.
"""
