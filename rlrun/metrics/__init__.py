"""Metrics: the per-step logger and its sinks, pass@k, health checks, plots and the run report."""

from rlrun.metrics.logger import MetricsLogger, format_console_line

__all__ = ["MetricsLogger", "format_console_line"]
