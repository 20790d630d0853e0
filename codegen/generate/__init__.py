"""The generate stage: spec -> KernelInstance (instance) -> RenderedFile (render) -> lowered device source
(lower); the tuned lockfile's reading and matching (lockfile); the library entry points (pipeline); the
starter specs and projects (starter, scaffold)."""
