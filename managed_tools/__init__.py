"""managed-tools installed under one distinctive name: `managed_tools.server`, `managed_tools.tools` and
`managed_tools.stores` are the repository's server/, tools/ and stores/ (symlinks), so a user's own `server`,
`tools` or `stores` can never shadow them (docs/decisions/installed-names.md)."""
