"""What the user configures, and where state lives: the flags over the config files (serve_config.py), the files
themselves (config_files.py) and what they may hold (user_config.py, upstream_spec.py for `mcpServers`,
provider_spec.py for `models`), the data dir outside every mount (data_dir.py) and where a workspace's state is
(state_place.py), the rules the command line shares with them (rules.py), the URLs the server itself calls
(served_urls.py), and the requestState key ring (request_state_keys.py). The lowest room of server/: only the user
sets any of it, and no tool reads it.

May import: `tools`, `stores`, `sandbox`.
"""
