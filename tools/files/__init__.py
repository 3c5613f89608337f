"""The file family: read, write, edit, glob and grep inside the mounts."""
