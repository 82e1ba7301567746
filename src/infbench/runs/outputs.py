"""The runs' tables and plots by name (rules and report share them; no heavy imports)."""

# analysis -> report subcategory; "status" has a table only
ANALYSES = {
    "status": "Ingestion",
    "best_so_far": "Compression",
    "outcomes": "Compression",
    "ranking_pairs": "Compression",
    "revisions": "Compression",
    "stopping": "Compression",
    "concurrency_paths": "Serving",
    "first_usable_replay": "Serving",
    "matched_seeds": "Serving",
    "cost": "Cost",
    "frontier": "Cost",
}
PLOTTED = [a for a in ANALYSES if a != "status"]
