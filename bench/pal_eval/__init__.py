"""The evaluation harness: what the benchmarks in bench/ and the real-Slurm replay are made of.

Not part of the product: setup.cfg ships pal_slurm alone, so a site's wheel holds no replay,
no benchmark and nothing that starts Slurm daemons. pal_eval imports pal_slurm; nothing in
pal_slurm imports pal_eval (tests/test_structure.py checks both).

How it is found: a bench script run as `python bench/X.py` has bench/ on its path, so it
imports pal_eval with no path edits; the tests reach it through setup.cfg's `[tool:pytest]
pythonpath`. pal_slurm itself comes from where Python finds it (`make venv` installs this
checkout, editable; `PYTHONPATH=.` runs a checkout without installing it).
"""
