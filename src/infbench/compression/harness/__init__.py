"""The pipeline's side of a package: it drives the package's causal next-token interface
(:mod:`infbench.compression.package_api`) and computes everything it judges from the raw logits it gets back.

- :mod:`.transport`: the logits, from the sandboxed worker to the pipeline, through shared memory;
- :mod:`.likelihood`: teacher-forced log-probs, each token revealed only once its position has been scored;
- :mod:`.greedy`: batched greedy generation, every token the argmax of the package's logits;
- :mod:`.decode`: decode timing, the harness's clock between steps at batch 1.
"""
