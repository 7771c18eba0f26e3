"""The admin API on a Unix socket (mode 0660), and the client the CLI and TUI use to reach it."""
