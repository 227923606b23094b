"""The recipe: its schema, YAML with line numbers, overrides, validation, and the shipped recipes."""
