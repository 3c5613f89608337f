"""Helpers the tests share: servers, probes and fixtures they spawn or import."""
