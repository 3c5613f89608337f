"""The session family: sessions, their events and traces."""
