"""The environment family: environment_describe, the mounts and the setup fingerprints."""
