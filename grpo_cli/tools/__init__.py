"""Tools a model may call inside a completion: the built-in calculator, user functions and environments, the guard
they run behind, and the counting of calls (made, failed, malformed) shared by train, preflight and eval."""
