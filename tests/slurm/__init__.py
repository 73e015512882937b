"""Real-Slurm tests (marker `slurm`); a package so its conftest does not shadow tests/conftest.py."""
