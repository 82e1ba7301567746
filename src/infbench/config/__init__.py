"""The infbench config as typed models (:mod:`.model`), its start-of-run checks (:mod:`.checks`) and the
JSON schema written from the models for Snakemake's ``validate()`` (:mod:`.schema`)."""
