"""verilive: self-hosted voice analysis, face liveness and capture liveness services."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("verilive")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
