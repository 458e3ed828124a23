"""The differential fuzzer: random autograd programs run in real torch and in the engine, compared step by
step (see docs/explanation/deviations.md, "The differential fuzzer")."""
