"""The package version: the CMake project version (a test checks they match)."""

__version__ = "0.1.0"
