"""Cross-session recall: search the agent's event log (session_search_context, session_search_traces) and merge
every lexical backend into one ranked answer with an expansion plan (retrieval_search). Reference §2a, §2e, §3."""
