"""rlrun's test suite: a package, so that `tests.*` never resolves to the top-level `tests`
another distribution installs (smdebug-rulesconfig, with the sagemaker extra, has one)."""
