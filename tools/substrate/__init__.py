"""The substrate family: the agent's shared files, staged, compared, promoted and versioned."""
