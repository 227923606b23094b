import sys

sys.exit(0)  # a script, not a module of reward functions
