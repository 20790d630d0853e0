"""The spec stage: which project tilegen works on (project) and its spec files read and validated (load)."""
