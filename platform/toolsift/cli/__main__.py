"""`python -m toolsift.cli`."""

from . import main

main()
