"""tilegen: YAML operator specs -> validated kernel instances -> TileLang source for gfx942, gfx950 and sm_90."""

__version__ = "0.1.0"
