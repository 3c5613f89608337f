"""The sandbox family: sandbox_describe and sandbox_execute, routed to the file and shell tools."""
