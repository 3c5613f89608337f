"""The latent-calls family: answers handed back for latent tools the client could not sample (seed 003)."""
