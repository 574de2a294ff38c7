"""Studies: plan, train through Hydra multirun, score, keep records, report (docs/study.md)."""
