"""Plots for the Snakemake report."""
