"""The console and the command line on top: the typer app (main), every table and progress bar (console),
and what `tilegen tune` shows (tune, tuneall)."""
