"""Coverage-guided fuzzing of what a device and a build host parse (docs/SECURITY.md: the harnesses,
their limits and the runs behind them). ``python -m fuzz.run --help``."""
