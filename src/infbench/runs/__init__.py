"""Agent-run ingestion (PROTOCOL A8, B6): run records built from a run directory's
logs, versions and transcripts; the trajectory analyses; the scripted reference search.

``docs/runs.md`` is the run-directory layout and the record schema.
"""
