"""Saved runs and baselines: report files (``files``), the regression rule and result matching
(``compare``), the environment a run records (``environment``) and output paths (``outputs``)."""
