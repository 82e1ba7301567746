import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.config.model import SyntheticParams
from infbench.serving import synthetic

params = SyntheticParams.model_validate(snakemake.params.synthetic)
n = synthetic.generate(params, params.seed, snakemake.output[0])
print(f"{n} synthetic sessions (seed {params.seed})", file=sys.stderr)
