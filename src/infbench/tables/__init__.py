"""Results tables for readers (CSV + Markdown, with a provenance sidecar)."""
