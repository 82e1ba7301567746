import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.plots import runs as figures
from infbench.runs import outputs, report

out = snakemake.output
data = report.write(
    list(snakemake.input.statuses),
    list(snakemake.input.records),
    dict(zip(snakemake.params.runs, snakemake.input.verified)),
    tables={name: {k: getattr(out, f"{name}_{k}") for k in ("csv", "md", "provenance")} for name in outputs.ANALYSES},
    settings={k: dict(v) if hasattr(v, "items") else v for k, v in snakemake.params.settings.items()},
)
figures.write(
    data,
    {name: {"png": getattr(out, f"{name}_png"), "csv": getattr(out, f"{name}_data")} for name in outputs.PLOTTED},
)
