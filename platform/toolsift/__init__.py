"""toolsift: pick the few tools an agent turn needs, among the tools the caller may use."""

__version__ = "0.1.0"
