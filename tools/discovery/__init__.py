"""The search profile's tools (`serve --tool-search`): tools_search, tools_describe and tools_call."""
