"""The tune stage: the search space expanded, constrained, pruned and ranked (search), and measured on the
GPU (measure); the winners go to the lockfile (codegen.generate.lockfile)."""
